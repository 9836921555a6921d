"""A GPU node whose kubelet died, end to end on `bridge sandbox cluster`: the node lifecycle controller stand-in marks
its Node Unknown and taints it `unreachable` (as kube-controller-manager does: tests/real/
test_node_lifecycle_differential.py), `bridge controller` stops counting its GPUs, and a pending DRA pod gets a GPU
moved on a node that can run it. Before the stand-in existed, the dead node stayed Ready in every stand-in test.
Past its pods' `unreachable` toleration (300 s on a real cluster), the taint eviction controller stand-in deletes
them, as kube-controller-manager does; they stay Terminating, still on their GPUs, until the kubelet is back.

The node monitor's periods are shortened (Unknown 6 s after the last heartbeat instead of 50 s), and so is the
toleration (2 s).
"""

from __future__ import annotations

from typing import Any

import pytest

from bridge.controller.record import DECISION_KEY
from bridge.kube import NODES, PODS
from bridge.ledger.target import SPLIT_KEY
from bridge.sandbox.apiserver.tolerationseconds import DefaultTolerationSeconds
from bridge.sandbox.cluster import NodeSpec
from bridge.sandbox.cluster.inspect import SideWatch, holders
from bridge.sandbox.nodelifecycle import NodeMonitorTimes, logic
from tests.polling import wait_until
from tests.sandbox_cluster import create_gpu_template, create_namespaces, dra_gpu_pod, legacy_gpu_pod

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NS = "team"
TIMES = NodeMonitorTimes(monitor_period=1.0, grace_period=6.0)


def _ready(api: Any, node: str) -> str | None:
    return logic.ready_status(api.get(NODES, node))


def test_a_pending_dra_pod_gets_its_gpu_on_a_node_whose_kubelet_runs_not_on_one_whose_kubelet_died(
        sandbox_cluster: Any) -> None:
    nodes = (NodeSpec("gpu-a", "2xH100-80GB", split="0"), NodeSpec("gpu-b", "2xH100-80GB", split="0"))
    cluster = sandbox_cluster(nodes, version="1.37", bridge=True, controller=True, node_monitor=TIMES,
                              node_lease_duration=2)
    cluster.wait_daemons_settled(60)
    api = cluster.api
    create_namespaces(api, NS)
    create_gpu_template(api, NS)

    cluster.stop_kubelet("gpu-a")  # its node daemon runs on, and keeps publishing its status
    wait_until(lambda: _ready(api, "gpu-a") == "Unknown", 30, "gpu-a's Node to go Unknown")
    api.create(PODS, dra_gpu_pod("train", NS), NS)
    pod = cluster.wait_pod_phase(NS, "train", "Running", 90)

    assert pod["spec"]["nodeName"] == "gpu-b"
    dead = api.get(NODES, "gpu-a")["metadata"].get("annotations") or {}
    assert dead.get(SPLIT_KEY) == "0" and DECISION_KEY not in dead, "the controller changed the dead node's split"
    assert api.get(NODES, "gpu-b")["metadata"]["annotations"][SPLIT_KEY] == "1"


def _on(pod: dict[str, Any], node: str) -> dict[str, Any]:
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def _gpu_holders(cluster: Any, node: str) -> dict[str, set[str]]:
    """GPU uuid -> its holders (pods by PodResources, claims by allocation) on `node`."""
    return {uuid: set(h) for (n, uuid), h in holders(cluster).items() if n == node and h}


def test_gpu_pods_evicted_from_a_dead_node_keep_their_gpus_until_the_kubelet_is_back_and_then_free_them(
        sandbox_cluster: Any) -> None:
    """One legacy and one DRA pod on gpu-a (split 1: one GPU each way); its kubelet dies and stays down past the
    pods' toleration, so both are evicted. While Terminating they still hold their GPUs: the replacements asked
    for gpu-a stay Pending, and the controller leaves gpu-a's split alone. Once the kubelet is back it ends the
    evicted pods; the replacements then run on gpu-a, and no GPU is held or offered twice at any moment."""
    nodes = (NodeSpec("gpu-a", "2xH100-80GB", split="1"), NodeSpec("gpu-b", "2xH100-80GB", split="1"))
    cluster = sandbox_cluster(nodes, version="1.37", bridge=True, controller=True, node_monitor=TIMES,
                              node_lease_duration=2, toleration_seconds=DefaultTolerationSeconds(300, 2))
    cluster.wait_daemons_settled(60)
    api = cluster.api
    create_namespaces(api, NS)
    create_gpu_template(api, NS)
    api.create(PODS, _on(legacy_gpu_pod("old", NS), "gpu-a"), NS)
    api.create(PODS, _on(dra_gpu_pod("new", NS), "gpu-a"), NS)
    for name in ("old", "new"):
        cluster.wait_pod_phase(NS, name, "Running", 60)
    held = _gpu_holders(cluster, "gpu-a")
    assert len(held) == 2, held

    with SideWatch(cluster) as watch:
        cluster.stop_kubelet("gpu-a")
        wait_until(lambda: all(api.get(PODS, p, NS)["metadata"].get("deletionTimestamp") for p in ("old", "new")),
                   60, "both pods on gpu-a to be evicted")
        api.create(PODS, _on(legacy_gpu_pod("old-2", NS), "gpu-a"), NS)
        api.create(PODS, _on(dra_gpu_pod("new-2", NS), "gpu-a"), NS)
        wait_until(lambda: _ready(api, "gpu-a") == "Unknown", 5, "gpu-a Unknown")
        # Terminating, but their containers run on: the GPUs stay theirs (the claim stays allocated; the kubelet,
        # down, cannot be asked about its device-plugin devices), and the replacements wait
        claim = api.get(api.resource_api().claims, api.get(PODS, "new", NS)["status"]["resourceClaimStatuses"][0]["resourceClaimName"],
                        NS)
        assert claim["status"]["allocation"] and claim["status"]["reservedFor"][0]["name"] == "new"
        for name in ("old-2", "new-2"):
            pod = api.get(PODS, name, NS)
            assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName"), pod["status"]

        cluster.restart_kubelet("gpu-a")
        for name in ("old", "new"):
            cluster.wait_pod_phase(NS, name, "Gone", 90)
        for name in ("old-2", "new-2"):
            cluster.wait_pod_phase(NS, name, "Running", 90)
    assert watch.samples.clean, watch.samples.describe()
    assert api.get(NODES, "gpu-a")["metadata"]["annotations"].get(SPLIT_KEY) == "1"
    now = _gpu_holders(cluster, "gpu-a")
    assert set(now) == set(held), "the replacements run on the GPUs the evicted pods let go"
    assert all(not (h & held[uuid]) for uuid, h in now.items()), now
