"""Registry strategies' `dropDisabledFields`: what the server silently removes when a feature gate is off.

A field guarded by a gate that is off is dropped on create, and on update unless the stored object already used it
(so turning a gate off never destroys data already written). The client gets no error; the field is simply not in
the answer, which is how the bridge's slice publisher detects that device taints are not kept. Written from
kubernetes/kubernetes:
* pkg/registry/resource/resourceslice/strategy.go (`dropDisabledFields`): device `taints` (DRADeviceTaints);
  `sharedCounters`, `perDeviceNodeSelection`, device `consumesCounters` / `nodeName` / `nodeSelector` / `allNodes`
  (DRAPartitionableDevices); `bindsToNode`, `bindingConditions`, `bindingFailureConditions`
  (DRADeviceBindingConditions); `allowMultipleAllocations`, capacity `requestPolicy` (DRAConsumableCapacity).
* pkg/registry/resource/resourceclaim/strategy.go and resourceclaimtemplate/strategy.go (`dropDisabledFields`, shared
  `dropDisabledDRAFields` helpers): request `adminAccess` (DRAAdminAccess), `firstAvailable` (DRAPrioritizedList),
  `tolerations` (DRADeviceTaints), `capacity` and constraint `distinctAttribute` (DRAConsumableCapacity); in the
  claim status: `devices` (DRAResourceClaimDeviceStatus), result `adminAccess` (DRAAdminAccess), result
  `bindingConditions` / `bindingFailureConditions` and `allocation.allocationTimestamp`
  (DRADeviceBindingConditions), result `shareID` / `consumedCapacity` (DRAConsumableCapacity).
* pkg/registry/resource/deviceclass/strategy.go: `spec.extendedResourceName` (DRAExtendedResource).
* pkg/api/pod/util.go (`dropDisabledFields` for pods): `status.extendedResourceClaimStatus` (DRAExtendedResource);
  `dropDisabledDynamicResourceAllocationFields`: with DynamicResourceAllocation off, `spec.resourceClaims` and every
  container's `resources.claims` (init and ephemeral containers too) are dropped unless the stored pod already has
  `spec.resourceClaims` (`dynamicResourceAllocationInUse`), and `status.resourceClaimStatuses` with them
  (`dropDisabledPodStatusFields`). This runs in PrepareForCreate, *after* the mutating webhooks
  (k8s.io/apiserver pkg/endpoints/handlers/create.go admits, then `r.Create` calls `BeforeCreate`): a pod whose
  `nvidia.com/gpu` a webhook replaced by a claim is stored with neither, silently. That is the 1.32-1.34 cluster
  that serves `resource.k8s.io` (`--runtime-config`) with the gate off, which `bridge webhook` must detect.

`apply_defaults` also fills the admissionregistration.k8s.io/v1 defaults (webhooks, policies, bindings; see
`_admission_defaults`).

`apply_defaults` is the defaulting the server applies when it decodes a request (k8s.io/api resource/v1
`+default` markers, pkg/apis/resource/v1/defaults.go): an exact request's `allocationMode` defaults to `ExactCount`
and then its `count` to 1 (the same for `firstAvailable` sub-requests), a toleration's `operator` to `Equal`. So a
stored claim always says `allocationMode: ExactCount, count: 1`, as `kubectl get -o yaml` shows on a real cluster.

Pure functions on the storage (v1) shape; they return new dicts and never mutate their input.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

from .clock import now_rfc3339
from .profiles import KubernetesProfile
from .registry import RESOURCE_GROUP, ResourceType

Obj = dict[str, Any]


def _requests(claim_spec: Any) -> list[Obj]:
    if not isinstance(claim_spec, dict):
        return []
    return [r for r in ((claim_spec.get("devices") or {}).get("requests") or []) if isinstance(r, dict)]


def _exact_parts(claim_spec: Any) -> Iterable[Obj]:
    """Every place an exact request lives: `requests[].exactly` and `requests[].firstAvailable[]`."""
    for req in _requests(claim_spec):
        if isinstance(req.get("exactly"), dict):
            yield req["exactly"]
        for sub in req.get("firstAvailable") or []:
            if isinstance(sub, dict):
                yield sub


def _uses(items: Iterable[Obj], key: str) -> bool:
    return any(item.get(key) not in (None, [], {}) for item in items)


def _drop(items: Iterable[Obj], *keys: str) -> None:
    for item in items:
        for key in keys:
            item.pop(key, None)


def _claim_spec(spec: Obj, old_spec: Any, profile: KubernetesProfile) -> None:
    old_parts = list(_exact_parts(old_spec))
    if not profile.enabled("DRAAdminAccess") and not _uses(old_parts, "adminAccess"):
        _drop((p for p in _exact_parts(spec) if isinstance(p, dict)), "adminAccess")
    if not profile.enabled("DRAPrioritizedList") and not _uses(_requests(old_spec), "firstAvailable"):
        _drop(_requests(spec), "firstAvailable")
    if not profile.enabled("DRADeviceTaints") and not _uses(old_parts, "tolerations"):
        _drop(_exact_parts(spec), "tolerations")
    if not profile.enabled("DRAConsumableCapacity"):
        if not _uses(old_parts, "capacity"):
            _drop(_exact_parts(spec), "capacity")
        old_constraints = [c for c in ((old_spec or {}).get("devices") or {}).get("constraints") or [] if isinstance(c, dict)]
        if not _uses(old_constraints, "distinctAttribute"):
            _drop((c for c in (spec.get("devices") or {}).get("constraints") or [] if isinstance(c, dict)),
                  "distinctAttribute")


def _claim_status(status: Obj, old_status: Any, profile: KubernetesProfile) -> None:
    old_status = old_status if isinstance(old_status, dict) else {}
    if not profile.enabled("DRAResourceClaimDeviceStatus") and not old_status.get("devices"):
        status.pop("devices", None)
    allocation = status.get("allocation")
    if not isinstance(allocation, dict):
        return
    results = [r for r in ((allocation.get("devices") or {}).get("results") or []) if isinstance(r, dict)]
    old_results = [r for r in (((old_status.get("allocation") or {}).get("devices") or {}).get("results") or [])
                   if isinstance(r, dict)]
    if not profile.enabled("DRAAdminAccess") and not _uses(old_results, "adminAccess"):
        _drop(results, "adminAccess")
    if not profile.enabled("DRADeviceBindingConditions") and not _uses(old_results, "bindingConditions"):
        _drop(results, "bindingConditions", "bindingFailureConditions")
        allocation.pop("allocationTimestamp", None)
    if not profile.enabled("DRAConsumableCapacity") and not _uses(old_results, "shareID"):
        _drop(results, "shareID", "consumedCapacity")


def _slice_spec(spec: Obj, old_spec: Any, profile: KubernetesProfile) -> None:
    old_spec = old_spec if isinstance(old_spec, dict) else {}
    devices = [d for d in spec.get("devices") or [] if isinstance(d, dict)]
    old_devices = [d for d in old_spec.get("devices") or [] if isinstance(d, dict)]
    if not profile.enabled("DRADeviceTaints") and not _uses(old_devices, "taints"):
        _drop(devices, "taints")
    if not profile.enabled("DRAPartitionableDevices"):
        uses_old = (old_spec.get("sharedCounters") or old_spec.get("perDeviceNodeSelection")
                    or _uses(old_devices, "consumesCounters"))
        if not uses_old:
            spec.pop("sharedCounters", None)
            spec.pop("perDeviceNodeSelection", None)
            _drop(devices, "consumesCounters", "nodeName", "nodeSelector", "allNodes")
    if not profile.enabled("DRADeviceBindingConditions") and not _uses(old_devices, "bindingConditions"):
        _drop(devices, "bindsToNode", "bindingConditions", "bindingFailureConditions")
    if not profile.enabled("DRAConsumableCapacity") and not _uses(old_devices, "allowMultipleAllocations"):
        _drop(devices, "allowMultipleAllocations")
        for dev in devices:
            for cap in (dev.get("capacity") or {}).values():
                if isinstance(cap, dict):
                    cap.pop("requestPolicy", None)


def _device_class(spec: Obj, old_spec: Any, profile: KubernetesProfile) -> None:
    if not profile.enabled("DRAExtendedResource") and not (old_spec or {}).get("extendedResourceName"):
        spec.pop("extendedResourceName", None)


def _pod_status(status: Obj, old_status: Any, profile: KubernetesProfile) -> None:
    if not profile.enabled("DRAExtendedResource") and not (old_status or {}).get("extendedResourceClaimStatus"):
        status.pop("extendedResourceClaimStatus", None)


def _apply(obj: Obj, part: str, old: Obj | None, fn: Callable[[Obj, Any, KubernetesProfile], None],
           profile: KubernetesProfile, inner: str | None = None) -> Obj:
    value = obj.get(part)
    if not isinstance(value, dict):
        return obj
    out = dict(obj)
    value = out[part] = copy.deepcopy(value)
    old_value = (old or {}).get(part)
    if inner is not None:
        if not isinstance(value.get(inner), dict):
            return out
        value, old_value = value[inner], (old_value or {}).get(inner) if isinstance(old_value, dict) else None
    fn(value, old_value, profile)
    return out


def _default_request(req: Obj, *, default_count: bool = True) -> None:
    if not req.get("allocationMode"):
        req["allocationMode"] = "ExactCount"
    if default_count and req["allocationMode"] == "ExactCount" and req.get("count") in (None, 0):
        req["count"] = 1
    for tol in req.get("tolerations") or []:
        if isinstance(tol, dict) and not tol.get("operator"):
            tol["operator"] = "Equal"


def _default_claim_spec(spec: Obj, _old: Any, _profile: KubernetesProfile) -> None:
    for req in _requests(spec):
        if isinstance(req.get("exactly"), dict):
            _default_request(req["exactly"])
        subs = [s for s in req.get("firstAvailable") or [] if isinstance(s, dict)]
        for i, sub in enumerate(subs):
            # "We allow the count to be zero for the last entry in the FirstAvailable list unless it is the only
            # subrequest" (SetDefaults_DeviceRequest).
            _default_request(sub, default_count=len(subs) == 1 or i < len(subs) - 1)


def _default_slice_spec(spec: Obj, _old: Any, _profile: KubernetesProfile) -> None:
    """SetDefaults_DeviceTaint: a taint without timeAdded gets the current time, truncated to seconds."""
    for dev in spec.get("devices") or []:
        for taint in (dev.get("taints") or []) if isinstance(dev, dict) else []:
            if isinstance(taint, dict) and not taint.get("timeAdded"):
                taint["timeAdded"] = now_rfc3339()


def _defaulted_pod(pod: Obj) -> Obj:
    """The pod with requests defaulted from limits; the same object when nothing changes (the common case: this
    runs twice on every pod write, so it copies only the containers it changes)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return pod
    new_spec: Obj | None = None
    for field_name in ("initContainers", "containers", "ephemeralContainers"):
        ctrs = spec.get(field_name)
        if not isinstance(ctrs, list):
            continue
        new_ctrs: list[Any] | None = None
        for i, ctr in enumerate(ctrs):
            resources = ctr.get("resources") if isinstance(ctr, dict) else None
            if not isinstance(resources, dict) or not isinstance(resources.get("limits"), dict):
                continue
            requests: Obj = resources["requests"] if isinstance(resources.get("requests"), dict) else {}
            missing = {k: v for k, v in resources["limits"].items() if k not in requests}
            if not missing:
                continue
            if new_ctrs is None:
                new_ctrs = list(ctrs)
            new_ctrs[i] = {**ctr, "resources": {**resources, "requests": {**requests, **missing}}}
        if new_ctrs is not None:
            new_spec = dict(spec) if new_spec is None else new_spec
            new_spec[field_name] = new_ctrs
    return pod if new_spec is None else {**pod, "spec": new_spec}


