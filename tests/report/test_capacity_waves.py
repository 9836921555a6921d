"""DRB032 in wave order speaks of the wave plan the report prints: the namespaces before a namespace are the ones the
plan moves before it (and those already on DRA), its wave number is the plan's, a namespace the plan leaves out (a
blocker holds it back) is judged alone, with no word of waves, and the fix for "not together" is the split that makes
it fit."""

from __future__ import annotations

from typing import Any

from bridge.report import ReportOptions, build_report
from tests.report.conftest import bridge_class, cluster, container, deployment, namespace, spec
from tests.report.test_controller_capacity import bridge_node, empty_slices

Obj = dict[str, Any]


def app(ns: str, gpus: int, replicas: int = 1, **extra: Any) -> Obj:
    return deployment("app", ns, replicas, spec(container({"nvidia.com/gpu": gpus}, **extra)))


def objects(*extra: Obj) -> list[Obj]:
    """4 GPUs on the DRA side of node a (all free), 4 free legacy GPUs on node b."""
    return [bridge_class(), bridge_node("a", ["dra"] * 4, target="4"),
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "a-slice"},
             "spec": {"driver": "gpu.dra-bridge.io", "nodeName": "a", "pool": {"name": "a", "generation": 1,
                                                                               "resourceSliceCount": 1},
                      "devices": [{"name": f"gpu-{i}", "attributes": {}} for i in range(4)]}},
            bridge_node("b", ["legacy"] * 4), *empty_slices("b"), *extra]


def test_the_namespaces_before_and_the_wave_are_the_plans() -> None:
    report = build_report(cluster(*objects(namespace("first", "shadow"), app("first", 3),
                                           namespace("second"), app("second", 2))), ReportOptions())
    waves = {(s.namespace, s.mode): s.wave for s in report.waves}
    assert waves == {("second", "shadow"): 1, ("first", "dra"): 2, ("second", "dra"): 3}
    (f,) = [f for f in report.findings if f.rule == "DRB032"]
    assert f.object.name == "second" and f.details["wave"] == 3 and f.details["before"] == ["first"]
    assert f.message.startswith("fits alone (2 GPUs) but not together with first (on DRA before its wave 3): 1 "
                                "pod(s) asking 2 GPU(s) would stay Pending")
    assert f.details["commands"] == ["kubectl annotate node b dra-bridge.io/dra-devices=2 --overwrite"]


def test_a_namespace_the_plan_leaves_out_is_judged_alone() -> None:
    blocked = deployment("mig", "second", 1, spec(container({"nvidia.com/mig-1g.10gb": 1})))  # DRB020: blocker
    report = build_report(cluster(*objects(namespace("first", "shadow"), app("first", 3),
                                           namespace("second"), app("second", 2), blocked)), ReportOptions())
    assert "second" not in {s.namespace for s in report.waves}
    assert [f for f in report.findings if f.rule == "DRB032"] == []  # fits alone; no "wave before" to speak of
    row = next(r for r in report.namespaces if r.name == "second")
    assert row.capacity is not None and not row.capacity.planned and row.capacity.before == ()
