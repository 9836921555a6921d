"""KEP-5004: extended resources served by DRA (`nvidia.com/gpu: 1` or `deviceclass.resource.kubernetes.io/<class>`),
as kube-scheduler does it (pure).

Written from kubernetes/kubernetes pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go,
extended/util.go (`DeviceClassMapping`) and pkg/scheduler/util (`IsDRAExtendedResourceName`):
* Which names map to a class: every DeviceClass maps its implicit name `deviceclass.resource.kubernetes.io/<class>`;
  a class with `spec.extendedResourceName` also maps that name — when several classes claim one name, the newest
  (creationTimestamp) wins, then the alphabetically first.
* Per node and name (`filterExtendedResources`): a mapped name whose node allocatable is 0 (or absent) is served
  by DRA on that node; otherwise a name the node does not list at all is unschedulable ("cannot fit resource");
  otherwise the device plugin serves it (noderesources checks it).
* The claim: one per pod, in memory until PreBind, then created with `generateName: <pod>-extended-resources-`,
  the annotation `resource.kubernetes.io/extended-resource-claim: "true"` and the pod as controller owner. Requests
  are `container-<i>-request-<j>` (i: index in initContainers + containers, j: the name's index among the
  container's sorted request keys), `exactly` of the mapped class, `ExactCount`. Long-lived containers (regular
  and sidecar init containers) each get their own request; a non-sidecar init container first reuses requests of
  the long-lived containers after it and requests only what is missing, and of those init requests only the
  largest is kept (init containers run one at a time) — every short-lived mapping then points at it.
* The pod's `status.extendedResourceClaimStatus`: `requestMappings` (containerName, resourceName, requestName)
  and `resourceClaimName`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .podresources import to_units

Obj = dict[str, Any]
DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
CANNOT_FIT = "cannot fit resource"


def is_extended_resource_name(name: str) -> bool:
    """core/v1 helper IsExtendedResourceName: a domain that is not kubernetes.io-prefixed, not `requests.`."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def is_dra_extended_resource_name(name: str) -> bool:
    return is_extended_resource_name(name) or name.startswith(DEVICE_CLASS_PREFIX)


def class_mapping(classes: Iterable[Mapping[str, Any]]) -> dict[str, Obj]:
    mapping: dict[str, Obj] = {}
    for cls in classes:
        meta = cls.get("metadata") or {}
        mapping[DEVICE_CLASS_PREFIX + str(meta.get("name"))] = dict(cls)
        explicit = (cls.get("spec") or {}).get("extendedResourceName")
        if explicit:
            current = mapping.get(str(explicit))
            if current is None or _prefer(cls, current):
                mapping[str(explicit)] = dict(cls)
    return mapping


def _prefer(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """deviceClassCmp: the later creationTimestamp wins; equal timestamps: the smaller name."""
    nt, ot = (new.get("metadata") or {}).get("creationTimestamp") or "", (old.get("metadata") or {}).get("creationTimestamp") or ""
    if nt == ot:
        return str((new.get("metadata") or {}).get("name")) < str((old.get("metadata") or {}).get("name"))
    return nt > ot


def mapped_requests(requests: Mapping[str, int], mapping: Mapping[str, Obj]) -> dict[str, int]:
    """The pod's requests that a class maps (hasDeviceClassMappedExtendedResource)."""
    return {n: q for n, q in requests.items() if q and is_dra_extended_resource_name(n) and n in mapping}


def find_extended_claim(pod: Mapping[str, Any], claims: Iterable[Mapping[str, Any]]) -> Obj | None:
    meta = pod.get("metadata") or {}
    for claim in claims:
        cmeta = claim.get("metadata") or {}
        if (cmeta.get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) != "true":
            continue
        if cmeta.get("namespace") != meta.get("namespace"):
            continue
        for ref in cmeta.get("ownerReferences") or []:
            if ref.get("name") == meta.get("name") and ref.get("uid") == meta.get("uid") and ref.get("controller"):
                return dict(claim)
    return None


def node_decision(requests: Mapping[str, int], mapping: Mapping[str, Obj],
                  allocatable: Mapping[str, int]) -> tuple[dict[str, int], str | None]:
    """(names DRA serves on this node with their quantities, an unschedulable reason or None)."""
    dra: dict[str, int] = {}
    for name, qty in requests.items():
        if not is_dra_extended_resource_name(name) or qty == 0:
            continue
        if name in mapping and allocatable.get(name, 0) == 0:
            dra[name] = qty
        elif name not in allocatable:
            return {}, CANNOT_FIT
    return dra, None


def new_claim(pod: Mapping[str, Any]) -> Obj:
    meta = pod.get("metadata") or {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{meta.get('name')}-extended-resources-",
            "namespace": meta.get("namespace"),
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"), "uid": meta.get("uid"),
                                 "controller": True}],
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
        },
        "spec": {},
    }


