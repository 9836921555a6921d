"""A deleted legacy pod keeps its GPU until its containers have stopped, and the split waits for that.

The real kubelet stops a deleted pod's containers within its grace period (SIGTERM, then SIGKILL at the end of it),
and all that time the pod is active: PodResources lists it with its GPU, the device manager keeps the GPU
allocated. A training job saving a checkpoint takes seconds to exit; a container whose PID 1 has no SIGTERM handler
takes the whole grace period (30 s by default). The kubelet simulator plays that
(`sandbox.dra-bridge.io/stop-seconds`, `bridge.sandbox.kubelet.pods`); before it did, a deleted pod freed its GPU at
once and no test here saw the window.

On a sandbox cluster with one node of one GPU and the real `bridge node`: a legacy job holds the GPU and needs 4 s to
stop; the split asks the GPU for DRA and a DRA pod waits for it; the job is deleted. The GPU goes to the DRA pod
only after the job's container has exited: the DRA pod never runs while the job does, the GPU is never held by both
or offered through both APIs, and the DRA pod's prepare is never refused (nothing offered it the GPU early).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from bridge.kube import EVENTS, NODES, PODS
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from bridge.sandbox.cluster.inspect import SideWatch
from bridge.sandbox.kubelet import STOP_SECONDS_ANNOTATION
from tests.polling import wait_until
from tests.sandbox_cluster import create_gpu_template, create_namespaces, dra_gpu_pod, legacy_gpu_pod

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NODE = "n1"
STOP_S = 4.0  # the legacy job's time to exit after SIGTERM, well inside its 30 s grace period


def _phase(cluster: SandboxCluster, namespace: str, name: str) -> str | None:
    pod = cluster.pod(namespace, name)
    return None if pod is None else (pod.get("status") or {}).get("phase")


def test_a_gpu_moves_to_dra_only_after_the_deleted_legacy_pods_container_has_stopped(sandbox_cluster: Any) -> None:
    cluster: SandboxCluster = sandbox_cluster((NodeSpec(NODE, "1xH100-80GB", split="0"),), bridge=True)
    api = cluster.api
    cluster.wait_daemons_settled(60)
    create_namespaces(api, "dra", "legacy")
    create_gpu_template(api, "dra")
    api.create(PODS, legacy_gpu_pod("job", "legacy", {STOP_SECONDS_ANNOTATION: str(STOP_S)}), "legacy")
    cluster.wait_pod_phase("legacy", "job", "Running", 30)

    both, stop = [], threading.Event()

    def sample() -> None:  # the two pods must never run at once: there is one GPU
        while not stop.wait(0.1):
            if _phase(cluster, "dra", "trainer") == "Running" and _phase(cluster, "legacy", "job") == "Running":
                both.append(time.monotonic())

    sampler = threading.Thread(target=sample, daemon=True)
    with SideWatch(cluster) as watch:
        sampler.start()
        api.patch(NODES, NODE, {"metadata": {"annotations": {"dra-bridge.io/dra-devices": "1"}}})
        api.create(PODS, dra_gpu_pod("trainer", "dra"), "dra")
        time.sleep(2)
        assert _phase(cluster, "dra", "trainer") == "Pending"  # the GPU is the running job's
        deleted = time.monotonic()
        api.delete(PODS, "job", "legacy")
        wait_until(lambda: [e for e in api.list(EVENTS, "legacy")["items"] if e.get("reason") == "Killing"], 10,
                   "the kubelet to send the job SIGTERM")
        cluster.wait_pod_phase("dra", "trainer", "Running", 60)
        waited = time.monotonic() - deleted
        assert cluster.pod("legacy", "job") is None  # stopped, then deleted for good by its kubelet
        stop.set()
        sampler.join(5)
    assert not both, f"the DRA pod ran while the legacy job still did ({len(both)} samples)"
    assert waited >= STOP_S - 0.5, f"the DRA pod ran {waited:.1f} s after the delete, before the job could stop"
    assert watch.samples.clean, watch.samples.describe()
    assert cluster.prepare_failures() == []
