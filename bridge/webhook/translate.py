"""Pod + decision + cluster facts -> JSONPatch, ResourceClaimTemplates to ensure, warnings. Pure; no I/O.

Targets:

* `claims`: every container and init container asking for `nvidia.com/gpu: N` gets its OWN pod claim (`gpu-<name>`)
  from a ResourceClaimTemplate requesting exactly N devices of the bridge's DeviceClass; `nvidia.com/gpu` is removed
  from its requests and limits and `resources.claims` points at the claim. One claim per container, never one
  shared: containers that share a claim share its GPUs. GPU Feature Discovery node selectors and required node
  affinity become one CEL selector on each request, and are removed from the pod only where the CEL expresses them
  fully.
* `extended`: `nvidia.com/gpu` becomes the DeviceClass's implicit extended resource
  `deviceclass.resource.kubernetes.io/<class>` (KEP-5004) and the scheduler makes the claim. Node selectors stay.

Invariants:
* all or nothing per pod: a pod with anything untranslatable (MIG or time-sliced names, other `nvidia.com/*`
  resources, non-integer counts, more than 32 GPUs in one container, requests without or unequal to limits) is left
  untouched and every reason is reported;
* deterministic: the same pod yields the same patch and the same template names
  (`dra-bridge-gpu-<count>-<hash8(class, selector)>`), so templates are shared by all pods of a namespace that
  ask for the same thing and creating them is idempotent;
* idempotent: a translated pod has no `nvidia.com/gpu` left, so translating it again changes nothing.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.webhook import cel
from bridge.webhook.facts import LEGACY_RESOURCE, ClusterFacts
from bridge.webhook.policy import (
    DETAIL_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    PREFIX,
    SHADOW_ANNOTATION,
    TRANSLATED_ANNOTATION,
    Action,
    Target,
)

MAX_DEVICES_PER_CLAIM = 32  # AllocationResultsMaxSize
REQUEST_NAME = "gpu"
COUNT_LABEL = PREFIX + "gpu-count"
SELECTOR_ANNOTATION = PREFIX + "selector"
CONTAINER_KINDS = ("initContainers", "containers")

Obj = dict[str, Any]


@dataclass(frozen=True)
class GpuContainer:
    kind: str  # "containers" | "initContainers"
    index: int
    name: str
    count: int
    in_requests: bool
    in_limits: bool


@dataclass(frozen=True)
class Translation:
    patch: tuple[Obj, ...] = ()
    templates: tuple[Obj, ...] = ()
    warnings: tuple[str, ...] = ()
    untranslatable: tuple[str, ...] = ()
    gpu_containers: tuple[GpuContainer, ...] = ()
    summary: Obj = field(default_factory=dict)

    @property
    def has_gpus(self) -> bool:
        return bool(self.gpu_containers) or bool(self.untranslatable)


def escape(key: str) -> str:
    """JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _parse_count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isdigit() and len(value) <= 9:
        return int(value)
    return None


_NVIDIA = "nvidia.com/"
_LEGACY_TOKEN = LEGACY_RESOURCE.replace("~", "~0").replace("/", "~1")


def _why_untranslatable(name: str) -> str | None:
    if name.startswith("nvidia.com/mig-"):
        return (f"{name} is a MIG slice; the bridge serves whole GPUs: request a MIG DeviceClass through a "
                "ResourceClaim, or keep this workload legacy (opt out with dra-bridge.io/translate=false)")
    if name == "nvidia.com/gpu.shared":
        return (f"{name} is a time-sliced GPU; DRA cannot share a GPU under an unchanged request until KEP-6406: "
                "keep this workload legacy or rewrite it with a claim and a sharing config")
    if name.startswith("nvidia.com/") and name != LEGACY_RESOURCE:
        return f"{name} has no DRA equivalent in the bridge; keep this workload legacy"
    return None


