"""The resource.k8s.io validation rules that the published OpenAPI schemas do not carry.

Limits from `pkg/apis/resource` (kubernetes/kubernetes pkg/apis/resource/types.go and validation/validation.go):
128 devices per slice (64 when a device uses taints or counters), DNS-label device names unique in the slice, at
most 32 attributes + capacities per device, qualified attribute names (C identifier <= 32, optional DNS-subdomain
domain <= 63), exactly one value per attribute, strings/versions <= 64 characters, versions in semver, driver a DNS
subdomain <= 63, pool names of DNS subdomains separated by '/', exactly one node selection field, CEL expressions
<= 10 KiB, <= 32 requests / constraints / config entries per claim, count >= 1, and the immutable fields on update.
Rules run on the storage (v1) shape, so paths are v1 paths whichever version the client used. Pure functions.
"""

from __future__ import annotations

from typing import Any

from . import names
from .status import FieldError, render_value

Obj = dict[str, Any]

MAX_DEVICES = 128
MAX_DEVICES_ADVANCED = 64
MAX_ATTRS_AND_CAPACITIES = 32
MAX_VALUE_LEN = 64
MAX_DRIVER_LEN = 63
MAX_POOL_LEN = 253
MAX_REQUESTS = 32
MAX_CONSTRAINTS = 32
MAX_CONFIGS = 32
MAX_SELECTORS = 32
MAX_SUBREQUESTS = 8
MAX_TAINTS = 16
MAX_TOLERATIONS = 16
MAX_CEL_LEN = 10 * 1024
MAX_RESERVED_FOR = 256
MAX_OPAQUE_LEN = 10 * 1024
_NODE_SELECTION = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"


def too_many(path: str, actual: int, limit: int) -> FieldError:
    return FieldError(path, "Too many", actual, f"must have at most {limit} items")


def _dict(value: object) -> Obj | None:
    return value if isinstance(value, dict) else None


def validate(kind: str, obj: Obj, old: Obj | None) -> list[FieldError]:
    spec = _dict(obj.get("spec"))
    if spec is None:
        spec = {}
    old_spec = _dict((old or {}).get("spec"))
    if kind == "ResourceSlice":
        errs = slice_spec(spec)
        if old_spec is not None:
            for f, path in (("driver", "spec.driver"), ("nodeName", "spec.nodeName")):
                if spec.get(f) != old_spec.get(f):
                    errs.append(FieldError(path, "Invalid value", spec.get(f), "field is immutable"))
            if (spec.get("pool") or {}).get("name") != (old_spec.get("pool") or {}).get("name"):
                errs.append(FieldError("spec.pool.name", "Invalid value", (spec.get("pool") or {}).get("name"), "field is immutable"))
        return errs
    if kind == "ResourceClaim":
        errs = claim_spec("spec", spec) + claim_status(obj.get("status") or {})
        if old_spec is not None and spec != old_spec:
            errs.append(FieldError("spec", "Invalid value", "object", "field is immutable", show_value=False))
        return errs
    if kind == "ResourceClaimTemplate":
        inner = _dict(spec.get("spec"))
        if inner is None:
            inner = {}
        errs = claim_spec("spec.spec", inner)
        if old_spec is not None and spec != old_spec:
            errs.append(FieldError("spec", "Invalid value", "object", "field is immutable", show_value=False))
        return errs
    if kind == "DeviceClass":
        errs = selectors("spec.selectors", spec.get("selectors"))
        errs += configs("spec.config", spec.get("config"))
        return errs
    return []


