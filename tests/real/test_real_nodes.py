"""The whole product on real nodes: real kubelets v1.37.2 with containerd and runc, GPU pods of both APIs in real
containers that see exactly the devices and driver files our CDI specs name (applied by containerd), and the
bridge's one-owner invariant checked from inside the containers and from the kubelets' PodResources."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from bridge.kube.api import NODES, PODS
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from bridge.sandbox.cluster.inspect import offered_twice, shared
from bridge.sandbox.real.binaries import NODE, Binaries
from tests.real.conftest import CONTROL_PLANE, require_binaries
from tests.real.realnodes import claim_template, create_pod, ensure_namespace, probe_log, probe_pod
from tests.sandbox_cluster import spec_for_tests

NODES_SPEC = (NodeSpec("node-0", "4xH100-80GB", split="2"), NodeSpec("node-1", "4xH100-80GB", split="2"))


@pytest.fixture(scope="module")
def cluster() -> Iterator[SandboxCluster]:
    require_binaries("1.37", CONTROL_PLANE + NODE + ("kubelet", "kubectl"))
    spec = spec_for_tests(NODES_SPEC, backend="real", version="1.37", real_kubelets=True, bridge=True,
                          node_status_frequency=2.0)
    with SandboxCluster(spec) as c:
        ensure_namespace(c, "legacy")
        ensure_namespace(c, "dra")
        c.api.create(c.api.resource_api().claim_templates, claim_template("one-gpu"), "dra")
        yield c


def _allocatable(cluster: SandboxCluster, node: str) -> str:
    return (cluster.api.get(NODES, node).get("status") or {}).get("allocatable", {}).get("nvidia.com/gpu", "")


def _published(cluster: SandboxCluster, node: str) -> int:
    slices = cluster.api.list(cluster.api.resource_api().slices, field_selector=f"spec.nodeName={node}")["items"]
    return sum(len(s["spec"].get("devices") or []) for s in slices)


def test_the_daemon_serves_the_split_to_the_real_kubelet_through_both_apis(cluster: SandboxCluster) -> None:
    """Split 2 of 4: the kubelet's allocatable nvidia.com/gpu is 2 and the ResourceSlice publishes the other 2
    (published once the Node's allocatable shows the smaller count: the move protocol's legacy -> DRA order)."""
    deadline = time.monotonic() + 60
    while (_allocatable(cluster, "node-0"), _published(cluster, "node-0")) != ("2", 2) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert (_allocatable(cluster, "node-0"), _published(cluster, "node-0")) == ("2", 2)


def test_a_legacy_pod_sees_exactly_its_gpu_and_the_driver_files(cluster: SandboxCluster) -> None:
    create_pod(cluster, "legacy", probe_pod("one", gpus=1, node="node-0"))
    cluster.wait_pod_phase("legacy", "one", "Running", timeout=120)
    seen = probe_log(cluster, "legacy", "one")
    assert len(seen.gpus) == 1, seen.devices
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm"} <= set(seen.devices)
    assert seen.env.get("NVIDIA_VISIBLE_DEVICES") == "void"
    assert any(f.endswith("libcuda.so.550.54.15") for f in seen.files), seen.files
    assert len(seen.smi) == 1, seen.smi


def test_a_dra_pod_sees_exactly_its_claimed_gpu(cluster: SandboxCluster) -> None:
    create_pod(cluster, "dra", probe_pod("claimer", claim_template="one-gpu", node="node-0"))
    cluster.wait_pod_phase("dra", "claimer", "Running", timeout=120)
    seen = probe_log(cluster, "dra", "claimer")
    assert len(seen.gpus) == 1, seen.devices
    assert seen.env.get("NVIDIA_VISIBLE_DEVICES") == "void"
    assert any(f.endswith("libnvidia-ml.so.550.54.15") for f in seen.files), seen.files
    legacy = probe_log(cluster, "legacy", "one")
    assert seen.gpus.isdisjoint(legacy.gpus), "one GPU in two pods' containers"
    assert shared(cluster) == {}
    assert offered_twice(cluster) == set()


def test_deleting_the_dra_pod_unprepares_its_claim_and_removes_its_cdi_spec(cluster: SandboxCluster) -> None:
    node = cluster.node("node-0")
    assert node.real is not None
    create_pod(cluster, "dra", probe_pod("short", claim_template="one-gpu", node="node-0"))
    cluster.wait_pod_phase("dra", "short", "Running", timeout=120)
    pod = cluster.api.get(PODS, "short", "dra")
    claim_name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = cluster.api.get(cluster.api.resource_api().claims, claim_name, "dra")
    uid = claim["metadata"]["uid"]
    assert any(uid in p.name for p in node.real.cdi_root.iterdir()), sorted(p.name for p in node.real.cdi_root.iterdir())
    cluster.api.delete(PODS, "short", "dra")
    cluster.wait_pod_phase("dra", "short", "Gone", timeout=120)
    deadline = time.monotonic() + 60
    while any(uid in p.name for p in node.real.cdi_root.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not any(uid in p.name for p in node.real.cdi_root.iterdir())
