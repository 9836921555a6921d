"""The adapter from the node daemon's published split status to the core's NodeView: counts, pins, settling."""

from __future__ import annotations

import pytest

from bridge.controller.model import FreeGroup
from bridge.controller.nodestatus import PIN_KEY, SPLIT_KEY, STATUS_KEY, StatusError, decode_status, node_view
from tests.controller.status_docs import gpu_node, status_doc

L, D, W = "legacy", "dra", "withdrawn"


def test_counts_come_from_the_sides_and_holders_the_daemon_reports() -> None:
    v = node_view(gpu_node("n1", [L, L, L, L, L, D, D, D], held=[0, 1, 5], target="3"))
    assert (v.total, v.dra, v.dra_held, v.legacy_held, v.frozen) == (8, 3, 1, 2, "")
    assert (v.free("legacy"), v.free("dra")) == (3, 2)
    assert v.target == "3"


def test_the_scheduler_facts_count_even_when_the_status_lags() -> None:
    # A legacy pod just bound (requests 4) and a claim just allocated gpu-7: the daemon has not reported them yet.
    v = node_view(gpu_node("n1", [L] * 6 + [D, D], target="2"), allocated={"gpu-7"}, legacy_requested=4)
    assert (v.legacy_held, v.dra_held) == (4, 1)