def slice_spec(spec: Obj) -> list[FieldError]:
    errs: list[FieldError] = []
    driver = spec.get("driver") or ""
    if not driver:
        errs.append(FieldError("spec.driver", "Required value"))
    else:
        errs += names.dns_subdomain("spec.driver", driver, MAX_DRIVER_LEN)
    pool = spec.get("pool") or {}
    pool_name = pool.get("name") or ""
    if not pool_name:
        errs.append(FieldError("spec.pool.name", "Required value"))
    else:
        if len(pool_name) > MAX_POOL_LEN:
            errs.append(FieldError("spec.pool.name", "Too long", detail=f"may not be more than {MAX_POOL_LEN} bytes"))
        for part in pool_name.split("/"):
            if not names.DNS_SUBDOMAIN_RE.match(part):
                errs.append(FieldError("spec.pool.name", "Invalid value", pool_name, names.DNS_SUBDOMAIN_MSG))
                break
    if int(pool.get("resourceSliceCount") or 0) <= 0:
        errs.append(FieldError("spec.pool.resourceSliceCount", "Invalid value", pool.get("resourceSliceCount", 0), "must be greater than zero"))
    if int(pool.get("generation") or 0) < 0:
        errs.append(FieldError("spec.pool.generation", "Invalid value", pool.get("generation"), "must be greater than or equal to 0"))
    chosen = [f for f in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(f)]
    if not chosen:
        errs.append(FieldError("spec", "Required value", detail=_NODE_SELECTION))
    elif len(chosen) > 1:
        errs.append(FieldError("spec", "Invalid value", chosen, _NODE_SELECTION))
    if spec.get("nodeName"):
        errs += names.dns_subdomain("spec.nodeName", spec["nodeName"])
    devices = spec.get("devices") or []
    if devices and spec.get("sharedCounters"):
        errs.append(FieldError("spec", "Invalid value", "object", "only one of `devices` or `sharedCounters` may be set", show_value=False))
    advanced = any(isinstance(d, dict) and (d.get("taints") or d.get("consumesCounters")) for d in devices)
    limit = MAX_DEVICES_ADVANCED if advanced else MAX_DEVICES
    if len(devices) > limit:
        errs.append(too_many("spec.devices", len(devices), limit))
    seen: set[str] = set()
    for i, dev in enumerate(devices):
        path = f"spec.devices[{i}]"
        if not isinstance(dev, dict):
            continue
        name = dev.get("name") or ""
        if not name:
            errs.append(FieldError(f"{path}.name", "Required value"))
        else:
            errs += names.dns_label(f"{path}.name", name)
            if name in seen:
                errs.append(FieldError(f"{path}.name", "Duplicate value", name))
            seen.add(name)
        errs += device(path, dev, spec.get("perDeviceNodeSelection") is True)
    return errs


