"""The resource.k8s.io validation rules that the published OpenAPI schemas do not carry.

Limits from `pkg/apis/resource` (kubernetes/kubernetes pkg/apis/resource/types.go and validation/validation.go):
128 devices per slice (64 when a device uses taints or counters), DNS-label device names unique in the slice, at
most 32 attributes + capacities per device, qualified attribute names (C identifier <= 32, optional DNS-subdomain
domain <= 63), exactly one value per attribute, strings/versions <= 64 characters, versions in semver, driver a DNS
subdomain <= 63, pool names of DNS subdomains separated by '/', exactly one node selection field, CEL expressions
<= 10 KiB, <= 32 requests / constraints / config entries per claim, count >= 1, and the immutable fields on update.
Rules run on the storage (v1) shape, so paths are v1 paths whichever version the client used. Pure functions.

From kubernetes/kubernetes pkg/apis/resource/validation/validation.go as well:
* CEL selectors are compiled, type-checked and cost-estimated (`validateCELSelector`, via
  bridge.kvalues.celcheck): a selector that does not compile is a 422 `Invalid value: "<expr>": compilation failed:
  ERROR: <input>:1:17: ...`, one over the cost limit `Forbidden: too complex, exceeds cost limit`. A selector list
  that is unchanged on update counts as *stored* and is checked in the stored-expression environment (every field
  declared, whatever the gates).
* device taints (`validateDeviceTaint`): key a qualified name (required), value a label value, effect required and
  one of NoSchedule/NoExecute (plus None from 1.35); tolerations (`validateDeviceToleration`): key a qualified name
  when set, operator Exists (value must be empty) or Equal (value a label value), effect one of the taint effects.
* ResourceClaim(Template) updates only check that the spec is unchanged (`ValidateResourceClaimUpdate`: "the only
  actionable error is for the immutability violation").
* DeviceClass `extendedResourceName` must be an extended resource name (pkg/apis/core/validation
  `validateExtendedResourceName`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bridge.kvalues.celcheck import MAX_COST, compile_selector
from bridge.kvalues.quantity import QuantityError, parse_quantity

from . import names
from .profiles import KubernetesProfile, profile_for
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


_DEFAULT_PROFILE = profile_for("1.34")


@dataclass(frozen=True)
class _Ctx:
    """What validation depends on besides the object: the emulated minor's gates and message variants."""

    consumable_capacity: bool
    taint_effects: tuple[str, ...]
    semver_18_digits: bool = False  # 1.38+: version attributes' numbers have at most 18 digits
    one_slash: bool = False  # 1.38+: a qualified name with more than one slash is refused (accepted before)
    capacity_requests: bool = False  # 1.38+: a request's capacity.requests are validated (not at all before)


def _ctx(profile: KubernetesProfile | None) -> _Ctx:
    p = profile or _DEFAULT_PROFILE
    return _Ctx(p.enabled("DRAConsumableCapacity"), p.device_taint_effects, p.semver_18_digits,
                p.qualified_names_one_slash, p.minor >= 38)


def validate(kind: str, obj: Obj, old: Obj | None, profile: KubernetesProfile | None = None) -> list[FieldError]:
    ctx = _ctx(profile)
    spec = _dict(obj.get("spec"))
    if spec is None:
        spec = {}
    old_spec = _dict((old or {}).get("spec"))
    if kind == "ResourceSlice":
        errs = slice_spec(spec, ctx)
        if old_spec is not None:
            for f, path in (("driver", "spec.driver"), ("nodeName", "spec.nodeName")):
                if spec.get(f) != old_spec.get(f):
                    errs.append(FieldError(path, "Invalid value", spec.get(f), "field is immutable"))
            if (spec.get("pool") or {}).get("name") != (old_spec.get("pool") or {}).get("name"):
                errs.append(FieldError("spec.pool.name", "Invalid value", (spec.get("pool") or {}).get("name"), "field is immutable"))
        return errs
    if kind == "ResourceClaim":
        if old_spec is not None:
            errs = claim_status(obj.get("status") or {})
            if spec != old_spec:
                errs.append(FieldError("spec", "Invalid value", "object", "field is immutable", show_value=False))
            return errs
        return claim_spec("spec", spec, ctx) + claim_status(obj.get("status") or {})
    if kind == "ResourceClaimTemplate":
        if old_spec is not None:
            if spec != old_spec:
                return [FieldError("spec", "Invalid value", "object", "field is immutable", show_value=False)]
            return []
        inner = _dict(spec.get("spec"))
        if inner is None:
            inner = {}
        return claim_spec("spec.spec", inner, ctx)
    if kind == "DeviceClass":
        stored = old_spec is not None and old_spec.get("selectors") == spec.get("selectors")
        errs = selectors("spec.selectors", spec.get("selectors"), ctx, stored=stored)
        errs += configs("spec.config", spec.get("config"))
        ern = spec.get("extendedResourceName")
        if ern is not None:
            errs += names.extended_resource_name("spec.extendedResourceName", ern)
        return errs
    return []


