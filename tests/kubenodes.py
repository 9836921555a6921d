"""Nodes for tests that run without the node lifecycle controller stand-in (the bare API emulator).

The emulator, as kube-apiserver (its TaintNodesByCondition admission), creates every Node tainted
`node.kubernetes.io/not-ready:NoSchedule`; in a cluster the node lifecycle controller removes that taint at the Node's
first event unless its conditions call for it (bridge.sandbox.nodelifecycle, from kube-controller-manager's
`doNoScheduleTaintingPass`). A test that stands for "a node of a running cluster" registers it with
`register_node`, which does both steps, so its Node looks like one the scheduler may use.
"""

from __future__ import annotations

from typing import Any

from bridge.kube import NODES, KubeAPI
from bridge.sandbox.nodelifecycle import logic


def register_node(api: KubeAPI, body: dict[str, Any]) -> dict[str, Any]:
    """Create the Node, then apply the node lifecycle controller's NoSchedule pass to it; returns it as stored."""
    node = api.create(NODES, body)
    add, remove = logic.condition_taints(node)
    taints = logic.swapped_taints((node.get("spec") or {}).get("taints") or [], add, remove)
    if taints is None:
        return node
    return api.patch(NODES, node["metadata"]["name"], {"spec": {"taints": taints or None}})
