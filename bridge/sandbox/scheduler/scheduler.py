"""The scheduler stand-in's I/O shell: informers, the scheduling queue, the binding cycle, Events, pod conditions.

A stand-in for kube-scheduler (never imported by production code). It talks to the API server only through
`bridge.kube.KubeAPI`, as the real scheduler talks through client-go: list+watch informers on pods, nodes,
ResourceSlices, ResourceClaims and DeviceClasses; claim updates; `pods/binding`; Events through events.k8s.io.
The decisions are made by the pure `cycle.schedule` (see there for the plugins and messages it reproduces).

Written from kubernetes/kubernetes pkg/scheduler:
* schedule_one.go: one pod at a time, highest `spec.priority` first, then the oldest (PrioritySort); pods whose
  `spec.schedulerName` (default "default-scheduler") is ours, without `spec.nodeName`, not being deleted;
  `spec.schedulingGates` keep a pod out with the condition `PodScheduled=False, reason SchedulingGated`
  ("Scheduling is blocked due to non-empty scheduling gates").
* Binding cycle (schedule_one.go `bindingCycle`, run in parallel with the next scheduling cycles): with
  NominatedNodeNameForExpectation (on from 1.35) and PreBind work to do (DynamicResources' `PreBindPreFlight` has
  work for every pod with a claim; VolumeBinding's for a pod with volumes to bind), `status.nominatedNodeName` is
  set to the chosen node first, so other components can see where the pod is going; a failed binding clears it
  (`clearNominatedNode`), the API server clears it on a successful Bind. Then PreBind: VolumeBinding waits for
  the pod's late-bound volumes (up to `bindTimeoutSeconds`, 600 s). The stand-in has no volumes; it models that
  wait as `prebind_delay(pod)` seconds, by default the pod's annotation `sandbox.dra-bridge.io/prebind-seconds`.
  Up to 1.35 PreBind plugins run one after the other in the plugins' order, VolumeBinding before DynamicResources
  (pkg/scheduler/apis/config/v1/default_plugins.go), so the allocation decided in the scheduling cycle stays
  reserved in memory during that wait (the assume cache), invisible in the API. From 1.36 plugins whose
  `PreBindPreFlight` allows it run in parallel (pkg/scheduler/framework/runtime/framework.go
  `getPreBindPluginGroups`; VolumeBinding and DynamicResources both set `AllowParallel`, with no feature gate), so
  DynamicResources writes the allocation at once and only the Bind waits for the volume: the pod is nominated,
  not bound, with an allocated claim. Reserve (the allocation is assumed in memory, so the next pod does not get
  the same devices)
  -> PreBind (DynamicResources `bindClaim`: create the extended-resource claim if the pod needs one; add the
  `resource.kubernetes.io/delete-protection` finalizer with an update; write `status.allocation` and append the pod to
  `status.reservedFor` with an UpdateStatus, re-reading on conflict; patch the pod's
  `status.extendedResourceClaimStatus`) -> Bind (DefaultBinder: POST `pods/<name>/binding` with the pod's uid) ->
  Event `Scheduled` "Successfully assigned ns/pod to node". A failure runs Unreserve (drop the pod from
  `reservedFor` with a strategic-merge patch, delete a claim created in this cycle) and is reported like an error.
* handleSchedulingFailure: an Event `FailedScheduling` (Warning, action Scheduling) with the FitError message, and
  the pod condition `PodScheduled=False` with reason `Unschedulable` (or `SchedulerError` for errors) and the same
  message, patched only when it changes, in one patch with the nominating info (`updatePod`): DefaultPreemption's
  node sets `status.nominatedNodeName`, a failure without candidates or with an error clears it, an ineligible
  preemptor keeps it (`Unschedulable.nominate`). PostFilter's deallocation / deletion of claims is carried out, and
  a preemption's victims are evicted first (`_preempt`: see there and preemption.py).
* The nominator (backend/queue/nominator.go): the node each waiting pod is nominated to, from its
  `status.nominatedNodeName` or from this scheduler's decision before the status write comes back; dropped when the
  pod is assumed, bound or deleted. The cycle counts nominated pods of at least the incoming pod's priority on their
  node (cycle.py), and tries a pod's own nominated node first.
* scheduling_queue.go: an unschedulable pod waits until a cluster event (node, ResourceSlice, ResourceClaim,
  DeviceClass change; an assigned pod deleted or finished; the pod itself updated) may help, then retries after
  its backoff (1 s doubling to 10 s per attempt); errors go to backoff directly; every unschedulable pod is retried
  after 5 minutes regardless. An event that arrives while the pod is in its scheduling cycle (its snapshot is
  older) and would have retried it sends it to backoff instead of waiting (`determineSchedulingHintForInFlightPod`);
  without that a Node made ready a moment after the pod was picked left the pod waiting for minutes. A Node update
  counts only when it changes allocatable, labels or taints or lifts `spec.unschedulable` (eventhandlers.go
  `updateNodeInCache`, framework/events.go `NodeSchedulingPropertiesChange`, and the Node events the default
  plugins register: none registers condition or annotation changes), so neither a kubelet's heartbeat nor the
  bridge's split-status annotation retries anything. The pod's own status writes never retry it, also when one
  comes back while its failure is still being handled (before, that re-queued it at once). So a preemptor waits
  for its victim's deletion with its first message, as with kube-scheduler v1.37.2. Queueing hints: only
  DynamicResources' claim hint is modelled (a claim change retries the pods using that claim; a deallocation
  retries every waiting pod); every other cluster event retries every waiting pod. A gated pod is held before any
  snapshot is taken (PreEnqueue).
Assigned pods count against their node until they are deleted or reach Succeeded/Failed.
"""

