"""Pod + decision + cluster facts -> JSONPatch, ResourceClaimTemplates to ensure, warnings. Pure; no I/O.

Targets:

* `claims`: `nvidia.com/gpu` is removed from every container's requests and limits and the pod gets claims from
  ResourceClaimTemplates of the bridge's DeviceClass, planned by `bridge.kvalues.podgpu.plan_claims` so that the
  pod holds exactly as many GPUs as under the device plugin: each app container and sidecar (`restartPolicy:
  Always` init container) its own claim (`gpu-<name>`), ordinary init containers borrowing the claims of the
  containers that start after them (init 8 + main 8 holds 8, not 16; init 1 + main 1 holds 1, not 2) plus, for a
  shortfall, one claim they share (`gpu-init`). A container sees exactly its own count: where an init container
  needs part of a claim, the claim's template is cut into requests (`gpu-0`, `gpu-1`, ...) and the init container
  references only those (`resources.claims[].request`). GPU Feature Discovery node selectors and required node
  affinity become one CEL selector on each request (bridge.kvalues.gfd), and are removed from the pod only where
  the CEL expresses them fully.
* `extended`: `nvidia.com/gpu` becomes the DeviceClass's implicit extended resource
  `deviceclass.resource.kubernetes.io/<class>` (KEP-5004) and the scheduler makes the claim. Node selectors stay.
  A pod whose ordinary init containers ask for GPUs is translated with `claims` instead: the scheduler's
  extended-resource claim gave every container its own request before kubernetes/kubernetes issue 134880 was
  fixed (init 8 + main 8 held 16), and which releases carry the fix is not verified here; the claims plan holds
  the device-plugin count on every release. Sidecars and app containers are exact either way.

Only what keeps its meaning and what the cluster can serve is translated (all or nothing per pod; every reason is
reported, each with a short form for the API warning and the full text with the remedy for the Event):
* per container: MIG or time-sliced names, other `nvidia.com/*` resources, counts that are not whole numbers,
  more than 32 GPUs in one container, requests without or unequal to limits;
* per pod (`serve_reasons`): no `resource.k8s.io` served; an API server that drops pod claims, or one not checked
  yet; a preset `spec.nodeName` (no scheduler allocates its claims) or a `schedulerName` that is not allowed to
  (only kube-scheduler allocates claims; `--translate-scheduler` adds names, e.g. a second kube-scheduler
  profile); node selectors that ask for MIG slices or shares, or that leave only nodes where `nvidia.com/gpu` is
  not a whole GPU (bridge/webhook/nodes.py).

Invariants:
* deterministic: the same pod yields the same patch and the same template names
  (`dra-bridge-gpu-<count>-<hash8(class, selector[, requests])>`), so templates are shared by all pods of a
  namespace that ask for the same thing and creating them is idempotent;
* idempotent: a translated pod has no `nvidia.com/gpu` left, so translating it again changes nothing;
* the summary records `devices`: how many GPUs the pod will hold, equal to the device-plugin count.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.kvalues import gfd
from bridge.kvalues.podgpu import OWNER_EXTRA, ClaimPlan, ContainerCount, Kind, devices_of, plan_claims
from bridge.kvalues.quantity import QuantityError, check_count
from bridge.webhook import cel, jsoncodec
from bridge.webhook.facts import LEGACY_RESOURCE, ClusterFacts, ServeFacts
from bridge.webhook.policy import (
    DETAIL_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    PREFIX,
    SHADOW_ANNOTATION,
    TRANSLATED_ANNOTATION,
    SHADOW,
    Action,
    Target,
)

CLAIMS, EXTENDED = Target.CLAIMS, Target.EXTENDED

MAX_DEVICES_PER_CLAIM = 32  # AllocationResultsMaxSize
REQUEST_NAME = "gpu"
COUNT_LABEL = PREFIX + "gpu-count"
SELECTOR_ANNOTATION = PREFIX + "selector"
CONTAINER_KINDS = ("initContainers", "containers")
DEFAULT_SCHEDULER = "default-scheduler"
EXTRA_CLAIM = "init"  # `gpu-init`: the claim the ordinary init containers share for what they cannot borrow

Obj = dict[str, Any]


@dataclass(slots=True)
class GpuContainer:
    """A container asking for `nvidia.com/gpu`. Not frozen: a frozen dataclass's __init__ costs a microsecond more
    per object, and the webhook builds one per GPU container per review; nothing changes it after `scan`."""

    kind: str  # "containers" | "initContainers"
    index: int
    name: str
    count: int
    in_requests: bool
    in_limits: bool
    sidecar: bool = False  # an init container with restartPolicy Always

    def counted(self) -> ContainerCount:
        """As bridge.kvalues.podgpu counts it."""
        kind: Kind = "app" if self.kind == "containers" else "sidecar" if self.sidecar else "init"
        return ContainerCount(self.name, kind, self.index, self.count)


@dataclass(frozen=True)
class Why:
    """A reason a pod is not translated: `short` for the API warning (120 characters with its prefix), `detail`
    with the remedy, for the Event and the shadow record."""

    short: str
    detail: str


@dataclass(slots=True)
class Translation:
    """Not frozen, like GpuContainer: one per review, nothing changes it after `translate`."""

    patch: tuple[Obj, ...] = ()
    templates: tuple[Obj, ...] = ()
    warnings: tuple[str, ...] = ()
    untranslatable: tuple[str, ...] = ()  # details
    gpu_containers: tuple[GpuContainer, ...] = ()
    summary: Obj = field(default_factory=dict)
    short: tuple[str, ...] = ()  # the untranslatable reasons' short forms
    target: Target | None = None  # the target actually used (claims where extended cannot keep the count)

    @property
    def has_gpus(self) -> bool:
        return bool(self.gpu_containers) or bool(self.untranslatable)


def escape(key: str) -> str:
    """JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


