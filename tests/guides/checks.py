"""What the guide tests read from the cluster to check a Verify section: who holds which GPU (from the kubelets'
PodResources and the claims, as `bridge.sandbox.cluster.inspect` does), the node daemons' split status, pods by API."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from bridge.kube.api import NODES, PODS, Obj
from bridge.sandbox.cluster.inspect import shared
from bridge.sandbox.kubelet.podresources import list_devices
from tests.guides.world import GuideWorld

GPU = "nvidia.com/gpu"
DRIVER = "gpu.dra-bridge.io"


def legacy_devices(world: GuideWorld, node: str) -> dict[str, list[str]]:
    """ns/pod -> the GPU UUIDs the kubelet assigned it through the device plugin, on `node`."""
    out: dict[str, list[str]] = defaultdict(list)
    for d in list_devices(world.cluster.node(node).kubelet.podresources_socket):
        if d.resource == GPU:
            out[f"{d.namespace}/{d.pod}"].append(d.device)
    return {k: sorted(v) for k, v in out.items()}


def dra_devices(world: GuideWorld, node: str) -> dict[str, list[str]]:
    """ns/pod -> pool/device of its prepared DRA claims on `node`."""
    out: dict[str, list[str]] = defaultdict(list)
    for d in list_devices(world.cluster.node(node).kubelet.podresources_socket):
        if d.resource == DRIVER:
            out[f"{d.namespace}/{d.pod}"].append(d.device)
    return {k: sorted(v) for k, v in out.items()}


def running_gpu_pods(world: GuideWorld, namespace: str | None = None) -> dict[str, Obj]:
    """ns/name -> pod, for Running pods of the teams asking for GPUs through either API."""
    out = {}
    for p in world.api.list(PODS, namespace)["items"]:
        meta = p["metadata"]
        if not meta["namespace"].startswith("team-") or meta.get("deletionTimestamp"):
            continue
        if (p.get("status") or {}).get("phase") == "Running":
            out[f"{meta['namespace']}/{meta['name']}"] = p
    return out


def api_of(pod: Obj) -> str:
    """"dra" when the pod gets its GPUs from claims (the webhook translated it), "legacy" when it asks
    nvidia.com/gpu, "" when neither."""
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return "dra"
    if GPU in json.dumps([c.get("resources") for c in spec.get("containers") or []]):
        return "legacy"
    return ""


def split_status(world: GuideWorld, node: str) -> dict[str, Any]:
    raw = (world.api.get(NODES, node)["metadata"].get("annotations") or {}).get("dra-bridge.io/split-status")
    assert raw, f"node {node} has no split status"
    status: dict[str, Any] = json.loads(raw)
    return status


def allocatable_gpus(world: GuideWorld, node: str) -> int:
    return int((world.api.get(NODES, node).get("status") or {}).get("allocatable", {}).get(GPU, "0"))


def slice_devices(world: GuideWorld, node: str) -> list[str]:
    api = world.api
    slices = api.list(api.resource_api().slices, field_selector=f"spec.nodeName={node}")["items"]
    return sorted(d["name"] for s in slices for d in s["spec"].get("devices") or [])


def no_gpu_shared(world: GuideWorld) -> None:
    both = shared(world.cluster)
    assert not both, f"GPUs with two holders: {both}"


def eventually(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Retry an assertion until it holds (the cluster converges on its own time); the last failure explains."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError as err:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: {err}") from err
        time.sleep(0.1)
