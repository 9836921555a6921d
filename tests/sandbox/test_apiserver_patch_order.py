"""The element order of a strategic merge patch's merged lists, as kube-apiserver answers it.

Each expected list is what k8s.io/apimachinery v0.37.2 `strategicpatch.StrategicMergeMapPatch` returned for the
same input against the resource.k8s.io/v1 ResourceClaim type (run by hand with the Go module this repository builds
kube-apiserver from), and the first rows are checked against the real server by
tests/real/test_differential.py::test_strategic_merge_patch_of_a_resource_claim. The rule: the patch's items in the
patch's order, the live-only items in live order, interleaved; an added item comes before the live items after it.
"""

from __future__ import annotations

from typing import Any

import pytest

from bridge.sandbox.apiserver.patch import strategic_merge_patch


def consumers(*names: str) -> dict[str, Any]:
    return {"status": {"reservedFor": [{"uid": n.rstrip("'"), "name": n} for n in names]}}


def names(obj: dict[str, Any]) -> list[str]:
    return [e["name"] for e in obj["status"].get("reservedFor") or []]


@pytest.mark.parametrize(("live", "patch", "merged"), [
    (consumers("a", "b"), consumers("c"), ["c", "a", "b"]),
    (consumers("a", "b"), consumers("b'"), ["a", "b'"]),
    (consumers("a", "b", "c"), consumers("c'", "d"), ["a", "b", "c'", "d"]),
    (consumers("a", "b", "c"), consumers("b'", "d"), ["a", "b'", "d", "c"]),
    (consumers("a", "b", "c"), consumers("c", "a"), ["b", "c", "a"]),
    (consumers("a", "b"), {"status": {"reservedFor": [{"$patch": "delete", "uid": "a"}, {"uid": "c", "name": "c"}]}},
     ["c", "b"]),
    (consumers("a", "b"), {"status": {"reservedFor": [{"$patch": "replace"}, {"uid": "c", "name": "c"}]}}, ["c"]),
    (consumers("a", "b"), {"status": {"reservedFor": []}}, ["a", "b"]),
    (consumers("a", "b"), {"status": {"$setElementOrder/reservedFor": [{"uid": "c"}, {"uid": "a"}, {"uid": "b"}],
                                      "reservedFor": [{"uid": "c", "name": "c"}]}}, ["c", "a", "b"]),
    ({"status": {}}, consumers("c", "a"), ["c", "a"]),
], ids=["add", "change", "change-last-and-add", "change-middle-and-add", "reorder", "delete-and-add", "replace",
        "empty-changes-nothing", "set-element-order", "into-nothing"])
def test_merged_consumers_come_in_apimachinerys_order(live: dict[str, Any], patch: dict[str, Any],
                                                      merged: list[str]) -> None:
    assert names(strategic_merge_patch(live, patch)) == merged


def test_every_element_with_a_deleted_key_goes_and_the_inputs_are_not_mutated() -> None:
    live = {"status": {"reservedFor": [{"uid": "a", "name": "a1"}, {"uid": "a", "name": "a2"}, {"uid": "b", "name": "b"}]}}
    patch = {"status": {"reservedFor": [{"$patch": "delete", "uid": "a"}]}}
    before = repr((live, patch))
    assert names(strategic_merge_patch(live, patch)) == ["b"]
    assert repr((live, patch)) == before


@pytest.mark.parametrize(("live", "patch", "merged"), [
    (["x", "y"], {"finalizers": ["z"]}, ["z", "x", "y"]),
    (["x", "y"], {"finalizers": ["y", "z"]}, ["x", "y", "z"]),
    (["x", "y"], {"$deleteFromPrimitiveList/finalizers": ["x"]}, ["y"]),
    (["x", "y"], {"finalizers": []}, ["x", "y"]),
])
def test_finalizers_merge_as_a_set_in_the_same_order(live: list[str], patch: dict[str, Any],
                                                     merged: list[str]) -> None:
    out = strategic_merge_patch({"metadata": {"finalizers": live}}, {"metadata": patch})
    assert out["metadata"]["finalizers"] == merged


def test_an_added_owner_reference_comes_first() -> None:
    out = strategic_merge_patch({"metadata": {"ownerReferences": [{"uid": "o1", "name": "o1"}]}},
                                {"metadata": {"ownerReferences": [{"uid": "o2", "name": "o2"}]}})
    assert [r["uid"] for r in out["metadata"]["ownerReferences"]] == ["o2", "o1"]
