"""Which ResourceClaims a pod uses, as the kubelet resolves them (pure functions over pod dicts).

Written from kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/resourceclaim/resourceclaim.go
(`Name`, `IsForPod`, `IsReservedForPod`) and pkg/kubelet/cm/dra/manager.go (`prepareResources`, `GetResources`):

* `resourceClaimName` names the claim directly; a `resourceClaimTemplateName` claim is the one recorded in
  `status.resourceClaimStatuses` for that pod claim. No entry yet: `pod "ns/name": ResourceClaim not created yet`
  (the pod cannot start). An entry without a name: no claim is needed (skipped). Template claims must be
  controlled by the pod (`IsForPod`: `ResourceClaim ns/c was not created for pod ns/p (pod is not owner)`).
* With DRAExtendedResource, the claim the scheduler made for the pod's extended resources
  (`status.extendedResourceClaimStatus.resourceClaimName`) is prepared too; containers use it through
  `requestMappings`.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.kube.api import Obj


class ClaimNotReady(Exception):
    """The pod references a claim that cannot be used (yet): the message is the kubelet's."""


@dataclass(frozen=True)
class PodClaim:
    name: str  # the ResourceClaim's name
    must_check_owner: bool  # generated from a template: the pod must be its controller
    extended: bool = False  # the scheduler-made claim for DRA-backed extended resources


def pod_claims(pod: Obj, *, extended_resources: bool) -> list[PodClaim]:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    generated = {s.get("name"): s for s in status.get("resourceClaimStatuses") or []}
    out: list[PodClaim] = []
    for ref in spec.get("resourceClaims") or []:
        if ref.get("resourceClaimName"):
            out.append(PodClaim(ref["resourceClaimName"], False))
        elif ref.get("resourceClaimTemplateName"):
            entry = generated.get(ref.get("name"))
            if entry is None:
                raise ClaimNotReady(f'pod "{meta.get("namespace")}/{meta.get("name")}": ResourceClaim not created yet')
            if entry.get("resourceClaimName"):
                out.append(PodClaim(entry["resourceClaimName"], True))
        else:
            raise ClaimNotReady(f'pod "{meta.get("namespace")}/{meta.get("name")}", spec.resourceClaim '
                                f'"{ref.get("name")}": unsupported ResourceClaim API')
    ext = status.get("extendedResourceClaimStatus") or {}
    if extended_resources and ext.get("resourceClaimName"):
        out.append(PodClaim(ext["resourceClaimName"], True, extended=True))
    return out


def pod_claim_names(pod: Obj, *, extended_resources: bool = False) -> list[str]:
    return [c.name for c in pod_claims(pod, extended_resources=extended_resources)]


def check_for_pod(pod: Obj, claim: Obj) -> None:
    """`IsForPod`: the claim is in the pod's namespace and controlled by the pod."""
    pm, cm = pod.get("metadata") or {}, claim.get("metadata") or {}
    controlled = any(r.get("controller") and r.get("uid") == pm.get("uid") for r in cm.get("ownerReferences") or [])
    if cm.get("namespace") != pm.get("namespace") or not controlled:
        raise ClaimNotReady(f"ResourceClaim {cm.get('namespace')}/{cm.get('name')} was not created for pod "
                            f"{pm.get('namespace')}/{pm.get('name')} (pod is not owner)")


def reserved_for_pod(pod: Obj, claim: Obj) -> bool:
    uid = (pod.get("metadata") or {}).get("uid")
    return any(r.get("uid") == uid for r in (claim.get("status") or {}).get("reservedFor") or [])


def containers_using(pod: Obj, claim: PodClaim | str) -> tuple[str, ...]:
    """The containers PodResources reports as using the ResourceClaim (sidecars and regular containers; ordinary
    init containers are never reported): through `resources.claims` naming a pod claim that resolves to it, or,
    for the extended-resource claim, through a request mapping."""
    name = claim.name if isinstance(claim, PodClaim) else claim
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    containers = [*(c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"),
                  *(spec.get("containers") or [])]
    if isinstance(claim, PodClaim) and claim.extended:
        mapped = {m.get("containerName") for m in
                  (status.get("extendedResourceClaimStatus") or {}).get("requestMappings") or []}
        return tuple(c["name"] for c in containers if c.get("name") in mapped)
    generated = {s.get("name"): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
    pod_names = {ref.get("name") for ref in spec.get("resourceClaims") or []
                 if (ref.get("resourceClaimName") or generated.get(ref.get("name"))) == name}
    return tuple(c["name"] for c in containers
                 if any(r.get("name") in pod_names for r in (c.get("resources") or {}).get("claims") or []))
