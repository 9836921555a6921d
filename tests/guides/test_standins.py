"""The guide tests' stand-ins decide like the components they play (pure parts): which nodes a DaemonSet runs on, and
how many pods a rolling update may add or remove."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.guides.markdown import REPO
from tests.guides.standins import _count, should_run, template_hash

VALUES = REPO / "charts" / "dra-bridge" / "examples" / "nvidia-device-plugin-values.yaml"


def node(labels: dict[str, str], name: str = "gpu-a") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def test_a_daemonset_runs_where_its_node_selector_and_required_affinity_both_match() -> None:
    spec = {"nodeSelector": {"dra-bridge.io/node": "true", "nvidia.com/gpu.deploy.device-plugin": "false"}}
    assert should_run(spec, node({"dra-bridge.io/node": "true", "nvidia.com/gpu.deploy.device-plugin": "false"}))
    # The bridge's node daemon needs both labels (the vendor plugin's label alone only removes that plugin).
    assert not should_run(spec, node({"dra-bridge.io/node": "true"}))
    assert not should_run(spec, node({"nvidia.com/gpu.deploy.device-plugin": "false"}))


def test_nvidia_standalone_plugin_leaves_exactly_the_nodes_where_it_is_switched_off() -> None:
    spec = {"affinity": yaml.safe_load(VALUES.read_text())["affinity"]}
    gpu = {"nvidia.com/gpu.present": "true"}
    assert should_run(spec, node(gpu))  # NotIn matches a node without the label
    assert should_run(spec, node({**gpu, "nvidia.com/gpu.deploy.device-plugin": "true"}))
    assert not should_run(spec, node({**gpu, "nvidia.com/gpu.deploy.device-plugin": "false"}))
    assert should_run(spec, node({**gpu, "dra-bridge.io/node": "true"}))  # the opt-in label alone: it stays
    assert should_run(spec, node({"feature.node.kubernetes.io/pci-10de.present": "true"}))  # terms are ORed
    assert not should_run(spec, node({"kubernetes.io/os": "linux"}))  # no GPU: no plugin


def test_node_affinity_operators_follow_the_scheduler() -> None:
    def one(expr: dict[str, Any], labels: dict[str, str], name: str = "gpu-a", fields: bool = False) -> bool:
        term = {"matchFields" if fields else "matchExpressions": [expr]}
        spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term]}}}}
        return should_run(spec, node(labels, name))

    assert one({"key": "k", "operator": "Exists"}, {"k": ""})
    assert one({"key": "k", "operator": "DoesNotExist"}, {})
    assert one({"key": "gpus", "operator": "Gt", "values": ["4"]}, {"gpus": "8"})
    assert not one({"key": "gpus", "operator": "Lt", "values": ["4"]}, {"gpus": "eight"})
    assert one({"key": "metadata.name", "operator": "In", "values": ["gpu-a"]}, {}, fields=True)
    assert not one({"key": "metadata.name", "operator": "In", "values": ["gpu-b"]}, {}, fields=True)
    empty = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{}]}}}}
    assert not should_run(empty, node({}))  # an empty term matches no node
    with pytest.raises(ValueError, match="unknown node selector operator"):
        one({"key": "k", "operator": "Near"}, {})


def test_rolling_update_counts_round_as_the_deployment_controller_does() -> None:
    # maxSurge rounds up, maxUnavailable down (k8s.io/kubernetes pkg/controller/deployment/util ResolveFenceposts).
    assert (_count("25%", 2, True), _count("25%", 2, False)) == (1, 0)
    assert (_count("25%", 4, True), _count("25%", 4, False)) == (1, 1)
    assert (_count(2, 4, True), _count("0", 4, False)) == (2, 0)


def test_a_template_change_is_a_new_revision_and_nothing_else_is() -> None:
    tmpl = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    same = {"spec": {"containers": [{"image": "i", "name": "c"}]}, "metadata": {"labels": {"app": "x"}}}
    assert template_hash(tmpl) == template_hash(same)
    restarted = {**tmpl, "metadata": {**tmpl["metadata"], "annotations": {"kubectl.kubernetes.io/restartedAt": "t"}}}
    assert template_hash(restarted) != template_hash(tmpl)
