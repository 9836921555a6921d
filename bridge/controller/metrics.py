"""The controller's Prometheus metrics (own registry, served on /metrics), all `dra_bridge_controller_*`.

What each one means, with its labels, is in the one table of every component's metrics: docs/metrics.md
(tests/test_metrics_doc.py keeps the two in step)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from bridge.controller.model import APIS, BLOCK_REASONS, PLANS, Decision

NODE_STATES = ("managed", "pinned", "settling", "unknown")


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        p = "dra_bridge_controller_"
        self.pending_gpus = Gauge(p + "pending_gpus", "GPUs asked by pending pods, per API", ["api"], registry=r)
        self.pending_pods = Gauge(p + "pending_pods", "Pending GPU pods, per API", ["api"], registry=r)
        self.free_gpus = Gauge(p + "free_gpus", "Free GPUs per side (nodes with a readable split)", ["api"],
                               registry=r)
        self.nodes = Gauge(p + "nodes", "GPU nodes by state", ["state"], registry=r)
        self.blocked_pods = Gauge(p + "blocked_pods", "Pending pods the last decision could not serve", ["reason"],
                                  registry=r)
        self.blocked_total = Counter(p + "blocked", "Pods that became blocked for a reason", ["reason"], registry=r)
        self.decisions = Counter(p + "decisions", "Decisions taken as leader", registry=r)
        buckets = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
        self.decision_seconds = Histogram(p + "decision_seconds", "Time of one decision (state + core)",
                                          buckets=buckets, registry=r)
        self.plan_seconds = Histogram(p + "plan_seconds", "Time of the core's plan in a decision, by how it was "
                                      "reached (went-on, step-3-again, from-scratch)", ["plan"], buckets=buckets,
                                      registry=r)
        self.write_seconds = Histogram(p + "write_seconds", "Time a decision's writes took (target patches with "
                                       "their Events, blocked-pod and unreadable-status Events), by whether it "
                                       "changed targets", ["changed"], buckets=buckets, registry=r)
        self.changes = Counter(p + "target_changes", "Split targets written or (dry-run) recorded", ["mode"],
                               registry=r)
        self.moves = Counter(p + "moves", "GPUs moved by the changes", ["direction", "mode"], registry=r)
        self.write_failures = Counter(p + "write_failures", "Target writes that did not happen", ["reason"],
                                      registry=r)
        self.api_requests = Counter(p + "api_requests", "API requests outside the watches", ["verb"], registry=r)
        self.leader = Gauge(p + "leader", "1 while this replica leads", registry=r)
        self.policy_errors = Counter(p + "policy_errors", "Policy documents refused", registry=r)
        self.unreadable_nodes = Gauge(p + "unreadable_nodes", "GPU nodes whose split-status annotation cannot be "
                                      "read (left alone)", registry=r)
        self.state_mismatches = Counter(p + "state_mismatches", "Incremental cluster states a full rebuild corrected",
                                        registry=r)
        for api in APIS:
            for g in (self.pending_gpus, self.pending_pods, self.free_gpus):
                g.labels(api=api).set(0)
        for reason in BLOCK_REASONS:
            self.blocked_pods.labels(reason=reason).set(0)
        for state in NODE_STATES:
            self.nodes.labels(state=state).set(0)
        for plan in PLANS:
            self.plan_seconds.labels(plan=plan)
        for changed in ("yes", "no"):
            self.write_seconds.labels(changed=changed)

    def observe(self, decision: Decision, node_states: dict[str, int]) -> None:
        for api in APIS:
            self.pending_gpus.labels(api=api).set(decision.pending_gpus.get(api, 0))
            self.pending_pods.labels(api=api).set(decision.pending_pods.get(api, 0))
            self.free_gpus.labels(api=api).set(decision.free_gpus.get(api, 0))
        counts = {r: 0 for r in BLOCK_REASONS}
        for b in decision.blocked:
            counts[b.reason] += 1
        for reason, n in counts.items():
            self.blocked_pods.labels(reason=reason).set(n)
        for state in NODE_STATES:
            self.nodes.labels(state=state).set(node_states.get(state, 0))


__all__ = ["ControllerMetrics", "NODE_STATES"]