from __future__ import annotations

import copy
import heapq
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bridge.kube import PODS, Conflict, Informer, KubeAPI, KubeError, NotFound, Resource, WatchEvent
from bridge.kube.api import NODES
from bridge.sandbox.apiserver.profiles import KubernetesProfile

from ..threads import join_all
from .allocator import AllocatedState, Features, MatchCache
from .cycle import (
    FINALIZER,
    NodeUsage,
    PlacedPod,
    Profile,
    Reject,
    Scheduled,
    Snapshot,
    Unschedulable,
    is_reserved_for,
    pod_claims,
    schedule,
)
from .podresources import allocatable, pod_requests
from .preemption import priority
from .recorder import EventRecorder

log = logging.getLogger("bridge.sandbox.scheduler")
Obj = dict[str, Any]
INITIAL_BACKOFF = 1.0  # podInitialBackoffDuration
MAX_BACKOFF = 10.0  # podMaxBackoffDuration
MAX_UNSCHEDULABLE = 300.0  # podMaxInUnschedulablePodsDuration
GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"
PREBIND_SECONDS_ANNOTATION = "sandbox.dra-bridge.io/prebind-seconds"
# From this minor PreBind plugins that allow it run in parallel (see the module docstring).
PARALLEL_PREBIND_MINOR = 36


def annotated_prebind_delay(pod: Obj) -> float:
    """How long VolumeBinding's PreBind holds this pod's binding cycle, as the test said (0: no volume to bind)."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(PREBIND_SECONDS_ANNOTATION)
    try:
        return max(0.0, float(value)) if value is not None else 0.0
    except ValueError:
        return 0.0


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))


def _rv(obj: Obj | None) -> int:
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


_MEMO_LIMIT = 50_000


def _memo(cache: dict[tuple[str, str], dict[str, int]], obj: Obj,
          compute: Callable[[Obj], dict[str, int]]) -> dict[str, int]:
    """`compute(obj)` cached by (uid, resourceVersion): an object's parsed quantities change only with a write."""
    meta = obj.get("metadata") or {}
    key = (str(meta.get("uid")), str(meta.get("resourceVersion")))
    value = cache.get(key)
    if value is None:
        if len(cache) > _MEMO_LIMIT:
            cache.clear()
        value = cache[key] = compute(obj)
    return value


def _pod_fingerprint(pod: Obj) -> str:
    """scheduling_queue.go isPodUpdated: the pod without resourceVersion, generation, managedFields, finalizers and
    status (except status.resourceClaimStatuses, which unblocks pods waiting for their claims)."""
    meta = {k: v for k, v in (pod.get("metadata") or {}).items()
            if k not in ("resourceVersion", "generation", "managedFields", "finalizers")}
    claims = (pod.get("status") or {}).get("resourceClaimStatuses")
    return json.dumps([meta, pod.get("spec"), claims], sort_keys=True, default=str)


