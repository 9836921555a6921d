"""What one pod spec says about GPUs: requests per resource name, DRA claims, GFD-label selectors, device access
that bypasses any allocator, and the node filters it keeps once translated (`dra_placement`). Pure functions over
plain dicts.

How many devices of a resource a pod holds is the shared device-plugin arithmetic (`bridge.kvalues.podgpu`, which
the webhook uses too): max(app containers + sidecars, each ordinary init container + the sidecars started before
it). Extended resources must have requests == limits, so a value in either is taken (limits win when both are set
and differ, as the API server rejects that anyway).

**GPUs through DRA** (`dra_gpus`): a pod the webhook translated asks no `nvidia.com/gpu` any more. Its GPUs are
the devices of the bridge's DeviceClass its claims request, counted as `bridge controller` counts them
(`bridge.controller.demand.request_count`: `exactly.count` with `allocationMode: ExactCount`, default 1; v1beta1's
flat fields; the first `firstAvailable` alternative of the class), summed over the pod's claims (a pod-level claim
is allocated once, however many containers reference it: the webhook's claims plan gives the pod exactly its
device-plugin count, `bridge.kvalues.podgpu.plan_claims`), plus the DeviceClass's implicit extended-resource name
`deviceclass.resource.kubernetes.io/<class>` counted with the device-plugin arithmetic (KEP-5004: the scheduler
makes that claim). A claim is read from the ResourceClaim when it exists (`resourceClaimName`, or the generated
name in `status.resourceClaimStatuses`), else from its ResourceClaimTemplate. What cannot be counted (a template or
claim not in the input, `allocationMode: All`) is named in `DraGpus.unknown`, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from bridge.controller.demand import request_count
from bridge.kvalues import gfd, podgpu
from bridge.kvalues.placement import NONE as NO_CONSTRAINTS
from bridge.kvalues.placement import Constraints, constraints_of
from bridge.kvalues.quantity import quantity_int
from bridge.report.features import BRIDGE_CLASS, GPU, IMPLICIT_PREFIX

Obj = dict[str, Any]

GFD_PREFIX = "nvidia.com/gpu."  # nvidia.com/gpu.product, .memory, .family, .compute.major, .count, ...
DEV_NVIDIA = "/dev/nvidia"

# (key, operator, values) with operator as in NodeSelectorRequirement (In, NotIn, Exists, DoesNotExist, Gt, Lt).
Requirement = tuple[str, str, tuple[str, ...]]


VENDOR_PREFIX = "nvidia.com/"  # extended resources of NVIDIA's device plugin (gpu, mig-*, gpu.shared, ...)


def _is_gpu_name(name: str) -> bool:
    return name.startswith(VENDOR_PREFIX) or name.startswith(IMPLICIT_PREFIX)


def _container_gpu(c: Obj) -> dict[str, int]:
    res = c.get("resources")
    if not res:
        return {}
    out: dict[str, int] = {}
    for section in ("requests", "limits"):  # limits last: they win
        vals = res.get(section)
        if vals:
            for k, v in vals.items():
                if _is_gpu_name(k):
                    out[k] = quantity_int(v)
    return out


def effective_gpu(spec: Obj) -> dict[str, int]:
    """Devices the pod holds per GPU resource name (`bridge.kvalues.podgpu.pod_devices`)."""
    return podgpu.pod_devices_by_name(spec, _is_gpu_name)


# (namespace, name) -> object, for ResourceClaimTemplates and ResourceClaims.
ClaimObjects = Mapping[tuple[str, str], Obj]


@dataclass(frozen=True)
class DraGpus:
    """The bridge DeviceClass's devices one pod asks for through DRA (see the module docstring)."""

    count: int = 0
    selectors: tuple[str, ...] = ()  # CEL of those requests (the webhook's translated GFD selectors), distinct
    unknown: tuple[str, ...] = ()  # what could not be counted, in words


NO_DRA = DraGpus()


def _request_body(req: Obj, device_class: str) -> Obj | None:
    """The part of a claim request that names `device_class` (v1 `exactly`, v1beta1 flat, or the first matching
    `firstAvailable` alternative); None when it asks another class."""
    exact = req.get("exactly")
    if isinstance(exact, dict):
        return exact if exact.get("deviceClassName") == device_class else None
    for sub in req.get("firstAvailable") or ():
        if isinstance(sub, dict) and sub.get("deviceClassName") == device_class:
            return sub
    return req if req.get("deviceClassName") == device_class else None