_NVIDIA = "nvidia.com/"
_LEGACY_TOKEN = LEGACY_RESOURCE.replace("~", "~0").replace("/", "~1")


def _why_untranslatable(name: str) -> tuple[str, str] | None:
    """(short, detail) for an `nvidia.com/*` name other than `nvidia.com/gpu`."""
    if name.startswith("nvidia.com/mig-"):
        return (f"{name[:40]} is a MIG slice",
                f"{name} is a MIG slice; the bridge serves whole GPUs: request a MIG DeviceClass through a "
                "ResourceClaim, or keep this workload legacy (opt out with dra-bridge.io/translate=false)")
    if name == "nvidia.com/gpu.shared":
        return (f"{name} is a time-sliced GPU",
                f"{name} is a time-sliced GPU; DRA cannot share a GPU under an unchanged request until KEP-6406: "
                "keep this workload legacy or rewrite it with a claim and a sharing config")
    if name.startswith("nvidia.com/") and name != LEGACY_RESOURCE:
        return (f"{name[:40]} has no DRA equivalent", f"{name} has no DRA equivalent in the bridge; keep this "
                "workload legacy")
    return None


def _container_why(cname: str, short: str, detail: str | None = None) -> Why:
    who = f"container {cname[:40]}"
    return Why(f"{who}: {short}", f"{who}: {detail or short}")


_EMPTY: Mapping[str, Any] = {}  # read only: the default for an absent resources/requests/limits
# resource names that are never untranslatable, known without a (costly) `startswith`
_PLAIN = frozenset({LEGACY_RESOURCE, "cpu", "memory", "ephemeral-storage"})


def _container_name(c: Mapping[str, Any], i: int) -> str:
    return str(c["name"]) if "name" in c else f"#{i}"


