"""The scheduler's hard node filters, as kube-scheduler's NodeAffinity, TaintToleration and NodeUnschedulable plugins
evaluate them; one implementation for the controller, the report, the webhook and the scheduler stand-in."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

import bridge.kvalues.placement as placement
from bridge.kvalues.placement import (Constraints, Taint, Toleration, canonical, constraints_of, on_node, taints_of,
                                      term_matches, toleration_tolerates)

LABELS = {"kubernetes.io/hostname": "node-0", "zone": "z1", "gpus": "8"}


def allows(spec: dict[str, Any], taints: tuple[Taint, ...] = (), unschedulable: bool = False,
           name: str = "node-0") -> bool:
    return constraints_of(spec).allows(name, LABELS, taints, unschedulable)


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}}


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


def test_a_node_selector_needs_every_label_equal() -> None:
    assert allows({"nodeSelector": {"kubernetes.io/hostname": "node-0"}})
    assert not allows({"nodeSelector": {"kubernetes.io/hostname": "node-1"}})
    assert not allows({"nodeSelector": {"kubernetes.io/hostname": "node-0", "pool": "blue"}})


def test_affinity_terms_are_ored_and_their_expressions_anded() -> None:
    assert allows(required({"matchExpressions": [expr("zone", "In", "z2")]},
                           {"matchExpressions": [expr("zone", "In", "z1"), expr("gpus", "Gt", "4")]}))
    assert not allows(required({"matchExpressions": [expr("zone", "In", "z1"), expr("gpus", "Gt", "8")]}))


def test_an_empty_term_or_an_empty_term_list_matches_no_node() -> None:
    assert not allows(required({}))
    assert not allows({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": []}}}})


def test_match_fields_know_the_node_name_with_in_and_not_in_only() -> None:
    assert term_matches({"matchFields": [expr("metadata.name", "In", "node-0")]}, "node-0", {})
    assert term_matches({"matchFields": [expr("metadata.name", "NotIn", "node-1")]}, "node-0", {})
    assert not term_matches({"matchFields": [expr("metadata.name", "Exists")]}, "node-0", {})
    assert not term_matches({"matchFields": [expr("metadata.uid", "In", "node-0")]}, "node-0", {})


@pytest.mark.parametrize(("toleration", "taint", "tolerated"), [
    (("", "Exists", "", ""), ("any", "x", "NoExecute"), True),  # empty key with Exists: every taint
    (("k", "Exists", "", "NoSchedule"), ("k", "x", "NoSchedule"), True),
    (("k", "Exists", "", "NoSchedule"), ("k", "x", "NoExecute"), False),  # the effect must match when given
    (("k", "", "v", ""), ("k", "v", "NoSchedule"), True),  # operator empty means Equal
    (("k", "Equal", "v", ""), ("k", "w", "NoSchedule"), False),
    (("k", "Equal", "v", ""), ("other", "v", "NoSchedule"), False),
    (("k", "Lt", "5", ""), ("k", "3", "NoSchedule"), True),  # the taint's value is below the toleration's
    (("k", "Gt", "5", ""), ("k", "3", "NoSchedule"), False),
    (("k", "Gt", "5", ""), ("k", "many", "NoSchedule"), False),  # not an integer: tolerates nothing
    (("k", "Sideways", "", ""), ("k", "", "NoSchedule"), False),
])
def test_tolerations_match_taints_as_toleration_go_does(toleration: tuple[str, str, str, str],
                                                       taint: tuple[str, str, str], tolerated: bool) -> None:
    assert toleration_tolerates(*toleration, *taint) is tolerated


def test_only_no_schedule_and_no_execute_taints_keep_a_pod_off() -> None:
    node = {"spec": {"taints": [{"key": "gpu", "value": "true", "effect": "PreferNoSchedule"}]}}
    assert allows({}, taints_of(node))
    assert not allows({}, (Taint("gpu", "true", "NoSchedule"),))
    assert allows({"tolerations": [{"key": "gpu", "operator": "Exists"}]}, (Taint("gpu", "true", "NoExecute"),))


def test_a_cordoned_node_takes_only_pods_tolerating_unschedulable() -> None:
    assert not allows({}, unschedulable=True)
    assert allows({"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]},
                  unschedulable=True)


def test_equal_filters_compare_equal_so_they_are_evaluated_once() -> None:
    a = constraints_of({"nodeSelector": {"zone": "z1", "kubernetes.io/hostname": "node-0"}})
    b = constraints_of({"nodeSelector": {"kubernetes.io/hostname": "node-0", "zone": "z1"}})
    assert a == b and hash(a) == hash(b)


def test_pods_with_equal_filters_share_one_instance_of_them() -> None:
    a = constraints_of({"nodeSelector": {"zone": "z1"}, "tolerations": [{"key": "team", "operator": "Exists"}]})
    b = constraints_of({"tolerations": [{"key": "team", "operator": "Exists"}], "nodeSelector": {"zone": "z1"}})
    assert a is b
    assert constraints_of({}) is constraints_of({"nodeSelector": {}}) == placement.NONE
    assert constraints_of({"nodeSelector": {"zone": "z2"}}) is not a


def test_the_shared_instances_are_bounded_and_stay_equal_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement, "_CANONICAL", {})
    monkeypatch.setattr(placement, "_CANONICAL_MAX", 3)
    first = constraints_of({"nodeSelector": {"zone": "z0"}})
    for i in range(1, 5):
        constraints_of({"nodeSelector": {"zone": f"z{i}"}})
    assert len(placement._CANONICAL) <= 3
    again = constraints_of({"nodeSelector": {"zone": "z0"}})
    assert again == first and hash(again) == hash(first)
    assert canonical(Constraints(node_selector=(("zone", "z0"),))) is again


def test_the_filters_in_words_name_the_selector_and_the_affinity() -> None:
    c = constraints_of({"nodeSelector": {"kubernetes.io/hostname": "node-0"},
                        **required({"matchExpressions": [expr("zone", "In", "z1", "z2")]})})
    assert c.describe() == "nodeSelector kubernetes.io/hostname=node-0; required node affinity zone In (z1, z2)"
    assert constraints_of({"tolerations": [{"operator": "Exists"}]}).describe() == ""


def test_equal_constraints_built_apart_are_one_key_also_after_a_pickle_round_trip() -> None:
    made = [Constraints(node_selector=(("zone", "a"),), tolerations=(Toleration("team", "Equal", "ml", "NoSchedule"),))
            for _ in range(2)]
    copied = pickle.loads(pickle.dumps(made[0]))
    assert {made[0]: "seen"}[made[1]] == "seen" and {made[0]: "seen"}[copied] == "seen"
    assert made[0] != Constraints(node_selector=(("zone", "b"),)) and "_hash" not in repr(made[0])


def test_on_node_narrows_a_pods_filters_to_one_node_and_keeps_the_rest() -> None:
    either = constraints_of({**required({"matchExpressions": [expr("zone", "In", "z1")]},
                                        {"matchExpressions": [expr("gpus", "Exists")]}),
                             "nodeSelector": {"gpus": "8"}})
    narrowed = on_node(either, "node-0")
    assert narrowed.allows("node-0", LABELS) and not narrowed.allows("node-1", LABELS)
    assert not narrowed.allows("node-0", {**LABELS, "gpus": "4"})  # the selector still applies
    assert on_node(constraints_of({}), "node-0").allows("node-0", {})
    assert not on_node(constraints_of({}), "node-0").allows("node-1", {})
    # An empty nodeSelectorTerms list matches no node; narrowing it does not make it match one.
    assert not on_node(constraints_of(required()), "node-0").allows("node-0", LABELS)
