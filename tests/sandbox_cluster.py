"""The `sandbox_cluster` fixture: whole sandbox clusters for whole-flow tests (the split, the webhook, the demo).

    def test_something(sandbox_cluster):
        cluster = sandbox_cluster(nodes=2, gpus="8xH100-80GB", bridge=True, split="4", version="1.36")
        api = cluster.api
        ...

`sandbox_cluster(**options)` starts a `bridge.sandbox.cluster.SandboxCluster` and returns it; every cluster a test
started is stopped afterwards, and the fixture fails the test if a node daemon, webhook or controller process outlived it or
the work directory was left behind. Options: `nodes` (a count, or a tuple of `NodeSpec`s), `gpus`, `bridge`,
`split`, `webhook`, `controller`, `version` (Kubernetes minor, e.g. "1.37"), and any other `ClusterSpec` field. The
defaults are tuned for tests: Node status every 0.5 s (10 s in a real kubelet), a pod sync that failed with an error
retried after 0.5 s, a 0.5 s split grace, a controller decision at most every 0.5 s (5 s by default). The kubelets'
pod resync keeps its real 60 s (60-90 s with jitter): a pod whose NodePrepareResources failed waits that long for its
next try, as on a real node, so a refusal in a flow that should have none shows up as a slow or failing test.

For several tests sharing one cluster (the cheapest way to stay fast), use the class in a module-scoped fixture:

    @pytest.fixture(scope="module")
    def cluster():
        with SandboxCluster(spec_for_tests(bridge=True, split="4")) as c:
            yield c
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bridge.kube import NAMESPACES, KubeAPI, Obj
from bridge.sandbox.cluster import ClusterSpec, NodeSpec, SandboxCluster, nodes_from_count
from tests.real.realnodes import ensure_namespace

GPU_CLASS = "gpu.dra-bridge.io"  # the DeviceClass the sandbox's daemons serve
# What kube-scheduler v1.37.2 wrote into PodScheduled (reason Unschedulable) for a pod asking one GPU of the only
# node, whose GPUs had all failed (tests/real/test_real_gpu_health.py); the scheduler stand-in must say the same
# (tests/sandbox/test_cluster_gpu_fault.py).
NO_HEALTHY_GPU_1_37 = {
    "legacy": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are available: 1 "
              "Preemption is not helpful for scheduling.",
    "dra": "0/1 nodes are available: 1 cannot allocate all claims. preemption: 0/1 nodes are available: 1 "
           "Preemption is not helpful for scheduling.",
}

TEST_DEFAULTS: dict[str, Any] = {"node_status_frequency": 0.5, "sync_retry": 0.5}


def spec_for_tests(nodes: int | tuple[NodeSpec, ...] = 2, gpus: str = "8xH100-80GB", *, version: str = "1.34",
                   **fields: Any) -> ClusterSpec:
    """A `ClusterSpec` with the test defaults (see the module docstring)."""
    node_specs = nodes if isinstance(nodes, tuple) else nodes_from_count(nodes, gpus)
    values = {**TEST_DEFAULTS, **fields}
    if values.get("bridge") and "split_grace" not in values:
        values["split_grace"] = 0.5
    if values.get("controller") and "controller_interval" not in values:
        values["controller_interval"] = 0.5
    return ClusterSpec(nodes=node_specs, kubernetes_version=version, **values)




def create_namespaces(api: KubeAPI, *names: str) -> None:
    for name in names:
        api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def create_pod_namespaces(cluster: SandboxCluster, *names: str) -> None:
    """Namespaces pods can be created in at once, on either backend: on a real control plane each one waits for its
    `default` ServiceAccount (`tests.real.realnodes.ensure_namespace`); the emulator takes it to exist."""
    if cluster.plane is None:
        create_namespaces(cluster.api, *names)
        return
    for name in names:
        ensure_namespace(cluster, name)


def create_gpu_template(api: KubeAPI, namespace: str, name: str = "one-gpu") -> None:
    """A ResourceClaimTemplate asking one GPU of the bridge's DeviceClass."""
    rapi = api.resource_api()
    api.create(rapi.claim_templates, {
        "apiVersion": f"resource.k8s.io/{rapi.version}", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]}}}},
        namespace)


def legacy_gpu_pod(name: str, namespace: str, annotations: dict[str, str] | None = None) -> Obj:
    """A pod asking `nvidia.com/gpu: 1`."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": {"containers": [{"name": "main", "image": "cuda:12",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def dra_gpu_pod(name: str, namespace: str, annotations: dict[str, str] | None = None,
                template: str = "one-gpu") -> Obj:
    """A pod with one claim from `template` (`create_gpu_template`), used by its container."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
                     "containers": [{"name": "main", "image": "cuda:12", "resources": {"claims": [{"name": "gpu"}]}}]}}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@pytest.fixture
def sandbox_cluster() -> Iterator[Callable[..., SandboxCluster]]:
    started: list[SandboxCluster] = []

    def start(nodes: int | tuple[NodeSpec, ...] = 2, gpus: str = "8xH100-80GB", **fields: Any) -> SandboxCluster:
        cluster = SandboxCluster(spec_for_tests(nodes, gpus, **fields))
        started.append(cluster)
        return cluster.start()

    yield start
    leftovers = []
    for cluster in reversed(started):
        pids = [n.daemon.pid for n in cluster.nodes if n.daemon is not None and n.daemon.pid is not None]
        if cluster.webhook is not None and cluster.webhook.process is not None and cluster.webhook.process.pid:
            pids.append(cluster.webhook.process.pid)
        if cluster.controller is not None and cluster.controller.process is not None and cluster.controller.process.pid:
            pids.append(cluster.controller.process.pid)
        cluster.stop()
        leftovers += [f"process {p}" for p in pids if _alive(p)]
        if cluster.work_dir is not None and cluster.work_dir.exists():
            leftovers.append(f"work directory {cluster.work_dir}")
    assert not leftovers, f"the sandbox cluster left things behind: {leftovers}"