def scan(pod: Mapping[str, Any]) -> tuple[list[GpuContainer], list[Why]]:
    """GPU-using containers and the reasons the pod cannot be translated (empty when it can)."""
    spec = pod.get("spec") or _EMPTY
    found: list[GpuContainer] = []
    reasons: list[Why] = []
    for kind in CONTAINER_KINDS:
        items = spec.get(kind)
        if not items:
            continue
        init = kind == "initContainers"
        for i, c in enumerate(items):
            res = c.get("resources")
            if not res:
                continue
            req = res.get("requests") or _EMPTY
            lim = res.get("limits") or _EMPTY
            # only nvidia.com/* names other than nvidia.com/gpu can be untranslatable: skip cpu, memory, ... (the
            # common container names nothing else: one C-level superset check per part)
            if not (_PLAIN.issuperset(req) and _PLAIN.issuperset(lim)):
                other = [k for k in (*req, *lim) if k not in _PLAIN and k.startswith(_NVIDIA)]
                if other:
                    cname = _container_name(c, i)
                    for n in sorted(set(other)):
                        why = _why_untranslatable(n)
                        if why:
                            reasons.append(_container_why(cname, *why))
            in_lim = LEGACY_RESOURCE in lim
            in_req = LEGACY_RESOURCE in req
            if not in_lim and not in_req:
                continue
            if in_lim:  # the common GPU container: the same whole count in limits (and requests), within a claim
                count = lim[LEGACY_RESOURCE]
                if (type(count) is int and 0 < count <= MAX_DEVICES_PER_CLAIM
                        and (not in_req or type(req[LEGACY_RESOURCE]) is int and req[LEGACY_RESOURCE] == count)):
                    found.append(GpuContainer(kind, i, _container_name(c, i), count, in_req, True,
                                              init and c.get("restartPolicy") == "Always"))
                    continue
            cname = _container_name(c, i)
            try:
                rq = check_count(req[LEGACY_RESOURCE]) if in_req else None
                lm = check_count(lim[LEGACY_RESOURCE]) if in_lim else None
            except QuantityError as err:  # bounded: a huge exponent is refused before any arithmetic
                reasons.append(_container_why(cname, f"{LEGACY_RESOURCE} is not a valid GPU count ({err.reason})",
                                              f"{LEGACY_RESOURCE} is not a valid GPU count: {err}"))
                continue
            if not in_lim:
                reasons.append(_container_why(
                    cname, f"{LEGACY_RESOURCE} is requested without a limit",
                    f"{LEGACY_RESOURCE} is requested without a limit; the API server rejects that for extended "
                    "resources, so the bridge leaves it for the server to refuse"))
                continue
            if rq is not None and rq != lm:
                reasons.append(_container_why(cname, f"{LEGACY_RESOURCE} requests ({rq}) differ from limits ({lm})"))
                continue
            assert lm is not None
            if lm == 0:
                continue
            if lm > MAX_DEVICES_PER_CLAIM:
                reasons.append(_container_why(
                    cname, f"{lm} GPUs is more than a claim can allocate ({MAX_DEVICES_PER_CLAIM})",
                    f"{lm} GPUs is more than a claim can allocate ({MAX_DEVICES_PER_CLAIM}): split the work across "
                    "pods, or keep this workload legacy (opt out with dra-bridge.io/translate=false)"))
                continue
            found.append(GpuContainer(kind, i, cname, lm, in_req, True, init and c.get("restartPolicy") == "Always"))
    return found, reasons


def serve_reasons(spec: Mapping[str, Any], facts: ClusterFacts, serve: ServeFacts,
                  schedulers: frozenset[str]) -> list[Why]:
    """Why the cluster cannot serve this pod's GPUs through DRA (see the module docstring); empty when it can."""
    out: list[Why] = []
    if facts.resource_version is None:
        out.append(Why("the cluster serves no resource.k8s.io API",
                       "the cluster serves no resource.k8s.io API version, so there is no DRA to translate to; "
                       "enable DRA on the control plane or keep this namespace legacy"))
    elif serve.claims_kept is False:
        out.append(Why("the API server drops pod claims (DynamicResourceAllocation is off)",
                       "the API server drops a pod's resourceClaims (a dry-run create showed it: the "
                       f"DynamicResourceAllocation feature gate is off in kube-apiserver; {serve.claims_problem}): "
                       "translated, the pod would run without a GPU. Turn the gate on, or keep this namespace legacy"))
    elif serve.claims_kept is None:
        out.append(Why("not yet known whether the API server keeps pod claims",
                       f"the webhook could not check whether the API server keeps a pod's resourceClaims "
                       f"({serve.claims_problem}); it translates nothing until it can (it checks again periodically)"))
    node = spec.get("nodeName")
    if node:
        out.append(Why("spec.nodeName is set: no scheduler allocates its claims",
                       f"spec.nodeName is preset ({str(node)[:63]}): the pod bypasses kube-scheduler, the only "
                       "component that allocates ResourceClaims, so a translated pod would wait forever; let the "
                       "scheduler place it (node affinity on kubernetes.io/hostname) or keep it legacy"))
    scheduler = str(spec.get("schedulerName") or DEFAULT_SCHEDULER)
    if scheduler not in schedulers:
        out.append(Why(f"schedulerName {scheduler[:40]}: only kube-scheduler allocates claims",
                       f"schedulerName is {scheduler}: claims are allocated by kube-scheduler's DRA plugin, and this "
                       "scheduler may not do it, so the pod would wait forever. If it is a kube-scheduler profile "
                       f"(or allocates DRA claims), start the webhook with --translate-scheduler {scheduler}"))
    why = serve.nodes.share_reason(spec)  # asks_for_shares(spec), else the nodes' placement verdict
    if why is not None:
        out.append(Why(why[:80], f"{why}: wherever this pod can run, the device plugin gives it a MIG slice or a "
                                 "share of a GPU, while the bridge serves whole GPUs; keep this workload legacy "
                                 "or request a MIG or shared device through a ResourceClaim"))
    return out


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


