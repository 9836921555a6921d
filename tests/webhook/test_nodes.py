"""The webhook's view of the GPU nodes: what it keeps of a Node, the scheduler's node selection it replays, and the
verdict "this pod can only run where nvidia.com/gpu is not a whole GPU"."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from bridge.kvalues import gfd
from bridge.webhook.nodes import NodeView, asks_for_shares, kubelet_version, project, selects, slim

Obj = dict[str, Any]


def node(name: str, labels: dict[str, str] | None = None, *, gpu: bool = True, taints: list[Obj] | None = None,
         kubelet: str = "v1.35.2") -> Obj:
    return {"metadata": {"name": name, "uid": f"u-{name}", "resourceVersion": "7", "labels": labels or {},
                         "annotations": {"big": "x" * 5000}},
            "spec": {"taints": taints or [], "podCIDR": "10.0.0.0/24"},
            "status": {"capacity": {"cpu": "64", **({"nvidia.com/gpu": "8"} if gpu else {})},
                       "images": [{"names": [f"registry/image-{i}:latest"], "sizeBytes": i} for i in range(50)],
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "nodeInfo": {"kubeletVersion": kubelet, "osImage": "Ubuntu"}}}


def view(*nodes: Obj) -> NodeView:
    return NodeView.of(n for n in (project(o) for o in nodes) if n is not None)


MIG = {gfd.PRODUCT: "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", gfd.MIG_STRATEGY: "single", "pool": "mig"}
WHOLE = {gfd.PRODUCT: "NVIDIA-H100-80GB-HBM3", "pool": "h100"}


def test_only_gpu_nodes_are_kept_and_only_what_the_decisions_need() -> None:
    cpu = node("cpu-1", {"pool": "general"}, gpu=False)
    gpu = node("gpu-1", WHOLE, taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                                       {"key": "soft", "effect": "PreferNoSchedule"}])
    assert project(cpu) is None and slim(cpu) == {"metadata": {"name": "cpu-1", "uid": "u-cpu-1", "resourceVersion": "7"}}
    kept = slim(gpu)
    assert len(json.dumps(kept)) < len(json.dumps(gpu)) / 5  # images, conditions, annotations are gone
    info = project(kept)
    assert info is not None and info == project(gpu)
    assert info.taints == (("nvidia.com/gpu", "", "NoSchedule"),) and info.kubelet == (1, 35)
    labelled = node("opted-in", {"dra-bridge.io/node": "true"}, gpu=False)  # the chart's opt-in label counts too
    assert project(labelled) is not None
    assert sys.intern("NVIDIA-H100-80GB-HBM3") is info.labels[gfd.PRODUCT]  # shared with every other H100 node


@pytest.mark.parametrize(("text", "version"), [("v1.36.2", (1, 36)), ("v1.35.4-eks-ab12", (1, 35)), ("1.37.0", (1, 37)),
                                               ("", None), ("unknown", None)])
def test_kubelet_versions_are_read_like_the_server_reports_them(text: str, version: Any) -> None:
    assert kubelet_version(text) == version


@pytest.mark.parametrize(
    ("spec", "picked"),
    [
        ({}, {"mig-0", "h100-0"}),  # untainted nodes only: the tainted one needs a toleration
        ({"nodeSelector": {"pool": "mig"}}, {"mig-0"}),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["mig"]}]}]}}}}, {"h100-0"}),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["mig"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["tainted-0"]}]}]}}},
          "tolerations": [{"operator": "Exists"}]}, {"mig-0", "tainted-0"}),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["4"]}]}]}}}}, {"h100-0"}),
        ({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]},
         {"mig-0", "h100-0", "tainted-0"}),
        ({"tolerations": [{"key": "dedicated", "value": "other"}]}, {"mig-0", "h100-0"}),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {}]}}}}, set()),  # an empty term selects nothing
    ],
)
def test_node_selection_follows_the_scheduler(spec: Obj, picked: set[str]) -> None:
    v = view(node("mig-0", MIG), node("h100-0", {**WHOLE, "gpus": "8"}),
             node("tainted-0", WHOLE, taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]))
    assert {n.name for n in v.nodes if selects(spec, n)} == picked


def test_a_pod_that_can_only_reach_mig_nodes_is_not_translated_a_mixed_one_is() -> None:
    v = view(node("mig-0", MIG), node("h100-0", WHOLE))
    only_mig = v.placement({"nodeSelector": {"pool": "mig"}})
    assert only_mig is not None and "MIG slice" in only_mig and "mig-0" in only_mig
    assert v.placement({}) is None  # mixed: it ran on whole GPUs sometimes; under DRA it gets one
    assert v.placement({"nodeSelector": {"pool": "nowhere"}}) is None  # no candidate: nothing to conclude
    assert view(node("h100-0", WHOLE)).placement({"nodeSelector": {"pool": "mig"}}) is None  # no shared node at all


def test_pod_selectors_that_ask_for_shares_are_recognised() -> None:
    assert asks_for_shares({"nodeSelector": {gfd.PRODUCT: "Tesla-T4-SHARED"}}) is not None
    assert asks_for_shares({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": gfd.REPLICAS, "operator": "In", "values": ["4"]}]}]}}}})
    assert asks_for_shares({"nodeSelector": {gfd.PRODUCT: "NVIDIA-H100-80GB-HBM3"}}) is None
    assert asks_for_shares({"nodeSelector": {gfd.MIG_STRATEGY: "single"}}) is None  # MIG may be off on the GPUs


def test_kubelet_versions_and_the_family_rule_come_from_the_nodes() -> None:
    old_gfd = {gfd.FAMILY: "ampere", gfd.COMPUTE_MAJOR: "8", gfd.COMPUTE_MINOR: "9"}  # an L4 under GFD < v0.18
    v = view(node("a", old_gfd, kubelet="v1.36.0"), node("b", kubelet="v1.35.9"))
    assert v.kubelets_at_least((1, 36)) == (False, "node b runs kubelet 1.35")
    assert v.family_rule is gfd.FamilyRule.BEFORE_V0_18 and not v.family_problem
    assert view().kubelets_at_least((1, 36))[0] is False  # no GPU node known: not verified
    assert view(node("a", kubelet="v1.36.1")).kubelets_at_least((1, 36)) == (True, "")
    clash = view(node("a", old_gfd), node("b", {**old_gfd, gfd.FAMILY: "ada-lovelace"}))
    assert "disagree" in clash.family_problem


def test_verdicts_are_memoised_per_selector_and_views_compare_by_nodes() -> None:
    v = view(node("mig-0", MIG))
    spec = {"nodeSelector": {"pool": "mig"}}
    assert v.placement(spec) == v.placement(dict(spec)) and len(v._memo) == 1
    assert view(node("mig-0", MIG)) == v and view(node("mig-1", MIG)) != v
