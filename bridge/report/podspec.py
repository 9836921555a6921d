"""What one pod spec says about GPUs: requests per resource name, DRA claims, GFD-label selectors, device access
that bypasses any allocator. Pure functions over plain dicts.

How many devices of a resource a pod holds is the shared device-plugin arithmetic (`bridge.kvalues.podgpu`, which
the webhook uses too): max(app containers + sidecars, each ordinary init container + the sidecars started before
it). Extended resources must have requests == limits, so a value in either is taken (limits win when both are set
and differ, as the API server rejects that anyway).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bridge.kvalues import podgpu
from bridge.kvalues.quantity import quantity_int
from bridge.report.features import GPU, IMPLICIT_PREFIX

Obj = dict[str, Any]

GFD_PREFIX = "nvidia.com/gpu."  # nvidia.com/gpu.product, .memory, .family, .compute.major, .count, ...
DEV_NVIDIA = "/dev/nvidia"

# (key, operator, values) with operator as in NodeSelectorRequirement (In, NotIn, Exists, DoesNotExist, Gt, Lt).
Requirement = tuple[str, str, tuple[str, ...]]


def _is_gpu_name(name: str) -> bool:
    return name.startswith("nvidia.com/") or name.startswith(IMPLICIT_PREFIX)


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


@dataclass(frozen=True)
class SpecInfo:
    gpu: dict[str, int]  # per pod
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

    @property
    def relevant(self) -> bool:
        return bool(self.gpu or self.uses_claims or self.gfd_terms or self.dev_hostpaths or self.visible_devices_env)


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


def analyse(spec: Obj) -> SpecInfo:
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
    )


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