def _map(req: cel.Requirement, driver: str, rule: gfd.FamilyRule | None) -> cel.Mapped:
    """The requirement's CEL under the cluster's GFD family rule; None: the nodes' GFD releases disagree, so a
    family selector cannot be translated exactly."""
    if rule is None and req.key == gfd.FAMILY:
        return cel.Mapped(None, reason="GFD releases on the nodes disagree on gpu.family")
    return cel.map_requirement(req, driver, rule or gfd.LATEST)


def _selectors(spec: Mapping[str, Any], driver: str, rule: gfd.FamilyRule | None = gfd.LATEST) -> _Selectors:
    """The device selector of a pod and what stays on it. A pod with only a nodeSelector of strings (the common
    case: every pod of a Deployment carries the same one) is answered from a cache keyed by that selector."""
    ns = spec.get("nodeSelector")
    if not spec.get("affinity") and (ns is None or type(ns) is dict):
        if not ns:
            return _node_selector_only((), driver, None if rule is None else rule._value_)
        for v in ns.values():
            if type(v) is not str:
                break
        else:
            return _node_selector_only(tuple(ns.items()), driver, None if rule is None else rule._value_)
    return _compute_selectors(spec, driver, rule)


@functools.lru_cache(maxsize=1024)
def _node_selector_only(items: tuple[tuple[str, str], ...], driver: str, rule: str | None) -> _Selectors:
    return _compute_selectors({"nodeSelector": dict(items)} if items else {}, driver,
                              None if rule is None else gfd.FamilyRule(rule))


def _compute_selectors(spec: Mapping[str, Any], driver: str, rule: gfd.FamilyRule | None) -> _Selectors:
    exprs: list[str] = []
    moved: list[str] = []
    warnings: list[str] = []
    new_ns: Obj | None = None
    ns = spec.get("nodeSelector") or {}
    if isinstance(ns, Mapping):
        kept = dict(ns)
        for key in sorted(k for k in ns if k in cel.DEVICE_LABELS):
            m = _map(cel.Requirement(key, "In", (str(ns[key]),)), driver, rule)
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
                m = _map(_requirement(e), driver, rule)
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
                parts = [_map(_requirement(e), driver, rule) for e in t.get("matchExpressions") or []]
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
                warnings.append("node affinity with several terms mixing GPU and other labels stays on the pod")
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
def template_name(count: int, device_class: str, expression: str, segments: tuple[int, ...] = ()) -> str:
    """Cached: a namespace's pods ask for a handful of (count, selector) pairs, and hashing costs microseconds.
    `segments` (a claim cut into requests for init containers) are part of the name only when there are several."""
    key: list[Any] = [device_class, expression] + ([list(segments)] if len(segments) > 1 else [])
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:8]
    return f"dra-bridge-gpu-{count}-{digest}"


def request_name(segments: tuple[int, ...], index: int) -> str:
    """`gpu` for a claim that is not cut, `gpu-<i>` for its i-th request otherwise."""
    return REQUEST_NAME if len(segments) <= 1 else f"{REQUEST_NAME}-{index}"


