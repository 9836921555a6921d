"""Preferred allocation (pure): must-include first, then most NVLink links, then same NUMA, then lowest index."""

from __future__ import annotations

import pytest

from bridge.deviceplugin.preferred import PreferredAllocationError, Topology, preferred_allocation
from bridge.inventory.simulated import devices_from_spec

# DGX-1 (8x V100 SXM2, hybrid cube-mesh): 2-link pairs 0-3 0-4 1-2 1-5 2-3 4-7 5-6 6-7; 1-link pairs 0-1 0-2 1-3
# 2-6 3-7 4-5 4-6 5-7; GPUs 0-3 on NUMA node 0, 4-7 on NUMA node 1.
DGX1 = devices_from_spec("8xV100-32GB", "node-a")
DGX1_TOPO = Topology.from_devices(DGX1)
HGX = devices_from_spec("8xH100-80GB", "node-a")  # NVSwitch: every pair has the same links
HGX_TOPO = Topology.from_devices(HGX)


def gpu(devices, *indexes):  # type: ignore[no-untyped-def]
    return [str(devices[i].uuid) for i in indexes]


def test_simulated_dgx1_has_the_hybrid_cube_mesh_the_table_assumes() -> None:
    assert DGX1_TOPO.links_between(*gpu(DGX1, 0, 3)) == 2
    assert DGX1_TOPO.links_between(*gpu(DGX1, 0, 1)) == 1
    assert DGX1_TOPO.links_between(*gpu(DGX1, 0, 5)) == 0
    assert [d.numa_node for d in DGX1] == [0, 0, 0, 0, 1, 1, 1, 1]


# (case, available indexes, must-include indexes, size, expected indexes)
DGX1_CASES = [
    ("a pair picks a 2-link pair on one NUMA node", range(8), [], 2, [0, 3]),
    ("must-include GPU 1 pairs it with its same-NUMA 2-link peer", range(8), [1], 2, [1, 2]),
    ("must-include GPU 5 pairs it with its same-NUMA 2-link peer", range(8), [5], 2, [5, 6]),
    ("without GPU 3 the best pair is the 2-link same-NUMA pair 1-2", [0, 1, 2, 4, 5, 6, 7], [], 2, [1, 2]),
    ("NVLink beats NUMA: 0 with 4 (2 links, other node) over 0 with 1 (1 link)", [0, 1, 4], [0], 2, [0, 4]),
    ("a quad picks a fully linked NUMA-local board half", range(8), [], 4, [0, 1, 2, 3]),
    # {0,4,6,7} and {0,3,4,7} both have 7 links; the first has 3 same-NUMA pairs, the second 2.
    ("must-include GPUs from both halves: most links, then most NUMA-local", range(8), [0, 7], 4, [0, 4, 6, 7]),
    ("all eight", range(8), [], 8, list(range(8))),
    ("must-include equal to size returns exactly them", range(8), [2, 6], 2, [2, 6]),
]


@pytest.mark.parametrize("case,available,must,size,expected", DGX1_CASES, ids=[c[0] for c in DGX1_CASES])
def test_preferred_allocation_on_a_dgx1(case: str, available, must, size: int, expected) -> None:  # type: ignore[no-untyped-def]
    got = preferred_allocation(gpu(DGX1, *available), gpu(DGX1, *must), size, DGX1_TOPO)
    assert got == gpu(DGX1, *expected)


def test_on_an_nvswitch_board_numa_locality_decides() -> None:
    # Every pair has 18 links, so the set on one NUMA node wins: with GPU 3 (node 0) required, pick from 0-2.
    got = preferred_allocation(gpu(HGX, 3, 4, 5, 2), gpu(HGX, 3), 2, HGX_TOPO)
    assert got == gpu(HGX, 2, 3)


def test_without_nvlink_same_numa_wins_then_lowest_index() -> None:
    topo = Topology(rank={"a": 0, "b": 1, "c": 2, "d": 3}, numa={"a": 0, "b": 1, "c": 1, "d": 0})
    assert preferred_allocation(["a", "b", "c", "d"], [], 2, topo) == ["a", "d"]
    assert preferred_allocation(["a", "b", "c"], [], 2, topo) == ["b", "c"]
    assert preferred_allocation(["d", "c", "b"], ["b"], 2, topo) == ["b", "c"]


def test_answer_is_deterministic_whatever_the_input_order() -> None:
    forward = preferred_allocation(gpu(HGX, *range(8)), [], 3, HGX_TOPO)
    backward = preferred_allocation(list(reversed(gpu(HGX, *range(8)))), [], 3, HGX_TOPO)
    assert forward == backward == gpu(HGX, 0, 1, 2)


def test_large_inventories_use_the_greedy_search_and_still_honour_the_rules() -> None:
    ids = [f"g{i:02d}" for i in range(40)]
    links = {frozenset(("g10", "g30")): 4, frozenset(("g30", "g31")): 4}
    topo = Topology(rank={d: i for i, d in enumerate(ids)}, numa={d: 0 for d in ids}, links=links)
    got = preferred_allocation(ids, ["g10"], 20, topo)  # C(39, 19) combinations: far past the exhaustive limit
    assert len(got) == 20 and len(set(got)) == 20
    assert {"g10", "g30", "g31"} <= set(got)


@pytest.mark.parametrize("available,must,size,message", [
    (["a", "b"], ["z"], 1, "not in the available list"),
    (["a", "b"], ["a", "b"], 1, "smaller than the 2 must-include"),
    (["a", "b"], [], 3, "exceeds the 2 available"),
    (["a"], [], -1, "negative"),
])
def test_impossible_requests_are_clear_errors(available: list[str], must: list[str], size: int,
                                               message: str) -> None:
    with pytest.raises(PreferredAllocationError, match=message):
        preferred_allocation(available, must, size, Topology())


def test_the_search_stays_bounded_on_the_largest_inventory() -> None:
    """1,024 GPUs (the simulated source's maximum), half of them asked for: the greedy search used to rescore every
    candidate against the whole chosen set on every pick (hours for a hostile size); now it is incremental."""
    import time

    devices = devices_from_spec("1024xV100-32GB", "node-a")
    topo = Topology.from_devices(devices)
    start = time.monotonic()
    got = preferred_allocation([str(d.uuid) for d in devices], [str(devices[700].uuid)], 512, topo)
    took = time.monotonic() - start
    print(f"\npreferred_allocation(1,024 GPUs, size 512) took {took * 1000:.0f} ms")
    assert len(set(got)) == 512 and str(devices[700].uuid) in got and took < 10


@pytest.mark.parametrize("size", [3, 20], ids=["exhaustive", "greedy"])
def test_a_search_out_of_time_still_answers_a_complete_valid_set(size: int) -> None:
    ids = [f"g{i:02d}" for i in range(40)]
    topo = Topology(rank={d: i for i, d in enumerate(ids)}, numa={d: int(d[1:]) % 2 for d in ids},
                    links={frozenset(("g05", "g30")): 4})
    got = preferred_allocation(ids, ["g30"], size, topo, expired=lambda: True)
    assert len(got) == len(set(got)) == size and "g30" in got and set(got) <= set(ids)
