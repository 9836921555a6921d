"""The controller's shell: informers feed an in-memory copy of the cluster, a loop turns it into decisions.

Reads (list + watch, cluster-wide, no per-decision requests): Nodes, Pods that have not finished
(`status.phase!=Succeeded,status.phase!=Failed`), ResourceClaims and ResourceClaimTemplates (when the cluster serves
resource.k8s.io), and the policy ConfigMap when one is configured. Each object is kept cut down to the fields read
here (bridge.controller.slim: a pod that asks for no GPU keeps a few fields, no object keeps its managedFields). Any
change marks the state dirty; the loop decides at most once per `interval_s` and at least once per `resync_s`
(cool-downs and the rate limit run out with time, not with events). Only the leader decides and writes; a standby
keeps its informers warm so a take-over needs no relist.

The informers' events keep the cluster state up to date (bridge.controller.cluster: a node's `NodeView` and a pod's
demand are recomputed when an event touches them, not at every decision; a full rebuild from the same objects checks
it at the first decision and every `state_check_s`, and heals it if they differ).

One decision: take that state, call the pure core (bridge.controller.decide), write the changes
(bridge.controller.writer), and remember what was written (`Memory`: cool-downs, the rate-limit window). Under
`--dry-run` nothing is remembered, because nothing changes: the same would-be change is recorded once, not once per
decision.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from bridge.controller.cluster import ClusterState, Kind, State, is_gpu_node
from bridge.controller.decide import decide_how
from bridge.controller.demand import Names
from bridge.controller.metrics import ControllerMetrics
from bridge.controller.model import Blocked, Decision, Memory, Policy
from bridge.controller.nodestatus import POOL_LABEL
from bridge.controller.policy import PolicyError, describe, policy_from_configmap
from bridge.controller.record import EVENT_COMPONENT
from bridge.controller.slim import slim_node, slim_pod, slim_resource
from bridge.controller.writer import Writer
from bridge.kube.api import CONFIG_MAPS, NODES, PODS, KubeAPI, ResourceAPI, WatchEvent
from bridge.kube.errors import KubeError
from bridge.kube.events import record_event
from bridge.kube.watch import Informer

log = logging.getLogger(__name__)

UNFINISHED_PODS = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass(frozen=True)
class ControllerOptions:
    names: Names = field(default_factory=Names)
    pool_label: str = POOL_LABEL
    policy: Policy = field(default_factory=Policy)
    policy_configmap: tuple[str, str] | None = None  # (namespace, name)
    dry_run: bool = False
    # Pods are demand only once kube-scheduler marked them Unschedulable (bridge.controller.demand); `bridge
    # controller` runs with it, tests that drive the loop without a scheduler leave it off.
    wait_for_scheduler: bool = False
    interval_s: float = 5.0
    resync_s: float = 30.0
    # How often the incremental state is checked against a full rebuild from the same objects (0: at the first
    # decision only); a difference is logged, counted and healed by the rebuild.
    state_check_s: float = 600.0
    # At each state check, collect the whole heap once and freeze what survives (`Controller.settle_heap`); a
    # decision's new plan is frozen too, instead of collected (bridge.controller.decide._collector_paused).
    freeze_heap: bool = True

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.resync_s < self.interval_s:
            raise ValueError("the decision interval must be > 0 and the resync period at least as long")
        if self.state_check_s < 0:
            raise ValueError("the state check period must be >= 0")


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
        self.memory = Memory(dry_run=options.dry_run)
        self.policy = options.policy
        self._policy_rv: str | None = None
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.last_loop = clock()
        self.last_decision: Decision | None = None
        self.cluster = ClusterState(options.names, options.pool_label, options.wait_for_scheduler)
        self._checked_at: float | None = None
        self._settle_due = False  # a state check ran: settle the heap once the decision is written
        # Each object is cut to what the state and the writer read as it arrives (bridge.controller.slim).
        self.nodes = Informer(api, NODES, on_event=self._feed("node"), watch_timeout=watch_timeout,
                              transform=slim_node)
        self.pods = Informer(api, PODS, field_selector=UNFINISHED_PODS, on_event=self._feed("pod"),
                             watch_timeout=watch_timeout, transform=slim_pod(options.names))
        self.claims = self.templates = None
        if resource_api is not None:
            self.claims = Informer(api, resource_api.claims, on_event=self._feed("claim"), watch_timeout=watch_timeout,
                                   transform=slim_resource)
            self.templates = Informer(api, resource_api.claim_templates, on_event=self._feed("template"),
                                      watch_timeout=watch_timeout, transform=slim_resource)
        self.configmap = None
        if options.policy_configmap is not None:
            ns, name = options.policy_configmap
            self.configmap = Informer(api, CONFIG_MAPS, ns, field_selector=f"metadata.name={name}", on_event=self._mark,
                                      watch_timeout=watch_timeout)

    def _mark(self, _ev: WatchEvent) -> None:
        self._dirty.set()

    def _feed(self, kind: Kind) -> Callable[[WatchEvent], None]:
        """An informer's callback: the event updates the cluster state, and the loop decides soon."""
        def on_event(ev: WatchEvent) -> None:
            self.cluster.apply(kind, ev.type, ev.object)
            self._dirty.set()
        return on_event

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
        """The state a decision reads: kept up to date from the watch events (bridge.controller.cluster), checked
        against a full rebuild from the same objects at the first decision and every `state_check_s`, after which
        the heap is settled once that decision is written (`settle_when_due`)."""
        now = self.clock()
        period = self.options.state_check_s
        if self._checked_at is None or (period > 0 and now - self._checked_at >= period):
            self._checked_at = now
            wrong = self.cluster.check()
            if wrong:
                self.metrics.state_mismatches.inc()
                log.error("the incremental cluster state differs from a full rebuild (%s); rebuilt it",
                          "; ".join(wrong[:5]))
                self.cluster.reload()
            self._settle_due = self.options.freeze_heap
        return self.cluster.state()

    def settle_when_due(self) -> None:
        """`settle_heap` after a state check, once: the decision loop calls it after the decision's writes, so the
        collection's pause (1.6 s the first time at 5,000 nodes and 150,000 pods, then about 0.4 s) delays no target
        and counts in no decision's time."""
        if self._settle_due:
            self._settle_due = False
            self.settle_heap()

    def settle_heap(self) -> None:
        """Collect the whole heap once and freeze what survives (`gc.freeze`), so that later collections skip it.

        The informers hold every Node and unfinished Pod of the cluster: at 5,000 nodes and 150,000 pods about
        850,000 objects the cyclic garbage collector tracks, which one collection of its oldest generation walks
        in 0.4 s here; CPython runs one whenever a quarter as many objects again have survived since the last one
        (pod events, a decision's new plan), so such pauses would land in watch handlers and decisions every few
        thousand events. Frozen objects are still freed by reference counting when their last reference goes
        (a pod deleted, a view replaced: none of the state's objects form cycles); a cycle among them would wait
        for the next settle, which unfreezes everything and collects it first. Later collections walk only what
        came since the last settle (bench/controller_memory_bench.py)."""
        started = time.perf_counter()
        gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        log.info("heap settled: %d objects frozen, %d unreachable ones collected, in %.0f ms", gc.get_freeze_count(),
                 found, 1000 * (time.perf_counter() - started))

    def decide_once(self) -> Decision | None:
        """Build, decide and (as leader) write once. Returns the decision, or None when not leading/synced."""
        if not self.is_leader() or not self.synced():
            return None
        started = time.perf_counter()
        self._refresh_policy()
        state = self.build()
        now = self.clock()
        self.memory = self.memory.forget({v.name for v in state.views}, self.policy, now)
        planning = time.perf_counter()
        decision, how = decide_how(state.views, state.demand.pending, self.policy, self.memory, now,
                                   freeze=self.options.freeze_heap)  # (a new plan joins the frozen heap)
        self.metrics.plan_seconds.labels(plan=how).observe(time.perf_counter() - planning)
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
        writing = time.perf_counter()
        written = self.writer.apply(decision.changes, state.nodes, self.is_leader)
        self.writer.forget_dry_runs_except({c.node for c in decision.changes})
        self.writer.report_blocked(decision.blocked, state.pending_pods, self.is_leader)
        self.writer.report_unreadable(state.views, state.nodes, self.is_leader)
        self.metrics.write_seconds.labels(changed="yes" if decision.changes else "no").observe(
            time.perf_counter() - writing)
        if not self.options.dry_run:
            self.memory = self.memory.after(replace(decision, changes=tuple(written)), now)
        self.last_decision = decision
        self.settle_when_due()
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
