"""A GPU node whose kubelet died, end to end on `bridge sandbox cluster`: the node lifecycle controller stand-in marks
its Node Unknown and taints it `unreachable` (as kube-controller-manager does: tests/real/
test_node_lifecycle_differential.py), `bridge controller` stops counting its GPUs, and a pending DRA pod gets a GPU
moved on a node that can run it. Before the stand-in existed, the dead node stayed Ready in every stand-in test.

The node monitor's periods are shortened (Unknown 6 s after the last heartbeat instead of 50 s).
"""

from __future__ import annotations

from typing import Any

import pytest

from bridge.controller.record import DECISION_KEY
from bridge.kube import NODES, PODS
from bridge.ledger.target import SPLIT_KEY
from bridge.sandbox.cluster import NodeSpec
from bridge.sandbox.nodelifecycle import NodeMonitorTimes, logic
from tests.polling import wait_until
from tests.sandbox_cluster import create_gpu_template, create_namespaces, dra_gpu_pod

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
