"""What the controller keeps of the objects it watches: the fields its state and its writer read, nothing else.

The controller watches every Node and every unfinished Pod of the cluster, not only the GPU ones (a field selector
cannot say "asks for GPUs"). Objects as the API server sends them are large: a Running pod of a two-container
Deployment read from a real kube-apiserver and kubelet (tests/controller/data/real-pod-running.json) is 11 KB of
JSON, 216 JSON objects and arrays, 130 of them its `managedFields`, and about 48 KB once parsed here. Kept whole, the objects
of 5,000 such nodes and 150,000 such pods took 5.6 GB and each full pass of Python's cyclic garbage collector 10 s;
cut as below, 456 MiB and 0.4 s (bench/controller_memory_bench.py). So each object is cut down as it arrives (the
informers' `transform`, as client-go's `SharedInformer.SetTransform`; applied per page of the start-up list, so that
list never holds more than one page of whole objects):

* every object keeps `apiVersion`, `kind` (Warning Events name the object by them) and its `metadata` except
  `managedFields` (what the server keeps for server-side apply; nothing here reads it);
* a **Pod** keeps of its metadata only the name, namespace, uid, resourceVersion, creationTimestamp and
  deletionTimestamp (labels, annotations and owners are never read), and of its status the phase,
  `resourceClaimStatuses`, `nominatedNodeName` and a `PodScheduled` condition that is False (its type, status and
  reason: whether kube-scheduler refused the pod; a bound pod's True one is not kept);
  * a pod that **asks for GPUs of the bridge's** (`asks_for_gpus`: a `spec.resourceClaims` entry, or a container or
    init container naming the legacy resource or the DeviceClass's extended resource in its limits or requests,
    whatever the value, so a count that is not valid is still reported) keeps of its spec what the demand and the
    held counts read: `nodeName`, `schedulingGates`, `priority`, `nodeSelector`, `affinity`, `tolerations`,
    `resourceClaims`, and each container's name and resources (an init container's `restartPolicy` too: a sidecar
    counts differently);
  * any other pod can be neither demand nor hold a GPU; it keeps `nodeName`, `schedulingGates` and `priority`, so
    that it is bound, pending or ranked as the whole pod would be, and an empty spec otherwise;
* a **Node** keeps its spec (taints, cordon), and of its status the capacity, the allocatable resources and the
  `Ready` condition: its images, addresses, daemon endpoints, system info and other conditions go;
* a **ResourceClaim** or **ResourceClaimTemplate** loses `managedFields` only (the demand reads its requests, the
  held counts its allocation).

Each cut is a pure function of the object at hand, and every watch event carries the whole current object, so a pod
whose spec changed to ask for GPUs would keep a GPU pod's fields from that event on; the cut never guesses ahead. A
malformed object (a container that is not a map, resources that are not a map) is never cut further than the
rules above allow: a value it does not understand is kept as it is, and the state reads it as it would have.
tests/controller/test_slim.py feeds the cut objects to the incremental state and checks, over random event
sequences, that views and demand equal the full rebuild from the whole objects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bridge.controller.demand import Names
from bridge.kube.watch import kept_metadata

Obj = dict[str, Any]

_POD_META = ("creationTimestamp", "deletionTimestamp")  # besides the identity (`kept_metadata`)
_ANY_POD_SPEC = ("nodeName", "schedulingGates", "priority")
_GPU_POD_SPEC = _ANY_POD_SPEC + ("nodeSelector", "affinity", "tolerations", "resourceClaims")
_POD_STATUS = ("phase", "resourceClaimStatuses", "nominatedNodeName")
_CONDITION = ("type", "status", "reason")
_CONTAINER = ("name", "resources")
_INIT_CONTAINER = ("name", "resources", "restartPolicy")
_NODE_STATUS = ("capacity", "allocatable")


def _pick(obj: Mapping[str, Any], keys: tuple[str, ...]) -> Obj:
    return {k: obj[k] for k in keys if k in obj}


def _top(obj: Mapping[str, Any], meta: Obj) -> Obj:
    out = _pick(obj, ("apiVersion", "kind"))
    out["metadata"] = meta
    return out


def _without_managed_fields(obj: Mapping[str, Any]) -> Obj:
    out = dict(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out


def asks_for_gpus(spec: Mapping[str, Any], names: Names) -> bool:
    """Whether a pod spec could be GPU demand or hold GPUs of the bridge's: it names claims, or one of its containers
    names `names.resource` or `names.extended` in its limits or requests (any value, valid or not). A spec whose
    containers are not the lists of maps a pod has also answers True: the state reads such a pod whole."""
    if spec.get("resourceClaims"):
        return True
    wanted = (names.resource, names.extended)
    for kind in ("initContainers", "containers"):
        listed = spec.get(kind) or []
        if not isinstance(listed, list):
            return True
        for c in listed:
            if not isinstance(c, dict):
                return True
            res = c.get("resources") or {}
            if not isinstance(res, dict):
                return True
            for part in ("limits", "requests"):
                values = res.get(part) or {}
                if not isinstance(values, dict) or any(w in values for w in wanted):
                    return True
    return False


def slim_pod(names: Names) -> Callable[[Obj], Obj]:
    """The transform of the controller's pod informer (see the module docstring)."""

    def slim(pod: Obj) -> Obj:
        spec = pod.get("spec")
        status = pod.get("status")
        if not isinstance(spec, dict) or not isinstance(status, (dict, type(None))):
            return _without_managed_fields(pod)
        out = _top(pod, kept_metadata(pod, *_POD_META))
        if asks_for_gpus(spec, names):
            kept = _pick(spec, _GPU_POD_SPEC)
            for kind, keys in (("initContainers", _INIT_CONTAINER), ("containers", _CONTAINER)):
                if kind in spec:
                    kept[kind] = [_pick(c, keys) if isinstance(c, dict) else c for c in spec[kind]] \
                        if isinstance(spec[kind], list) else spec[kind]
        else:
            kept = _pick(spec, _ANY_POD_SPEC)
        out["spec"] = kept
        if status is not None:
            out["status"] = _pick(status, _POD_STATUS)
            conditions = status.get("conditions")
            refusals = [_pick(c, _CONDITION) for c in conditions if isinstance(c, dict)
                        and c.get("type") == "PodScheduled" and c.get("status") == "False"] \
                if isinstance(conditions, list) else []
            if refusals:
                out["status"]["conditions"] = refusals
        return out

    return slim


def slim_node(node: Obj) -> Obj:
    """The transform of the controller's node informer (see the module docstring)."""
    out = _without_managed_fields(node)
    status = node.get("status")
    if not isinstance(status, dict):
        return out
    kept = _pick(status, _NODE_STATUS)
    conditions = status.get("conditions")
    if isinstance(conditions, list):
        kept["conditions"] = [c for c in conditions if not isinstance(c, dict) or c.get("type") == "Ready"]
    elif "conditions" in status:
        kept["conditions"] = conditions
    out["status"] = kept
    return out


def slim_resource(obj: Obj) -> Obj:
    """The transform of the ResourceClaim and ResourceClaimTemplate informers: `managedFields` goes."""
    return _without_managed_fields(obj)


__all__ = ["asks_for_gpus", "slim_node", "slim_pod", "slim_resource"]
