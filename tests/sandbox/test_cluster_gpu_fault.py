"""A GPU fault on a sandbox cluster reaches the pods that hold the GPU, through either API, as on a real 1.37 node.

`SandboxCluster.gpu_fault` writes the node daemon's `--simulated-faults` file; the real `bridge node` reads it as
it reads NVML's XID events, marks the GPU unhealthy in its ListAndWatch update and its NodeWatchResources stream,
and the kubelet (simulator, ResourceHealthStatus on from 1.36) writes it into each holder's
`allocatedResourcesStatus`. tests/real/test_kubelet_differential.py runs the same fault on a real kubelet.
"""

from __future__ import annotations

from typing import Any

import pytest

from bridge.kube import NODES, PODS
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from tests.polling import wait_until
from tests.sandbox_cluster import (
    NO_HEALTHY_GPU_1_37,
    create_gpu_template,
    create_namespaces,
    dra_gpu_pod,
    legacy_gpu_pod,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NODE = "n1"


def _one_node(sandbox_cluster: Any) -> SandboxCluster:
    """A 1.37 cluster of one node with 2 GPUs, one per side, and the namespace `team` with a one-GPU template."""
    cluster: SandboxCluster = sandbox_cluster((NodeSpec(NODE, "2xH100-80GB", split="1"),), version="1.37",
                                              bridge=True)
    cluster.wait_daemons_settled(60)
    create_namespaces(cluster.api, "team")
    create_gpu_template(cluster.api, "team")
    return cluster


def _health(cluster: SandboxCluster, name: str) -> list[tuple[str, str, str]]:
    pod = cluster.pod("team", name) or {}
    (main,) = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return [(e["name"], r["health"], r.get("message", "")) for e in main.get("allocatedResourcesStatus") or []
            for r in e["resources"]]


def test_an_xid_on_the_gpus_of_a_legacy_and_a_dra_pod_shows_unhealthy_in_both_pods_status(
        sandbox_cluster: Any) -> None:
    cluster = _one_node(sandbox_cluster)
    api = cluster.api
    api.create(PODS, legacy_gpu_pod("legacy", "team"), "team")
    api.create(PODS, dra_gpu_pod("dra", "team"), "team")
    for name in ("legacy", "dra"):
        cluster.wait_pod_phase("team", name, "Running", 60)
    assert _health(cluster, "legacy") == [("nvidia.com/gpu", "Healthy", "")]
    assert _health(cluster, "dra") == [("claim:gpu", "Healthy", "")]

    for minor in (0, 1):  # the node's two GPUs: one on each side
        cluster.gpu_fault(NODE, minor, xid=79)
    wait_until(lambda: _health(cluster, "legacy") == [("nvidia.com/gpu", "Unhealthy", "")], 30,
               "the legacy pod's GPU unhealthy in its status")
    ((name, health, message),) = wait_until(
        lambda: (h := _health(cluster, "dra"))[0][1] == "Unhealthy" and h, 30, "the DRA pod's GPU unhealthy")
    assert name == "claim:gpu" and health == "Unhealthy" and "XID 79" in message, message

    cluster.gpu_fault(NODE, 1, healthy=True, reason="replaced")
    cluster.gpu_fault(NODE, 0, healthy=True, reason="replaced")
    wait_until(lambda: _health(cluster, "legacy") == [("nvidia.com/gpu", "Healthy", "")]
               and [h[1] for h in _health(cluster, "dra")] == ["Healthy"], 30, "both GPUs healthy again")


def test_with_every_gpu_failed_the_scheduler_stand_in_refuses_both_pods_in_the_real_schedulers_words(
        sandbox_cluster: Any) -> None:
    """tests/real/test_real_gpu_health.py on the stand-ins: the same refusals, word for word, as kube-scheduler
    v1.37.2 wrote them (a request over the node's whole allocatable is unresolvable; DynamicResources' PostFilter
    gives no reason in 1.37), and both pods run once the GPUs recover."""
    cluster = _one_node(sandbox_cluster)
    api = cluster.api
    for minor in (0, 1):
        cluster.gpu_fault(NODE, minor, xid=79)

    def offered() -> tuple[str, list[bool]]:
        allocatable = (api.get(NODES, NODE).get("status") or {}).get("allocatable", {}).get("nvidia.com/gpu", "")
        slices = api.list(api.resource_api().slices, field_selector=f"spec.nodeName={NODE}")["items"]
        return allocatable, [bool(d.get("taints")) for s in slices for d in s["spec"].get("devices") or []]

    wait_until(lambda: offered() == ("0", [True]), 30, "allocatable 0 and the DRA GPU tainted")
    api.create(PODS, legacy_gpu_pod("legacy", "team"), "team")
    api.create(PODS, dra_gpu_pod("dra", "team"), "team")
    for name in ("legacy", "dra"):
        def refused() -> str | None:
            conditions = ((cluster.pod("team", name) or {}).get("status") or {}).get("conditions") or []
            return next((c.get("message") for c in conditions
                         if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"), None)

        assert wait_until(refused, 30, f"the {name} pod refused") == NO_HEALTHY_GPU_1_37[name]
    for minor in (0, 1):
        cluster.gpu_fault(NODE, minor, healthy=True, reason="replaced")
    for name in ("legacy", "dra"):
        cluster.wait_pod_phase("team", name, "Running", 60)
