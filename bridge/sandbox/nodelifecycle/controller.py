"""The node lifecycle controller stand-in's I/O shell (kube-controller-manager's "node-lifecycle-controller").

A stand-in (never imported by production code), talking to the API server through `bridge.kube.KubeAPI` like the
real controller through client-go. Written from kubernetes/kubernetes v1.37.2 pkg/controller/nodelifecycle/
node_lifecycle_controller.go (`Run`, `monitorNodeHealth`, `tryUpdateNodeHealth`, `processTaintBaseEviction`,
`doNoScheduleTaintingPass`, `doNoExecuteTaintingPass`, `handleDisruption`, `markNodeAsReachable`), the same in
v1.35.4 and v1.38.0-beta.0 but for the lease check below. The rules themselves are in logic.py.

* **Heartbeats.** Every `monitor_period` (`--node-monitor-period`, 5 s) each Node is checked. Its probe time moves
  to "now" when the Ready condition's `lastHeartbeatTime` changed since the last look, or when its Lease in
  `kube-node-lease` was renewed (a later `renewTime`). Past `grace_period` (`--node-monitor-grace-period`, 50 s)
  without either (`startup_grace_period`, 60 s from creation, for a Node that never posted Ready), its Ready and
  pressure conditions become Unknown ("Kubelet stopped posting node status."), written with an UpdateStatus. From
  1.37 (NodeControllerLeaseCircuitBreaker, beta, on) the live Lease is read first; when it is not the one last seen,
  the node is skipped this pass (the informer is behind) instead of being marked.
* **NoSchedule taints** follow the conditions at every Node event: Ready False `node.kubernetes.io/not-ready`,
  Unknown `node.kubernetes.io/unreachable`, the pressure conditions theirs, `spec.unschedulable`
  `node.kubernetes.io/unschedulable`; taints of those keys no condition calls for are removed. Each added taint
  carries `timeAdded`.
* **NoExecute taints** (`unreachable` for Unknown, `not-ready` for False, never both) go through a rate-limited
  queue per zone (`--node-eviction-rate` 0.1 nodes/s, burst 1, tried every 100 ms); a Node Ready again loses both
  at once. **Zones**: no Ready Node in a zone is a full disruption, more than two and at least 55 % not Ready a
  partial one (eviction rate 0.01/s above 50 nodes, else none). When every zone is fully disrupted (a one-node
  cluster whose kubelet stopped), the controller assumes the fault is its own: it removes the NoExecute taints and
  stops tainting until a Node is Ready again. Only the taints the pass's copies of the Nodes show are removed: a node
  the tainter reached between the pass that queued it and the switch keeps its taint (a race upstream has too).
* **Pods**: when a Node leaves Ready, each pod bound to it gets its Ready condition False (a status update, reason
  and message kept) and a Warning Event `NodeNotReady`; a failure is retried at the next pass. The Node gets an
  Event `NodeNotReady`, and `RegisteredNode` when the controller first sees it. A Node the controller sees for the
  first time (every Node at its start) loses its NoExecute condition taints.

Taint-based eviction (deleting the pods that do not tolerate the NoExecute taints, or only for a while: the 300 s
every pod gets from the DefaultTolerationSeconds admission) is another controller's, as upstream:
bridge.sandbox.tainteviction. Not modelled: `processPod` (a pod bound to a not-Ready Node after the
transition is not marked); the beta/GA os and arch label reconciliation (the kubelet simulator writes both); the
metrics. The real controller reacts to Node events for NoSchedule taints through its informer, as here; the
monitor runs the Nodes one after another where the real one runs 8 at a time.
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.kube import NODES, PODS, Informer, KubeAPI, KubeError, NotFound, WatchEvent, record_event
from bridge.kube.api import LEASES
from bridge.sandbox.apiserver.clock import now_rfc3339
from bridge.sandbox.apiserver.profiles import KubernetesProfile

from ..threads import join_all, start_controller
from . import logic

log = logging.getLogger("bridge.sandbox.nodelifecycle")
Obj = dict[str, Any]
COMPONENT = "node-controller"
LEASE_NAMESPACE = "kube-node-lease"
EVICTION_PERIOD_S = 0.1  # scheduler.NodeEvictionPeriod
HEALTH_UPDATE_TRIES = 5  # scheduler.NodeHealthUpdateRetry
RETRY_SLEEP_S = 0.02  # retrySleepTime


@dataclass(frozen=True)
class NodeMonitorTimes:
    """kube-controller-manager's node lifecycle flags (their defaults); tests shorten them on both backends."""

    monitor_period: float = 5.0  # --node-monitor-period
    grace_period: float = 50.0  # --node-monitor-grace-period
    startup_grace_period: float = 60.0  # --node-startup-grace-period
    eviction_rate: float = 0.1  # --node-eviction-rate (nodes tainted NoExecute per second, per zone)
    secondary_eviction_rate: float = 0.01  # --secondary-node-eviction-rate
    large_cluster_threshold: int = 50  # --large-cluster-size-threshold
    unhealthy_zone_threshold: float = 0.55  # --unhealthy-zone-threshold

    def flags(self) -> list[str]:
        """The same settings as kube-controller-manager flags (for a real one)."""
        return [f"--node-monitor-period={self.monitor_period:g}s",
                f"--node-monitor-grace-period={self.grace_period:g}s",
                f"--node-startup-grace-period={self.startup_grace_period:g}s",
                f"--node-eviction-rate={self.eviction_rate:g}",
                f"--secondary-node-eviction-rate={self.secondary_eviction_rate:g}",
                f"--large-cluster-size-threshold={self.large_cluster_threshold}",
                f"--unhealthy-zone-threshold={self.unhealthy_zone_threshold:g}"]