def claim_template(name: str, namespace: str, count: int, expression: str, facts: ClusterFacts,
                   segments: tuple[int, ...] = ()) -> Obj:
    """The ResourceClaimTemplate in the shape of the served resource.k8s.io version (v1beta1 puts deviceClassName
    and count on the request itself; v1beta2 and v1 nest them under `exactly`). `segments`: the request sizes a
    claim is cut into (default: one request for all `count` devices). Cached (a namespace's pods ask for a few
    templates, over and over): the same object is returned for the same arguments, so callers must not change it."""
    return _template(name, namespace, count, expression, facts.resource_version or "v1", facts.device_class, segments)


@functools.lru_cache(maxsize=4096)
def _template(name: str, namespace: str, count: int, expression: str, version: str, device_class: str,
              segments: tuple[int, ...]) -> Obj:
    """`claim_template`, cached on plain values (a dataclass argument would be hashed in Python on every call)."""
    segments = segments or (count,)
    requests: list[Obj] = []
    for i, n in enumerate(segments):
        exact: Obj = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": n}
        if expression:
            exact["selectors"] = [{"cel": {"expression": expression}}]
        rname = request_name(segments, i)
        requests.append({"name": rname, **exact} if version == "v1beta1" else {"name": rname, "exactly": exact})
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, COUNT_LABEL: str(count)}
    meta: Obj = {"name": name, "namespace": namespace, "labels": labels}
    if expression:
        meta["annotations"] = {SELECTOR_ANNOTATION: expression}
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaimTemplate",
        "metadata": meta,
        "spec": {"metadata": {"labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}},
                 "spec": {"devices": {"requests": requests}}},
    }


def _claim_name(container: str, taken: set[str]) -> str:
    name = f"gpu-{container}"
    if len(name) > 63 or name in taken:
        name = f"gpu-{container[:45]}-{hashlib.sha256(container.encode()).hexdigest()[:8]}"
    return name


def _annotation_ops(pod: Mapping[str, Any], values: Mapping[str, str]) -> list[Obj]:
    meta = pod.get("metadata") or _EMPTY
    if not isinstance(meta.get("annotations"), Mapping):
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(values)}]
    return [{"op": "add", "path": f"/metadata/annotations/{escape(k)}", "value": v} for k, v in values.items()]


_TRANSLATED_PATH = "/metadata/annotations/" + escape(TRANSLATED_ANNOTATION)
_DETAIL_PATH = "/metadata/annotations/" + escape(DETAIL_ANNOTATION)


def _record_ops(pod: Mapping[str, Any], target: str, detail: str) -> list[Obj]:
    """`_annotation_ops(pod, {TRANSLATED_ANNOTATION: target, DETAIL_ANNOTATION: detail})`, without building the
    paths on every review."""
    ann = (pod.get("metadata") or _EMPTY).get("annotations")
    if ann is not None and (type(ann) is dict or isinstance(ann, Mapping)):
        return [{"op": "add", "path": _TRANSLATED_PATH, "value": target},
                {"op": "add", "path": _DETAIL_PATH, "value": detail}]
    return [{"op": "add", "path": "/metadata/annotations", "value": {TRANSLATED_ANNOTATION: target,
                                                                      DETAIL_ANNOTATION: detail}}]


_compact = jsoncodec.dumps_sorted


def _remove_legacy(ops: list[Obj], res: Mapping[str, Any], base: str) -> None:
    for part in ("requests", "limits"):
        if LEGACY_RESOURCE in (res.get(part) or {}):
            ops.append({"op": "remove", "path": f"{base}/{part}/{_LEGACY_TOKEN}"})