def scan(pod: Mapping[str, Any]) -> tuple[list[GpuContainer], list[str]]:
    """GPU-using containers and the reasons the pod cannot be translated (empty when it can)."""
    spec = pod.get("spec") or {}
    found: list[GpuContainer] = []
    reasons: list[str] = []
    for kind in CONTAINER_KINDS:
        for i, c in enumerate(spec.get(kind) or []):
            res = c.get("resources") or {}
            req = res.get("requests") or {}
            lim = res.get("limits") or {}
            cname = c.get("name", f"#{i}")
            # only nvidia.com/* names other than nvidia.com/gpu can be untranslatable: skip cpu, memory, ...
            for n in sorted(k for k in req.keys() | lim.keys() if k.startswith(_NVIDIA) and k != LEGACY_RESOURCE):
                why = _why_untranslatable(n)
                if why:
                    reasons.append(f"container {cname}: {why}")
            if LEGACY_RESOURCE not in req and LEGACY_RESOURCE not in lim:
                continue
            rq, lm = _parse_count(req.get(LEGACY_RESOURCE)), _parse_count(lim.get(LEGACY_RESOURCE))
            if LEGACY_RESOURCE in req and rq is None or LEGACY_RESOURCE in lim and lm is None:
                reasons.append(f"container {cname}: {LEGACY_RESOURCE} must be a whole number of GPUs")
                continue
            if LEGACY_RESOURCE not in lim:
                reasons.append(f"container {cname}: {LEGACY_RESOURCE} is requested without a limit; the API server "
                               "rejects that for extended resources, so the bridge leaves it for the server to refuse")
                continue
            if rq is not None and rq != lm:
                reasons.append(f"container {cname}: {LEGACY_RESOURCE} requests ({rq}) differ from limits ({lm})")
                continue
            assert lm is not None
            if lm == 0:
                continue
            if lm > MAX_DEVICES_PER_CLAIM:
                reasons.append(f"container {cname}: {lm} GPUs is more than a claim can allocate "
                               f"({MAX_DEVICES_PER_CLAIM}): split the work across pods, or keep this workload legacy "
                               "(opt out with dra-bridge.io/translate=false)")
                continue
            found.append(GpuContainer(kind, i, cname, lm, LEGACY_RESOURCE in req, True))
    return found, reasons


@dataclass(frozen=True)
class _Selectors:
    expression: str  # '' when no device constraint
    new_node_selector: Obj | None  # None: unchanged
    new_affinity: Obj | None  # None: unchanged; {} means remove
    moved: tuple[str, ...]  # human summary of what moved into CEL
    warnings: tuple[str, ...]


def _requirement(expr: Mapping[str, Any]) -> cel.Requirement:
    return cel.Requirement(str(expr.get("key", "")), str(expr.get("operator", "")),
                           tuple(str(v) for v in expr.get("values") or ()))


def _is_device_label(expr: Mapping[str, Any]) -> bool:
    return isinstance(expr, Mapping) and expr.get("key") in cel.DEVICE_LABELS


def _selectors(spec: Mapping[str, Any], driver: str) -> _Selectors:
    """The device selector of a pod and what stays on it. A pod with only a nodeSelector of strings (the common
    case: every pod of a Deployment carries the same one) is answered from a cache keyed by that selector."""
    ns = spec.get("nodeSelector")
    if not spec.get("affinity") and (ns is None or type(ns) is dict and all(type(v) is str for v in ns.values())):
        return _node_selector_only(tuple(ns.items()) if ns else (), driver)
    return _compute_selectors(spec, driver)


@functools.lru_cache(maxsize=1024)
def _node_selector_only(items: tuple[tuple[str, str], ...], driver: str) -> _Selectors:
    return _compute_selectors({"nodeSelector": dict(items)} if items else {}, driver)