def dra_gpus(spec: Obj, namespace: str = "", status: Obj | None = None, templates: ClaimObjects | None = None,
             claims: ClaimObjects | None = None, device_class: str = BRIDGE_CLASS) -> DraGpus:
    """GPUs the pod asks for through DRA (module docstring). `status`: the pod's status (generated claim names)."""
    count = podgpu.pod_devices(spec, IMPLICIT_PREFIX + device_class)
    refs = spec.get("resourceClaims") or ()
    if not refs:
        return DraGpus(count) if count else NO_DRA
    generated = {s.get("name"): s.get("resourceClaimName")
                 for s in (status or {}).get("resourceClaimStatuses") or () if isinstance(s, dict)}
    selectors: dict[str, None] = {}
    unknown: list[str] = []
    for ref in refs:
        if not isinstance(ref, dict):
            continue
        name = str(ref.get("name", ""))
        claim_name = ref.get("resourceClaimName") or generated.get(name)
        claim_spec: Obj | None = None
        if claim_name:
            claim = (claims or {}).get((namespace, str(claim_name)))
            if claim is not None:
                claim_spec = claim.get("spec") or {}
        template_name = ref.get("resourceClaimTemplateName")
        if claim_spec is None and template_name:
            template = (templates or {}).get((namespace, str(template_name)))
            if template is not None:
                claim_spec = ((template.get("spec") or {}).get("spec")) or {}
        if claim_spec is None:
            what = f"ResourceClaim {claim_name}" if claim_name and not template_name else \
                f"ResourceClaimTemplate {template_name}"
            unknown.append(f"claim {name}: {what} is not in the input")
            continue
        for req in ((claim_spec.get("devices") or {}).get("requests") or ()):
            if not isinstance(req, dict):
                continue
            n = request_count(req, device_class)
            if n is None:
                unknown.append(f"claim {name} request {req.get('name', '')}: allocationMode All has no count")
                continue
            if not n:
                continue
            count += n
            body = _request_body(req, device_class) or {}
            for sel in body.get("selectors") or ():
                expr = str(((sel or {}).get("cel") or {}).get("expression", "")).strip() if isinstance(sel, dict) else ""
                if expr:
                    selectors[expr] = None
    return DraGpus(count, tuple(selectors), tuple(unknown))


@dataclass(frozen=True)
class SpecInfo:
    gpu: dict[str, int]  # per pod, by resource name as the spec writes it (the implicit DRA name included)
    uses_claims: bool
    gfd_terms: tuple[tuple[Requirement, ...], ...]  # OR of ANDed requirements on GFD labels; () when none
    dev_hostpaths: tuple[str, ...]
    privileged: tuple[str, ...]  # container names
    visible_devices_env: tuple[str, ...]  # container names setting NVIDIA_VISIBLE_DEVICES by hand
    priority_class: str
    gpu_containers: int  # containers (incl. init) that request any GPU resource
    max_container_gpus: int = 0  # the largest nvidia.com/gpu request of one container (the webhook's claim size)
    gpu_counts: tuple[podgpu.ContainerCount, ...] = ()  # nvidia.com/gpu per container, start order
    scheduler_name: str = ""  # spec.schedulerName ("" = default-scheduler)
    node_name: str = ""  # spec.nodeName (in a template: preset, the scheduler is bypassed)
    dra: DraGpus = field(default=NO_DRA)  # the bridge DeviceClass's devices asked through DRA
    placement: Constraints = NO_CONSTRAINTS  # the node filters the pod keeps once translated (`dra_placement`)
    # GPU values that are not a valid count ("1e400": out of range; bridge.kvalues.podgpu.count_problems), counted
    # as 0 GPUs above and named here, one line each
    invalid_counts: tuple[str, ...] = ()

    @property
    def legacy_gpus(self) -> int:
        """`nvidia.com/gpu` per pod: GPUs through the device plugin."""
        return self.gpu.get(GPU, 0)

    @property
    def gpus(self) -> int:
        """GPUs per pod through either API (the webhook's translation keeps the count)."""
        return self.gpu.get(GPU, 0) + self.dra.count

    @property
    def per_pod(self) -> dict[str, int]:
        """Devices per pod by resource name, GPUs through either API under `nvidia.com/gpu` (the bridge class's
        implicit extended-resource name folded in): what the workload table shows."""
        out = {k: v for k, v in self.gpu.items() if k != IMPLICIT_PREFIX + BRIDGE_CLASS}
        if self.gpus:
            out[GPU] = self.gpus
        return out

    @property
    def api(self) -> str:
        """Which API this spec asks devices through: legacy (any `nvidia.com/*` resource: the device plugin), dra
        (the bridge class), both, or "" (neither)."""
        legacy = any(v > 0 for k, v in self.gpu.items() if k.startswith(VENDOR_PREFIX))
        # Claims that cannot be read on a spec asking nothing of the device plugin: DRA, count unknown.
        dra = self.dra.count > 0 or (bool(self.dra.unknown) and not legacy)
        return "both" if legacy and dra else "legacy" if legacy else "dra" if dra else ""

    @property
    def relevant(self) -> bool:
        return bool(self.gpu or self.uses_claims or self.gfd_terms or self.dev_hostpaths or self.visible_devices_env
                    or self.invalid_counts)


