"""How the demo reads the cluster back (pure parts): which API a pod uses, and what counts as disturbing a pod."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.sandbox.demo.observe import PodRecord, differences, pod_api, record_pod


def pod(resources: dict[str, Any] | None = None, claims: list[dict[str, str]] | None = None,
        init: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": resources or {}}]}
    if claims:
        spec["resourceClaims"] = claims
    if init:
        spec["initContainers"] = [{"name": "init", "resources": init}]
    return {"metadata": {"name": "p", "namespace": "n", "uid": "u1"}, "spec": spec}


@pytest.mark.parametrize(("p", "api"), [
    (pod({"limits": {"nvidia.com/gpu": "2"}}), "legacy"),
    (pod({"requests": {"nvidia.com/gpu": "1"}}), "legacy"),
    (pod(init={"limits": {"nvidia.com/gpu": "1"}}), "legacy"),
    (pod({"claims": [{"name": "gpu"}]}, claims=[{"name": "gpu", "resourceClaimTemplateName": "t"}]), "dra"),
    (pod({"limits": {"deviceclass.resource.kubernetes.io/gpu.dra-bridge.io": "1"}}), "dra"),
    (pod({"limits": {"cpu": "1"}}), None),
])
def test_a_pod_uses_the_api_its_spec_asks_for(p: dict[str, Any], api: str | None) -> None:
    assert pod_api(p) == api


def running(uid: str = "u1", node: str = "n1", restarts: int = 0, started: str = "t0") -> dict[str, Any]:
    return {"metadata": {"uid": uid}, "spec": {"nodeName": node},
            "status": {"containerStatuses": [{"restartCount": restarts, "state": {"running": {"startedAt": started}}}]}}


GPUS = {("n1", "GPU-a"), ("n1", "GPU-b")}


def test_a_pod_left_alone_shows_no_difference() -> None:
    assert differences(record_pod(running(), GPUS), record_pod(running(), set(GPUS))) == []


@pytest.mark.parametrize(("after", "gpus", "said"), [
    (running(uid="u2"), GPUS, "UID u1 -> u2 (recreated)"),
    (running(node="n2"), GPUS, "node n1 -> n2"),
    (running(restarts=1), GPUS, "restarted 1 time(s)"),
    (running(started="t1"), GPUS, "container start time t0 -> t1"),
    (running(), {("n1", "GPU-a"), ("n1", "GPU-c")}, "GPUs ['GPU-a', 'GPU-b'] -> ['GPU-a', 'GPU-c']"),
])
def test_every_way_of_disturbing_a_pod_is_named(after: dict[str, Any], gpus: set[tuple[str, str]], said: str) -> None:
    before: PodRecord = record_pod(running(), GPUS)
    assert differences(before, record_pod(after, gpus)) == [said]