_ADMISSION = "admissionregistration.k8s.io"


def _default_rules(rules: Any) -> None:
    for rule in rules if isinstance(rules, list) else []:
        if isinstance(rule, dict):
            rule.setdefault("scope", "*")


def _default_match_resources(match: Any) -> None:
    """SetDefaults_MatchResources, and SetDefaults_Rule on its (exclude)resourceRules."""
    if not isinstance(match, dict):
        return
    match.setdefault("matchPolicy", "Equivalent")
    match.setdefault("namespaceSelector", {})
    match.setdefault("objectSelector", {})
    _default_rules(match.get("resourceRules"))
    _default_rules(match.get("excludeResourceRules"))


def _admission_defaults(rt: ResourceType, obj: Obj) -> Obj:
    """kubernetes/kubernetes pkg/apis/admissionregistration/v1/defaults.go (v1.37.2): a webhook's failurePolicy
    Fail, matchPolicy Equivalent, empty namespace and object selectors, timeoutSeconds 10, a mutating webhook's
    reinvocationPolicy Never, a service reference's port 443, every rule's scope "*"; a policy's failurePolicy Fail
    and its matchConstraints' (a binding's matchResources') matchPolicy and selectors. kube-apiserver v1.37.2 answers
    these on create (observed by tests/real/test_differential.py)."""
    out = copy.deepcopy(obj)
    if rt.plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        for hook in out.get("webhooks") or []:
            if not isinstance(hook, dict):
                continue
            hook.setdefault("failurePolicy", "Fail")
            hook.setdefault("matchPolicy", "Equivalent")
            hook.setdefault("namespaceSelector", {})
            hook.setdefault("objectSelector", {})
            hook.setdefault("timeoutSeconds", 10)
            if rt.plural == "mutatingwebhookconfigurations":
                hook.setdefault("reinvocationPolicy", "Never")
            service = (hook.get("clientConfig") or {}).get("service") if isinstance(hook.get("clientConfig"), dict) else None
            if isinstance(service, dict):
                service.setdefault("port", 443)
            _default_rules(hook.get("rules"))
    spec = out.get("spec")
    if isinstance(spec, dict) and rt.plural == "validatingadmissionpolicies":
        spec.setdefault("failurePolicy", "Fail")
        _default_match_resources(spec.get("matchConstraints"))
    if isinstance(spec, dict) and rt.plural == "validatingadmissionpolicybindings":
        _default_match_resources(spec.get("matchResources"))
    return out