def _gfd_terms(spec: Obj) -> tuple[tuple[Requirement, ...], ...]:
    base: list[Requirement] = [
        (k, "In", (str(v),)) for k, v in (spec.get("nodeSelector") or {}).items() if k.startswith(GFD_PREFIX)
    ]
    terms: list[tuple[Requirement, ...]] = []
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or ():
        reqs = [
            (e["key"], e.get("operator", "In"), tuple(str(v) for v in e.get("values") or ()))
            for e in term.get("matchExpressions") or ()
            if str(e.get("key", "")).startswith(GFD_PREFIX)
        ]
        if reqs:
            terms.append(tuple(base + reqs))
    if not terms and base:
        terms.append(tuple(base))
    return tuple(terms)


def analyse(spec: Obj, namespace: str = "", status: Obj | None = None, templates: ClaimObjects | None = None,
            claims: ClaimObjects | None = None) -> SpecInfo:
    """What `spec` says about GPUs; `namespace`, `status` (a pod's) and the claim objects let DRA requests be
    counted (`dra_gpus`)."""
    containers = list(spec.get("containers") or ()) + list(spec.get("initContainers") or ())
    dev_paths = tuple(
        sorted(
            {
                str((v.get("hostPath") or {}).get("path", ""))
                for v in spec.get("volumes") or ()
                if str((v.get("hostPath") or {}).get("path", "")).startswith(DEV_NVIDIA)
            }
        )
    )
    privileged = tuple(c.get("name", "") for c in containers if (c.get("securityContext") or {}).get("privileged"))
    env_set = tuple(
        c.get("name", "")
        for c in containers
        if any(e.get("name") == "NVIDIA_VISIBLE_DEVICES" for e in c.get("env") or ())
    )
    uses_claims = bool(spec.get("resourceClaims")) or any((c.get("resources") or {}).get("claims") for c in containers)
    return SpecInfo(
        gpu=effective_gpu(spec),
        uses_claims=uses_claims,
        gfd_terms=_gfd_terms(spec),
        dev_hostpaths=dev_paths,
        privileged=privileged,
        visible_devices_env=env_set,
        priority_class=str(spec.get("priorityClassName") or ""),
        gpu_containers=sum(1 for c in containers if _container_gpu(c)),
        max_container_gpus=max((_container_gpu(c).get(GPU, 0) for c in containers), default=0),
        gpu_counts=podgpu.containers(spec, GPU) if spec.get("initContainers") else (),
        scheduler_name=str(spec.get("schedulerName") or ""),
        node_name=str(spec.get("nodeName") or ""),
        dra=dra_gpus(spec, namespace, status, templates, claims) if uses_claims or _asks_implicit(spec) else NO_DRA,
        placement=dra_placement(spec),
        invalid_counts=_invalid_counts(containers, spec),
    )


