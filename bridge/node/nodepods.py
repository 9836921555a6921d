"""The pods bound or nominated to this node and the ResourceClaims they use: what the holders of both sides need
from the API.

Two pod watches per node daemon, never a cluster-wide one:
* pods with the field selector `spec.nodeName=<node>` (what the kubelet itself watches; the API server's watch
  cache indexes this field, pkg/registry/core/pod/strategy.go `Indexers`), and
* pods with `status.nominatedNodeName=<node>`: the pods the scheduler is binding to this node. Since KEP-5278
  (NominatedNodeNameForExpectation, beta and on by default from 1.35) kube-scheduler writes `nominatedNodeName`
  at the start of a binding cycle whose Permit waits or whose PreBind plugins have work to do
  (pkg/scheduler/schedule_one.go `bindingCycle`: `RunPreBindPreFlights`, then `updatePod` with the nominating
  info), and DynamicResources' `PreBindPreFlight` has work for every pod with a claim
  (pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go). The device it chose from the
  ResourceSlice of that moment is written only in PreBind (`bindClaim`), up to 1.35 after VolumeBinding's PreBind
  (which waits up to `bindTimeoutSeconds`, 600 s, for late-bound volumes), and Bind comes after that: for all that
  time the claim has no allocation and the pod no `nodeName`, and `nominatedNodeName` is the only trace of the
  decision. From 1.36 the two PreBind plugins run in parallel: the claim is allocated at once and only the Bind
  waits, so a nominated pod's allocated claim holds its GPU (`ALLOCATED`) for that time.
  The field is selectable for pods (`ToSelectableFields` lists `status.nominatedNodeName`); the watch cache does not
  index it, so the API server matches each pod event against every node daemon's selector in memory (one string
  comparison per GPU node per pod event) and sends a daemon only its node's pods; each (re)list scans the cached
  pods once. The binding clears the field (ClearingNominatedNodeNameAfterBinding, beta in 1.35,
  pkg/registry/core/pod/storage/storage.go), and a failed binding cycle clears it too, so the set stays small.
  Preemption nominates pods as well (they wait here for their victims): they are the same fact, a pod on its way.

plus a GET per claim those pods reference: never a cluster-wide claim watch, which every node would receive in full
(5,000 nodes x every claim change). `on_change` is called once per watch event (or refresh) that changed anything,
after its claim reads: a new DRA pod is one change to the split, not one for the pod and one for its claim (two
evaluations, each a PodResources List on the kubelet while it starts that pod). Claims are read when a pod first references them, again when it is first seen bound
and when it ends (the claim controller deallocates a claim whose pods are gone), after a failed read, at every
`refresh_claims()` while a nominated pod's claim is not allocated yet, and on `refresh_claims(every=True)` (before
a device leaves the DRA side). A pod nominated here whose claim is not allocated yet (or whose extended-resource
request's claim the scheduler has not made yet) is `incoming`: any DRA device of this node may be the one chosen.

Extended resources served by DRA (KEP-5004; the scheduler's rules are in `bridge.node.deviceclasses`): a pod
nominated here that asks for a name the scheduler serves through DRA on this node, and whose
`status.extendedResourceClaimStatus` names no claim yet, is waiting for one of this node's devices. The names: a
DeviceClass's implicit `deviceclass.resource.kubernetes.io/<class>`, and the explicit `spec.extendedResourceName`s
a third watch (`DeviceClassNames`, cluster-scoped: DeviceClasses are few) keeps; either only where the Node's
`status.allocatable` for it is 0 or absent (else a device plugin serves it there and no claim comes). The decision
of a binding cycle is the scheduler's at Filter time and is not taken back when a DeviceClass or the allocatable
changes later: a pod once found waiting keeps waiting while it stays nominated and unclaimed.

Which claims a pod uses (core/v1 Pod): `spec.resourceClaims[].resourceClaimName` (a claim by name),
`status.resourceClaimStatuses[].resourceClaimName` (claims generated from templates) and, with
DRAExtendedResource, `status.extendedResourceClaimStatus.resourceClaimName` (the claim the scheduler creates for an
extended-resource request). Of a claim, the devices of `status.allocation.devices.results[]` whose `driver` and
`pool` are ours (the pool is the node name) are this node's.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bridge.deviceplugin.registration import is_extended_resource_name
from bridge.kube.api import PODS, KubeAPI, Obj, WatchEvent
from bridge.kube.errors import KubeError, NotFound
from bridge.kube.watch import Informer
from bridge.kvalues.quantity import QuantityError, parse_quantity, quantity_int
from bridge.node.deviceclasses import DEVICE_CLASS_PREFIX, DeviceClassNames

log = logging.getLogger(__name__)

_TERMINAL = ("Succeeded", "Failed")
MAX_DELETED = 4096  # deleted pods remembered (their kubelet-checkpoint entries are leftovers, not holders)


@dataclass(frozen=True)
class GpuInitContainer:
    name: str
    gpus: int
    restartable: bool  # a sidecar (restartPolicy: Always)
    terminated: bool  # its status says terminated (or the pod has ended)


@dataclass(frozen=True)
class PodView:
    uid: str
    namespace: str
    name: str
    terminal: bool
    init_containers: tuple[GpuInitContainer, ...]  # only those asking for our resource
    app_containers: tuple[str, ...]
    claims: tuple[str, ...]  # claim names in the pod's namespace
    bound: bool = True  # spec.nodeName is set (else: nominated to this node, the scheduler is binding it)
    # Waits for the claim the scheduler makes for its extended resources (PreBind): decided in one place,
    # `NodePods.snapshot`, for the nominated pods, from `extended`, the DeviceClasses' explicit names and the Node's
    # allocatable (False in a view made from the pod alone, `pod_view`).
    extended_pending: bool = False
    # The extended resource names it asks for (non-zero) that DRA may serve, while `extendedResourceClaimStatus`
    # names no claim yet (empty once it does: that claim is in `claims`).
    extended: tuple[str, ...] = ()
    # How many devices of our resource the kubelet's device manager gives it when it admits the pod (`legacy_need`);
    # 0 when it asks for none, or when its extended-resource claim serves them through DRA.
    legacy_gpus: int = 0

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ClaimView:
    namespace: str
    name: str
    devices: tuple[str, ...] = ()  # this node's devices allocated to it (names, e.g. "gpu-3")
    error: str = ""  # why it could not be read (NotFound is not an error: not allocated)
    allocated: bool = False  # it has an allocation (on any node, of any driver)


@dataclass(frozen=True)
class PodsSnapshot:
    listed: bool  # the watch is synced and healthy: `pods` is every pod bound to this node
    claims_ok: bool  # ... and every claim they reference was read
    why: str  # when not listed or not claims_ok
    pods: tuple[PodView, ...] = ()
    claims: Mapping[tuple[str, str], ClaimView] | None = None
    deleted: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # uid -> (namespace, name), recently gone
    incoming: tuple[PodView, ...] = ()  # nominated to this node, not bound yet, waiting for a device here

    def pod_by_uid(self) -> dict[str, PodView]:
        return {p.uid: p for p in self.pods}


def waits_for_allocation(pod: PodView, claims: Mapping[tuple[str, str], ClaimView]) -> bool:
    """A pod nominated here still waiting for the scheduler to write a claim's allocation (or to make its
    extended-resource claim): any of this node's DRA devices may be the one it gets. Any claim counts, whatever its
    DeviceClass (a pending claim does not say which driver will serve it): safe, and a pod is nominated only for the
    length of its binding cycle."""
    if pod.bound or pod.terminal:
        return False
    if pod.extended_pending:
        return True
    for name in pod.claims:
        view = claims.get((pod.namespace, name))
        if view is None or view.error or not view.allocated:
            return True
    return False


def _gpus(container: Mapping[str, Any], resource: str) -> int:
    res = container.get("resources") or {}
    try:
        return max(quantity_int((res.get("limits") or {}).get(resource)),
                   quantity_int((res.get("requests") or {}).get(resource)))
    except QuantityError:
        return 0


def legacy_need(spec: Mapping[str, Any], resource: str) -> int:
    """The devices of `resource` the kubelet's device manager hands a pod at admission, counted as the scheduler
    counts a pod's request (kubernetes/kubernetes pkg/api/v1/resource/helpers.go `PodRequests`): the app containers
    and the sidecars (restartable init containers) together, or the largest non-restartable init container with the
    sidecars, whichever is more (an init container's devices are handed on to the containers after it). Counting
    every sidecar beside each init container may count a few more than the kubelet needs, never fewer."""
    apps = sum(_gpus(c, resource) for c in spec.get("containers") or [] if isinstance(c, dict))
    inits = [c for c in spec.get("initContainers") or [] if isinstance(c, dict)]
    sidecars = sum(_gpus(c, resource) for c in inits if c.get("restartPolicy") == "Always")
    largest = max((_gpus(c, resource) for c in inits if c.get("restartPolicy") != "Always"), default=0)
    return max(apps, largest) + sidecars


def pod_view(pod: Obj, resource: str) -> PodView:
    """The parts of a Pod the holders need (pure)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    terminal = status.get("phase") in _TERMINAL
    done = {s.get("name") for s in status.get("initContainerStatuses") or []
            if isinstance(s, dict) and (s.get("state") or {}).get("terminated") is not None}
    inits = tuple(GpuInitContainer(str(c.get("name")), n, c.get("restartPolicy") == "Always",
                                   terminal or c.get("name") in done)
                  for c in spec.get("initContainers") or [] if isinstance(c, dict) and (n := _gpus(c, resource)) > 0)
    claims: list[str] = []
    for rc in spec.get("resourceClaims") or []:
        if isinstance(rc, dict) and rc.get("resourceClaimName"):
            claims.append(str(rc["resourceClaimName"]))
    for st in status.get("resourceClaimStatuses") or []:
        if isinstance(st, dict) and st.get("resourceClaimName"):
            claims.append(str(st["resourceClaimName"]))
    ext = status.get("extendedResourceClaimStatus") or {}
    claimed = isinstance(ext, dict) and bool(ext.get("resourceClaimName"))
    if claimed:
        claims.append(str(ext["resourceClaimName"]))
    extended = () if claimed else _extended_names(spec)
    return PodView(str(meta.get("uid", "")), str(meta.get("namespace", "")), str(meta.get("name", "")), terminal,
                   inits, tuple(str(c.get("name")) for c in spec.get("containers") or [] if isinstance(c, dict)),
                   tuple(dict.fromkeys(claims)), bound=bool(spec.get("nodeName")),
                   extended=extended, legacy_gpus=0 if claimed else legacy_need(spec, resource))


def _extended_names(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The names a pod asks for, in any container, that the scheduler may serve through DRA: non-zero (the
    scheduler skips zero requests, extendeddynamicresources.go `hasDeviceClassMappedExtendedResource`) and
    `IsDRAExtendedResourceName` (pkg/scheduler/util/utils.go). A quantity that cannot be read counts as asked."""
    names: set[str] = set()
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if not isinstance(c, dict):
            continue
        res = c.get("resources") or {}
        for section in ("requests", "limits"):
            values = res.get(section) if isinstance(res, dict) else None
            for name, value in (values.items() if isinstance(values, dict) else ()):
                name = str(name)
                if name in names or not (name.startswith(DEVICE_CLASS_PREFIX) or is_extended_resource_name(name)):
                    continue
                try:
                    if parse_quantity(value) == 0:
                        continue
                except QuantityError:
                    pass
                names.add(name)
    return tuple(sorted(names))


def served_by_dra(names: Sequence[str], maps: Callable[[str], bool | None],
                  allocatable: Mapping[str, Any] | None) -> tuple[bool | None, str]:
    """Whether the scheduler serves one of a pod's extended resource `names` through DRA on this node (pure):
    (True, that name), (False, ""), or (None, the first name it cannot tell for).

    The rule is kube-scheduler's (pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go
    `filterExtendedResources`: `isBackedByDRA && allocatable == 0`): a name a DeviceClass maps (`maps`: the explicit
    names; an implicit name always) that the Node's `status.allocatable` lists at 0 or not at all. Where the node
    advertises the name (a device plugin, ours included when a class declares `nvidia.com/gpu`), the device plugin
    serves it and the scheduler makes no claim for it. `allocatable` None: the Node has not been read (or its watch
    is down); an implicit name needs no Node, a device plugin cannot advertise one (`bridge.node.deviceclasses`)."""
    unknown = ""
    for name in names:
        mapped = True if name.startswith(DEVICE_CLASS_PREFIX) else maps(name)
        if mapped is False:
            continue
        if allocatable is None:
            advertised: bool | None = None if not name.startswith(DEVICE_CLASS_PREFIX) else False
        else:
            try:
                advertised = parse_quantity(allocatable.get(name) or 0) > 0
            except QuantityError:
                advertised = False  # unreadable: as if absent (the side that holds)
        if advertised:
            continue
        if mapped and advertised is False:
            return True, name
        unknown = unknown or name
    return (None, unknown) if unknown else (False, "")


def allocated_devices(claim: Obj, driver: str, pool: str) -> tuple[str, ...]:
    """This node's devices in a claim's allocation (pure)."""
    results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")) or []
    return tuple(dict.fromkeys(str(r.get("device")) for r in results
                               if isinstance(r, dict) and r.get("driver") == driver and r.get("pool") == pool))


class NodePods:
    def __init__(self, api: KubeAPI, node_name: str, *, resource: str, driver: str,
                 on_change: Callable[[], None] = lambda: None,
                 node_allocatable: Callable[[], Mapping[str, Any] | None] = lambda: None) -> None:
        """`node_allocatable`: the Node's `status.allocatable` as last seen, None while not known (the split
        controller's Node watch, `SplitController.node_allocatable`): which extended resources a device plugin
        serves on this node. Called without any lock of this object held."""
        self.api = api
        self.node_name = node_name
        self.resource = resource
        self.driver = driver
        self.on_change = on_change
        self.node_allocatable = node_allocatable
        self.classes = DeviceClassNames(api, node_name, on_change=self._classes_changed)
        # After an outage both list again before they count as healthy: a resumed watch gives no sign of when it
        # has replayed what it missed (bridge.kube.watch), and the holders read from them must include it.
        self.informer = Informer(api, PODS, field_selector=f"spec.nodeName={node_name}", on_event=self._on_event,
                                 relist_after_failure=True)
        self.nominated = Informer(api, PODS, field_selector=f"status.nominatedNodeName={node_name}",
                                  on_event=self._on_nominated, relist_after_failure=True)
        self._lock = threading.Lock()
        self._pods: dict[str, PodView] = {}  # by uid
        self._incoming: dict[str, PodView] = {}  # by uid: nominated here, not bound
        # by uid: left the nominated view, and the bound view does not have it (yet): see `_resolve_leaving`
        self._leaving: dict[str, PodView] = {}
        self._claims: dict[tuple[str, str], ClaimView] = {}
        # Which read of each claim `_claims` holds (reads are numbered as they start): the pod watches and the split's
        # refresh read claims concurrently, and an older answer must not overwrite a newer one.
        self._reads = itertools.count()
        self._claim_read: dict[tuple[str, str], int] = {}
        self._ended_read: dict[tuple[str, str], float] = {}  # claim -> next re-read while its pod has ended
        self._deleted: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name) of pods seen deleted, oldest first
        # uids of nominated pods found waiting for their extended-resource claim from known facts: they keep waiting
        # while nominated and unclaimed (the scheduler's decision was taken at Filter time; see the module doc)
        self._extended_dra: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nominated_thread: threading.Thread | None = None
        self._classes_thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = self.informer.start(self._stop)
            self._nominated_thread = self.nominated.start(self._stop)
            self._classes_thread = self.classes.start(self._stop)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        for th in (self._thread, self._nominated_thread, self._classes_thread):
            if th is not None:
                th.join(timeout)
        self._thread = self._nominated_thread = self._classes_thread = None

    # NodeComponent (bridge.node.daemon): an API outage must not restart the pod; the split reports it instead.
    def liveness(self) -> Mapping[str, Callable[[], str | None]]:
        return {}

    def readiness(self) -> Mapping[str, Callable[[], str | None]]:
        return {}

    # ---- reading -----------------------------------------------------------------------------------------------

    def snapshot(self) -> PodsSnapshot:
        for informer, what in ((self.informer, "bound to"), (self.nominated, "nominated to")):
            if not informer.synced.is_set():
                return PodsSnapshot(False, False, f"the pods {what} node {self.node_name} have not been listed yet"
                                           + _error_tail(informer))
            if not informer.healthy:
                return PodsSnapshot(False, False, f"the watch on the pods {what} node {self.node_name} is down"
                                           + _error_tail(informer))
        allocatable = self.node_allocatable()
        with self._lock:
            pods = tuple(self._pods.values())
            judged = [(p, *self._extended_waits(p, allocatable))
                      for uid, p in {**self._leaving, **self._incoming}.items() if uid not in self._pods]
            claims = dict(self._claims)
            deleted = dict(self._deleted)
        incoming = tuple(p if p.extended_pending == waits else replace(p, extended_pending=waits)
                         for p, waits, _ in judged)
        for key in sorted({(p.namespace, n) for p in (*pods, *incoming) for n in p.claims}):
            c = claims.get(key)
            if c is None or c.error:
                why = c.error if c is not None else "not read yet"
                return PodsSnapshot(True, False, f"ResourceClaim {key[0]}/{key[1]} cannot be read ({why})", pods,
                                    claims, deleted, incoming)
        for _, _, why in judged:
            if why:
                return PodsSnapshot(True, False, why, pods, claims, deleted, incoming)
        return PodsSnapshot(True, True, "", pods, claims, deleted, incoming)

    def refresh_claims(self, *, every: bool = False, ended_interval_s: float = 5.0) -> None:
        """Read claims again: all of them (`every`, before a device leaves the DRA side), else those whose last read
        failed, those of nominated pods not allocated yet, and, at most every `ended_interval_s`, those of ended pods
        that still hold an allocation (the claim controller deallocates them some time after the pod ended; until
        then the device stays held) and those of running pods not allocated when last read."""
        with self._lock:
            leaving = list(self._leaving)
        resolved = [self._resolve_leaving(uid) for uid in leaving]
        now = time.monotonic()
        with self._lock:
            keys: set[tuple[str, str]] = set()
            for p in self._watched():
                for n in p.claims:
                    c = self._claims.get((p.namespace, n))
                    if every or c is None or c.error or (not p.bound and not c.allocated):
                        keys.add((p.namespace, n))  # a nominated pod's claim: PreBind allocates it any moment
                    elif ((p.terminal and c.devices) or (p.bound and not p.terminal and not c.allocated)) \
                            and now >= self._ended_read.get((p.namespace, n), 0.0):
                        # An ended pod's claim is deallocated some time after it ended; a running pod's claim that
                        # was not there or not allocated when last read (written out of the usual order) is read
                        # again too, so its allocation is seen.
                        keys.add((p.namespace, n))
                        self._ended_read[(p.namespace, n)] = now + ended_interval_s
        changed = [self._read_claim(ns, name) for ns, name in sorted(keys)]
        if any(changed) or any(resolved):
            self.on_change()

    def waiting_for_claims(self) -> bool:
        """A running pod bound here, or a pod nominated here, references a claim not allocated when last read (or
        a pod that left the nominated view is not accounted for yet, or a pod nominated here waits for the claim of
        its extended resources)."""
        allocatable = self.node_allocatable()
        with self._lock:
            if self._leaving:
                return True
            for p in self._watched():
                if p.terminal:
                    continue
                for n in p.claims:
                    c = self._claims.get((p.namespace, n))
                    if c is None or c.error or not c.allocated:
                        return True
                if not p.bound and self._extended_waits(p, allocatable)[0]:
                    return True
        return False

    def _extended_waits(self, pod: PodView, allocatable: Mapping[str, Any] | None) -> tuple[bool, str]:
        """Whether a pod nominated here waits for the claim the scheduler makes for its extended resources, and
        when that cannot be told now, why (lock held).

        Unknown (the DeviceClasses not listed or their watch down, the Node's allocatable not read) is handled as
        `bridge.node.holders` handles every source it cannot read, and as an unread claim of a nominated pod is
        here: the pod counts as waiting (`INCOMING` on every device) AND the snapshot is not `claims_ok`, so the
        DRA side is unknown, with the reason, and nothing leaves it. Waiting is the side that holds: taking a
        device to the legacy side under a pod about to get it strands its claim (the prepare guard refuses it),
        while holding one too long costs at most one binding cycle. Only a pod that asks for such a name does this:
        a DeviceClass watch that cannot list (an older chart's RBAC) stops nothing else."""
        if pod.bound or pod.terminal or not pod.extended:
            return False, ""
        if pod.uid in self._extended_dra:
            return True, ""
        waits, name = served_by_dra(pod.extended, self.classes.maps, allocatable)
        if waits:
            self._extended_dra.add(pod.uid)
            return True, ""
        if waits is None:
            source = (self.classes.why_unknown() if self.classes.maps(name) is None
                      else f"the Node {self.node_name}'s allocatable has not been read")
            return True, (f"whether pod {pod.ref}, nominated to this node, waits for a DRA device for {name} is "
                          f"unknown: {source}")
        return False, ""

    def _classes_changed(self) -> None:
        """A DeviceClass declared or dropped an explicit name: a change to the split when a nominated pod asks for
        an extended resource (its waiting may have changed)."""
        with self._lock:
            asks = any(p.extended for p in (*self._incoming.values(), *self._leaving.values()))
        if asks:
            self.on_change()

    # ---- watch -------------------------------------------------------------------------------------------------

    def _on_event(self, ev: WatchEvent) -> None:
        view = pod_view(ev.object, self.resource)
        with self._lock:
            old = self._pods.get(view.uid)
            self._leaving.pop(view.uid, None)  # the bound view has it now (or saw it go)
            if ev.type == "DELETED":
                self._pods.pop(view.uid, None)
                self._deleted[view.uid] = (view.namespace, view.name)
                while len(self._deleted) > MAX_DELETED:
                    del self._deleted[next(iter(self._deleted))]
            else:
                self._pods[view.uid] = view
            self._forget_unwanted_claims()
            unread = [(view.namespace, n) for n in view.claims if (view.namespace, n) not in self._claims]
        reread: Sequence[str] = ()
        if ev.type != "DELETED" and old is not None and view.terminal and not old.terminal:
            reread = view.claims  # the pod ended: its claims may be deallocated now
        elif ev.type != "DELETED" and old is None:
            # First seen bound: a claim read while the pod was only nominated here predates its allocation.
            reread = [n for n in view.claims if (view.namespace, n) not in unread]
        changed = [self._read_claim(ns, name) for ns, name in unread + [(view.namespace, n) for n in reread]]
        if old != view or any(changed):
            self.on_change()  # once per event: the pod and its claims are one change to the split

    def _on_nominated(self, ev: WatchEvent) -> None:
        """A pod the scheduler nominated to this node (or that left this view: DELETED, or bound).

        A pod leaving the view may have been bound here (the binding clears `nominatedNodeName` and sets `nodeName`
        in one write, which the two watches report in either order), bound elsewhere, deleted, or had its
        nomination cleared; the DELETED event carries the object as it was before, so it does not say which. Until
        the bound view has it or the API says it went elsewhere (`_resolve_leaving`), it keeps holding: else its
        allocated claim would be free for the moment between the two events."""
        view = pod_view(ev.object, self.resource)
        with self._lock:
            old = self._incoming.get(view.uid, self._leaving.get(view.uid))
            self._leaving.pop(view.uid, None)
            if ev.type == "DELETED" or view.bound or view.terminal:
                gone = self._incoming.pop(view.uid, None)
                if gone is not None and not view.terminal and view.uid not in self._pods:
                    self._leaving[view.uid] = gone
            else:
                self._incoming[view.uid] = view
            self._forget_unwanted_claims()
            unread = [(view.namespace, n) for n in view.claims if (view.namespace, n) not in self._claims]
        changed = [self._read_claim(ns, name) for ns, name in unread]
        self._resolve_leaving(view.uid)
        with self._lock:
            new = self._incoming.get(view.uid, self._leaving.get(view.uid))
        if old != new or any(changed):
            self.on_change()

    def _resolve_leaving(self, uid: str) -> bool:
        """Ask the API where a pod that left the nominated view went; drop it unless it is bound (or nominated
        again) here and the watches have not brought it yet, or the API cannot say (then it keeps holding, and is
        asked again at the next `refresh_claims`). True when it was dropped."""
        with self._lock:
            view = self._leaving.get(uid)
        if view is None:
            return False
        try:
            pod: Obj | None = self.api.get(PODS, view.name, view.namespace)
        except NotFound:
            pod = None
        except KubeError as err:
            log.warning("cannot read pod %s, which left the pods nominated to this node: %s; it holds until it can "
                        "be read", view.ref, err.message, extra={"node": self.node_name})
            return False
        here = False
        if pod is not None and str((pod.get("metadata") or {}).get("uid", "")) == uid:
            spec, status = pod.get("spec") or {}, pod.get("status") or {}
            here = status.get("phase") not in _TERMINAL and (
                spec.get("nodeName") == self.node_name
                or (not spec.get("nodeName") and status.get("nominatedNodeName") == self.node_name))
        with self._lock:
            if here and uid not in self._pods and uid not in self._incoming:
                return False  # the watches bring it
            dropped = self._leaving.pop(uid, None) is not None
            self._forget_unwanted_claims()
        return dropped

    def _watched(self) -> tuple[PodView, ...]:
        """Every pod whose claims are followed: bound, nominated, leaving the nominated view (lock held)."""
        return (*self._pods.values(), *self._incoming.values(), *self._leaving.values())

    def _forget_unwanted_claims(self) -> None:
        """Drop claims no bound or nominated pod references any more, and the waiting of pods no longer nominated
        here unclaimed (lock held)."""
        self._extended_dra &= {uid for uid, p in {**self._leaving, **self._incoming}.items()
                               if p.extended and not p.bound and not p.terminal}
        wanted = {(p.namespace, n) for p in self._watched() for n in p.claims}
        for key in [k for k in self._claims if k not in wanted]:
            del self._claims[key]
            self._ended_read.pop(key, None)
            self._claim_read.pop(key, None)

    def _read_claim(self, namespace: str, name: str) -> bool:
        """Read one claim into the cache; True when what is cached for it changed (the caller tells `on_change`).
        An answer is dropped when a read of the same claim that started later has been stored meanwhile."""
        seq = next(self._reads)
        try:
            claim = self.api.get(self.api.resource_api().claims, name, namespace)
            view = ClaimView(namespace, name, allocated_devices(claim, self.driver, self.node_name),
                             allocated=bool((claim.get("status") or {}).get("allocation")))
        except NotFound:
            view = ClaimView(namespace, name)
        except KubeError as err:
            log.warning("cannot read ResourceClaim %s/%s: %s", namespace, name, err.message,
                        extra={"node": self.node_name})
            view = ClaimView(namespace, name, error=err.message)
        key = (namespace, name)
        with self._lock:
            if self._claim_read.get(key, -1) < seq and any(p.namespace == namespace and name in p.claims
                                                           for p in self._watched()):
                changed = self._claims.get(key) != view
                self._claims[key] = view
                self._claim_read[key] = seq
            else:
                changed = False
        return changed


def _error_tail(informer: Informer) -> str:
    err = informer.last_error
    return f" ({err.message})" if err is not None else ""


__all__ = ["ClaimView", "GpuInitContainer", "NodePods", "PodView", "PodsSnapshot", "allocated_devices", "pod_view",
           "served_by_dra", "waits_for_allocation"]
