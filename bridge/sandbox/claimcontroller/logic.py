"""The resource claim controller's decisions (pure): which claims to create for a pod, which reservations are stale,
when to deallocate and when to delete.

Written from kubernetes/kubernetes pkg/controller/resourceclaim/controller.go:
* A claim from a template (`handleClaim`): `generateName: <pod>-<pod claim>-` (when that is longer than 57
  characters both parts are cut proportionally and joined by "-", without a trailing "-": the real controller's
  choice), the pod as controller owner (with `blockOwnerDeletion` up to 1.34), the template's labels, its
  annotations plus `resource.kubernetes.io/pod-claim-name: <pod claim>`, and the template's `spec.spec`. An orphan
  from an earlier attempt (owned by the pod, with that annotation, or named `<pod>-<claim>` by Kubernetes <= 1.27)
  is reused instead (`findPodResourceClaim`). Admin-access requests with DRAAdminAccess off fail ("admin access is
  requested, but the feature is disabled").
* The pod's `status.resourceClaimStatuses` gets `{name, resourceClaimName}` for every claim it created.
* Reservations (`syncClaim`): a pod entry in `reservedFor` stays while the pod exists with that uid and is not done
  (`isPodDone`: phase Succeeded/Failed, or deleted before it was scheduled). When the last reservation goes and the
  claim carries the scheduler's `resource.kubernetes.io/delete-protection` finalizer, the allocation (and the
  device status) is cleared and then the finalizer removed: the claim is deallocated. A claim being deleted with
  nobody reserving it loses its allocation and the finalizer, so the deletion completes.
* A generated claim nobody reserves whose owning pod is done or replaced is deleted (the garbage collector does
  the same once the pod object is gone).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

Obj = dict[str, Any]
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
FINALIZER = "resource.kubernetes.io/delete-protection"
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
MAX_BASE_LEN = 57  # 63 minus a hyphen and the 5 random characters of a generated name


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def generate_name(pod_name: str, claim_name: str) -> str:
    name = f"{pod_name}-{claim_name}-"
    if len(name) > MAX_BASE_LEN:
        name = pod_name[: len(pod_name) * MAX_BASE_LEN // len(name)] + "-" + \
            claim_name[: len(claim_name) * MAX_BASE_LEN // len(name)]
    return name


def is_pod_done(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or bool(
        _meta(pod).get("deletionTimestamp") and not (pod.get("spec") or {}).get("nodeName"))


def pod_needs_claims(pod: Mapping[str, Any], deleted: bool) -> bool:
    """podNeedsClaims: false once the pod was removed, terminated or deleted before scheduling."""
    if deleted or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    return not (_meta(pod).get("deletionTimestamp") and not (pod.get("spec") or {}).get("nodeName"))


def claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The claims a pod uses by name: `resourceClaimName`, the names recorded for template claims, and the
    scheduler-made extended-resource claim (status.extendedResourceClaimStatus)."""
    statuses = {s.get("name"): s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    out = []
    for pc in (pod.get("spec") or {}).get("resourceClaims") or []:
        if pc.get("resourceClaimName"):
            out.append(str(pc["resourceClaimName"]))
        elif pc.get("resourceClaimTemplateName") and statuses.get(pc.get("name")):
            out.append(str(statuses[pc.get("name")]))
    ext = ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    if ext:
        out.append(str(ext))
    return out


def owning_pod(claim: Mapping[str, Any]) -> tuple[str, str] | None:
    for ref in _meta(claim).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("apiVersion") == "v1" and ref.get("kind") == "Pod":
            return str(ref.get("name")), str(ref.get("uid"))
    return None


def find_pod_claim(pod: Mapping[str, Any], pod_claim: Mapping[str, Any], claims: Iterable[Mapping[str, Any]]) -> Obj | None:
    uid, deterministic = _meta(pod).get("uid"), f"{_meta(pod).get('name')}-{pod_claim.get('name')}"
    for claim in claims:
        owner = owning_pod(claim)
        if owner is None or owner[1] != uid or _meta(claim).get("namespace") != _meta(pod).get("namespace"):
            continue
        annotations = _meta(claim).get("annotations") or {}
        if POD_CLAIM_ANNOTATION in annotations:
            if annotations[POD_CLAIM_ANNOTATION] != pod_claim.get("name"):
                continue
        elif _meta(claim).get("name") != deterministic:
            continue
        return dict(claim)
    return None


def needs_admin_access(template: Mapping[str, Any]) -> bool:
    for req in (((template.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests") or []:
        if (req.get("exactly") or {}).get("adminAccess"):
            return True
    return False


def claim_from_template(pod: Mapping[str, Any], pod_claim: Mapping[str, Any], template: Mapping[str, Any],
                        minor: int = 37) -> Obj:
    """The claim `handleClaim` creates for a pod claim from its template, as release 1.`minor` writes it: up to 1.34
    the owner reference sets `blockOwnerDeletion`, from 1.35 it does not (read at v1.32.0, v1.34.0, v1.35.4, v1.37.2;
    kube-controller-manager v1.37.2 seen creating it without, tests/real/test_claim_differential.py)."""
    pmeta = _meta(pod)
    tmeta = ((template.get("spec") or {}).get("metadata") or {})
    annotations = dict(tmeta.get("annotations") or {})
    annotations[POD_CLAIM_ANNOTATION] = str(pod_claim.get("name"))
    meta: Obj = {
        "generateName": generate_name(str(pmeta.get("name")), str(pod_claim.get("name"))),
        "namespace": pmeta.get("namespace"),
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pmeta.get("name"), "uid": pmeta.get("uid"),
                             "controller": True, **({"blockOwnerDeletion": True} if minor <= 34 else {})}],
        "annotations": annotations,
    }
    if tmeta.get("labels"):
        meta["labels"] = dict(tmeta["labels"])
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
            "spec": copy.deepcopy((template.get("spec") or {}).get("spec") or {})}


def deallocated(claim: Mapping[str, Any], valid: list[Obj]) -> Obj:
    """The claim with `reservedFor` = valid; without any reservation a scheduler-allocated claim (finalizer) loses its
    allocation and device status."""
    new = copy.deepcopy(dict(claim))
    status = new.setdefault("status", {})
    if valid:
        status["reservedFor"] = valid
    else:
        status.pop("reservedFor", None)
        if FINALIZER in ((new.get("metadata") or {}).get("finalizers") or []):
            status.pop("allocation", None)
            status.pop("devices", None)
    return new


def without_finalizer(claim: Mapping[str, Any]) -> Obj:
    new = copy.deepcopy(dict(claim))
    new["metadata"]["finalizers"] = [f for f in new["metadata"].get("finalizers") or [] if f != FINALIZER]
    return new


__all__ = [
    "EXTENDED_CLAIM_ANNOTATION", "FINALIZER", "POD_CLAIM_ANNOTATION", "claim_from_template", "claim_names",
    "deallocated", "find_pod_claim", "generate_name", "is_pod_done", "needs_admin_access", "owning_pod",
    "pod_needs_claims", "without_finalizer",
]
