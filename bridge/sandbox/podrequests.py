"""A pod's effective resource requests, as the scheduler and the kubelet compute them (pure).

Written from kubernetes/kubernetes staging/src/k8s.io/component-helpers/resource/helpers.go (`PodRequests`,
`AggregateContainerRequests`): the regular containers are summed; each restartable init container (sidecar) adds
to that sum and keeps running, so it also adds to every init container started after it; an ordinary init
container needs its own request plus the sidecars started before it; the pod needs the maximum of the sum and of
each init container's need; `spec.overhead` is added. Requests default to limits for a resource that has only a
limit (the API server's defaulting, pkg/apis/core/v1/defaults.go `SetDefaults_Pod`), so either is read.

Shared by the kubelet simulator's admission and the scheduler stand-in.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from bridge.kvalues.quantity import QuantityError, parse_quantity

Obj = dict[str, Any]
Requests = dict[str, Fraction]


def container_requests(container: Mapping[str, Any]) -> Requests:
    res = container.get("resources") or {}
    out: Requests = {}
    for section in ("limits", "requests"):  # requests last: they win where both are set
        for name, value in (res.get(section) or {}).items():
            try:
                out[name] = parse_quantity(value)
            except QuantityError:
                continue  # the API server rejects such a pod; nothing to count
    return out


def _add(into: Requests, more: Mapping[str, Fraction]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, Fraction(0)) + v


def _max(into: Requests, other: Mapping[str, Fraction]) -> None:
    for k, v in other.items():
        if v > into.get(k, Fraction(0)):
            into[k] = v


def pod_requests(pod: Mapping[str, Any]) -> Requests:
    spec = pod.get("spec") or {}
    total: Requests = {}
    for c in spec.get("containers") or []:
        _add(total, container_requests(c))
    sidecars: Requests = {}
    init_need: Requests = {}
    for c in spec.get("initContainers") or []:
        reqs = container_requests(c)
        if c.get("restartPolicy") == "Always":
            _add(total, reqs)
            _add(sidecars, reqs)
            need = dict(sidecars)
        else:
            need = dict(reqs)
            _add(need, sidecars)
        _max(init_need, need)
    _max(total, init_need)
    for name, value in (spec.get("overhead") or {}).items():
        try:
            _add(total, {name: parse_quantity(value)})
        except QuantityError:
            continue
    return {k: v for k, v in total.items() if v != 0}
