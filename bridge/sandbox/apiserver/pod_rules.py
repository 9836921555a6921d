"""Pod validation rules for DRA that the OpenAPI schema cannot express, answered as 422 like the real server.

Written from kubernetes/kubernetes pkg/apis/core/validation/validation.go:
* `validatePodResourceClaims` / `validatePodResourceClaim`: each `spec.resourceClaims[i].name` is required, unique
  ("Duplicate value") and a DNS label; exactly one of `resourceClaimName` / `resourceClaimTemplateName` ("at most
  one of `resourceClaimName` or `resourceClaimTemplateName` may be specified" / "must specify one of:
  `resourceClaimName`, `resourceClaimTemplateName`"), each a DNS subdomain (ValidateResourceClaimName /
  ValidateResourceClaimTemplateName).
* `validateResourceClaimNames` (for `containers[*]`, `initContainers[*]` `resources.claims`): a claim entry needs
  a name, `name` + `/request` must be unique within the container, `request` is a DNS label, and the name must be
  one of `spec.resourceClaims` ("Not found: "x": must be one of the names in pod.spec.resourceClaims: a, b", or
  "... which is empty").
* `validateEphemeralContainers` -> `validateFieldAllowList`: an ephemeral container may not set `resources`
  (nor ports, probes, lifecycle, resizePolicy, restartPolicy): "Forbidden: cannot be set for an Ephemeral
  Container".
One approximation: the real server prints a bad PodResourceClaim value with Go's `%#v` (which includes pointer
addresses); the emulator prints it as JSON.
"""

from __future__ import annotations

from typing import Any

from . import names
from .status import FieldError

Obj = dict[str, Any]

_EPHEMERAL_FORBIDDEN = ("ports", "resources", "resizePolicy", "lifecycle", "livenessProbe", "readinessProbe",
                        "startupProbe", "restartPolicy")


def _claim_sources(i: int, claim: Obj) -> list[FieldError]:
    path = f"spec.resourceClaims[{i}]"
    errs: list[FieldError] = []
    by_name, by_template = claim.get("resourceClaimName"), claim.get("resourceClaimTemplateName")
    if by_name is not None and by_template is not None:
        errs.append(FieldError(path, "Invalid value", claim,
                               "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified"))
    if by_name is None and by_template is None:
        errs.append(FieldError(path, "Invalid value", claim,
                               "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`"))
    if by_name is not None:
        errs += [FieldError(f"{path}.resourceClaimName", e.type, by_name, e.detail)
                 for e in names.dns_subdomain("", str(by_name))]
    if by_template is not None:
        errs += [FieldError(f"{path}.resourceClaimTemplateName", e.type, by_template, e.detail)
                 for e in names.dns_subdomain("", str(by_template))]
    return errs


def pod_claims(spec: Obj) -> tuple[list[FieldError], set[str]]:
    """Errors in `spec.resourceClaims` and the set of valid-looking claim names (for the containers' checks)."""
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, claim in enumerate(spec.get("resourceClaims") or []):
        if not isinstance(claim, dict):
            continue
        name = claim.get("name") or ""
        path = f"spec.resourceClaims[{i}].name"
        if not name:
            errs.append(FieldError(path, "Required value"))
        elif name in seen:
            errs.append(FieldError(path, "Duplicate value", name))
        else:
            errs += names.dns_label(path, name)
            seen.add(name)
        errs += _claim_sources(i, claim)
    return errs, seen


def container_claims(path: str, claims: Any, pod_claim_names: set[str]) -> list[FieldError]:
    errs: list[FieldError] = []
    keys: set[str] = set()
    for i, claim in enumerate(claims or []):
        if not isinstance(claim, dict):
            continue
        p = f"{path}[{i}]"
        name = claim.get("name") or ""
        if not name:
            errs.append(FieldError(p, "Required value"))
            continue
        key = name
        if claim.get("request"):
            errs += names.dns_label(f"{p}.request", str(claim["request"]))
            key = f"{name}/{claim['request']}"
        if key in keys:
            errs.append(FieldError(p, "Duplicate value", key))
        else:
            keys.add(key)
        if name not in pod_claim_names:
            detail = "must be one of the names in pod.spec.resourceClaims"
            detail += ": " + ", ".join(sorted(pod_claim_names)) if pod_claim_names else " which is empty"
            errs.append(FieldError(p, "Not found", name, detail))
    return errs


def validate_pod(obj: Obj) -> list[FieldError]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return []
    errs, claim_names = pod_claims(spec)
    for field in ("initContainers", "containers"):
        for i, ctr in enumerate(spec.get(field) or []):
            if isinstance(ctr, dict):
                resources = ctr.get("resources") or {}
                errs += container_claims(f"spec.{field}[{i}].resources.claims", resources.get("claims"), claim_names)
    for i, ctr in enumerate(spec.get("ephemeralContainers") or []):
        if not isinstance(ctr, dict):
            continue
        for key in _EPHEMERAL_FORBIDDEN:
            if ctr.get(key) not in (None, {}, []):
                errs.append(FieldError(f"spec.ephemeralContainers[{i}].{key}", "Forbidden",
                                       detail="cannot be set for an Ephemeral Container"))
    return errs


__all__ = ["container_claims", "pod_claims", "validate_pod"]