def apply_defaults(rt: ResourceType, stored: Obj, profile: KubernetesProfile) -> Obj:
    """`stored` (v1 shape) with the server-side defaults filled in (resource.k8s.io requests, pod requests,
    admission registration)."""
    if rt.group == "" and rt.plural == "pods":
        return _defaulted_pod(stored)
    if rt.group == _ADMISSION:
        return _admission_defaults(rt, stored)
    if rt.group != RESOURCE_GROUP:
        return stored
    if rt.kind == "ResourceClaim":
        return _apply(stored, "spec", None, _default_claim_spec, profile)
    if rt.kind == "ResourceClaimTemplate":
        return _apply(stored, "spec", None, _default_claim_spec, profile, inner="spec")
    if rt.kind == "ResourceSlice":
        return _apply(stored, "spec", None, _default_slice_spec, profile)
    return stored


def drop_disabled_fields(rt: ResourceType, stored: Obj, old: Obj | None, profile: KubernetesProfile) -> Obj:
    """`stored` (v1 shape) without the fields the profile's disabled gates guard; `old` is the stored object an update
    replaces (None on create)."""
    if rt.group == RESOURCE_GROUP:
        if rt.kind == "ResourceSlice":
            return _apply(stored, "spec", old, _slice_spec, profile)
        if rt.kind == "ResourceClaim":
            out = _apply(stored, "spec", old, _claim_spec, profile)
            return _apply(out, "status", old, _claim_status, profile)
        if rt.kind == "ResourceClaimTemplate":
            return _apply(stored, "spec", old, _claim_spec, profile, inner="spec")
        if rt.kind == "DeviceClass":
            return _apply(stored, "spec", old, _device_class, profile)
    if rt.group == "" and rt.plural == "pods":
        if not profile.enabled("DynamicResourceAllocation") and not ((old or {}).get("spec") or {}).get("resourceClaims"):
            stored = _drop_pod_claims(stored)
        if "extendedResourceClaimStatus" not in (stored.get("status") or {}):
            return stored  # the hot path: nothing gated in it, no copy
        return _apply(stored, "status", old, _pod_status, profile)
    return stored


def _drop_pod_claims(pod: Obj) -> Obj:
    """dropDisabledDynamicResourceAllocationFields (and the status half): the pod without its claims; the same
    object when it has none."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return pod
    uses = "resourceClaims" in spec or any(
        isinstance(c, dict) and isinstance(c.get("resources"), dict) and "claims" in c["resources"]
        for f in ("containers", "initContainers", "ephemeralContainers") for c in spec.get(f) or [])
    status = pod.get("status")
    if not uses and not (isinstance(status, dict) and "resourceClaimStatuses" in status):
        return pod
    new_spec = {k: v for k, v in spec.items() if k != "resourceClaims"}
    for f in ("containers", "initContainers", "ephemeralContainers"):
        if isinstance(spec.get(f), list):
            new_spec[f] = [{**c, "resources": {k: v for k, v in c["resources"].items() if k != "claims"}}
                           if isinstance(c, dict) and isinstance(c.get("resources"), dict) else c for c in spec[f]]
    out = {**pod, "spec": new_spec}
    if isinstance(status, dict) and "resourceClaimStatuses" in status:
        out["status"] = {k: v for k, v in status.items() if k != "resourceClaimStatuses"}
    return out


__all__ = ["apply_defaults", "drop_disabled_fields"]