def _compute_selectors(spec: Mapping[str, Any], driver: str) -> _Selectors:
    exprs: list[str] = []
    moved: list[str] = []
    warnings: list[str] = []
    new_ns: Obj | None = None
    ns = spec.get("nodeSelector") or {}
    if isinstance(ns, Mapping):
        kept = dict(ns)
        for key in sorted(k for k in ns if k in cel.DEVICE_LABELS):
            m = cel.map_requirement(cel.Requirement(key, "In", (str(ns[key]),)), driver)
            if m.ok:
                kept.pop(key)
                moved.append(f"nodeSelector {key}={ns[key]}")
                if m.expression:
                    exprs.append(m.expression)
            else:
                warnings.append(f"nodeSelector {key} stays on the pod: {m.reason}")
        if kept != dict(ns):
            new_ns = kept

    new_aff: Obj | None = None
    affinity = spec.get("affinity") or {}
    required = ((affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if terms and any(_is_device_label(e) for t in terms for e in (t.get("matchExpressions") or [])):
        new_terms: list[Obj] | None = None
        if len(terms) == 1:
            term = terms[0]
            kept_exprs: list[Any] = []
            for e in term.get("matchExpressions") or []:
                if not _is_device_label(e):
                    kept_exprs.append(e)
                    continue
                m = cel.map_requirement(_requirement(e), driver)
                if m.ok:
                    moved.append(f"nodeAffinity {e.get('key')} {e.get('operator')} {','.join(map(str, e.get('values') or []))}")
                    if m.expression:
                        exprs.append(m.expression)
                else:
                    kept_exprs.append(e)
                    warnings.append(f"node affinity on {e.get('key')} stays on the pod: {m.reason}")
            new_term = {k: v for k, v in term.items() if k != "matchExpressions"}
            if kept_exprs:
                new_term["matchExpressions"] = kept_exprs
            new_terms = [new_term] if (new_term.get("matchExpressions") or new_term.get("matchFields")) else []
        else:
            alternatives: list[str] = []
            translatable = True
            for t in terms:
                if t.get("matchFields") or not all(_is_device_label(e) for e in t.get("matchExpressions") or []):
                    translatable = False
                    break
                parts = [cel.map_requirement(_requirement(e), driver) for e in t.get("matchExpressions") or []]
                if not all(p.ok for p in parts):
                    translatable = False
                    break
                alternatives.append(cel.conjunction([p.expression for p in parts if p.expression]))
            if translatable and alternatives:
                moved.append(f"nodeAffinity ({len(terms)} alternative terms)")
                if all(alternatives):  # an empty alternative matches every device: no constraint at all
                    exprs.append(cel.disjunction(alternatives))
                new_terms = []
            else:
                warnings.append("required node affinity with several terms mixing GPU and other labels stays on "
                                "the pod; the GPUs are constrained only through the node")
        if new_terms is not None:
            new_aff = copy.deepcopy(dict(affinity))
            node_aff = new_aff["nodeAffinity"]
            if new_terms:
                node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = {**required, "nodeSelectorTerms": new_terms}
            else:
                node_aff.pop("requiredDuringSchedulingIgnoredDuringExecution", None)
            if not node_aff:
                new_aff.pop("nodeAffinity")
    expression = cel.compile_checked(cel.conjunction(exprs)) if exprs else ""
    return _Selectors(expression, new_ns, new_aff, tuple(moved), tuple(warnings))


@functools.lru_cache(maxsize=4096)
def template_name(count: int, device_class: str, expression: str) -> str:
    """Cached: a namespace's pods ask for a handful of (count, selector) pairs, and hashing costs microseconds."""
    digest = hashlib.sha256(json.dumps([device_class, expression]).encode()).hexdigest()[:8]
    return f"dra-bridge-gpu-{count}-{digest}"


def claim_template(name: str, namespace: str, count: int, expression: str, facts: ClusterFacts) -> Obj:
    """The ResourceClaimTemplate in the shape of the served resource.k8s.io version (v1beta1 puts deviceClassName
    and count on the request itself; v1beta2 and v1 nest them under `exactly`)."""
    exact: Obj = {"deviceClassName": facts.device_class, "allocationMode": "ExactCount", "count": count}
    if expression:
        exact["selectors"] = [{"cel": {"expression": expression}}]
    version = facts.resource_version or "v1"
    request: Obj = {"name": REQUEST_NAME, **exact} if version == "v1beta1" else {"name": REQUEST_NAME, "exactly": exact}
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, COUNT_LABEL: str(count)}
    meta: Obj = {"name": name, "namespace": namespace, "labels": labels}
    if expression:
        meta["annotations"] = {SELECTOR_ANNOTATION: expression}
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaimTemplate",
        "metadata": meta,
        "spec": {"metadata": {"labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}},
                 "spec": {"devices": {"requests": [request]}}},
    }


def _claim_name(container: str, taken: set[str]) -> str:
    name = f"gpu-{container}"
    if len(name) > 63 or name in taken:
        name = f"gpu-{container[:45]}-{hashlib.sha256(container.encode()).hexdigest()[:8]}"
    return name


def _annotation_ops(pod: Mapping[str, Any], values: Mapping[str, str]) -> list[Obj]:
    meta = pod.get("metadata") or {}
    if not isinstance(meta.get("annotations"), Mapping):
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(values)}]
    return [{"op": "add", "path": f"/metadata/annotations/{escape(k)}", "value": v} for k, v in values.items()]