def _claim_keys(pod: Obj) -> set[str]:
    ns = (pod.get("metadata") or {}).get("namespace")
    statuses = {st.get("name"): st.get("resourceClaimName")
                for st in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    out = set()
    for pc in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = pc.get("resourceClaimName") or statuses.get(pc.get("name"))
        if name:
            out.add(f"{ns}/{name}")
    ext = ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    if ext:
        out.add(f"{ns}/{ext}")
    return out


def _flight_key(pod: Obj, claim: Obj) -> str:
    meta = claim.get("metadata") or {}
    return _key(claim) if meta.get("name") else f"{(pod.get('metadata') or {}).get('uid')}/<extended-resources>"


def _node_properties(node: Obj) -> tuple[str, bool]:
    """What a Node update must change to retry waiting pods: allocatable, labels, taints (UpdateNodeAllocatable,
    UpdateNodeLabel, UpdateNodeTaint of framework/events.go `NodeSchedulingPropertiesChange`, the Node events the
    default plugins register: noderesources/fit.go, tainttoleration, nodeaffinity, nodeunschedulable,
    dynamicresources `EventsToRegister`) and spec.unschedulable, which counts only when it is lifted. Its
    UpdateNodeCondition and UpdateNodeAnnotation are registered by no default plugin, so they move no pod."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    return (json.dumps([status.get("allocatable"), meta.get("labels") or {}, spec.get("taints") or []],
                       sort_keys=True, default=str),
            bool(spec.get("unschedulable")))


def _terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def profile_of(profile: KubernetesProfile) -> Profile:
    """structured.Features from the gates, as dynamicresources.go `New` builds them."""
    return Profile(
        Features(
            admin_access=profile.enabled("DRAAdminAccess"),
            prioritized_list=profile.enabled("DRAPrioritizedList"),
            partitionable_devices=profile.enabled("DRAPartitionableDevices"),
            device_taints=profile.enabled("DRADeviceTaints"),
            consumable_capacity=profile.enabled("DRAConsumableCapacity"),
            device_binding=profile.enabled("DRADeviceBindingConditions")
            and profile.enabled("DRAResourceClaimDeviceStatus"),
            all_mode_pool_errors_per_node=profile.minor >= 38,
        ),
        extended_resources=profile.enabled("DRAExtendedResource"),
        detailed_taint_reason=profile.detailed_taint_reason,
        unresolvable_fit=profile.unresolvable_fit,
        dra_postfilter_reasons=profile.dra_postfilter_reasons,
        preemption_placement_message=profile.preemption_placement_message,
    )


@dataclass
class _Waiting:
    attempts: int = 0
    ready_at: float = 0.0  # backoff end
    since: float = 0.0  # when it became unschedulable


class Scheduler:
    """`Scheduler(api, profile=profile_for("1.37")).start()`; `stop()` ends every thread it started."""

    def __init__(
        self,
        api: KubeAPI,
        *,
        profile: KubernetesProfile,
        scheduler_name: str = "default-scheduler",
        rng: random.Random | None = None,
        initial_backoff: float = INITIAL_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
        host: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        bind_workers: int = 4,
        prebind_delay: Callable[[Obj], float] = annotated_prebind_delay,
    ) -> None:
        self.api = api
        self.profile = profile
        self.cycle_profile = profile_of(profile)
        self.scheduler_name = scheduler_name
        self.rng = rng or random.Random()
        self.initial_backoff, self.max_backoff = initial_backoff, max_backoff
        self.clock = clock
        self.prebind_delay = prebind_delay
        self.recorder = EventRecorder(api, scheduler_name, host=host)
        self.cache = MatchCache()
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._informers: dict[str, Informer] = {}
        self._active: list[tuple[int, str, str]] = []  # heap of (-priority, creationTimestamp, key)
        self._queued: set[str] = set()
        self._waiting: dict[str, _Waiting] = {}  # unschedulable or in backoff
        self._gated: set[str] = set()
        self._assumed_claims: dict[str, Obj] = {}
        self._assumed_pods: dict[str, str] = {}  # pod key -> node
        # Allocations decided but not yet written (inFlightAllocations): they count as allocated.
        self._in_flight: dict[str, Obj] = {}
        self._binder = ThreadPoolExecutor(max_workers=bind_workers, thread_name_prefix="scheduler-bind")
        self._requests: dict[tuple[str, str], dict[str, int]] = {}
        self._conditions: dict[str, tuple[str, str]] = {}  # pod key -> last (reason, message) written
        self._fingerprints: dict[str, str] = {}
        self._pod_claims: dict[str, set[str]] = {}  # waiting pod -> "ns/claim" keys it uses
        self._claim_allocated: dict[str, bool] = {}
        # The nominator (backend/queue/nominator.go): pod key -> the node it is nominated to, from its
        # status.nominatedNodeName or this scheduler's last decision for it; and the value last read from the API.
        self._nominated: dict[str, str] = {}
        self._api_nominated: dict[str, str] = {}
        self._node_properties: dict[str, tuple[str, bool]] = {}  # node -> what scheduling reads of it
        # The pod in its scheduling cycle, and whether a cluster event that retries it arrived meanwhile
        # (determineSchedulingHintForInFlightPod: it then goes to backoff instead of waiting for the next event).
        self._cycle_key: str | None = None
        self._cycle_missed = False
        self.scheduled = 0
        self.attempts = 0
        self.bind_latency: list[float] = []
        self._allocatable: dict[tuple[str, str], dict[str, int]] = {}

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def start(self) -> Scheduler:
        rapi = self.api.resource_api()
        for name, res in (("nodes", NODES), ("slices", rapi.slices), ("classes", rapi.device_classes),
                          ("claims", rapi.claims), ("pods", PODS)):
            inf = Informer(self.api, res, on_event=self._on_event(name), watch_timeout=300)
            self._informers[name] = inf
            self._threads.append(inf.start(self._stop))
        for inf in self._informers.values():
            inf.wait_synced(30)
        loop = threading.Thread(target=self._loop, name="scheduler-loop", daemon=True)
        loop.start()
        self._threads.append(loop)
        log.info("scheduler stand-in %s started (Kubernetes %s)", self.scheduler_name, self.profile.version)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._binder.shutdown(wait=True, cancel_futures=True)
        self._threads = join_all(self._threads, timeout, "scheduler stand-in", log)

    def __enter__(self) -> Scheduler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def binding(self, namespace: str, name: str) -> str | None:
        """The node the pod's binding cycle is under way for (assumed, not bound yet), else None: for tests that
        act while a binding is in its PreBind."""
        with self._cond:
            return self._assumed_pods.get(f"{namespace}/{name}")

    # -- informer callbacks ----------------------------------------------------------------------------------------
    def _on_event(self, kind: str) -> Callable[[WatchEvent], None]:
        def handle(ev: WatchEvent) -> None:
            with self._cond:
                if kind == "pods":
                    self._pod_event(ev)
                elif kind == "claims":
                    self._claim_event(ev)
                elif kind == "nodes":
                    self._node_event(ev)
                else:
                    self._cluster_event()
                self._cond.notify_all()
        return handle

    def _ours(self, pod: Obj) -> bool:
        spec = pod.get("spec") or {}
        return ((spec.get("schedulerName") or "default-scheduler") == self.scheduler_name
                and not spec.get("nodeName") and not (pod.get("metadata") or {}).get("deletionTimestamp")
                and not _terminal(pod))

    def _pod_event(self, ev: WatchEvent) -> None:
        pod, key = ev.object, _key(ev.object)
        if ev.type == "DELETED" or not self._ours(pod):
            self._queued.discard(key)
            self._waiting.pop(key, None)
            self._gated.discard(key)
            self._fingerprints.pop(key, None)
            self._pod_claims.pop(key, None)
            self._nominated.pop(key, None)
            self._api_nominated.pop(key, None)
            if ev.type == "DELETED" or (pod.get("spec") or {}).get("nodeName"):
                self._assumed_pods.pop(key, None)
            if ev.type == "DELETED" and (pod.get("spec") or {}).get("nodeName") or _terminal(pod):
                self._cluster_event()  # resources were freed
            return
        self._pod_claims[key] = _claim_keys(pod)
        self._update_nominated(key, pod)
        fingerprint = _pod_fingerprint(pod)
        changed = self._fingerprints.get(key) != fingerprint
        self._fingerprints[key] = fingerprint
        if key in self._waiting or key in self._gated or key == self._cycle_key:
            if changed:  # isPodUpdated: the scheduler's own status writes do not count
                self._gated.discard(key)
                self._retry(key)
            return  # (the pod in its cycle included: its failure handler's own status write came back early)
        self._push(pod)

    def _update_nominated(self, key: str, pod: Obj) -> None:
        """nominator.UpdateNominatedPod (lock held): the API's nominatedNodeName wins, except that an update with none
        before and none now keeps a nomination made in memory (the status write has not come back yet)."""
        now = str((pod.get("status") or {}).get("nominatedNodeName") or "")
        before = self._api_nominated.get(key, "")
        self._api_nominated[key] = now
        if now:
            self._nominated[key] = now
        elif before:
            self._nominated.pop(key, None)

    def _push(self, pod: Obj) -> None:
        key = _key(pod)
        if key in self._queued:
            return
        prio = int((pod.get("spec") or {}).get("priority") or 0)
        heapq.heappush(self._active, (-prio, str((pod.get("metadata") or {}).get("creationTimestamp") or ""), key))
        self._queued.add(key)

    def _retry(self, key: str) -> None:
        pod = self._informers["pods"].store.get(key) if "pods" in self._informers else None
        if pod is None or not self._ours(pod):
            self._waiting.pop(key, None)
            return
        self._push(pod)

    def _cluster_event(self, only: Callable[[str], bool] | None = None) -> None:
        for key in list(self._waiting) + list(self._gated):
            if only is not None and not only(key):
                continue
            self._gated.discard(key)
            self._retry(key)
        if self._cycle_key is not None and (only is None or only(self._cycle_key)):
            self._cycle_missed = True  # the pod in its cycle saw a snapshot from before this event

    def _node_event(self, ev: WatchEvent) -> None:
        """updateNodeInCache: a Node update retries the waiting pods only when it changed what the default plugins
        wait for (`_node_properties`); a kubelet's heartbeat or a daemon's annotation retries none. An added or
        deleted Node always does."""
        name = str((ev.object.get("metadata") or {}).get("name"))
        if ev.type == "DELETED":
            self._node_properties.pop(name, None)
            self._cluster_event()
            return
        now = _node_properties(ev.object)
        before = self._node_properties.get(name)
        self._node_properties[name] = now
        if before is None or before[0] != now[0] or (before[1] and not now[1]):
            self._cluster_event()

    def _claim_event(self, ev: WatchEvent) -> None:
        """The DynamicResources queueing hint (isSchedulableAfterClaimChange): a deallocated claim may help any
        waiting pod; any other change only the pods that use the claim."""
        key = _key(ev.object)
        assumed = self._assumed_claims.get(key)
        if assumed is not None and (ev.type == "DELETED" or _rv(ev.object) >= _rv(assumed)):
            del self._assumed_claims[key]
        allocated_now = ev.type != "DELETED" and bool((ev.object.get("status") or {}).get("allocation"))
        allocated_before = self._claim_allocated.pop(key, False)
        if allocated_now:
            self._claim_allocated[key] = True
        if allocated_before and not allocated_now:
            self._cluster_event()
        else:
            self._cluster_event(lambda pod_key: key in self._pod_claims.get(pod_key, ()))

    # -- the loop ----------------------------------------------------------------------------------------------------
    def _next(self) -> str | None:
        now = self.clock()
        deferred: list[tuple[int, str, str]] = []
        chosen = None
        while self._active:
            item = heapq.heappop(self._active)
            w = self._waiting.get(item[2])
            if w is not None and w.ready_at > now:
                deferred.append(item)
                continue
            chosen = item[2]
            break
        for item in deferred:
            heapq.heappush(self._active, item)
        if chosen is not None:
            self._queued.discard(chosen)
        return chosen

    def _wait_time(self) -> float:
        now = self.clock()
        times = [w.ready_at - now for k, w in self._waiting.items() if k in self._queued]
        times += [w.since + MAX_UNSCHEDULABLE - now for k, w in self._waiting.items() if k not in self._queued]
        return max(0.01, min([0.5] + times))

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                now = self.clock()
                for waiting, w in list(self._waiting.items()):
                    if waiting not in self._queued and now - w.since >= MAX_UNSCHEDULABLE:
                        self._retry(waiting)  # flushUnschedulablePodsLeftover
                key = self._next()
                if key is None:
                    self._cond.wait(self._wait_time())
                    continue
                pod = self._informers["pods"].store.get(key)
                if pod is None or not self._ours(pod) or key in self._assumed_pods:
                    continue
                self._cycle_key, self._cycle_missed = key, False
            try:
                self._schedule_one(copy.deepcopy(pod))
            except Exception:  # noqa: BLE001 - one broken pod must not stop the scheduler
                log.exception("scheduling %s failed unexpectedly", key)
                with self._cond:
                    self._backoff(key, unschedulable=False)
            finally:
                with self._cond:
                    self._cycle_key = None

    def _snapshot(self) -> Snapshot:
        with self._cond:
            nodes = sorted(self._informers["nodes"].snapshot().values(), key=lambda n: str(n["metadata"]["name"]))
            pods = self._informers["pods"].snapshot()
            claims = {k: v for k, v in self._informers["claims"].snapshot().items()}
            claims.update(self._assumed_claims)
            in_flight = list(self._in_flight.values())
            classes = {str(c["metadata"]["name"]): c for c in self._informers["classes"].snapshot().values()}
            slices = list(self._informers["slices"].snapshot().values())
            assumed_pods = dict(self._assumed_pods)
            nominated_to = dict(self._nominated)
        usage: dict[str, NodeUsage] = {}
        placed: dict[str, list[PlacedPod]] = {}
        for key, pod in pods.items():
            node = (pod.get("spec") or {}).get("nodeName") or assumed_pods.get(key)
            if not node or _terminal(pod):
                continue
            requests = self._pod_requests(pod)
            usage.setdefault(node, NodeUsage()).add(requests)
            placed.setdefault(node, []).append(PlacedPod(pod, requests))
        nominated: dict[str, list[PlacedPod]] = {}
        for key, node in nominated_to.items():
            waiting = pods.get(key)
            if waiting is None or (waiting.get("spec") or {}).get("nodeName") or key in assumed_pods:
                continue  # assumed or bound pods count on their node already (assume drops the nomination)
            nominated.setdefault(node, []).append(PlacedPod(waiting, self._pod_requests(waiting)))
        allocated = AllocatedState()
        by_key: dict[tuple[str, str], Obj] = {}
        for claim in claims.values():
            meta = claim.get("metadata") or {}
            by_key[(str(meta.get("namespace")), str(meta.get("name")))] = claim
        pending: set[str] = set()
        for claim in in_flight:
            meta = claim.get("metadata") or {}
            if meta.get("name"):
                by_key[(str(meta.get("namespace")), str(meta.get("name")))] = claim
            else:
                allocated.add_claim(claim)  # an extended-resource claim not created yet
            pending.add(str(meta.get("uid")))
        for claim in by_key.values():
            allocated.add_claim(claim)
        alloc: dict[str, dict[str, int]] = {}
        for node in nodes:
            alloc[str((node.get("metadata") or {}).get("name"))] = _memo(self._allocatable, node, allocatable)
        return Snapshot(nodes, usage, by_key, classes, slices, allocated, pending, alloc, placed, nominated)

    def _pod_requests(self, pod: Obj) -> dict[str, int]:
        return _memo(self._requests, pod, pod_requests)

    def _schedule_one(self, pod: Obj) -> None:
        key = _key(pod)
        self.attempts += 1
        if (pod.get("spec") or {}).get("schedulingGates"):
            with self._cond:
                self._gated.add(key)
            self._set_condition(pod, "SchedulingGated", GATED_MESSAGE)
            return
        current = self._informers["claims"].snapshot()
        with self._cond:
            current.update(self._assumed_claims)
        claims: dict[tuple[str, str], Obj] = {}
        for k, v in current.items():
            ns, _, name = k.partition("/")
            claims[(ns, name)] = v
        try:
            pod_claims(pod, claims)
        except Reject as rej:
            if rej.gated:  # PreEnqueue: no snapshot, no cycle
                self._failed(pod, Unschedulable(rej.message, gated=True))
                return
        decision = schedule(pod, self._snapshot(), self.cycle_profile, cache=self.cache, rng=self.rng)
        if isinstance(decision, Scheduled):
            # Reserve: assume the pod on its node and the allocations as made, then bind in the background
            # (the binding cycle runs in parallel with the next scheduling cycles, as in kube-scheduler).
            with self._cond:
                self._assumed_pods[key] = decision.node
                self._nominated.pop(key, None)  # assume: DeleteNominatedPodIfExists
                for plan in decision.claims:
                    if plan.allocation is not None:
                        assumed = copy.deepcopy(plan.claim)
                        assumed.setdefault("status", {})["allocation"] = plan.allocation
                        self._in_flight[_flight_key(pod, plan.claim)] = assumed
            try:
                self._binder.submit(self._bind, pod, decision)
            except RuntimeError:  # stopping
                with self._cond:
                    self._forget(pod, decision)
        else:
            self._failed(pod, decision)

    def _forget(self, pod: Obj, decision: Scheduled) -> None:
        """Undo the Reserve assumptions (lock held)."""
        self._assumed_pods.pop(_key(pod), None)
        for plan in decision.claims:
            self._in_flight.pop(_flight_key(pod, plan.claim), None)

    # -- failure -----------------------------------------------------------------------------------------------------
    def _backoff(self, key: str, *, unschedulable: bool) -> None:
        if unschedulable and key == self._cycle_key and self._cycle_missed:
            unschedulable = False  # an event during its cycle may help: retried after the backoff
        w = self._waiting.setdefault(key, _Waiting())
        w.attempts += 1
        now = self.clock()
        w.ready_at = now + min(self.max_backoff, self.initial_backoff * (2 ** (w.attempts - 1)))
        w.since = now
        if not unschedulable:
            pod = self._informers["pods"].store.get(key)
            if pod is not None:
                self._push(pod)

    def _failed(self, pod: Obj, why: Unschedulable) -> None:
        key = _key(pod)
        if why.gated:
            log.debug("pod %s waits before scheduling: %s", key, why.message)
            with self._cond:
                self._gated.add(key)
            return
        log.info("pod %s unschedulable: %s", key, why.message)
        if why.deallocate is not None:
            self._deallocate(why.deallocate)
        if why.delete_claim is not None:
            self._delete_claim(why.delete_claim)
        if why.victims and why.nominate:
            self._preempt(pod, why.nominate, why.victims)
        with self._cond:  # AddNominatedPod: override with the decision, or (None) keep what the pod says
            node = why.nominate if why.nominate is not None else (pod.get("status") or {}).get("nominatedNodeName")
            if node:
                self._nominated[key] = str(node)
            else:
                self._nominated.pop(key, None)
        self.recorder.event(pod, "Warning", "FailedScheduling", "Scheduling", why.message)
        self._set_condition(pod, "SchedulerError" if why.error else "Unschedulable", why.message, why.nominate)
        with self._cond:
            self._backoff(key, unschedulable=not why.error)

    def _set_condition(self, pod: Obj, reason: str, message: str, nominate: str | None = None) -> None:
        """updatePod: the PodScheduled condition and, unless `nominate` is None, status.nominatedNodeName ("" clears
        it), in one patch of what changed."""
        key = _key(pod)
        status: Obj = {}
        same = any(cond.get("type") == "PodScheduled" and cond.get("status") == "False"
                   and cond.get("reason") == reason and cond.get("message") == message
                   for cond in (pod.get("status") or {}).get("conditions") or [])
        if not same and self._conditions.get(key) != (reason, message):
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": reason, "message": message,
                                     "lastProbeTime": None, "lastTransitionTime": now}]
        if nominate is not None and nominate != ((pod.get("status") or {}).get("nominatedNodeName") or ""):
            status["nominatedNodeName"] = nominate or None
        if not status:
            return
        try:
            self.api.patch(PODS, str(pod["metadata"]["name"]), {"status": status}, str(pod["metadata"]["namespace"]),
                           patch_type="strategic", subresource="status")
            if "conditions" in status:
                self._conditions[key] = (reason, message)
        except KubeError as err:
            log.warning("could not update the status of pod %s: %s", key, err.message)

    # -- preemption ------------------------------------------------------------------------------------------------
    def _preempt(self, preemptor: Obj, node: str, victims: list[Obj]) -> None:
        """The preemption executor (framework/preemption/executor.go `prepareCandidateAsync` and `PreemptPod`): clear
        the nominations of lower-priority pods nominated to the node; then, for each victim not being deleted yet,
        the condition DisruptionTarget=True (reason PreemptionByScheduler), a plain DELETE (the victim's own grace
        period applies) and a Normal Event "Preempted" on it. A victim already gone is skipped without an Event.
        The real scheduler makes these calls in a goroutine and keeps the preemptor out of its queue until they are
        made (DefaultPreemption's PreEnqueue); here they are made before the failure is handled, which looks the same
        from outside. (Victims in their binding cycle are deleted too; from 1.36 the real one cancels their PreBind
        instead, in memory.)"""
        own = priority(preemptor)
        with self._cond:
            lower = [k for k, n in self._nominated.items() if n == node
                     and (p := self._informers["pods"].store.get(k)) is not None and priority(p) < own]
            for k in lower:
                self._nominated.pop(k, None)
            clear = [k for k in lower if self._api_nominated.get(k)]
        for k in clear:
            ns, _, name = k.partition("/")
            try:
                self.api.patch(PODS, name, {"status": {"nominatedNodeName": None}}, ns, patch_type="strategic",
                               subresource="status")
            except KubeError as err:
                log.warning("could not clear the nominated node of pod %s: %s", k, err.message)
        scheduler = (preemptor.get("spec") or {}).get("schedulerName") or self.scheduler_name
        uid = (preemptor.get("metadata") or {}).get("uid")
        for victim in victims:
            if (victim.get("metadata") or {}).get("deletionTimestamp"):
                continue  # graceful deletion under way already
            name, ns = str(victim["metadata"]["name"]), str(victim["metadata"]["namespace"])
            message = f"{scheduler}: preempting to accommodate a higher priority pod"
            current = next((c for c in (victim.get("status") or {}).get("conditions") or []
                            if c.get("type") == "DisruptionTarget"), None)
            try:
                if current is None or (current.get("status"), current.get("reason"), current.get("message")) != (
                        "True", "PreemptionByScheduler", message):
                    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                    since = now if current is None or current.get("status") != "True" else current.get(
                        "lastTransitionTime")
                    self.api.patch(PODS, name, {"status": {"conditions": [{
                        "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                        "message": message, "lastProbeTime": None, "lastTransitionTime": since}]}}, ns,
                        patch_type="strategic", subresource="status")
                self.api.delete(PODS, name, ns)
            except NotFound:
                log.info("victim %s/%s of %s is gone already", ns, name, _key(preemptor))
                continue
            except KubeError as err:
                log.warning("could not preempt %s/%s for %s: %s", ns, name, _key(preemptor), err.message)
                continue
            log.info("pod %s preempted %s/%s on %s", _key(preemptor), ns, name, node)
            self.recorder.event(victim, "Normal", "Preempted", "Preempting", f"Preempted by pod {uid} on node {node}",
                                related=preemptor)

    def _deallocate(self, claim: Obj) -> None:
        rapi = self.api.resource_api()
        new = copy.deepcopy(claim)
        status = new.setdefault("status", {})
        for f in ("reservedFor", "allocation", "devices"):
            status.pop(f, None)
        try:
            self.api.update(rapi.claims, new, subresource="status")
        except KubeError as err:
            log.warning("could not deallocate claim %s: %s", _key(claim), err.message)

    def _delete_claim(self, claim: Obj) -> None:
        rapi = self.api.resource_api()
        name, ns = str(claim["metadata"]["name"]), str(claim["metadata"]["namespace"])
        try:
            self._drop_finalizer(rapi.claims, name, ns)
            self.api.delete(rapi.claims, name, ns)
        except NotFound:
            pass
        except KubeError as err:
            log.warning("could not delete claim %s/%s: %s", ns, name, err.message)

    def _drop_finalizer(self, res: Resource, name: str, ns: str) -> None:
        for _ in range(5):
            current = self.api.get(res, name, ns)
            finalizers = current["metadata"].get("finalizers") or []
            if FINALIZER not in finalizers:
                return
            current["metadata"]["finalizers"] = [f for f in finalizers if f != FINALIZER]
            try:
                self.api.update(res, current, ns)
                return
            except Conflict:
                continue

    # -- binding cycle -----------------------------------------------------------------------------------------------
    def _nominate(self, pod: Obj, node: str | None) -> None:
        """`updatePod` with a nominating info: set (or, with None, clear) `status.nominatedNodeName`. A failure is
        logged and the binding goes on, as in the real binding cycle."""
        try:
            self.api.patch(PODS, str(pod["metadata"]["name"]), {"status": {"nominatedNodeName": node}},
                           str(pod["metadata"]["namespace"]), patch_type="strategic", subresource="status")
        except KubeError as err:
            log.warning("could not %s the nominated node of pod %s: %s", "set" if node else "clear", _key(pod),
                        err.message)

    def _bind(self, pod: Obj, decision: Scheduled) -> None:
        key = _key(pod)
        started = time.monotonic()
        reserved: list[Obj] = []
        created: list[Obj] = []
        delay = self.prebind_delay(pod)
        nominated = self.profile.enabled("NominatedNodeNameForExpectation") and (bool(decision.claims) or delay > 0)
        if nominated:
            self._nominate(pod, decision.node)
        parallel = self.profile.minor >= PARALLEL_PREBIND_MINOR  # VolumeBinding's wait beside DynamicResources'
        prebind_started = time.monotonic()
        if delay > 0 and not parallel and self._stop.wait(delay):
            with self._cond:
                self._forget(pod, decision)
            return
        try:
            for plan in decision.claims:
                claim = plan.claim
                if plan.extended and not (claim.get("metadata") or {}).get("name"):
                    claim = self._create_extended_claim(plan.claim)
                    created.append(claim)
                stored = self._bind_claim(pod, claim, plan.allocation)
                reserved.append(stored)
                with self._cond:
                    self._assumed_claims[_key(stored)] = stored
                    self._in_flight.pop(_flight_key(pod, plan.claim), None)
                if plan.extended:
                    self.api.patch(PODS, str(pod["metadata"]["name"]), {"status": {"extendedResourceClaimStatus": {
                        "requestMappings": plan.mappings, "resourceClaimName": stored["metadata"]["name"]}}},
                        str(pod["metadata"]["namespace"]), patch_type="strategic", subresource="status")
            if delay > 0 and parallel and self._stop.wait(max(0.0, delay - (time.monotonic() - prebind_started))):
                with self._cond:
                    self._forget(pod, decision)
                return
            try:
                self.api.create(PODS, {
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"],
                                 "uid": pod["metadata"]["uid"]},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": decision.node},
                }, str(pod["metadata"]["namespace"]), subresource="binding")
            except KubeError as err:
                raise _BindError(f'running Bind plugin "DefaultBinder": {err.message}') from err
        except (KubeError, _BindError) as err:
            message = err.message
            log.warning("binding pod %s to %s failed: %s", key, decision.node, message)
            with self._cond:
                self._forget(pod, decision)
            self._unreserve(pod, reserved, created)
            if nominated or (pod.get("status") or {}).get("nominatedNodeName"):
                self._nominate(pod, None)  # the failure handler's clearNominatedNode
            self.recorder.event(pod, "Warning", "FailedScheduling", "Scheduling", message)
            self._set_condition(pod, "SchedulerError", message)
            with self._cond:
                self._backoff(key, unschedulable=False)
            return
        with self._cond:
            self._waiting.pop(key, None)
            self._cond.notify_all()
        with self._cond:
            self.scheduled += 1
            self.bind_latency.append(time.monotonic() - started)
        log.info("pod %s bound to %s", key, decision.node)
        self.recorder.event(pod, "Normal", "Scheduled", "Binding",
                            f"Successfully assigned {key} to {decision.node}")

    def _create_extended_claim(self, claim: Obj) -> Obj:
        rapi = self.api.resource_api()
        body = copy.deepcopy(claim)
        body["metadata"].pop("name", None)
        body["metadata"].pop("uid", None)
        body.pop("status", None)
        try:
            return self.api.create(rapi.claims, body, str(body["metadata"]["namespace"]))
        except KubeError as err:
            raise _BindError(f'running PreBind plugin "DynamicResources": create claim for extended resources '
                             f"{body['metadata']['namespace']}/<extended-resources>: {err.message}") from err

    def _bind_claim(self, pod: Obj, claim: Obj, allocation: Obj | None) -> Obj:
        """dynamicresources.go bindClaim: finalizer with a normal update, then allocation + reservedFor with
        UpdateStatus; on conflict re-read and try again (retry.DefaultRetry: 5 attempts)."""
        rapi = self.api.resource_api()
        name, ns = str(claim["metadata"]["name"]), str(claim["metadata"]["namespace"])
        current = claim
        fresh = False
        last: KubeError | None = None
        for _ in range(5):
            try:
                if fresh:
                    current = self.api.get(rapi.claims, name, ns)
                fresh = True
                if (current.get("metadata") or {}).get("deletionTimestamp"):
                    raise _BindError(f"claim {ns}/{name} got deleted in the meantime")
                new = copy.deepcopy(current)
                if allocation is not None:
                    if (new.get("status") or {}).get("allocation"):
                        raise _BindError(f"claim {ns}/{name} got allocated elsewhere in the meantime")
                    if FINALIZER not in (new["metadata"].get("finalizers") or []):
                        new["metadata"]["finalizers"] = [*(new["metadata"].get("finalizers") or []), FINALIZER]
                        new = self.api.update(rapi.claims, new, ns)
                    new.setdefault("status", {})["allocation"] = allocation
                if is_reserved_for(pod, new):
                    return new
                status = new.setdefault("status", {})
                status["reservedFor"] = [*(status.get("reservedFor") or []),
                                         {"resource": "pods", "name": pod["metadata"]["name"],
                                          "uid": pod["metadata"]["uid"]}]
                if self.cycle_profile.features.device_binding:
                    # bindClaim with DRADeviceBindingConditions and DRAResourceClaimDeviceStatus on (1.36+ defaults,
                    # always from 1.38): the allocation's time, once (dynamicresources.go, read at v1.37.2 and
                    # v1.38.0-beta.0)
                    if not status.get("allocation"):
                        raise _BindError(f"claim {ns}/{name} got deallocated elsewhere in the meantime")
                    status["allocation"].setdefault(
                        "allocationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
                return self.api.update(rapi.claims, new, ns, subresource="status")
            except Conflict as err:
                last = err
                continue
            except _BindError as err:
                raise _BindError(f'running PreBind plugin "DynamicResources": {err.message}') from err
            except KubeError as err:
                what = "add allocation and reservation to" if allocation is not None else "add reservation to"
                raise _BindError(f'running PreBind plugin "DynamicResources": {what} claim {ns}/{name}: '
                                 f"{err.message}") from err
        assert last is not None
        raise _BindError(f'running PreBind plugin "DynamicResources": {last.message}')

    def _unreserve(self, pod: Obj, reserved: list[Obj], created: list[Obj]) -> None:
        rapi = self.api.resource_api()
        created_names = {_key(c) for c in created}
        for claim in reserved:
            with self._cond:
                self._assumed_claims.pop(_key(claim), None)
            if _key(claim) in created_names:
                continue
            patch = {"metadata": {"uid": claim["metadata"]["uid"]},
                     "status": {"reservedFor": [{"$patch": "delete", "uid": pod["metadata"]["uid"]}]}}
            try:
                self.api.patch(rapi.claims, str(claim["metadata"]["name"]), patch, str(claim["metadata"]["namespace"]),
                               patch_type="strategic", subresource="status")
            except KubeError as err:
                log.warning("unreserve %s: %s", _key(claim), err.message)
        for claim in created:
            self._delete_claim(claim)

    # -- introspection (tests, bench) ------------------------------------------------------------------------------
    def idle(self) -> bool:
        """Nothing queued that could be scheduled now."""
        with self._cond:
            now = self.clock()
            return all(self._waiting.get(k, _Waiting()).ready_at > now for _, _, k in self._active)


class _BindError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


__all__ = ["PREBIND_SECONDS_ANNOTATION", "Scheduler", "annotated_prebind_delay", "profile_of"]
