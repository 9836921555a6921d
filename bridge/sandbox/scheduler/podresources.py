"""What a pod asks of a node: the scheduler's view of requests (pure).

Written from kubernetes/kubernetes staging/src/k8s.io/component-helpers/resource/helpers.go (`PodRequests`,
`AggregateContainerRequests`) and pkg/scheduler/framework/types.go (`NewResource`):
* regular containers add up;
* a restartable init container (sidecar, `restartPolicy: Always`) adds to the sum *and* keeps running while later
  init containers run, so each later init container needs its own request plus the sidecars started before it;
* the pod needs max(sum of regular containers and sidecars, the largest of those init-container steps), per
  resource;
* pod-level `spec.resources.requests` (cpu, memory) replace the container sum for those resources; `overhead` is
  added on top.
A container that sets a limit but no request gets the limit as request: the API server defaults it when the pod is
created (pkg/apis/core/v1/defaults.go `SetDefaults_Pod`); the scheduler sees the defaulted pod, so does this.
Quantities become integers as the scheduler stores them: CPU in millicores rounded up (`MilliValue`), everything
else in units rounded up (`Value`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from bridge.kvalues.quantity import QuantityError, parse_quantity

Obj = dict[str, Any]
Requests = dict[str, int]
POD_LEVEL_RESOURCES = ("cpu", "memory")


def to_units(resource: str, value: object) -> int:
    """A quantity as the scheduler's int64: millicores for cpu, whole units (rounded up) for everything else."""
    try:
        q = parse_quantity(value)
    except QuantityError:
        return 0
    return math.ceil(q * 1000) if resource == "cpu" else math.ceil(q)


def container_requests(container: Mapping[str, Any]) -> Requests:
    resources = container.get("resources") or {}
    requests = dict(resources.get("requests") or {})
    for name, limit in (resources.get("limits") or {}).items():
        requests.setdefault(name, limit)
    return {name: to_units(name, value) for name, value in requests.items()}


def _add(into: Requests, other: Mapping[str, int]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def _max(into: Requests, other: Mapping[str, int]) -> None:
    for k, v in other.items():
        if v > into.get(k, 0):
            into[k] = v


def _containers(spec: Mapping[str, Any], field: str) -> Iterable[Mapping[str, Any]]:
    return [c for c in spec.get(field) or [] if isinstance(c, dict)]


def pod_requests(pod: Mapping[str, Any]) -> Requests:
    spec = pod.get("spec") or {}
    reqs: Requests = {}
    for ctr in _containers(spec, "containers"):
        _add(reqs, container_requests(ctr))
    sidecars: Requests = {}
    init_max: Requests = {}
    for ctr in _containers(spec, "initContainers"):
        ctr_reqs = container_requests(ctr)
        if ctr.get("restartPolicy") == "Always":
            _add(reqs, ctr_reqs)
            _add(sidecars, ctr_reqs)
            step = dict(sidecars)
        else:
            step = dict(ctr_reqs)
            _add(step, sidecars)
        _max(init_max, step)
    _max(reqs, init_max)
    pod_level = ((spec.get("resources") or {}).get("requests") or {})
    for name in POD_LEVEL_RESOURCES:
        if name in pod_level:
            reqs[name] = to_units(name, pod_level[name])
    _add(reqs, {k: to_units(k, v) for k, v in (spec.get("overhead") or {}).items()})
    return reqs


def allocatable(node: Mapping[str, Any]) -> Requests:
    status = node.get("status") or {}
    return {k: to_units(k, v) for k, v in (status.get("allocatable") or {}).items()}


__all__ = ["allocatable", "container_requests", "pod_requests", "to_units"]