def _claims_ops(spec: Mapping[str, Any], namespace: str, facts: ClusterFacts, plan: ClaimPlan, expression: str,
                ops: list[Obj], templates: list[Obj]) -> dict[str, str]:
    """Patch operations for the claims plan; returns pod claim name -> template name."""
    taken = {str(c.get("name")) for c in spec.get("resourceClaims") or [] if isinstance(c, Mapping)}
    names: list[str] = []
    for claim in plan.claims:
        name = _claim_name(claim.owner if claim.owner != OWNER_EXTRA else EXTRA_CLAIM, taken)
        taken.add(name)
        names.append(name)
    new_claims: list[Obj] = []
    seen_templates: set[str] = set()
    for claim, name in zip(plan.claims, names):
        tname = template_name(claim.count, facts.device_class, expression, claim.segments)
        if tname not in seen_templates:
            seen_templates.add(tname)
            templates.append(claim_template(tname, namespace, claim.count, expression, facts, claim.segments))
        new_claims.append({"name": name, "resourceClaimTemplateName": tname})
    for (kind, index), uses in plan.uses.items():
        lst = "containers" if kind == "app" else "initContainers"
        res = spec[lst][index].get("resources") or {}
        base = f"/spec/{lst}/{index}/resources"
        _remove_legacy(ops, res, base)
        refs: list[Obj] = []
        for use in uses:
            segs = plan.claims[use.claim].segments
            if use.requests:
                refs += [{"name": names[use.claim], "request": request_name(segs, i)} for i in use.requests]
            else:
                refs.append({"name": names[use.claim]})
        if isinstance(res.get("claims"), list):
            ops.extend({"op": "add", "path": f"{base}/claims/-", "value": r} for r in refs)
        else:
            ops.append({"op": "add", "path": f"{base}/claims", "value": refs})
    if isinstance(spec.get("resourceClaims"), list):
        ops.extend({"op": "add", "path": "/spec/resourceClaims/-", "value": c} for c in new_claims)
    else:
        ops.append({"op": "add", "path": "/spec/resourceClaims", "value": new_claims})
    return {c["name"]: c["resourceClaimTemplateName"] for c in new_claims}


def _simple_claims_ops(spec: Mapping[str, Any], namespace: str, facts: ClusterFacts, gpus: list[GpuContainer],
                       expression: str, ops: list[Obj], templates: list[Obj]) -> dict[str, str]:
    """`_claims_ops` for the common pod, whose GPU init containers (if any) are all sidecars: every GPU container its
    own claim, nothing borrowed or cut (what `plan_claims` gives such a pod, without building the plan). Every review
    of a new pod runs this: the paths and the (template name, template) pairs come from small caches."""
    existing = spec.get("resourceClaims")
    taken = {str(c.get("name")) for c in existing if isinstance(c, Mapping)} if existing else set()
    claims: dict[str, str] = {}
    new_claims: list[Obj] = []
    device_class, version = facts.device_class, facts.resource_version or "v1"
    for g in gpus:
        name = "gpu-" + g.name
        if len(name) > 63 or name in taken:
            name = _claim_name(g.name, taken)
        taken.add(name)
        tname, template = _named_template(g.count, device_class, expression, namespace, version)
        if tname not in claims.values():
            templates.append(template)
        claims[name] = tname
        new_claims.append({"name": name, "resourceClaimTemplateName": tname})
        remove_request, remove_limit, add_claims, append_claim = _container_paths(g.kind, g.index)
        if g.in_requests:
            ops.append({"op": "remove", "path": remove_request})
        ops.append({"op": "remove", "path": remove_limit})  # scan found it there
        res = spec[g.kind][g.index].get("resources") or _EMPTY
        if isinstance(res.get("claims"), list):
            ops.append({"op": "add", "path": append_claim, "value": {"name": name}})
        else:
            ops.append({"op": "add", "path": add_claims, "value": [{"name": name}]})
    if isinstance(existing, list):
        ops.extend({"op": "add", "path": "/spec/resourceClaims/-", "value": c} for c in new_claims)
    else:
        ops.append({"op": "add", "path": "/spec/resourceClaims", "value": new_claims})
    return claims


@functools.lru_cache(maxsize=256)
def _container_paths(kind: str, index: int) -> tuple[str, str, str, str]:
    """The patch paths of one container: remove the legacy request and limit, add the claims list, append to it."""
    base = f"/spec/{kind}/{index}/resources"
    return (f"{base}/requests/{_LEGACY_TOKEN}", f"{base}/limits/{_LEGACY_TOKEN}", f"{base}/claims",
            f"{base}/claims/-")


