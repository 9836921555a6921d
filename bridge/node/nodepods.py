"""The pods bound to this node and the ResourceClaims they use: what the holders of both sides need from the API.

One watch per node daemon, on pods with the field selector `spec.nodeName=<node>` (what the kubelet itself
watches), plus a GET per claim those pods reference: never a cluster-wide claim watch, which every node would
receive in full (5,000 nodes x every claim change). Claims are read when a pod first references them, again when
the pod ends (the claim controller deallocates a claim whose pods are gone), after a failed read, and on
`refresh_claims()` (before a device leaves the DRA side). A claim's allocation is written by the scheduler before
it binds the pod (PreBind, then Bind), so by the time a pod is seen here its claims are allocated; claims
allocated for a pod the scheduler has not bound yet are covered by the split's grace and by prepare taking a
device back (`bridge.ledger.guard_prepare`).

Which claims a pod uses (core/v1 Pod): `spec.resourceClaims[].resourceClaimName` (a claim by name),
`status.resourceClaimStatuses[].resourceClaimName` (claims generated from templates) and, with
DRAExtendedResource, `status.extendedResourceClaimStatus.resourceClaimName` (the claim the scheduler creates for an
extended-resource request). Of a claim, the devices of `status.allocation.devices.results[]` whose `driver` and
`pool` are ours (the pool is the node name) are this node's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge.kube.api import PODS, KubeAPI, Obj, WatchEvent
from bridge.kube.errors import KubeError, NotFound
from bridge.kube.watch import Informer
from bridge.kvalues.quantity import QuantityError, quantity_int

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

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ClaimView:
    namespace: str
    name: str
    devices: tuple[str, ...] = ()  # this node's devices allocated to it (names, e.g. "gpu-3")
    error: str = ""  # why it could not be read (NotFound is not an error: not allocated)


@dataclass(frozen=True)
class PodsSnapshot:
    listed: bool  # the watch is synced and healthy: `pods` is every pod bound to this node
    claims_ok: bool  # ... and every claim they reference was read
    why: str  # when not listed or not claims_ok
    pods: tuple[PodView, ...] = ()
    claims: Mapping[tuple[str, str], ClaimView] | None = None
    deleted: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # uid -> (namespace, name), recently gone

    def pod_by_uid(self) -> dict[str, PodView]:
        return {p.uid: p for p in self.pods}


def _gpus(container: Mapping[str, Any], resource: str) -> int:
    res = container.get("resources") or {}
    try:
        return max(quantity_int((res.get("limits") or {}).get(resource)),
                   quantity_int((res.get("requests") or {}).get(resource)))
    except QuantityError:
        return 0


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
    if isinstance(ext, dict) and ext.get("resourceClaimName"):
        claims.append(str(ext["resourceClaimName"]))
    return PodView(str(meta.get("uid", "")), str(meta.get("namespace", "")), str(meta.get("name", "")), terminal,
                   inits, tuple(str(c.get("name")) for c in spec.get("containers") or [] if isinstance(c, dict)),
                   tuple(dict.fromkeys(claims)))


def allocated_devices(claim: Obj, driver: str, pool: str) -> tuple[str, ...]:
    """This node's devices in a claim's allocation (pure)."""
    results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")) or []
    return tuple(dict.fromkeys(str(r.get("device")) for r in results
                               if isinstance(r, dict) and r.get("driver") == driver and r.get("pool") == pool))


class NodePods:
    def __init__(self, api: KubeAPI, node_name: str, *, resource: str, driver: str,
                 on_change: Callable[[], None] = lambda: None) -> None:
        self.api = api
        self.node_name = node_name
        self.resource = resource
        self.driver = driver
        self.on_change = on_change
        self.informer = Informer(api, PODS, field_selector=f"spec.nodeName={node_name}", on_event=self._on_event)
        self._lock = threading.Lock()
        self._pods: dict[str, PodView] = {}  # by uid
        self._claims: dict[tuple[str, str], ClaimView] = {}
        self._ended_read: dict[tuple[str, str], float] = {}  # claim -> next re-read while its pod has ended
        self._deleted: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name) of pods seen deleted, oldest first
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = self.informer.start(self._stop)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    # NodeComponent (bridge.node.daemon): an API outage must not restart the pod; the split reports it instead.
    def liveness(self) -> Mapping[str, Callable[[], str | None]]:
        return {}

    def readiness(self) -> Mapping[str, Callable[[], str | None]]:
        return {}

    # ---- reading -----------------------------------------------------------------------------------------------

    def snapshot(self) -> PodsSnapshot:
        if not self.informer.synced.is_set():
            return PodsSnapshot(False, False, f"the pods bound to node {self.node_name} have not been listed yet"
                                       + self._error_tail())
        if not self.informer.healthy:
            return PodsSnapshot(False, False, f"the watch on the pods bound to node {self.node_name} is down"
                                       + self._error_tail())
        with self._lock:
            pods = tuple(self._pods.values())
            claims = dict(self._claims)
            deleted = dict(self._deleted)
        for key in sorted({(p.namespace, n) for p in pods for n in p.claims}):
            c = claims.get(key)
            if c is None or c.error:
                why = c.error if c is not None else "not read yet"
                return PodsSnapshot(True, False, f"ResourceClaim {key[0]}/{key[1]} cannot be read ({why})", pods,
                                    claims, deleted)
        return PodsSnapshot(True, True, "", pods, claims, deleted)

    def _error_tail(self) -> str:
        err = self.informer.last_error
        return f" ({err.message})" if err is not None else ""

    def refresh_claims(self, *, every: bool = False, ended_interval_s: float = 5.0) -> None:
        """Read claims again: all of them (`every`, before a device leaves the DRA side), else those whose last read
        failed and, at most every `ended_interval_s`, those of ended pods that still hold an allocation (the claim
        controller deallocates them some time after the pod ended; until then the device stays held)."""
        now = time.monotonic()
        with self._lock:
            keys: set[tuple[str, str]] = set()
            for p in self._pods.values():
                for n in p.claims:
                    c = self._claims.get((p.namespace, n))
                    if every or c is None or c.error:
                        keys.add((p.namespace, n))
                    elif p.terminal and c.devices and now >= self._ended_read.get((p.namespace, n), 0.0):
                        keys.add((p.namespace, n))
                        self._ended_read[(p.namespace, n)] = now + ended_interval_s
        for ns, name in sorted(keys):
            self._read_claim(ns, name)

    # ---- watch -------------------------------------------------------------------------------------------------

    def _on_event(self, ev: WatchEvent) -> None:
        view = pod_view(ev.object, self.resource)
        with self._lock:
            old = self._pods.get(view.uid)
            if ev.type == "DELETED":
                self._pods.pop(view.uid, None)
                self._deleted[view.uid] = (view.namespace, view.name)
                while len(self._deleted) > MAX_DELETED:
                    del self._deleted[next(iter(self._deleted))]
            else:
                self._pods[view.uid] = view
            wanted = {(p.namespace, n) for p in self._pods.values() for n in p.claims}
            for key in [k for k in self._claims if k not in wanted]:
                del self._claims[key]
                self._ended_read.pop(key, None)
            unread = [(view.namespace, n) for n in view.claims if (view.namespace, n) not in self._claims]
        reread: Sequence[str] = ()
        if ev.type != "DELETED" and old is not None and view.terminal and not old.terminal:
            reread = view.claims  # the pod ended: its claims may be deallocated now
        for ns, name in unread + [(view.namespace, n) for n in reread]:
            self._read_claim(ns, name)
        if old != view:
            self.on_change()

    def _read_claim(self, namespace: str, name: str) -> None:
        try:
            claim = self.api.get(self.api.resource_api().claims, name, namespace)
            view = ClaimView(namespace, name, allocated_devices(claim, self.driver, self.node_name))
        except NotFound:
            view = ClaimView(namespace, name)
        except KubeError as err:
            log.warning("cannot read ResourceClaim %s/%s: %s", namespace, name, err.message,
                        extra={"node": self.node_name})
            view = ClaimView(namespace, name, error=err.message)
        with self._lock:
            if any(p.namespace == namespace and name in p.claims for p in self._pods.values()):
                changed = self._claims.get((namespace, name)) != view
                self._claims[(namespace, name)] = view
            else:
                changed = False
        if changed:
            self.on_change()


__all__ = ["ClaimView", "GpuInitContainer", "NodePods", "PodView", "PodsSnapshot", "allocated_devices", "pod_view"]
