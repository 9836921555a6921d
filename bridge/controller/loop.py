"""The controller's shell: informers feed an in-memory copy of the cluster, a loop turns it into decisions.

Reads (list + watch, cluster-wide, no per-decision requests): Nodes, Pods that have not finished
(`status.phase!=Succeeded,status.phase!=Failed`), ResourceClaims and ResourceClaimTemplates (when the cluster serves
resource.k8s.io), and the policy ConfigMap when one is configured. Any change marks the state dirty; the loop decides
at most once per `interval_s` and at least once per `resync_s` (cool-downs and the rate limit run out with time,
not with events). Only the leader decides and writes; a standby keeps its informers warm so a take-over needs no
relist.

One decision: build `NodeView`s (bridge.controller.nodestatus) and the pending demand (bridge.controller.demand)
from the stores, call the pure core (bridge.controller.decide), write the changes (bridge.controller.writer), and
remember what was written (`Memory`: cool-downs, the rate-limit window). Under `--dry-run` nothing is remembered,
because nothing changes: the same would-be change is recorded once, not once per decision.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from bridge.controller.decide import decide
from bridge.controller.demand import Demand, Names, allocated_by_node, legacy_requested_by_node, pending_demand, pod_key
from bridge.controller.metrics import ControllerMetrics
from bridge.controller.model import Blocked, Decision, Memory, NodeView, Policy
from bridge.controller.nodestatus import POOL_LABEL, SPLIT_KEY, STATUS_KEY, node_view
from bridge.controller.policy import PolicyError, describe, policy_from_configmap
from bridge.controller.record import EVENT_COMPONENT
from bridge.controller.writer import Writer
from bridge.kube.api import CONFIG_MAPS, NODES, PODS, KubeAPI, Obj, ResourceAPI, WatchEvent
from bridge.kube.errors import KubeError
from bridge.kube.events import record_event
from bridge.kube.watch import Informer
from bridge.kvalues.quantity import quantity_int

log = logging.getLogger(__name__)

UNFINISHED_PODS = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass(frozen=True)
class ControllerOptions:
    names: Names = field(default_factory=Names)
    pool_label: str = POOL_LABEL
    policy: Policy = field(default_factory=Policy)
    policy_configmap: tuple[str, str] | None = None  # (namespace, name)
    dry_run: bool = False
    interval_s: float = 5.0
    resync_s: float = 30.0

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.resync_s < self.interval_s:
            raise ValueError("the decision interval must be > 0 and the resync period at least as long")


def is_gpu_node(node: Obj, names: Names) -> bool:
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    if STATUS_KEY in annotations or SPLIT_KEY in annotations or SPLIT_KEY in labels:
        return True
    status = node.get("status") or {}
    return quantity_int((status.get("capacity") or {}).get(names.resource)) > 0


@dataclass(frozen=True)
class State:
    views: tuple[NodeView, ...]
    demand: Demand
    nodes: dict[str, Obj]
    pending_pods: dict[str, Obj]


class Controller:
    def __init__(self, api: KubeAPI, options: ControllerOptions, *, identity: str, metrics: ControllerMetrics,
                 is_leader: Callable[[], bool], resource_api: ResourceAPI | None,
                 clock: Callable[[], float] = time.monotonic, watch_timeout: int = 300) -> None:
        self.api = api
        self.options = options
        self.identity = identity
        self.metrics = metrics
        self.is_leader = is_leader
        self.clock = clock
        self.writer = Writer(api, identity=identity, dry_run=options.dry_run, metrics=metrics)
        self.memory = Memory()
        self.policy = options.policy
        self._policy_rv: str | None = None
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.last_loop = clock()
        self.last_decision: Decision | None = None
        mark = self._mark
        self.nodes = Informer(api, NODES, on_event=mark, watch_timeout=watch_timeout)
        self.pods = Informer(api, PODS, field_selector=UNFINISHED_PODS, on_event=mark, watch_timeout=watch_timeout)
        self.claims = self.templates = None
        if resource_api is not None:
            self.claims = Informer(api, resource_api.claims, on_event=mark, watch_timeout=watch_timeout)
            self.templates = Informer(api, resource_api.claim_templates, on_event=mark, watch_timeout=watch_timeout)
        self.configmap = None
        if options.policy_configmap is not None:
            ns, name = options.policy_configmap
            self.configmap = Informer(api, CONFIG_MAPS, ns, field_selector=f"metadata.name={name}", on_event=mark,
                                      watch_timeout=watch_timeout)

    def _mark(self, _ev: WatchEvent) -> None:
        self._dirty.set()

    def wake(self) -> None:
        """Decide at the next opportunity (e.g. right after becoming the leader)."""
        self._dirty.set()

    # ---- lifecycle -------------------------------------------------------------------------------------------

    @property
    def informers(self) -> list[Informer]:
        return [i for i in (self.nodes, self.pods, self.claims, self.templates, self.configmap) if i is not None]

    def start(self) -> Controller:
        for inf in self.informers:
            self._threads.append(inf.start(self._stop))
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._dirty.set()
        for t in self._threads:
            t.join(timeout)

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    def wait_synced(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else self.clock() + timeout
        for inf in self.informers:
            left = None if deadline is None else max(0.0, deadline - self.clock())
            if not inf.wait_synced(left):
                return False
        return True

    # ---- one decision ----------------------------------------------------------------------------------------

    def _refresh_policy(self) -> None:
        if self.configmap is None:
            return
        store = self.configmap.snapshot()
        cm = next(iter(store.values()), None)
        rv = None if cm is None else str((cm.get("metadata") or {}).get("resourceVersion"))
        if rv == self._policy_rv:
            return
        self._policy_rv = rv
        if cm is None:
            if self.policy != self.options.policy:
                log.warning("policy ConfigMap %s/%s is gone; back to the flags' policy: %s",
                            *self.options.policy_configmap or ("", ""), describe(self.options.policy))
            self.policy = self.options.policy
            return
        try:
            policy = policy_from_configmap(cm, self.options.policy)
        except PolicyError as err:
            self.metrics.policy_errors.inc()
            log.error("%s; keeping the current policy (%s)", err, describe(self.policy))
            if self.is_leader():
                try:
                    self.metrics.api_requests.labels(verb="create-event").inc()
                    record_event(self.api, cm, "InvalidPolicy", f"{err}; the controller keeps its current policy",
                                 "Warning", EVENT_COMPONENT)
                except KubeError as e:
                    log.warning("event on the policy ConfigMap failed: %s", e.message)
            return
        if policy != self.policy:
            log.info("policy: %s", describe(policy))
        self.policy = policy

    def build(self) -> State:
        names = self.options.names
        nodes = {str((n.get("metadata") or {}).get("name")): n for n in self.nodes.snapshot().values()}
        pods = list(self.pods.snapshot().values())
        claims = self.claims.snapshot() if self.claims is not None else {}
        templates = self.templates.snapshot() if self.templates is not None else {}
        allocated = allocated_by_node(claims.values(), names)
        requested = legacy_requested_by_node(pods, names)
        views = tuple(node_view(obj, allocated=allocated.get(name, set()), legacy_requested=requested.get(name, 0),
                                pool_label=self.options.pool_label)
                      for name, obj in sorted(nodes.items()) if is_gpu_node(obj, names))
        demand = pending_demand(pods, claims, templates, names)
        pending = {pod_key(p): p for p in pods if not (p.get("spec") or {}).get("nodeName")}
        return State(views, demand, nodes, pending)

    def decide_once(self) -> Decision | None:
        """Build, decide and (as leader) write once. Returns the decision, or None when not leading/synced."""
        if not self.is_leader() or not self.synced():
            return None
        started = time.perf_counter()
        self._refresh_policy()
        state = self.build()
        now = self.clock()
        self.memory = self.memory.forget({v.name for v in state.views}, self.policy, now)
        decision = decide(state.views, state.demand.pending, self.policy, self.memory, now)
        if state.demand.invalid:  # counted once as unschedulable demand, never planned with
            decision = replace(decision, blocked=decision.blocked + tuple(
                Blocked(key, "legacy", 0, "invalid-count", f"not a valid GPU count: {why}")
                for key, why in state.demand.invalid))
        self.metrics.decision_seconds.observe(time.perf_counter() - started)
        self.metrics.decisions.inc()
        states: dict[str, int] = {}
        for v in state.views:
            key = v.frozen or "managed"
            states[key] = states.get(key, 0) + 1
        self.metrics.observe(decision, states)
        for note in state.demand.skipped[:5]:
            log.warning("demand: %s", note)
        if decision.changes or decision.blocked:
            log.info("decision: %d pending pods (%d GPUs legacy, %d DRA), %d target changes (%d moves), %d blocked",
                     sum(decision.pending_pods.values()), decision.pending_gpus["legacy"],
                     decision.pending_gpus["dra"], len(decision.changes), decision.moves, len(decision.blocked))
        written = self.writer.apply(decision.changes, state.nodes, self.is_leader)
        changed = {c.node for c in decision.changes}
        for v in state.views:
            if v.name not in changed:
                self.writer.forget_dry_run(v.name)
        self.writer.report_blocked(decision.blocked, state.pending_pods, self.is_leader)
        self.writer.report_unreadable(state.views, state.nodes, self.is_leader)
        if not self.options.dry_run:
            self.memory = self.memory.after(replace(decision, changes=tuple(written)), now)
        self.last_decision = decision
        return decision

    # ---- the loop ---------------------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Decide until `stop` is set (never raises: a failed decision is logged and the next one tries again)."""
        last = -float("inf")
        was_leader = False
        while not stop.is_set():
            self._dirty.wait(self.options.resync_s)
            self.last_loop = self.clock()
            if stop.is_set():
                break
            wait = last + self.options.interval_s - self.clock()
            if wait > 0 and stop.wait(wait):
                break
            self._dirty.clear()
            leader = self.is_leader()
            self.metrics.leader.set(1 if leader else 0)
            if leader != was_leader:
                log.info("%s: %s", self.identity, "leading: deciding" if leader else "standing by")
                was_leader = leader
            if not leader:
                continue
            try:
                self.decide_once()
            except Exception:  # noqa: BLE001 - the loop must survive any bug in one decision
                log.exception("decision failed; retrying at the next interval")
            last = self.clock()
            self.last_loop = self.clock()

    def health(self) -> str | None:
        """Liveness: the loop turned recently (a wedged loop restarts the pod)."""
        age = self.clock() - self.last_loop
        limit = 3 * self.options.resync_s + self.options.interval_s
        return None if age < limit else f"the decision loop has not run for {age:.0f}s"

    def readiness(self) -> str | None:
        if not self.synced():
            return "informers not synced yet"
        return None


__all__ = ["Controller", "ControllerOptions", "State", "UNFINISHED_PODS", "is_gpu_node"]