def slice_spec(spec: Obj, ctx: _Ctx | None = None) -> list[FieldError]:
    ctx = ctx or _ctx(None)
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
            if name in seen:  # on the list element, not its name (kube-apiserver v1.37.2, tests/real/test_differential.py)
                errs.append(FieldError(path, "Duplicate value", name))
            seen.add(name)
        errs += device(path, dev, spec.get("perDeviceNodeSelection") is True, ctx)
    return errs


def device(path: str, dev: Obj, per_device_nodes: bool, ctx: _Ctx | None = None) -> list[FieldError]:
    ctx = ctx or _ctx(None)
    errs: list[FieldError] = []
    attrs = dev.get("attributes") or {}
    caps = dev.get("capacity") or {}
    if len(attrs) + len(caps) > MAX_ATTRS_AND_CAPACITIES:
        errs.append(too_many(path, len(attrs) + len(caps), MAX_ATTRS_AND_CAPACITIES))
    for name, attr in attrs.items():
        apath = f"{path}.attributes[{name}]"
        # a key's errors name the map, not the entry (validation.go `validateMap`: `validateKey(key, fldPath)`)
        errs += names.qualified_device_name(f"{path}.attributes", name, one_slash=ctx.one_slash)
        errs += attribute(apath, attr, ctx)
    for name, cap in caps.items():
        cpath = f"{path}.capacity[{name}]"
        errs += names.qualified_device_name(f"{path}.capacity", name, one_slash=ctx.one_slash)
        if not isinstance(cap, dict) or cap.get("value") in (None, ""):
            errs.append(FieldError(f"{cpath}.value", "Required value"))
    taints = dev.get("taints") or []
    if len(taints) > MAX_TAINTS:
        errs.append(too_many(f"{path}.taints", len(taints), MAX_TAINTS))
    for j, taint in enumerate(taints):
        errs += device_taint(f"{path}.taints[{j}]", taint if isinstance(taint, dict) else {}, ctx.taint_effects)
    node_fields = [f for f in ("nodeName", "nodeSelector", "allNodes") if dev.get(f)]
    if node_fields and not per_device_nodes:
        errs.append(FieldError(f"{path}.{node_fields[0]}", "Forbidden", detail="must be unset unless `spec.perDeviceNodeSelection` is true"))
    if per_device_nodes and len(node_fields) != 1:
        errs.append(FieldError(path, "Invalid value", node_fields, "exactly one of `nodeName`, `nodeSelector`, `allNodes` is required when `spec.perDeviceNodeSelection` is true"))
    return errs


def attribute(path: str, attr: Any, ctx: _Ctx | None = None) -> list[FieldError]:
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
    if kind == "version":
        short = ctx is not None and ctx.semver_18_digits
        if not (isinstance(value, str) and (names.SEMVER_18_RE if short else names.SEMVER_RE).match(value)):
            errs.append(FieldError(f"{path}.version", "Invalid value", value,
                                   "must be a string compatible with semver.org spec 2.0.0"
                                   + (", with at most 18 digits in numbers" if short else "")))
    return errs


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(f'"{v}"' for v in sorted(values))


def device_taint(path: str, taint: Obj, effects: tuple[str, ...]) -> list[FieldError]:
    # metav1validation.ValidateLabelName "includes checking for non-empty": an empty key is Invalid, not Required.
    errs = names.qualified_label_key(f"{path}.key", str(taint["key"])) if taint.get("key") else [
        FieldError(f"{path}.key", "Invalid value", "", "name part must be non-empty")]
    if taint.get("value"):
        errs += names.label_value(f"{path}.value", str(taint["value"]))
    effect = taint.get("effect") or ""
    if not effect:
        errs.append(FieldError(f"{path}.effect", "Required value"))
    elif effect not in effects:
        errs.append(FieldError(f"{path}.effect", "Unsupported value", effect, f"supported values: {_quoted(effects)}"))
    return errs


def device_toleration(path: str, tol: Obj, effects: tuple[str, ...]) -> list[FieldError]:
    errs: list[FieldError] = []
    if tol.get("key"):
        errs += names.qualified_label_key(f"{path}.key", str(tol["key"]))
    op = tol.get("operator") or ""
    value = tol.get("value") or ""
    if op == "Exists":
        if value:
            errs.append(FieldError(f"{path}.value", "Invalid value", value, "must be empty for operator `Exists`"))
    elif op == "Equal":
        errs += names.label_value(f"{path}.value", str(value))
    elif op == "":
        errs.append(FieldError(f"{path}.operator", "Required value"))
    else:
        errs.append(FieldError(f"{path}.operator", "Unsupported value", op, 'supported values: "Equal", "Exists"'))
    effect = tol.get("effect") or ""
    if effect and effect not in effects:
        errs.append(FieldError(f"{path}.effect", "Unsupported value", effect, f"supported values: {_quoted(effects)}"))
    return errs