def dra_placement(spec: Obj) -> Constraints:
    """The scheduler's node filters a pod keeps once the webhook translated it (`bridge.kvalues.placement`): its node
    selector, required node affinity and tolerations, without the GPU Feature Discovery device labels
    (`bridge.kvalues.gfd.DEVICE_LABELS`), which the translation moves into the claim's CEL selector as the webhook
    does (bridge/webhook/translate.py): from the node selector, from a single affinity term, and from several terms
    only when every one of them selects device labels alone (several terms mixing other labels stay whole). A pod
    already translated has nothing left to move, so this is its own filters."""
    selector, affinity, tolerations = spec.get("nodeSelector"), spec.get("affinity"), spec.get("tolerations")
    if not selector and not affinity and not tolerations:
        return NO_CONSTRAINTS  # the common pod: nothing keeps it off a node but taints
    key = repr((selector, affinity, tolerations))  # the pods of a workload (and most workloads) share one
    hit = _PLACEMENTS.get(key)
    if hit is None:
        if len(_PLACEMENTS) >= 4096:
            _PLACEMENTS.clear()
        hit = _PLACEMENTS[key] = _dra_placement(spec)
    return hit


_PLACEMENTS: dict[str, Constraints] = {}


def _dra_placement(spec: Obj) -> Constraints:
    c = constraints_of(spec)
    selector = tuple((k, v) for k, v in c.node_selector if k not in gfd.DEVICE_LABELS)
    terms = c.terms
    stripped = tuple(replace(t, expressions=tuple(r for r in t.expressions if r.key not in gfd.DEVICE_LABELS))
                     for t in terms)
    device_only = [t.expressions != s.expressions and not s.expressions and not s.fields for t, s in zip(terms, stripped)]
    if len(terms) == 1:
        terms = () if device_only[0] else stripped
    elif terms and all(device_only):
        terms = ()
    if selector == c.node_selector and terms == c.terms:
        return c
    return Constraints(selector, terms, c.tolerations)


def _invalid_counts(containers: list[Obj], spec: Obj) -> tuple[str, ...]:
    names = {k for c in containers for part in ("limits", "requests")
             for k in (((c.get("resources") or {}).get(part)) or {}) if _is_gpu_name(k)}
    return tuple(p for name in sorted(names) for p in podgpu.count_problems(spec, name))


def _asks_implicit(spec: Obj) -> bool:
    return any(str(k).startswith(IMPLICIT_PREFIX)
               for kind in ("containers", "initContainers") for c in spec.get(kind) or ()
               for part in ("limits", "requests") for k in (((c.get("resources") or {}).get(part)) or {}))


OPT_OUT_ANNOTATION = "dra-bridge.io/translate"  # "false" keeps a pod on the device plugin (bridge/webhook/policy.py)


def opted_out(metadata: Obj | None) -> bool:
    """Whether pod metadata opts the pod out of translation, as the webhook reads it (value "false", any case)."""
    annotations = (metadata or {}).get("annotations") or {}
    return isinstance(annotations, dict) and str(annotations.get(OPT_OUT_ANNOTATION, "")).lower() == "false"


def template_metadata(kind: str, obj: Obj) -> Obj | None:
    """The pod template's metadata of a controller (CronJob: its job template's)."""
    spec = obj.get("spec") or {}
    if kind == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    tmpl = spec.get("template")
    return (tmpl.get("metadata") or {}) if isinstance(tmpl, dict) else None


def template_spec(kind: str, obj: Obj) -> Obj | None:
    spec = obj.get("spec") or {}
    if kind == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    tmpl = spec.get("template")
    if isinstance(tmpl, dict):
        return tmpl.get("spec") or {}
    return None


def desired_replicas(kind: str, obj: Obj) -> int | None:
    spec = obj.get("spec") or {}
    if kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        r = spec.get("replicas")
        return 1 if r is None else int(r)
    if kind == "Job":
        status = obj.get("status") or {}
        if status.get("completionTime") or any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in status.get("conditions") or ()
        ):
            return 0  # a finished Job holds no GPUs
        p = spec.get("parallelism")
        return 1 if p is None else int(p)
    if kind == "CronJob":
        p = (((spec.get("jobTemplate") or {}).get("spec")) or {}).get("parallelism")
        return 1 if p is None else int(p)
    if kind == "DaemonSet":
        d = (obj.get("status") or {}).get("desiredNumberScheduled")
        return None if d is None else int(d)
    return None
