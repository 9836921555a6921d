"""The kubelet's pod admission, simulated (pure functions: pod and node dicts in, a verdict out).

Written from kubernetes/kubernetes pkg/kubelet/lifecycle/predicate.go (`predicateAdmitHandler.Admit`,
`removeMissingExtendedResources`, `InsufficientResourceError`), pkg/kubelet/cm/admission/errors.go
(`unexpectedAdmissionError`), pkg/kubelet/kubelet.go (`rejectPod`) and the scheduler's noderesources `Fits`
(pkg/scheduler/framework/plugins/noderesources/fit.go), which the kubelet's general filter runs:

* The device manager allocates first (the topology manager's admit handler runs before the predicate handler):
  its failure rejects the pod with reason `UnexpectedAdmissionError` and message
  `Allocate failed due to <error>, which is unexpected`.
* Then resources are checked against the Node's `status.allocatable`, where a device-plugin resource counts at
  least the devices already allocated (`sanitizeNodeAllocatable`), minus what the other admitted pods request.
  `removeMissingExtendedResources` first drops from each container's requests (1) a DRA extended-resource name
  (`schedutil.IsDRAExtendedResourceName`: an extended resource name, or the implicit
  `deviceclass.resource.kubernetes.io/<class>`) that the pod's `status.extendedResourceClaimStatus.requestMappings`
  maps for THAT container and name, only with DRAExtendedResource on (1.36+ here), and (2) an extended resource
  name the Node does not advertise (cluster-level resources). The implicit `deviceclass.resource.kubernetes.io/...`
  name is not an extended resource name (`IsExtendedResourceName` refuses every `*kubernetes.io/` name), so rule
  (2) never drops it: without a mapping it reaches the fit check, which counts it against an allocatable of 0
  (noderesources `Fits`: kubelets from 1.36 no longer delegate a name to DRA when they have no DRA manager
  (kubernetes/kubernetes PR #135725, pkg/scheduler/framework/plugins/noderesources/fit.go
  `shouldDelegateResourceToDRA`), and with the gate off nothing is delegated), and the pod is rejected
  `OutOfdeviceclass.resource.kubernetes.io/<class>`. So a pod translated to the `extended` target runs only on a
  1.36+ kubelet and only once the scheduler wrote its mappings. The first failure wins, in the scheduler's order:
  pods, cpu, memory, ephemeral-storage, then the other resources. Reason `OutOfcpu`, `OutOfmemory`,
  `OutOfephemeral-storage`, `OutOfpods`, or `OutOf<resource>`, message `Node didn't have enough resource: <name>,
  requested: N, used: N, capacity: N` (cpu in millicores).
* A pod's `nodeSelector` must match the Node's labels (reason `NodeAffinity`).
* A rejected pod gets phase Failed, the reason, and the message prefixed `Pod was rejected: `, and a Warning
  Event with the reason and the message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from bridge.deviceplugin.registration import is_extended_resource_name
from bridge.kvalues.quantity import QuantityError, parse_quantity
from bridge.sandbox.podrequests import pod_requests

Obj = dict[str, Any]

UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"
INVALID_NODE_INFO = "InvalidNodeInfo"
_SCALAR_ORDER = ("cpu", "memory", "ephemeral-storage")
DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"  # resourceapi.ResourceDeviceClassPrefix


@dataclass(frozen=True)
class Verdict:
    admit: bool
    reason: str = ""
    message: str = ""


ADMIT = Verdict(True)


def unexpected(err: Exception | str) -> Verdict:
    return Verdict(False, UNEXPECTED_ADMISSION_ERROR, f"Allocate failed due to {err}, which is unexpected")


def device_limits(container: Mapping[str, Any]) -> dict[str, int]:
    """What the device manager allocates for a container: its extended-resource limits (requests when a limit is
    missing, as the API server defaults them), as whole device counts."""
    res = container.get("resources") or {}
    out: dict[str, int] = {}
    for section in ("requests", "limits"):  # limits last: they win
        for name, value in (res.get(section) or {}).items():
            if not is_extended_resource_name(name):
                continue
            try:
                out[name] = int(parse_quantity(value))
            except QuantityError:
                continue
    return {k: v for k, v in out.items() if v > 0}


def _allocatable(node: Obj) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for name, value in ((node.get("status") or {}).get("allocatable") or {}).items():
        try:
            out[name] = parse_quantity(value)
        except QuantityError:
            continue
    return out


def is_dra_extended_resource_name(name: str) -> bool:
    """pkg/scheduler/util `IsDRAExtendedResourceName`: an extended resource name or the DeviceClass's implicit one."""
    return is_extended_resource_name(name) or name.startswith(DEVICE_CLASS_PREFIX)