def selectors(path: str, items: Any, ctx: _Ctx | None = None, *, stored: bool = False) -> list[FieldError]:
    ctx = ctx or _ctx(None)
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
        else:
            result = compile_selector(expr, consumable_capacity=ctx.consumable_capacity or stored)
            if result.issue is not None:
                if result.issue.type == "Required":
                    errs.append(FieldError(epath, "Required value", detail=result.issue.detail))
                elif result.issue.type == "Invalid":
                    errs.append(FieldError(epath, "Invalid value", expr, result.issue.detail))
                else:
                    errs.append(FieldError(epath, "Internal error", detail=result.issue.detail))
            elif result.max_cost > MAX_COST:
                errs.append(FieldError(epath, "Forbidden", detail="too complex, exceeds cost limit"))
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


def _exact(path: str, req: Obj, ctx: _Ctx) -> list[FieldError]:
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
    errs += selectors(f"{path}.selectors", req.get("selectors"), ctx)
    if ctx.capacity_requests:
        errs += _capacity_requests(f"{path}.capacity.requests", ((req.get("capacity") or {}).get("requests")) or {})
    tolerations = req.get("tolerations") or []
    if len(tolerations) > MAX_TOLERATIONS:
        errs.append(too_many(f"{path}.tolerations", len(tolerations), MAX_TOLERATIONS))
    for j, tol in enumerate(tolerations):
        errs += device_toleration(f"{path}.tolerations[{j}]", tol if isinstance(tol, dict) else {}, ctx.taint_effects)
    return errs


MAX_CAPACITY_REQUESTS = 32


def _capacity_requests(path: str, requests: Any) -> list[FieldError]:
    """1.38 (v1.38.0-beta.0): the keys as qualified names, naming the map (validation.go validateCapacityNames);
    at most 32 entries, then each value >= 0, declaratively (v1/zz_generated.validations.go
    Validate_CapacityRequirements: MaxProperties short-circuits the values' MinimumQuantity). 1.37 checked none."""
    if not isinstance(requests, dict):
        return []
    errs: list[FieldError] = []
    for key in requests:
        errs += names.qualified_device_name(path, str(key), one_slash=True)
    if len(requests) > MAX_CAPACITY_REQUESTS:
        return [*errs, too_many(path, len(requests), MAX_CAPACITY_REQUESTS)]
    for key, value in requests.items():
        try:
            negative = parse_quantity(value) < 0
        except QuantityError:
            continue  # the schema's quantity format reports it
        if negative:
            errs.append(FieldError(f"{path}[{key}]", "Invalid value", value, "must be greater than or equal to 0"))
    return errs


def claim_spec(path: str, spec: Obj, ctx: _Ctx | None = None) -> list[FieldError]:
    ctx = ctx or _ctx(None)
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
            if name in seen:  # the whole request is the value (kube-apiserver v1.37.2, tests/real/test_differential.py)
                errs.append(FieldError(p, "Duplicate value", req))
            seen.add(name)
        has_exact, has_first = isinstance(req.get("exactly"), dict), bool(req.get("firstAvailable"))
        if has_exact == has_first:
            ftype = "Invalid value" if has_exact else "Required value"
            errs.append(FieldError(p, ftype, None, "exactly one of `exactly` or `firstAvailable` is required", show_value=False))
        if has_exact:
            errs += _exact(f"{p}.exactly", req["exactly"], ctx)
        subs = req.get("firstAvailable") or []
        if len(subs) > MAX_SUBREQUESTS:
            errs.append(too_many(f"{p}.firstAvailable", len(subs), MAX_SUBREQUESTS))
        for j, sub in enumerate(subs):
            sp = f"{p}.firstAvailable[{j}]"
            if isinstance(sub, dict):
                errs += names.dns_label(f"{sp}.name", sub.get("name") or "") if sub.get("name") else [FieldError(f"{sp}.name", "Required value")]
                errs += _exact(sp, sub, ctx)
    constraints = devices.get("constraints") or []
    if len(constraints) > MAX_CONSTRAINTS:
        errs.append(too_many(f"{path}.devices.constraints", len(constraints), MAX_CONSTRAINTS))
    for i, c in enumerate(constraints):
        attr = (c or {}).get("matchAttribute")
        if attr:
            errs += names.qualified_device_name(f"{path}.devices.constraints[{i}].matchAttribute", attr,
                                                one_slash=ctx.one_slash)
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