@dataclass
class _Health:
    """`nodeHealthData`: when the controller last heard from the node (its own clock) and what it saw then."""

    probe: float
    ready_transition: float
    ready: Obj | None  # the saved status's Ready condition
    lease_renew: dt.datetime | None = None
    lease_rv: str = ""


def _parse(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class NodeLifecycleController:
    def __init__(self, api: KubeAPI, *, profile: KubernetesProfile, times: NodeMonitorTimes | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.profile = profile
        self.times = times or NodeMonitorTimes()
        self.clock = clock
        self.lease_check = profile.minor >= 37  # NodeControllerLeaseCircuitBreaker: beta and on from 1.37
        self._nodes = Informer(api, NODES, on_event=self._node_event, watch_timeout=300)
        self._leases = Informer(api, LEASES, namespace=LEASE_NAMESPACE, watch_timeout=300)
        self._health: dict[str, _Health] = {}
        self._known: dict[str, Obj] = {}
        self._zone_states: dict[str, str] = {}
        self._tainters: dict[str, logic.TaintQueue] = {}
        self._retry_pods: set[str] = set()
        self._lock = threading.Lock()  # the zones' queues (the real evictorLock)
        self._updates: queue.Queue[str | None] = queue.Queue()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors = 0

    # -- lifecycle ----------------------------------------------------------------------------------------------------

    def start(self) -> NodeLifecycleController:
        self._threads = start_controller((self._nodes, self._leases), self._stop,
                                         (("node-updates", self._node_worker), ("monitor", self._monitor_loop),
                                          ("noexecute", self._tainting_loop)), "node-lifecycle")
        log.info("node lifecycle controller stand-in started (Kubernetes %s, grace %gs)", self.profile.version,
                 self.times.grace_period)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._updates.put(None)
        self._threads = join_all(self._threads, timeout, "node lifecycle controller stand-in", log)

    def __enter__(self) -> NodeLifecycleController:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- NoSchedule taints, at every Node event --------------------------------------------------------------------

    def _node_event(self, ev: WatchEvent) -> None:
        if ev.type in ("ADDED", "MODIFIED"):
            self._updates.put(str(ev.object["metadata"]["name"]))

    def _node_worker(self) -> None:
        while not self._stop.is_set():
            name = self._updates.get()
            if name is None:
                return
            node = self._nodes.snapshot().get(name)
            if node is None:
                continue
            add, remove = logic.condition_taints(node)
            if (add or remove) and not self._swap(node, add, remove):
                log.warning("failed to taint NoSchedule on node %s", name)

    # -- NoExecute taints, rate-limited per zone -------------------------------------------------------------------

    def _tainting_loop(self) -> None:
        while not self._stop.wait(EVICTION_PERIOD_S):
            with self._lock:
                zones = list(self._tainters.values())
            for tainter in zones:
                with self._lock:
                    tainter.try_each(self.clock(), self._taint_no_execute)

    def _taint_no_execute(self, name: str) -> tuple[bool, float]:
        node = self._nodes.snapshot().get(name)
        if node is None:
            return True, 0.0
        status = logic.ready_status(node)
        if status is None:
            return False, 0.05
        if status == "False":
            add, opposite = logic.NOT_READY, logic.UNREACHABLE
        elif status == "Unknown":
            add, opposite = logic.UNREACHABLE, logic.NOT_READY
        else:
            return True, 0.0  # Ready again: nothing to taint
        return self._swap(node, [{"key": add, "effect": "NoExecute"}],
                          [{"key": opposite, "effect": "NoExecute"}]), 0.0

    def _swap(self, node: Obj, add: list[Obj], remove: list[Obj]) -> bool:
        """`SwapNodeControllerTaint`: add (each stamped `timeAdded`), then remove those of `remove` the Node had, each
        a patch of the whole taint list read just before (a conflict-free read-modify-write, as the real one's
        two-way strategic merge patch without a resourceVersion)."""
        name = node["metadata"]["name"]
        stamped = [{**t, "timeAdded": now_rfc3339(now=self.clock())} for t in add]
        try:
            if stamped:
                self._patch_taints(name, stamped, [])
            if any(logic.has_taint(node, t["key"], t["effect"]) for t in remove):
                self._patch_taints(name, [], remove)
        except KubeError as err:
            self.errors += 1
            log.warning("unable to swap the taints of node %s: %s", name, err)
            return False
        return True

    def _patch_taints(self, name: str, add: list[Obj], remove: list[Obj]) -> None:
        current = self.api.get(NODES, name)
        taints = logic.swapped_taints((current.get("spec") or {}).get("taints") or [], add, remove)
        if taints is not None:
            self.api.patch(NODES, name, {"spec": {"taints": taints or None}})

    def _reachable(self, node: Obj) -> None:
        """`markNodeAsReachable`: no NoExecute condition taint, and out of its zone's queue."""
        remove = [{"key": k, "effect": "NoExecute"} for k in (logic.UNREACHABLE, logic.NOT_READY)]
        if self._swap(node, [], remove):
            with self._lock:
                tainter = self._tainters.get(logic.zone_key(node))
                if tainter is not None:
                    tainter.remove(node["metadata"]["name"])

    # -- the monitor ---------------------------------------------------------------------------------------------------

    def _monitor_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.monitor_once()
            except KubeError as err:
                self.errors += 1
                log.warning("error monitoring node health: %s", err)
            if self._stop.wait(self.times.monitor_period):
                return

    def monitor_once(self) -> None:
        """`monitorNodeHealth`: one pass over every Node."""
        nodes = sorted(self._nodes.snapshot().values(), key=lambda n: str(n["metadata"]["name"]))
        names = {str(n["metadata"]["name"]) for n in nodes}
        for node in nodes:
            name = str(node["metadata"]["name"])
            self._new_zone(node)
            if name not in self._known:
                log.info("controller observed a new Node %s", name)
                self._event(node, "Normal", "RegisteredNode", f"Node {name} event: Registered Node {name} in "
                                                              "Controller")
                self._known[name] = node
                self._reachable(node)
        for name in set(self._known) - names:
            log.info("controller observed a Node deletion: %s", name)
            gone = self._known.pop(name)
            self._event(gone, "Normal", "RemovingNode", f"Node {name} event: Removing Node {name} from Controller")
            self._health.pop(name, None)
        zone_ready: dict[str, list[str | None]] = {}
        for node in nodes:
            self._update_node(node, zone_ready)
        self._handle_disruption(zone_ready, nodes)

    def _new_zone(self, node: Obj) -> None:
        zone = logic.zone_key(node)
        with self._lock:
            if zone not in self._zone_states:
                self._zone_states[zone] = logic.INITIAL
                self._tainters[zone] = logic.TaintQueue(self.times.eviction_rate, self.clock())

    def _update_node(self, node: Obj, zone_ready: dict[str, list[str | None]]) -> None:
        name = str(node["metadata"]["name"])
        result = None
        for attempt in range(HEALTH_UPDATE_TRIES):
            try:
                result = self.try_update_node_health(node)
                break
            except _LeaseAhead:
                return  # the informer is behind the live Lease: this node waits for the next pass
            except KubeError as err:
                log.warning("update of node %s's health failed: %s", name, err)
                if attempt + 1 == HEALTH_UPDATE_TRIES or self._stop.wait(RETRY_SLEEP_S):
                    return
                try:
                    node = self.api.get(NODES, name)
                except KubeError:
                    return  # "Probably Node was deleted"
        if result is None:
            return
        observed, current = result
        if not logic.excluded_from_disruption(node):
            zone_ready.setdefault(logic.zone_key(node), []).append(None if current is None else
                                                                   str(current.get("status")))
        if current is None:
            self._retry_pods.discard(name)
            return
        self._taint_base_eviction(node, str(current.get("status")))
        left_ready = current.get("status") != "True" and observed.get("status") == "True"
        if left_ready:
            self._event(node, "Normal", "NodeNotReady", f"Node {name} status is now: NodeNotReady")
        if left_ready or (name in self._retry_pods and observed.get("status") != "True"):
            if not self._mark_pods_not_ready(name):
                self._retry_pods.add(name)
                return
        self._retry_pods.discard(name)

    def try_update_node_health(self, node: Obj) -> tuple[Obj, Obj | None]:
        """`tryUpdateNodeHealth`: (the Ready condition as observed, as it is now, None when absent)."""
        name = str(node["metadata"]["name"])
        now = self.clock()
        health = self._health.get(name)
        current = logic.condition(node, "Ready")
        if current is None:  # never posted: a fake Unknown condition as of the Node's creation
            observed: Obj = {"type": "Ready", "status": "Unknown"}
            grace = self.times.startup_grace_period
            if health is not None:
                health.ready = None
            else:
                created = _parse((node.get("metadata") or {}).get("creationTimestamp"))
                created_t = created.timestamp() if created else now
                health = _Health(created_t, created_t, None)
        else:
            observed = dict(current)
            grace = self.times.grace_period
        saved = health.ready if health is not None else None
        saved_lease = health.lease_renew if health is not None else None
        if health is None or (saved is None and current is not None):
            health = _Health(now, now, current)  # first seen, or a controller restarted over an existing Node
        elif saved is not None and current is not None and \
                saved.get("lastHeartbeatTime") != current.get("lastHeartbeatTime"):
            transition = now if saved.get("lastTransitionTime") != current.get("lastTransitionTime") \
                else health.ready_transition
            health = _Health(now, transition, current)  # (the real one's new record keeps no Lease either)
        lease = self._leases.snapshot().get(f"{LEASE_NAMESPACE}/{name}")
        renew = _parse(((lease or {}).get("spec") or {}).get("renewTime"))
        if lease is not None and renew is not None and (saved_lease is None or saved_lease < renew):
            health.lease_renew, health.lease_rv = renew, str(lease["metadata"].get("resourceVersion", ""))
            health.probe = now
        self._health[name] = health
        if now <= health.probe + grace:
            return observed, current
        if self.lease_check:
            try:
                live = self.api.get(LEASES, name, LEASE_NAMESPACE)
            except NotFound:
                live = None
            if live is not None and str(live["metadata"].get("resourceVersion", "")) != health.lease_rv:
                log.info("node %s: the live Lease is newer than the informer's; checking it next pass", name)
                raise _LeaseAhead(name)
        status = logic.mark_unknown(node, now_rfc3339(now=now))
        new_ready = logic.condition({"status": status}, "Ready")
        if new_ready != observed:
            stored = self.api.update(NODES, {**node, "status": status}, subresource="status")
            log.info("node %s: kubelet stopped posting node status; conditions set Unknown", name)
            self._health[name] = _Health(health.probe, now, logic.condition(stored, "Ready"), renew,
                                         str(((lease or {}).get("metadata") or {}).get("resourceVersion", "")))
        return observed, new_ready

    def _taint_base_eviction(self, node: Obj, status: str) -> None:
        """`processTaintBaseEviction`."""
        name = str(node["metadata"]["name"])
        if status in ("False", "Unknown"):
            want, other = (logic.NOT_READY, logic.UNREACHABLE) if status == "False" else \
                (logic.UNREACHABLE, logic.NOT_READY)
            if logic.has_taint(node, other, "NoExecute"):  # swapped at once, not through the queue
                self._swap(node, [{"key": want, "effect": "NoExecute"}], [{"key": other, "effect": "NoExecute"}])
                return
            with self._lock:
                tainter = self._tainters[logic.zone_key(node)]
                if not logic.has_taint(node, want, "NoExecute"):
                    tainter.remove(name)
                tainter.add(name, str(node["metadata"].get("uid", "")), self.clock())
        elif status == "True":
            self._reachable(node)

    def _mark_pods_not_ready(self, node_name: str) -> bool:
        """`MarkPodsNotReady` for every pod bound to the node; False when one could not be written."""
        try:
            pods = self.api.list(PODS, field_selector=f"spec.nodeName={node_name}")["items"]
        except KubeError as err:
            log.warning("unable to list the pods of node %s: %s", node_name, err)
            return False
        ok = True
        for pod in pods:
            status = logic.mark_pod_not_ready(pod, now_rfc3339(now=self.clock()))
            if status is None:
                continue
            meta = pod["metadata"]
            try:
                self.api.update(PODS, {**pod, "status": status}, meta["namespace"], subresource="status")
            except NotFound:
                continue
            except KubeError as err:
                log.warning("failed to update the status of pod %s/%s: %s", meta["namespace"], meta["name"], err)
                ok = False
                continue
            self._event(pod, "Warning", "NodeNotReady", "Node is not ready")
        return ok

    def _handle_disruption(self, zone_ready: dict[str, list[str | None]], nodes: list[Obj]) -> None:
        """`handleDisruption`: the zones' states and their tainting rates."""
        new_states: dict[str, str] = {}
        for zone, ready in zone_ready.items():
            new_states[zone] = logic.zone_state(ready, self.times.unhealthy_zone_threshold)[1]
            self._zone_states.setdefault(zone, logic.INITIAL)
        all_are_full = all(s == logic.FULL for s in new_states.values())
        all_were_full = True
        for zone, state in list(self._zone_states.items()):
            if zone not in zone_ready:
                del self._zone_states[zone]
                continue
            if state != logic.FULL:
                all_were_full = False
                break
        if all_are_full and all_were_full:
            return
        now = self.clock()
        if all_are_full:
            log.info("controller detected that all Nodes are not-Ready; entering master disruption mode")
            for node in nodes:
                self._reachable(node)
            with self._lock:
                for zone in self._zone_states:
                    self._tainters[zone].swap_limiter(0, now)
                    self._zone_states[zone] = logic.FULL
            return
        if all_were_full:
            log.info("controller detected that some Nodes are Ready; exiting master disruption mode")
            for node in nodes:
                health = self._health.get(str(node["metadata"]["name"]))
                if health is not None:
                    health.probe = health.ready_transition = now
            with self._lock:
                for zone in self._zone_states:
                    self._set_rate(zone, len(zone_ready.get(zone, ())), new_states.get(zone, logic.NORMAL), now)
                    self._zone_states[zone] = new_states.get(zone, logic.NORMAL)
            return
        with self._lock:
            for zone, state in self._zone_states.items():
                new = new_states.get(zone)
                if new is None or new == state:
                    continue
                log.info("controller detected that zone %r is now in state %s", zone, new)
                self._set_rate(zone, len(zone_ready[zone]), new, now)
                self._zone_states[zone] = new

    def _set_rate(self, zone: str, size: int, state: str, now: float) -> None:
        """`setLimiterInZone` (the caller holds the lock)."""
        if state == logic.PARTIAL:
            qps = self.times.secondary_eviction_rate if size > self.times.large_cluster_threshold else 0.0
        else:  # normal, and full disruption of one zone among others (`HealthyQPSFunc`)
            qps = self.times.eviction_rate
        self._tainters[zone].swap_limiter(qps, now)

    def _event(self, obj: Obj, type_: str, reason: str, message: str) -> None:
        try:
            record_event(self.api, obj, reason, message, type_, component=COMPONENT)  # type: ignore[arg-type]
        except KubeError as err:
            log.debug("could not record event %s: %s", reason, err)


class _LeaseAhead(Exception):
    """The circuit breaker's short circuit: the live Lease is not the informer's."""
