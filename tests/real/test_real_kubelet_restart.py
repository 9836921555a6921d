"""A real kubelet restarted while the node daemon is down (crashed, or its DaemonSet pod being replaced): the new
kubelet admits the node's pods again before any device plugin can have registered. A pod whose containers the
runtime still runs skips the device manager's checks while the kubelet's sources are not ready (devicemanager/
manager.go `devicesToAllocate`, "scenario 2: kubelet restart"), so the running legacy pod is kept, unlike after a
reboot (tests/real/test_real_node_reboot.py), where nothing runs and the same pod is refused. But an init container
that ran to completion is not running: a running pod whose init container had a GPU from the device plugin goes
through the checks, finds no healthy device, and is rejected and killed ("no healthy devices present"): upstream
behaviour (kubernetes/kubernetes#138446, open; #124345 closed), pinned. A DRA pod has nothing of the kind. The kubelet simulator plays all three since it models a
kubelet's stop and start (tests/sandbox/test_cluster_node_lifecycle.py runs the twin); this confirms it on the real
kubelets.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest

from bridge.kube.api import EVENTS, NODES, PODS
from bridge.sandbox.cluster import SandboxCluster
from tests.real.realnodes import BOTH_PODS, GPU_NODE, create_pod, probe_log, probe_pod

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

NAME = GPU_NODE


@pytest.fixture
def cluster(gpu_node: SandboxCluster) -> SandboxCluster:
    return gpu_node


def running_containers(cluster: SandboxCluster, namespace: str, pod: str) -> list[tuple[str, int]]:
    """(containerID, restartCount) of each running container: a restart or a rejection changes it."""
    status = cluster.api.get(PODS, pod, namespace)["status"]
    return [(s.get("containerID", ""), int(s.get("restartCount", 0))) for s in status.get("containerStatuses") or []
            if "running" in (s.get("state") or {})]


def ready_since(cluster: SandboxCluster, since: float) -> bool:
    """The Node is Ready with a heartbeat posted after `since` (wall clock): the new kubelet runs and reports."""
    node: dict[str, Any] = cluster.api.get(NODES, NAME)
    for c in node["status"].get("conditions") or []:
        if c["type"] == "Ready" and c["status"] == "True":
            return datetime.fromisoformat(c["lastHeartbeatTime"].replace("Z", "+00:00")).timestamp() >= since
    return False


def test_a_kubelet_restarted_while_the_device_plugin_is_down_keeps_its_running_gpu_pods_but_not_a_gpu_init_pod(
        cluster: SandboxCluster) -> None:
    create_pod(cluster, "legacy", probe_pod("init", gpus=1, init_gpus=1))  # the node's other legacy GPU
    cluster.wait_pod_phase("legacy", "init", "Running", timeout=120)
    before = {f"{ns}/{pod}": running_containers(cluster, ns, pod) for ns, pod in BOTH_PODS}
    assert all(before.values()), before
    gpus = {f"{ns}/{pod}": probe_log(cluster, ns, pod).gpus for ns, pod in BOTH_PODS}
    cluster.kill_daemon(NAME)  # both of the node's plugins gone, no socket cleaned up
    cluster.stop_kubelet(NAME)
    restarted = time.time()
    cluster.restart_kubelet(NAME, timeout=120)
    deadline = time.monotonic() + 60
    while not ready_since(cluster, restarted + 1):
        assert time.monotonic() < deadline, "the restarted kubelet did not report the Node Ready"
        time.sleep(0.5)
    time.sleep(5)  # its first pod syncs: a rejection or a restart would come now
    after = {f"{ns}/{pod}": running_containers(cluster, ns, pod) for ns, pod in BOTH_PODS}
    assert after == before
    rejected = [e["message"] for ns in ("legacy", "dra") for e in cluster.api.list(EVENTS, ns)["items"]
                if e.get("reason") == "UnexpectedAdmissionError"]
    assert rejected == ["Allocate failed due to no healthy devices present; cannot allocate unhealthy devices "
                        "nvidia.com/gpu, which is unexpected"]  # the init pod's, the one only
    deadline = time.monotonic() + 30  # the status manager writes the rejection a little after the Event
    while (status := cluster.api.get(PODS, "init", "legacy")["status"]).get("phase") == "Running":
        assert time.monotonic() < deadline, "the init pod's rejection did not reach its status"
        time.sleep(0.5)
    assert (status.get("phase"), status.get("reason")) == ("Failed", "UnexpectedAdmissionError")

    # the daemon back (its DaemonSet pod restarted): both APIs serve again, the running pods keep their GPUs
    cluster.restart_daemon(NAME, timeout=120)
    create_pod(cluster, "legacy", probe_pod("after-legacy", gpus=1))
    create_pod(cluster, "dra", probe_pod("after-dra", claim_template="one-gpu"))
    for ns, pod in (("legacy", "after-legacy"), ("dra", "after-dra")):
        cluster.wait_pod_phase(ns, pod, "Running", timeout=120)
    assert {f"{ns}/{pod}": probe_log(cluster, ns, pod).gpus for ns, pod in BOTH_PODS} == gpus
    new = [probe_log(cluster, ns, pod).gpus for ns, pod in (("legacy", "after-legacy"), ("dra", "after-dra"))]
    everyone = [next(iter(g)) for g in (*gpus.values(), *new)]
    assert len(set(everyone)) == 4, f"a GPU is in two pods: {gpus} {new}"