_compact = json.JSONEncoder(separators=(",", ":"), sort_keys=True).encode  # one encoder, not one per call


def translate(pod: Mapping[str, Any], namespace: str, action: Action, target: Target, facts: ClusterFacts) -> Translation:
    """The translation of `pod` for `action` SHADOW or TRANSLATE. The caller has already applied the policy."""
    gpus, reasons = scan(pod)
    if not gpus and not reasons:
        return Translation()
    spec = pod.get("spec") or {}
    summary: Obj
    if reasons:
        summary = {"ok": False, "target": target.value, "reasons": reasons}
        patch = _annotation_ops(pod, {SHADOW_ANNOTATION: _compact(summary)}) if action is Action.SHADOW else []
        return Translation(tuple(patch), (), tuple(reasons), tuple(reasons), tuple(gpus), summary)

    ops: list[Obj] = []
    templates: list[Obj] = []
    template_names: set[str] = set()
    warnings: list[str] = []
    summary = {"ok": True, "target": target.value,
                    "containers": {("init:" if g.kind == "initContainers" else "") + g.name: g.count for g in gpus}}
    if target is Target.EXTENDED:
        new = facts.extended_resource_name
        for g in gpus:
            res = spec[g.kind][g.index]["resources"]
            for part in ("requests", "limits"):
                if LEGACY_RESOURCE in (res.get(part) or {}):
                    base = f"/spec/{g.kind}/{g.index}/resources/{part}"
                    ops.append({"op": "remove", "path": f"{base}/{_LEGACY_TOKEN}"})
                    ops.append({"op": "add", "path": f"{base}/{escape(new)}", "value": res[part][LEGACY_RESOURCE]})
        summary["resource"] = new
    else:
        sel = _selectors(spec, facts.driver)
        warnings.extend(sel.warnings)
        taken = {str(c.get("name")) for c in spec.get("resourceClaims") or [] if isinstance(c, Mapping)}
        new_claims: list[Obj] = []
        for g in gpus:
            claim = _claim_name(g.name, taken)
            taken.add(claim)
            tname = template_name(g.count, facts.device_class, sel.expression)
            if tname not in template_names:
                template_names.add(tname)
                templates.append(claim_template(tname, namespace, g.count, sel.expression, facts))
            new_claims.append({"name": claim, "resourceClaimTemplateName": tname})
            res = spec[g.kind][g.index]["resources"]
            base = f"/spec/{g.kind}/{g.index}/resources"
            for part in ("requests", "limits"):
                if LEGACY_RESOURCE in (res.get(part) or {}):
                    ops.append({"op": "remove", "path": f"{base}/{part}/{_LEGACY_TOKEN}"})
            if isinstance(res.get("claims"), list):
                ops.append({"op": "add", "path": f"{base}/claims/-", "value": {"name": claim}})
            else:
                ops.append({"op": "add", "path": f"{base}/claims", "value": [{"name": claim}]})
        if isinstance(spec.get("resourceClaims"), list):
            ops.extend({"op": "add", "path": "/spec/resourceClaims/-", "value": c} for c in new_claims)
        else:
            ops.append({"op": "add", "path": "/spec/resourceClaims", "value": new_claims})
        if sel.new_node_selector is not None:
            ops.append({"op": "replace", "path": "/spec/nodeSelector", "value": dict(sel.new_node_selector)}
                       if sel.new_node_selector else {"op": "remove", "path": "/spec/nodeSelector"})
        if sel.new_affinity is not None:
            ops.append({"op": "replace", "path": "/spec/affinity", "value": sel.new_affinity}
                       if sel.new_affinity else {"op": "remove", "path": "/spec/affinity"})
        summary["claims"] = {c["name"]: c["resourceClaimTemplateName"] for c in new_claims}
        if sel.expression:
            summary["selector"] = sel.expression
        if sel.moved:
            summary["moved"] = list(sel.moved)
    if warnings:
        summary["warnings"] = warnings

    if action is Action.SHADOW:
        return Translation(tuple(_annotation_ops(pod, {SHADOW_ANNOTATION: _compact(summary)})), (), tuple(warnings),
                           (), tuple(gpus), summary)
    ops.extend(_annotation_ops(pod, {TRANSLATED_ANNOTATION: target.value, DETAIL_ANNOTATION: _compact(summary)}))
    return Translation(tuple(ops), tuple(templates), tuple(warnings), (), tuple(gpus), summary)