@functools.lru_cache(maxsize=4096)
def _named_template(count: int, device_class: str, expression: str, namespace: str,
                    version: str) -> tuple[str, Obj]:
    """`template_name` and `_template` of a one-request claim in one cached call (the same shared, unchanged
    objects those return)."""
    name = template_name(count, device_class, expression)
    return name, _template(name, namespace, count, expression, version, device_class, ())


_ASSUMED = ServeFacts()


def translate(pod: Mapping[str, Any], namespace: str, action: Action, target: Target, facts: ClusterFacts,
              serve: ServeFacts | None = None,
              schedulers: frozenset[str] = frozenset({DEFAULT_SCHEDULER})) -> Translation:
    """The translation of `pod` for `action` SHADOW or TRANSLATE. The caller has already applied the policy.
    `serve` None: a cluster that keeps claims and whose nodes are unknown (`ServeFacts()`)."""
    serve = serve if serve is not None else _ASSUMED
    gpus, whys = scan(pod)
    if not gpus and not whys:
        return Translation()
    spec = pod.get("spec") or {}
    if not whys:
        whys = serve_reasons(spec, facts, serve, schedulers)
    summary: Obj
    if whys:
        reasons = [w.detail for w in whys]
        summary = {"ok": False, "target": target._value_, "reasons": reasons}
        patch = _annotation_ops(pod, {SHADOW_ANNOTATION: _compact(summary)}) if action is SHADOW else []
        return Translation(tuple(patch), (), (), tuple(reasons), tuple(gpus), summary, tuple(w.short for w in whys),
                           target)

    borrowing = False  # ordinary (not sidecar) init containers with GPUs
    devices = 0
    containers: dict[str, int] = {}
    for g in gpus:
        if g.kind == "initContainers":
            containers["init:" + g.name] = g.count
            if not g.sidecar:
                borrowing = True
        else:
            containers[g.name] = g.count
        devices += g.count
    counts = [g.counted() for g in gpus] if borrowing else []  # start order, as scan walks them
    if borrowing:
        devices = devices_of(counts)
    used = target
    if target is EXTENDED and borrowing:
        used = CLAIMS  # see the module docstring: init containers keep the count only through claims
    used_value = used._value_
    ops: list[Obj] = []
    templates: list[Obj] = []
    warnings: list[str] = []
    summary = {"ok": True, "target": used_value, "devices": devices, "containers": containers}
    if used is not target:
        summary["note"] = "init containers with GPUs: translated with claims, which keep the device-plugin count"
    if used is EXTENDED:
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
        nodes = serve.nodes
        sel = _selectors(spec, facts.driver, nodes.family_rule if not nodes.family_problem else None)
        if sel.warnings:
            warnings.extend(sel.warnings)
        if borrowing:
            plan = plan_claims(counts)
            assert plan.devices == devices, (plan, devices)
            summary["claims"] = _claims_ops(spec, namespace, facts, plan, sel.expression, ops, templates)
        else:
            summary["claims"] = _simple_claims_ops(spec, namespace, facts, gpus, sel.expression, ops, templates)
        if sel.new_node_selector is not None:
            ops.append({"op": "replace", "path": "/spec/nodeSelector", "value": dict(sel.new_node_selector)}
                       if sel.new_node_selector else {"op": "remove", "path": "/spec/nodeSelector"})
        if sel.new_affinity is not None:
            ops.append({"op": "replace", "path": "/spec/affinity", "value": sel.new_affinity}
                       if sel.new_affinity else {"op": "remove", "path": "/spec/affinity"})
        if sel.expression:
            summary["selector"] = sel.expression
        if sel.moved:
            summary["moved"] = list(sel.moved)
    if warnings:
        summary["warnings"] = warnings

    if action is SHADOW:
        return Translation(tuple(_annotation_ops(pod, {SHADOW_ANNOTATION: _compact(summary)})), (), tuple(warnings),
                           (), tuple(gpus), summary, (), used)
    ops += _record_ops(pod, used_value, _compact(summary))
    return Translation(tuple(ops), tuple(templates), tuple(warnings), (), tuple(gpus), summary, (), used)
