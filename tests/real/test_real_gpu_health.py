"""A failed GPU is never handed out through either API, as the real components decide it: a real node (kubelet
v1.37.2, containerd) with 2 simulated GPUs, one on each side, and the real scheduler and controllers.

Both GPUs fail (XID 79, through the daemon's `--simulated-faults` file, as NVML would report it). The daemon tells
the kubelet through ListAndWatch (the legacy GPU Unhealthy: the Node's allocatable `nvidia.com/gpu` drops to 0) and
the scheduler through the ResourceSlice (the DRA GPU published with a NoSchedule taint: DRADeviceTaints is GA in
1.37). A legacy pod and a DRA pod then stay Pending, each marked Unschedulable by the real kube-scheduler. The GPUs
recover: both pods run, each on its own side. No GPU is ever held twice or offered to both APIs.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bridge.dra.slices import device_has_taints
from bridge.kube.api import NODES
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from bridge.sandbox.cluster.inspect import SideWatch
from bridge.sandbox.real.binaries import NODE
from tests.polling import wait_until
from tests.real.conftest import CONTROL_PLANE, REAL_LINE, require_binaries
from tests.real.realnodes import claim_template, create_pod, ensure_namespace, probe_pod
from tests.sandbox_cluster import NO_HEALTHY_GPU_1_37, spec_for_tests

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

NAME = "gpu-node"
XID = 79  # "GPU has fallen off the bus": not in NVIDIA's ignore list


@pytest.fixture(scope="module")
def cluster() -> Iterator[SandboxCluster]:
    require_binaries(REAL_LINE, CONTROL_PLANE + NODE + ("kubelet", "kubectl"))
    spec = spec_for_tests((NodeSpec(NAME, "2xH100-80GB", split="1"),), backend="real", version=REAL_LINE,
                          real_kubelets=True, bridge=True, node_status_frequency=2.0)
    with SandboxCluster(spec).start(timeout=300) as c:
        ensure_namespace(c, "team")
        c.api.create(c.api.resource_api().claim_templates, claim_template("one-gpu"), "team")
        yield c


def _offered(cluster: SandboxCluster) -> tuple[str, list[bool]]:
    """(the Node's allocatable nvidia.com/gpu, whether each published DRA device is tainted)."""
    allocatable = (cluster.api.get(NODES, NAME).get("status") or {}).get("allocatable", {}).get("nvidia.com/gpu", "")
    slices = cluster.api.list(cluster.api.resource_api().slices, field_selector=f"spec.nodeName={NAME}")["items"]
    return allocatable, [device_has_taints(d) for s in slices for d in s["spec"].get("devices") or []]


def _unschedulable(cluster: SandboxCluster, name: str) -> str | None:
    """The kube-scheduler's message when it marked the pod Unschedulable, else None."""
    conditions = ((cluster.pod("team", name) or {}).get("status") or {}).get("conditions") or []
    return next((c.get("message", "") for c in conditions
                 if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"), None)


def test_failed_gpus_are_handed_out_through_neither_api_until_they_recover(cluster: SandboxCluster) -> None:
    wait_until(lambda: _offered(cluster) == ("1", [False]), 60, "the split offered: 1 GPU per side, healthy")
    with SideWatch(cluster) as watch:
        for minor in (0, 1):
            cluster.gpu_fault(NAME, minor, xid=XID)
        wait_until(lambda: _offered(cluster) == ("0", [True]), 60,
                   "the kubelet's allocatable at 0 and the DRA GPU tainted")
        create_pod(cluster, "team", probe_pod("legacy", gpus=1, node=NAME))
        create_pod(cluster, "team", probe_pod("dra", claim_template="one-gpu", node=NAME))
        for name in ("legacy", "dra"):
            message = wait_until(lambda: _unschedulable(cluster, name), 60, f"the scheduler to refuse the {name} pod")
            assert message == NO_HEALTHY_GPU_1_37[name]
        for minor in (0, 1):
            cluster.gpu_fault(NAME, minor, healthy=True, reason="replaced")
        for name in ("legacy", "dra"):
            cluster.wait_pod_phase("team", name, "Running", timeout=120)
        assert _offered(cluster) == ("1", [False])
    assert watch.samples.clean, watch.samples.describe()
