"""Conversion between the served versions of one group resource and its storage version.

Objects are stored once per group resource. Outside `resource.k8s.io` every served version has the same shape, so
conversion only rewrites `apiVersion`. `resource.k8s.io` objects are stored in the v1 shape (v1beta2 has the same
shape); v1beta1 differs in two places, converted both ways here:
* ResourceSlice devices: v1beta1 wraps everything but `name` in `basic: {...}`; v1/v1beta2 are flat.
* ResourceClaim(Template) requests: v1beta1 puts deviceClassName/selectors/allocationMode/count/adminAccess/
  tolerations/capacity directly on the request; v1/v1beta2 nest them under `exactly` (unless `firstAvailable`).
`events.k8s.io/v1` Events are the core/v1 Events under another name: one storage (core shape), converted on the
way in and out like kubernetes/kubernetes pkg/apis/events/v1/conversion.go does (`regarding` <-> `involvedObject`,
`note` <-> `message`, `reportingController` <-> `reportingComponent`, `deprecatedSource` <-> `source`,
`deprecatedFirstTimestamp`/`deprecatedLastTimestamp`/`deprecatedCount` <-> `firstTimestamp`/`lastTimestamp`/`count`).
So an Event the scheduler stand-in records through the events API is what `kubectl describe pod` lists.
Conversion functions are pure and return new dicts.
"""

from __future__ import annotations

import copy
from typing import Any

from .registry import RESOURCE_GROUP, ResourceType

Obj = dict[str, Any]

_EXACT_FIELDS = ("deviceClassName", "selectors", "allocationMode", "count", "adminAccess", "tolerations", "capacity")


EVENTS_GROUP = "events.k8s.io"
# events.k8s.io/v1 field -> core/v1 field (the rest have the same name in both).
_EVENT_FIELDS = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
_EVENT_FIELDS_BACK = {v: k for k, v in _EVENT_FIELDS.items()}


def _rename(obj: Obj, names: dict[str, str]) -> Obj:
    return {names.get(k, k): v for k, v in obj.items()}


def to_storage(rt: ResourceType, obj: Obj) -> Obj:
    if rt.group == EVENTS_GROUP and rt.kind == "Event":
        out = _rename(obj, _EVENT_FIELDS)
        out["apiVersion"], out["kind"] = "v1", "Event"
        return out
    out = dict(obj)
    out["apiVersion"] = rt.stored_api_version
    out["kind"] = rt.kind
    if rt.group == RESOURCE_GROUP and rt.version == "v1beta1":
        out = _beta1_to_v1(rt.kind, out)
    return out


def from_storage(rt: ResourceType, obj: Obj) -> Obj:
    if rt.group == EVENTS_GROUP and rt.kind == "Event":
        out = _rename(obj, _EVENT_FIELDS_BACK)
        out["apiVersion"] = rt.group_version
        return out
    if rt.group == RESOURCE_GROUP and rt.version == "v1beta1":
        out = _v1_to_beta1(rt.kind, obj)
    elif obj.get("apiVersion") == rt.group_version:
        return obj
    else:
        out = dict(obj)
    out["apiVersion"] = rt.group_version
    return out


def _beta1_to_v1(kind: str, obj: Obj) -> Obj:
    obj = copy.deepcopy(obj)
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return obj
    if kind == "ResourceSlice":
        for dev in spec.get("devices") or []:
            if isinstance(dev, dict) and isinstance(dev.get("basic"), dict):
                basic = dev.pop("basic")
                dev.update(basic)
    elif kind == "ResourceClaim":
        _requests_to_v1(spec)
    elif kind == "ResourceClaimTemplate" and isinstance(spec.get("spec"), dict):
        _requests_to_v1(spec["spec"])
    return obj


def _v1_to_beta1(kind: str, obj: Obj) -> Obj:
    obj = copy.deepcopy(obj)
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return obj
    if kind == "ResourceSlice":
        devices = []
        for dev in spec.get("devices") or []:
            if isinstance(dev, dict):
                rest = {k: v for k, v in dev.items() if k != "name"}
                dev = {"name": dev.get("name"), "basic": rest}
            devices.append(dev)
        if "devices" in spec:
            spec["devices"] = devices
    elif kind == "ResourceClaim":
        _requests_to_beta1(spec)
    elif kind == "ResourceClaimTemplate" and isinstance(spec.get("spec"), dict):
        _requests_to_beta1(spec["spec"])
    return obj


def _requests_to_v1(claim_spec: Obj) -> None:
    for req in (claim_spec.get("devices") or {}).get("requests") or []:
        if not isinstance(req, dict) or "firstAvailable" in req:
            continue
        exactly = {f: req.pop(f) for f in _EXACT_FIELDS if f in req}
        if exactly:
            req["exactly"] = exactly


def _requests_to_beta1(claim_spec: Obj) -> None:
    for req in (claim_spec.get("devices") or {}).get("requests") or []:
        if isinstance(req, dict) and isinstance(req.get("exactly"), dict):
            req.update(req.pop("exactly"))