@dataclass(frozen=True)
class _Request:
    name: str
    class_name: str
    count: int


def _container_request(index: int, container: Mapping[str, Any], resource: str, class_name: str,
                       reusable: list[_Request | None]) -> tuple[_Request | None, list[Obj]]:
    resources = container.get("resources") or {}
    requests = dict(resources.get("requests") or {})
    for n, v in (resources.get("limits") or {}).items():
        requests.setdefault(n, v)
    if resource not in requests:
        return None, []
    want = to_units(resource, requests[resource])
    if want == 0:
        return None, []
    mappings: list[Obj] = []
    total = 0
    for r in reusable:
        if r is not None:
            total += r.count
            mappings.append({"containerName": container.get("name"), "resourceName": resource, "requestName": r.name})
            if total >= want:
                return None, mappings
    ridx = sorted(requests).index(resource)
    req = _Request(f"container-{index}-request-{ridx}", class_name, want - total)
    mappings.append({"containerName": container.get("name"), "resourceName": resource, "requestName": req.name})
    return req, mappings


def requests_and_mappings(pod: Mapping[str, Any], dra: Mapping[str, int],
                          mapping: Mapping[str, Obj]) -> tuple[list[Obj], list[Obj]]:
    """createRequestsAndMappings: the claim's device requests and the pod's request mappings."""
    spec = pod.get("spec") or {}
    inits = [c for c in spec.get("initContainers") or [] if isinstance(c, dict)]
    containers = inits + [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    long_lived = [i for i, c in enumerate(containers) if i >= len(inits) or c.get("restartPolicy") == "Always"]
    short_lived = [i for i in range(len(inits)) if inits[i].get("restartPolicy") != "Always"]
    requests: list[_Request] = []
    mappings: list[Obj] = []
    for resource in sorted(dra):
        cls = mapping.get(resource)
        if cls is None:
            continue
        class_name = str((cls.get("metadata") or {}).get("name"))
        long_requests: list[_Request | None] = [None] * len(containers)
        long_mappings: list[Obj] = []
        for i in long_lived:
            req, maps = _container_request(i, containers[i], resource, class_name, [])
            long_requests[i] = req
            long_mappings += maps
        short_mappings: list[Obj] = []
        biggest: _Request | None = None
        short_names: set[str] = set()
        for i in short_lived:
            req, maps = _container_request(i, containers[i], resource, class_name, long_requests[i:])
            if req is not None:
                short_names.add(req.name)
                if biggest is None or biggest.count < req.count:
                    biggest = req
            short_mappings += maps
        if biggest is not None and len(short_names) > 1:
            short_names.discard(biggest.name)
            for m in short_mappings:
                if m["requestName"] in short_names:
                    m["requestName"] = biggest.name
        if biggest is not None:
            requests.append(biggest)
        requests += [r for r in long_requests if r is not None]
        mappings += long_mappings + short_mappings
    requests.sort(key=lambda r: r.name)
    device_requests = [{"name": r.name, "exactly": {"deviceClassName": r.class_name, "allocationMode": "ExactCount",
                                                   "count": r.count}} for r in requests]
    return device_requests, mappings


__all__ = [
    "CANNOT_FIT", "DEVICE_CLASS_PREFIX", "EXTENDED_CLAIM_ANNOTATION", "class_mapping", "find_extended_claim",
    "is_dra_extended_resource_name", "mapped_requests", "new_claim", "node_decision", "requests_and_mappings",
]
