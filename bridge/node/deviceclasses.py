"""The extended resource names the cluster's DeviceClasses declare (KEP-5004, DRAExtendedResource): which names a
pod may ask for that kube-scheduler serves through DRA, so that `bridge.node.nodepods` can tell a pod nominated to
this node that still waits for the scheduler to make and allocate its claim.

What the real scheduler does (kubernetes/kubernetes v1.37, pkg/scheduler/framework/plugins/dynamicresources):
* Which names map to a DeviceClass: k8s.io/dynamic-resource-allocation deviceclass/extendedresourcecache
  `updateResourceName2class` maps every class's implicit name `deviceclass.resource.kubernetes.io/<class>` and, when
  set, its `spec.extendedResourceName` (an explicit name such as `example.com/gpu`; when several classes declare
  one name the newest wins, then the lower name: which class it is does not matter here, only that one maps it).
* Which pods take the DRA path: extendeddynamicresources.go `hasDeviceClassMappedExtendedResource` (PreFilter): a
  non-zero request whose name `IsDRAExtendedResourceName` (pkg/scheduler/util/utils.go: an extended resource name,
  or the implicit prefix) and that a class maps. Such a pod has a claim to bind, so `PreBindPreFlight` has work and
  the binding cycle nominates it to its node first, on every node, whatever serves the name there.
* Per node (`filterExtendedResources`): a mapped name is served by DRA on that node only where the node's
  `status.allocatable` for it is 0 or absent (`isBackedByDRA && allocatable == 0`); where a device plugin advertises
  it (allocatable above 0) the device plugin serves it and no claim is made for it (`bindClaim`: "extended
  resource requests satisfied by device plugin").
* The claim is created, allocated and reserved in PreBind (`bindClaim`), and only then is the pod's
  `status.extendedResourceClaimStatus` written (`patchPodExtendedResourceClaimStatus`): until that field names the
  claim, the pod is waiting for a device of this node, even when the claim already exists.
* A device plugin can never advertise an implicit name: the kubelet registers only `IsExtendedResourceName` names
  (pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go `RegisterPlugin`, handler.go), and
  `deviceclass.resource.kubernetes.io/...` is in the kubernetes.io namespace. So implicit names need no class
  knowledge; explicit names do, and that is what this watch keeps.

One cluster-scoped watch per node daemon (DeviceClasses are few and change rarely), keeping only each class's name
and explicit name. Not modelled: the real cache's quirk of dropping a clashing name when one of the classes that
declare it is deleted or changed (extendedresourcecache.go `removeResourceName2class`) until the other changes
too; here a name stays mapped while any class declares it, the side that holds devices longer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from bridge.kube.api import KubeAPI, Obj, ResourceAPI, WatchEvent
from bridge.kube.errors import KubeError
from bridge.kube.retry import RetryPolicy
from bridge.kube.watch import Informer

log = logging.getLogger(__name__)

DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"  # resourceapi.ResourceDeviceClassPrefix


def _keep(obj: Obj) -> Obj:
    """Informer transform: the fields the store diffs on and the explicit name."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    out: dict[str, Any] = {"metadata": {k: meta[k] for k in ("name", "uid", "resourceVersion") if k in meta}}
    if isinstance(spec, dict) and spec.get("extendedResourceName"):
        out["spec"] = {"extendedResourceName": str(spec["extendedResourceName"])}
    return out


class DeviceClassNames:
    """The explicit `spec.extendedResourceName`s of the cluster's DeviceClasses, from a watch.

    `maps(name)` answers whether a class declares `name`, or None while that is not known (not listed yet, the
    watch down, resource.k8s.io not reachable): the caller decides what unknown means (`bridge.node.nodepods`:
    possibly waiting, and the DRA side unknown)."""

    def __init__(self, api: KubeAPI, node_name: str, *, on_change: Callable[[], None] = lambda: None,
                 backoff: RetryPolicy | None = None) -> None:
        self.api = api
        self.node_name = node_name
        self.on_change = on_change
        self.backoff = backoff or RetryPolicy(initial_backoff=0.2, factor=2.0, max_backoff=10.0)
        # The resource.k8s.io version is known only once the API answers (`resource_api()`); `_run` sets it before
        # the informer lists. v1 until then (the informer has not listed anything).
        self.informer = Informer(api, ResourceAPI("v1").device_classes, on_event=self._on_event,
                                 backoff=self.backoff, transform=_keep, relist_after_failure=True)
        self._lock = threading.Lock()
        self._explicit: dict[str, str] = {}  # class name -> its spec.extendedResourceName
        self._problem = ""  # why the resource.k8s.io version could not be resolved yet ("" = resolved or not tried)

    def start(self, stop: threading.Event) -> threading.Thread:
        t = threading.Thread(target=self._run, args=(stop,), name="informer-deviceclasses", daemon=True)
        t.start()
        return t

    def _run(self, stop: threading.Event) -> None:
        failures = 0
        while not stop.is_set():
            try:
                self.informer.res = self.api.resource_api().device_classes
                break
            except KubeError as err:
                self._problem = err.message
                delay = self.backoff.backoff(failures)
                failures += 1
                log.warning("cannot resolve resource.k8s.io for the DeviceClass watch: %s; retrying in %.1fs",
                            err.message, delay, extra={"node": self.node_name})
                stop.wait(delay)
        else:
            return
        self._problem = ""
        self.informer.run(stop)

    # ---- reading -----------------------------------------------------------------------------------------------

    def known(self) -> bool:
        return self.informer.synced.is_set() and self.informer.healthy

    def maps(self, name: str) -> bool | None:
        """Whether a DeviceClass declares `name` as its `extendedResourceName`; None when not known now."""
        if not self.known():
            return None
        with self._lock:
            return name in self._explicit.values()

    def explicit_names(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._explicit.values())

    def why_unknown(self) -> str:
        err = self.informer.last_error
        tail = f" ({err.message})" if err is not None else ""
        if self._problem:
            return f"the DeviceClasses cannot be listed ({self._problem})"
        if not self.informer.synced.is_set():
            return "the DeviceClasses have not been listed yet" + tail
        return "the watch on DeviceClasses is down" + tail

    # ---- watch -------------------------------------------------------------------------------------------------

    def _on_event(self, ev: WatchEvent) -> None:
        meta = ev.object.get("metadata") or {}
        name = str(meta.get("name", ""))
        explicit = str(((ev.object.get("spec") or {}).get("extendedResourceName")) or "")
        with self._lock:
            before = frozenset(self._explicit.values())
            if ev.type == "DELETED" or not explicit:
                self._explicit.pop(name, None)
            else:
                self._explicit[name] = explicit
            changed = frozenset(self._explicit.values()) != before
        if changed:
            log.info("DeviceClass %s %s: extended resource names served by DRA: %s", name, ev.type.lower(),
                     ", ".join(sorted(self.explicit_names())) or "none besides the implicit ones",
                     extra={"node": self.node_name})
            self.on_change()


__all__ = ["DEVICE_CLASS_PREFIX", "DeviceClassNames"]