def device(path: str, dev: Obj, per_device_nodes: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    attrs = dev.get("attributes") or {}
    caps = dev.get("capacity") or {}
    if len(attrs) + len(caps) > MAX_ATTRS_AND_CAPACITIES:
        errs.append(too_many(path, len(attrs) + len(caps), MAX_ATTRS_AND_CAPACITIES))
    for name, attr in attrs.items():
        apath = f"{path}.attributes[{name}]"
        errs += names.qualified_device_name(apath, name)
        errs += attribute(apath, attr)
    for name, cap in caps.items():
        cpath = f"{path}.capacity[{name}]"
        errs += names.qualified_device_name(cpath, name)
        if not isinstance(cap, dict) or cap.get("value") in (None, ""):
            errs.append(FieldError(f"{cpath}.value", "Required value"))
    taints = dev.get("taints") or []
    if len(taints) > MAX_TAINTS:
        errs.append(too_many(f"{path}.taints", len(taints), MAX_TAINTS))
    for j, taint in enumerate(taints):
        effect = (taint or {}).get("effect")
        if effect not in ("NoSchedule", "NoExecute", "None"):
            errs.append(FieldError(f"{path}.taints[{j}].effect", "Unsupported value", effect, 'supported values: "NoExecute", "NoSchedule", "None"'))
    node_fields = [f for f in ("nodeName", "nodeSelector", "allNodes") if dev.get(f)]
    if node_fields and not per_device_nodes:
        errs.append(FieldError(f"{path}.{node_fields[0]}", "Forbidden", detail="must be unset unless `spec.perDeviceNodeSelection` is true"))
    if per_device_nodes and len(node_fields) != 1:
        errs.append(FieldError(path, "Invalid value", node_fields, "exactly one of `nodeName`, `nodeSelector`, `allNodes` is required when `spec.perDeviceNodeSelection` is true"))
    return errs


def attribute(path: str, attr: Any) -> list[FieldError]:
    if not isinstance(attr, dict):
        return [FieldError(path, "Invalid value", attr, "must be an object")]
    present = [k for k in ("int", "bool", "string", "version") if attr.get(k) is not None]
    if len(present) != 1:
        return [FieldError(path, "Invalid value", present or None, "exactly one value must be specified")]
    kind = present[0]
    value = attr[kind]
    errs: list[FieldError] = []
    if kind in ("string", "version") and isinstance(value, str) and len(value) > MAX_VALUE_LEN:
        errs.append(FieldError(f"{path}.{kind}", "Too long", detail=f"may not be more than {MAX_VALUE_LEN} bytes"))
    if kind == "version" and not (isinstance(value, str) and names.SEMVER_RE.match(value)):
        errs.append(FieldError(f"{path}.version", "Invalid value", value, "must be a string compatible with semver.org spec 2.0.0"))
    return errs


def selectors(path: str, items: Any) -> list[FieldError]:
    items = items or []
    errs: list[FieldError] = []
    if len(items) > MAX_SELECTORS:
        errs.append(too_many(path, len(items), MAX_SELECTORS))
    for i, sel in enumerate(items):
        cel = (sel or {}).get("cel")
        if not isinstance(cel, dict):
            errs.append(FieldError(f"{path}[{i}].cel", "Required value"))
            continue
        expr = cel.get("expression") or ""
        epath = f"{path}[{i}].cel.expression"
        if not expr.strip():
            errs.append(FieldError(epath, "Required value"))
        elif len(expr) > MAX_CEL_LEN:
            errs.append(FieldError(epath, "Too long", detail=f"may not be more than {MAX_CEL_LEN} bytes"))
    return errs


def configs(path: str, items: Any) -> list[FieldError]:
    items = items or []
    errs: list[FieldError] = []
    if len(items) > MAX_CONFIGS:
        errs.append(too_many(path, len(items), MAX_CONFIGS))
    for i, cfg in enumerate(items):
        opaque = (cfg or {}).get("opaque")
        if isinstance(opaque, dict):
            errs += names.dns_subdomain(f"{path}[{i}].opaque.driver", opaque.get("driver") or "", MAX_DRIVER_LEN)
            size = len(render_value(opaque.get("parameters")))
            if size > MAX_OPAQUE_LEN:
                errs.append(FieldError(f"{path}[{i}].opaque.parameters", "Too long", detail=f"may not be more than {MAX_OPAQUE_LEN} bytes"))
    return errs


def _exact(path: str, req: Obj) -> list[FieldError]:
    errs: list[FieldError] = []
    cls = req.get("deviceClassName") or ""
    if not cls:
        errs.append(FieldError(f"{path}.deviceClassName", "Required value"))
    else:
        errs += names.dns_subdomain(f"{path}.deviceClassName", cls)
    mode = req.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        errs.append(FieldError(f"{path}.allocationMode", "Unsupported value", mode, 'supported values: "All", "ExactCount"'))
    count = req.get("count")
    if mode == "ExactCount" and count is not None and int(count) <= 0:
        errs.append(FieldError(f"{path}.count", "Invalid value", count, "must be greater than zero"))
    if mode == "All" and count not in (None, 0):
        errs.append(FieldError(f"{path}.count", "Invalid value", count, "must not be specified when allocationMode is 'All'"))
    errs += selectors(f"{path}.selectors", req.get("selectors"))
    tolerations = req.get("tolerations") or []
    if len(tolerations) > MAX_TOLERATIONS:
        errs.append(too_many(f"{path}.tolerations", len(tolerations), MAX_TOLERATIONS))
    return errs


def claim_spec(path: str, spec: Obj) -> list[FieldError]:
    devices = spec.get("devices") or {}
    requests = devices.get("requests") or []
    errs: list[FieldError] = []
    rpath = f"{path}.devices.requests"
    if len(requests) > MAX_REQUESTS:
        errs.append(too_many(rpath, len(requests), MAX_REQUESTS))
    seen: set[str] = set()
    for i, req in enumerate(requests):
        p = f"{rpath}[{i}]"
        if not isinstance(req, dict):
            continue
        name = req.get("name") or ""
        if not name:
            errs.append(FieldError(f"{p}.name", "Required value"))
        else:
            errs += names.dns_label(f"{p}.name", name)
            if name in seen:
                errs.append(FieldError(f"{p}.name", "Duplicate value", name))
            seen.add(name)
        has_exact, has_first = isinstance(req.get("exactly"), dict), bool(req.get("firstAvailable"))
        if has_exact == has_first:
            ftype = "Invalid value" if has_exact else "Required value"
            errs.append(FieldError(p, ftype, None, "exactly one of `exactly` or `firstAvailable` is required", show_value=False))
        if has_exact:
            errs += _exact(f"{p}.exactly", req["exactly"])
        subs = req.get("firstAvailable") or []
        if len(subs) > MAX_SUBREQUESTS:
            errs.append(too_many(f"{p}.firstAvailable", len(subs), MAX_SUBREQUESTS))
        for j, sub in enumerate(subs):
            sp = f"{p}.firstAvailable[{j}]"
            if isinstance(sub, dict):
                errs += names.dns_label(f"{sp}.name", sub.get("name") or "") if sub.get("name") else [FieldError(f"{sp}.name", "Required value")]
                errs += _exact(sp, sub)
    constraints = devices.get("constraints") or []
    if len(constraints) > MAX_CONSTRAINTS:
        errs.append(too_many(f"{path}.devices.constraints", len(constraints), MAX_CONSTRAINTS))
    for i, c in enumerate(constraints):
        attr = (c or {}).get("matchAttribute")
        if attr:
            errs += names.qualified_device_name(f"{path}.devices.constraints[{i}].matchAttribute", attr)
    errs += configs(f"{path}.devices.config", devices.get("config"))
    return errs


def claim_status(status: Obj) -> list[FieldError]:
    errs: list[FieldError] = []
    reserved = status.get("reservedFor") or []
    if len(reserved) > MAX_RESERVED_FOR:
        errs.append(too_many("status.reservedFor", len(reserved), MAX_RESERVED_FOR))
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    if len(results) > MAX_REQUESTS:
        errs.append(too_many("status.allocation.devices.results", len(results), MAX_REQUESTS))
    return errs