@pytest.mark.parametrize(("bound", "held", "unreported"), [
    pytest.param((1, 2, 1), [0], (("legacy", 2), ("legacy", 1)), id="the youngest two make up the 3 not counted"),
    pytest.param((1, 1), [0], (("legacy", 1),), id="one of two counted: the younger is named"),
    pytest.param((2, 2), [0], (), id="no younger pods make up 3: not named, one take"),
    pytest.param((1, 2), [0, 1, 2], (), id="the status counts them all"),
    pytest.param((), [], (), id="no bound pods known"),
])
def test_the_youngest_bound_legacy_pods_the_status_does_not_count_yet_are_named(
        bound: tuple[int, ...], held: list[int], unreported: tuple[tuple[str, int], ...]) -> None:
    """The kubelet admits pods about in the order they were bound: what the status does not count yet is the
    youngest pods' (bound in queue order, oldest first); only where they make it up exactly."""
    node = gpu_node("n1", [L] * 4 + [D] * 4, held=held, numa={i: i // 2 for i in range(8)})
    v = node_view(node, legacy_requested=sum(bound), legacy_bound=bound)
    assert v.legacy_held == max(len(held), sum(bound)) and v.unreported == unreported


def test_a_move_under_way_counts_as_landed_and_allows_more_moves_only_its_way() -> None:
    pending = [{"device": "gpu-7", "from": "legacy", "to": "dra", "phase": "waiting-node-status", "reason": ""}]
    v = node_view(gpu_node("n1", [L] * 7 + [W], target="1", state="converging", pending=pending))
    assert (v.dra, v.free("dra"), v.free("legacy"), v.moving, v.frozen) == (1, 1, 7, "to-dra", "")
    back = [{"device": "gpu-6", "from": "dra", "to": "legacy", "phase": "waiting-slice", "reason": ""}]
    both = node_view(gpu_node("n1", [L] * 6 + [W, W], target="1", state="converging", pending=pending + back))
    assert both.frozen == "settling" and "both directions" in both.frozen_reason
    lost = node_view(gpu_node("n1", [L] * 7 + [W], target="1", state="converging"))
    assert lost.frozen == "settling" and "without a move under way" in lost.frozen_reason


def test_a_target_the_daemon_has_not_acted_on_yet_settles_the_node_and_counts_as_landed() -> None:
    v = node_view(gpu_node("n1", [L] * 8, target="2", requested="0"))
    assert v.frozen == "settling" and "has not acted on" in v.frozen_reason
    assert (v.dra, v.free("dra")) == (2, 2), "the pods it was written for fit there, not elsewhere"
    out_of_reach = node_view(gpu_node("n1", [L] * 8, held=list(range(7)), target="2", requested="0"))
    assert out_of_reach.dra == 0, "a target that needs a held device is not counted on"
    assert node_view(gpu_node("n1", [L] * 6 + [D, D], target="2", requested=" 2 ")).frozen == ""
    assert node_view(gpu_node("n1", [L] * 6 + [D, D], target="gpu-6,gpu-7", requested="GPU-6,gpu-7")).frozen == ""


def test_a_move_waiting_for_a_holder_does_not_settle_the_node() -> None:
    pending = [{"device": "gpu-0", "from": "legacy", "to": "dra", "phase": "held", "reason": "held by pod x"}]
    v = node_view(gpu_node("n1", [L] * 8, held=[0], target="1", state="converging", pending=pending))
    assert v.frozen == "" and v.dra == 0 and v.legacy_held == 1


def test_unreadable_holders_a_refused_target_or_a_stray_allocation_settle_the_node() -> None:
    unknown = [{"device": "gpu-1", "from": "legacy", "to": "dra", "phase": "unknown", "reason": ""}]
    assert "cannot be read" in node_view(gpu_node("n", [L] * 4, target="1", pending=unknown)).frozen_reason
    assert "refused" in node_view(gpu_node("n", [L] * 4, target="9", state="refused")).frozen_reason
    assert "not on the DRA side" in node_view(gpu_node("n", [L] * 4, target="0"), allocated={"gpu-2"}).frozen_reason


@pytest.mark.parametrize(("labels", "annotations", "why"), [
    ({}, {PIN_KEY: "true"}, f"annotation {PIN_KEY}=true"),
    ({PIN_KEY: "true"}, {}, f"label {PIN_KEY}=true"),
    ({}, {PIN_KEY: "yes"}, "is not \"true\"; pinned"),
    ({SPLIT_KEY: "4"}, {}, "the operator's form of the split key"),
])
def test_operators_pin_a_node_with_the_pin_key_or_the_label_form_of_the_split_key(
        labels: dict[str, str], annotations: dict[str, str], why: str) -> None:
    v = node_view(gpu_node("n1", [L] * 8, labels=labels, annotations=annotations))
    assert v.frozen == "pinned" and why in v.frozen_reason


def test_pin_false_does_not_pin() -> None:
    assert node_view(gpu_node("n1", [L] * 8, annotations={PIN_KEY: "false"})).frozen == ""


@pytest.mark.parametrize(("text", "why"), [
    (None, "no dra-bridge.io/split-status annotation"),
    ("{not json", "is not JSON"),
    (status_doc("n1", [L], version=2), "has schema version 2; this one reads version 1 (written by a newer dra-bridge: upgrade"),
    (status_doc("other", [L]), "describes node 'other'"),
])
def test_a_node_without_a_readable_status_is_unknown(text: str | None, why: str) -> None:
    node = gpu_node("n1", [L] * 8)
    if text is None:
        del node["metadata"]["annotations"][STATUS_KEY]
    else:
        node["metadata"]["annotations"][STATUS_KEY] = text
    v = node_view(node)
    assert v.frozen == "unknown" and why in v.frozen_reason
    assert v.free("legacy") == 0 and v.free("dra") == 0


def test_a_node_that_is_not_ready_is_unknown() -> None:
    assert node_view(gpu_node("n1", [L] * 8, ready=False)).frozen == "unknown"
    assert node_view(gpu_node("n1", [L] * 8, ready=True)).frozen == ""


def test_free_devices_are_grouped_by_numa_when_the_daemon_reports_it() -> None:
    v = node_view(gpu_node("n1", [L] * 8, held=[0], numa={i: i // 4 for i in range(8)}))
    assert v.groups == (FreeGroup("numa-1", legacy=4), FreeGroup("numa-0", legacy=3))
    assert node_view(gpu_node("n1", [L] * 8, held=[0])).groups == (), "no topology: the core sees one group"


def test_free_devices_are_grouped_by_nvlink_island_where_a_device_has_one_and_by_numa_otherwise() -> None:
    # Two NVLink pairs on NUMA node 0 (one NUMA group, two islands) and two PCIe cards on NUMA node 1.
    v = node_view(gpu_node("n1", [L, L, D, D, L, L, D, L], held=[1, 2], numa={0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1,
                                                                           6: 1, 7: 1},
                           nvlink={0: 0, 1: 0, 2: 1, 3: 1}))
    assert v.groups == (FreeGroup("numa-1", legacy=3, dra=1), FreeGroup("nvlink-0", legacy=1),
                        FreeGroup("nvlink-1", dra=1))


def test_devices_moving_to_a_side_count_as_free_there_in_their_group() -> None:
    pending = [{"device": "gpu-3", "from": "legacy", "to": "dra", "phase": "waiting-node-status", "reason": ""}]
    v = node_view(gpu_node("n1", [L, L, L, W], target="1", state="converging", pending=pending,
                           nvlink={0: 0, 1: 0, 2: 1, 3: 1}))
    assert v.groups == (FreeGroup("nvlink-0", legacy=2), FreeGroup("nvlink-1", legacy=1, dra=1))
    assert (v.free("legacy"), v.free("dra")) == (3, 1)


def test_pool_labels_and_taints_are_read_from_the_node() -> None:
    node = gpu_node("n1", [L] * 2, labels={"dra-bridge.io/pool": "training"})
    node["spec"] = {"unschedulable": True, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}
    v = node_view(node)
    assert v.pool == "training" and v.unschedulable and v.taints[0].key == "k"
    assert node_view(node, pool_label="other").pool == ""


def test_malformed_device_entries_are_refused_with_the_field_named() -> None:
    """The controller reads the daemon's document with the ledger's own decoder: one schema, one parser."""
    with pytest.raises(StatusError, match=r"devices\[\]\.side: expected one of legacy, dra, withdrawn, got 'sideways'"):
        decode_status('{"version": 1, "requested": {"value": "0", "source": "default"}, "state": "converged", '
                      '"devices": [{"name": "gpu-0", "side": "sideways"}]}')
    with pytest.raises(StatusError, match="requested.source"):
        decode_status('{"version": 1, "requested": {}, "devices": []}')