def _dra_backed(pod: Obj, container: str, enabled: bool) -> set[str]:
    """`isResourceBackedByDRA`: the names `requestMappings` maps for this container (DRAExtendedResource on)."""
    if not enabled:
        return set()
    ext = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    return {m.get("resourceName", "") for m in ext.get("requestMappings") or [] if m.get("containerName") == container}


def _dropped(name: str, backed: set[str], allocatable: Mapping[str, Fraction]) -> bool:
    if is_dra_extended_resource_name(name) and name in backed:
        return True
    return is_extended_resource_name(name) and name not in allocatable


def _requests_without_missing(pod: Obj, allocatable: Mapping[str, Fraction], dra_extended: bool) -> dict[str, Fraction]:
    """`removeMissingExtendedResources`, then the pod's effective requests."""
    spec = pod.get("spec") or {}

    def filtered(containers: Iterable[Obj]) -> list[Obj]:
        out = []
        for c in containers:
            backed = _dra_backed(pod, c.get("name", ""), dra_extended)
            res = dict(c.get("resources") or {})
            for section in ("requests", "limits"):
                if res.get(section):
                    res[section] = {k: v for k, v in res[section].items() if not _dropped(k, backed, allocatable)}
            out.append({**c, "resources": res})
        return out

    copy = {"spec": {**spec, "containers": filtered(spec.get("containers") or []),
                     "initContainers": filtered(spec.get("initContainers") or [])}}
    return pod_requests(copy)


def _show(name: str, value: Fraction) -> int:
    return int(value * 1000) if name == "cpu" else int(value)


def fits(pod: Obj, node: Obj, others: Iterable[Obj], allocated_devices: Mapping[str, int], *,
         dra_extended: bool) -> Verdict:
    """The predicate handler's verdict for `pod` on `node`, with `others` (the pods admitted before) running."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return Verdict(False, "NodeAffinity", "Predicate NodeAffinity failed: node(s) didn't match Pod's node "
                                              "affinity/selector")
    allocatable = _allocatable(node)
    for name, count in allocated_devices.items():  # sanitizeNodeAllocatable
        if allocatable.get(name, Fraction(0)) < count:
            allocatable[name] = Fraction(count)
    others = list(others)
    max_pods = allocatable.get("pods", Fraction(0))
    if len(others) + 1 > max_pods:
        return Verdict(False, "OutOfpods", f"Node didn't have enough resource: pods, requested: 1, used: "
                                            f"{len(others)}, capacity: {int(max_pods)}")
    wanted = _requests_without_missing(pod, allocatable, dra_extended)
    used: dict[str, Fraction] = {}
    for other in others:
        for k, v in _requests_without_missing(other, allocatable, dra_extended).items():
            used[k] = used.get(k, Fraction(0)) + v
    order = [n for n in _SCALAR_ORDER if n in wanted] + sorted(n for n in wanted if n not in _SCALAR_ORDER)
    for name in order:
        if name in ("pods",):
            continue
        req = wanted[name]
        cap = allocatable.get(name, Fraction(0))
        if (name not in allocatable and not is_extended_resource_name(name) and name not in _SCALAR_ORDER
                and not name.startswith(DEVICE_CLASS_PREFIX)):
            continue  # e.g. hugepages not reported: the scheduler would not know them either
        if req > cap - used.get(name, Fraction(0)):
            return Verdict(False, f"OutOf{name}", f"Node didn't have enough resource: {name}, requested: "
                                                   f"{_show(name, req)}, used: {_show(name, used.get(name, Fraction(0)))}"
                                                   f", capacity: {_show(name, cap)}")
    return ADMIT


def rejected_status(pod: Obj, verdict: Verdict) -> Obj:
    """The status `rejectPod` writes: phase Failed, the reason, `Pod was rejected: <message>`, the QoS class."""
    return {"phase": "Failed", "reason": verdict.reason, "message": f"Pod was rejected: {verdict.message}",
            "qosClass": qos_class(pod)}


def qos_class(pod: Obj) -> str:
    """pkg/apis/core/v1/helper/qos `GetPodQOS` (cpu and memory only)."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for name in ("cpu", "memory"):
            if name in req or name in lim:
                any_set = True
            if name not in lim or (name in req and str(req[name]) != str(lim[name])):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"
