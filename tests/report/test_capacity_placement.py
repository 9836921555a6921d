"""DRB032 counts only the nodes a pod can run on: its node selector (any label, the hostname included), its required
node affinity and the taints it does not tolerate keep it off the others, as the scheduler's filters do
(`bridge.kvalues.placement`). The advice names those nodes, and the `--require-fixed` gate passes only once the
GPUs are where the pods can use them."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.report import ReportOptions, build_report
from bridge.report.report import unresolved
from tests.report.conftest import (
    bridge_class,
    cluster,
    container,
    deployment,
    findings,
    gpu_device,
    namespace,
    resource_slice,
    spec,
)
from tests.report.test_controller_capacity import bridge_node, empty_slices

Obj = dict[str, Any]
HOSTNAME = "kubernetes.io/hostname"


def nodes(b_labels: dict[str, str] | None = None, a_taints: list[Obj] | None = None, dra_on: str = "") -> list[Obj]:
    """Two idle bridge nodes of 4 GPUs, every GPU on the legacy side unless `dra_on` names the node whose split was
    raised to 2 (its status shows them on the DRA side and its slice publishes them)."""
    out = []
    for name, labels in (("a", {HOSTNAME: "a"}), ("b", {HOSTNAME: "b", **(b_labels or {})})):
        sides = ["dra", "dra", "legacy", "legacy"] if name == dra_on else ["legacy"] * 4
        n = bridge_node(name, sides, labels=labels, target="2" if name == dra_on else None)
        if name == "a" and a_taints:
            n["spec"]["taints"] = a_taints
        out.append(n)
        out += [resource_slice(name, [gpu_device(0), gpu_device(1)])] if name == dra_on else empty_slices(name)
    return out


def team(*node_objs: Obj, **pod_spec: Any) -> list[Obj]:
    """Namespace team (shadow) with one Deployment of one pod asking 2 GPUs, placed by `pod_spec`."""
    return [namespace("team", "shadow"), bridge_class(), *node_objs,
            deployment("app", "team", 1, spec(container({"nvidia.com/gpu": 2}), **pod_spec))]


AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]}]}}}
TAINT = [{"key": "reserved", "value": "ml", "effect": "NoSchedule"}]

# Each way a pod ends up on node b only: (node b's labels, node a's taints, the pod's placement fields).
PINNED_TO_B = {
    "hostname": ({}, None, {"nodeSelector": {HOSTNAME: "b"}}),
    "custom label": ({"team.example/pool": "blue"}, None, {"nodeSelector": {"team.example/pool": "blue"}}),
    "required affinity": ({"zone": "z2"}, None, {"affinity": AFFINITY}),
    "taint on the other node": ({}, TAINT, {}),
}


@pytest.mark.parametrize("how", PINNED_TO_B)
def test_the_split_advice_names_the_node_the_pod_can_run_on(how: str) -> None:
    b_labels, a_taints, placement = PINNED_TO_B[how]
    (f,) = findings(cluster(*team(*nodes(b_labels, a_taints), **placement)), "DRB032")
    assert f.details["commands"] == ["kubectl annotate node b dra-bridge.io/dra-devices=2 --overwrite"]
    assert f.fix.startswith("Raise the split: kubectl annotate node b dra-bridge.io/dra-devices=2 --overwrite")


def test_an_unpinned_pod_may_use_either_node() -> None:
    (f,) = findings(cluster(*team(*nodes())), "DRB032")
    assert f.details["commands"] == ["kubectl annotate node a dra-bridge.io/dra-devices=2 --overwrite"]


def test_a_tolerated_taint_keeps_no_pod_off_the_node() -> None:
    tolerate = [{"key": "reserved", "operator": "Exists", "effect": "NoSchedule"}]
    (f,) = findings(cluster(*team(*nodes(a_taints=TAINT), tolerations=tolerate)), "DRB032")
    assert f.details["commands"] == ["kubectl annotate node a dra-bridge.io/dra-devices=2 --overwrite"]


@pytest.mark.parametrize("how", PINNED_TO_B)
def test_the_gate_passes_only_once_the_gpus_are_on_the_node_the_pod_can_run_on(how: str) -> None:
    b_labels, a_taints, placement = PINNED_TO_B[how]
    wrong = cluster(*team(*nodes(b_labels, a_taints, dra_on="a"), **placement))
    right = cluster(*team(*nodes(b_labels, a_taints, dra_on="b"), **placement))

    def open_rules(data: Any) -> list[str]:
        return [f.rule for f in unresolved(build_report(data, ReportOptions()), "team", frozenset({"DRB032"}))]

    assert open_rules(wrong) == ["DRB032"]  # 2 DRA GPUs in the cluster, none where the pod can run
    (f,) = findings(wrong, "DRB032")
    assert f.details["matchingDevices"] == 0 and f.details["commands"] == [
        "kubectl annotate node b dra-bridge.io/dra-devices=2 --overwrite"]
    assert open_rules(right) == []


def test_the_finding_says_where_the_pods_may_run() -> None:
    (f,) = findings(cluster(*team(*nodes(), nodeSelector={HOSTNAME: "b"})), "DRB032")
    assert "needs 2 GPUs in 1 pod (only on nodes matching nodeSelector kubernetes.io/hostname=b)" in f.message
    assert f.details["placement"] == ["nodeSelector kubernetes.io/hostname=b"]


def test_a_pod_pinned_to_a_node_without_the_bridge_gets_no_command_for_the_bridge_nodes() -> None:
    (f,) = findings(cluster(*team(*nodes(), nodeSelector={HOSTNAME: "elsewhere"})), "DRB032")
    assert "commands" not in f.details
    assert "no bridge node has free legacy GPUs these pods match and can run on" in f.message


def test_gpu_labels_move_into_the_claim_and_do_not_pin_the_translated_pod() -> None:
    """The webhook moves GFD device labels from the node selector into the claim's CEL: node b carries no GFD label,
    yet its published H100s serve the translated pod; the rest of the selector stays and pins it."""
    product = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert findings(cluster(*team(*nodes(dra_on="b"), nodeSelector={**product, HOSTNAME: "b"})), "DRB032") == []
    (f,) = findings(cluster(*team(*nodes(dra_on="a"), nodeSelector={**product, HOSTNAME: "b"})), "DRB032")
    assert f.details["placement"] == ["nodeSelector kubernetes.io/hostname=b"]
