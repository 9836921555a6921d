"""The decision core's topology preference: among nodes that can serve a pod with the same number of moves, the one
where the pod's GPUs are one NVLink island (else NUMA node) wins; the preference never costs a move, never moves a
GPU by itself, and a node without topology is planned as before."""

from __future__ import annotations

from bridge.controller.decide import decide
from bridge.controller.model import FreeGroup, NodeView, PendingPod, Policy

FREE = Policy(max_moves_per_minute=1000, cooldown_s=60)


def pod(api: str, gpus: int, i: int = 0) -> PendingPod:
    return PendingPod(f"team-a/p-{i}", api, gpus, "team-a", since=float(i))  # type: ignore[arg-type]


def island(n: int, legacy: int = 0, dra: int = 0) -> FreeGroup:
    return FreeGroup(f"nvlink-{n}", legacy, dra)


# ---- moves: trigger ---------------------------------------------------------------------------------------------

def test_a_node_where_the_moved_gpus_come_from_one_island_is_preferred() -> None:
    split = NodeView("a-split", 8, 0, legacy_held=4, groups=(island(0, 2), island(1, 2)))
    whole = NodeView("b-whole", 8, 0, legacy_held=4, groups=(island(0, 4),))
    d = decide([split, whole], [pod("dra", 4)], FREE)
    (change,) = d.changes
    assert (change.node, change.dra, change.groups) == ("b-whole", 4, ("nvlink-0",))
    assert change.reason.endswith("moving 4 to DRA from NVLink island 0")


def test_a_node_where_the_pods_whole_request_ends_in_one_island_beats_a_tighter_fit_elsewhere() -> None:
    # Both need 2 moves for a 4-GPU DRA pod (each has 2 free DRA GPUs). On `a` those 2 sit in island 0 and the
    # legacy GPUs that would move in island 1: the pod would span two islands. On `b` all four end in island 0,
    # although `b` has more free legacy GPUs (best fit alone would pick `a`).
    a = NodeView("a", 8, 2, legacy_held=4, groups=(island(0, 0, 2), island(1, 2, 0)))
    b = NodeView("b", 8, 2, legacy_held=1, groups=(island(0, 2, 2), island(1, 3, 0)))
    assert decide([a, b], [pod("dra", 4)], FREE).changes[0].node == "b"
    plain = [NodeView("a", 8, 2, legacy_held=4), NodeView("b", 8, 2, legacy_held=1)]
    assert decide(plain, [pod("dra", 4)], FREE).changes[0].node == "a", "without topology: best fit"


def test_the_tightest_island_moves_so_whole_islands_change_sides() -> None:
    # A 4-GPU pod: `a` would cut its free 8-GPU island in half, `b` moves one of its 4-GPU islands whole.
    a = NodeView("a", 8, 0, groups=(island(0, 8),))
    b = NodeView("b", 8, 0, groups=(island(0, 4), island(1, 4)))
    (change,) = decide([a, b], [pod("dra", 4)], FREE).changes
    assert change.node == "b" and change.groups == ("nvlink-1",), "joining DRA, the highest-numbered island first"


def test_legacy_demand_takes_back_a_whole_dra_island() -> None:
    a = NodeView("a", 8, 8, dra_held=2, groups=(island(0, 0, 4), island(1, 0, 2)))
    (change,) = decide([a], [pod("legacy", 2)], FREE).changes
    assert (change.dra, change.groups) == (6, ("nvlink-1",))
    assert change.reason.endswith("moving 2 to legacy from NVLink island 1")


def test_numa_nodes_group_gpus_that_have_no_nvlink_island() -> None:
    a = NodeView("a", 8, 0, legacy_held=4, groups=(FreeGroup("numa-0", 2), FreeGroup("numa-1", 2)))
    b = NodeView("b", 8, 0, legacy_held=4, groups=(FreeGroup("numa-1", 4),))
    (change,) = decide([a, b], [pod("dra", 3)], FREE).changes
    assert (change.node, change.groups) == ("b", ("numa-1",))
    assert change.reason.endswith("from NUMA node 1")


def test_a_node_serving_two_pods_counts_each_islands_gpus_once() -> None:
    # Islands of 4 and 3: the first pod (4) takes island 0; the second (3) must come from island 1, not again 0.
    n = NodeView("n", 8, 0, legacy_held=1, groups=(island(0, 4), island(1, 3)))
    (change,) = decide([n], [pod("dra", 4, 0), pod("dra", 3, 1)], FREE).changes
    assert (change.dra, change.groups) == (7, ("nvlink-0", "nvlink-1"))


# ---- moves: no trigger ------------------------------------------------------------------------------------------

def test_the_preference_never_costs_a_move() -> None:
    # `a` needs one move (3 free DRA GPUs, spread over two islands); `b` would move a whole island of 4.
    a = NodeView("a", 8, 3, legacy_held=4, groups=(island(0, 1, 2), island(1, 0, 1)))
    b = NodeView("b", 8, 0, legacy_held=4, groups=(island(1, 4),))
    (change,) = decide([a, b], [pod("dra", 4)], FREE).changes
    assert (change.node, change.moves) == ("a", 1)


def test_no_gpu_moves_to_put_a_pod_that_fits_somewhere_in_one_island() -> None:
    # 4 free DRA GPUs on `a`, split over two islands: the pod fits as things are; `b`'s whole island stays legacy.
    a = NodeView("a", 8, 4, legacy_held=4, groups=(island(0, 0, 2), island(1, 0, 2)))
    b = NodeView("b", 8, 0, groups=(island(0, 8),))
    d = decide([a, b], [pod("dra", 4)], FREE)
    assert d.changes == () and [(p.node, p.moves) for p in d.placements] == [("a", 0)]


def test_no_demand_no_change_however_fragmented_the_islands() -> None:
    nodes = [NodeView(f"n{i}", 8, 3, groups=(island(0, 2, 1), island(1, 3, 2))) for i in range(3)]
    assert decide(nodes, [], FREE).changes == ()


def test_moves_spanning_islands_name_no_island() -> None:
    n = NodeView("n", 8, 0, groups=(island(0, 4), island(1, 4)))
    (change,) = decide([n], [pod("dra", 6)], FREE).changes
    assert (change.dra, change.groups) == (6, ())
    assert change.reason.endswith("moving 6 to DRA"), "the daemon picks by affinity then: no island is promised"


def test_groups_that_lag_the_counts_never_add_capacity() -> None:
    # The status shows 4 free legacy GPUs in island 0, but a legacy pod bound since holds 2 of them (legacy_held):
    # only 2 can move, so the 4-GPU pod goes to `b`, although `a`'s stale group says "whole".
    a = NodeView("a", 8, 0, legacy_held=6, groups=(island(0, 4),))
    b = NodeView("b", 8, 0, legacy_held=4, groups=(island(0, 2), island(1, 2)))
    assert decide([a, b], [pod("dra", 4)], FREE).changes[0].node == "b"


# ---- fit (no move) ----------------------------------------------------------------------------------------------

def test_a_pod_that_fits_is_counted_where_it_fits_one_island() -> None:
    # Best fit alone would put the 2-GPU pod on `a` (2 free, but in two islands) and leave `b` its 3.
    a = NodeView("a", 8, 8, dra_held=6, groups=(island(0, 0, 1), island(1, 0, 1)))
    b = NodeView("b", 8, 8, dra_held=5, groups=(island(0, 0, 3),))
    assert [p.node for p in decide([a, b], [pod("dra", 2)], FREE).placements] == ["b"]
    plain = [NodeView("a", 8, 8, dra_held=6), NodeView("b", 8, 8, dra_held=5)]
    assert [p.node for p in decide(plain, [pod("dra", 2)], FREE).placements] == ["a"]


def test_when_no_node_fits_the_pod_in_one_island_best_fit_decides() -> None:
    a = NodeView("a", 8, 8, dra_held=5, groups=(island(0, 0, 2), island(1, 0, 1)))
    b = NodeView("b", 8, 8, dra_held=4, groups=(island(0, 0, 2), island(1, 0, 2)))
    assert [p.node for p in decide([a, b], [pod("dra", 3)], FREE).placements] == ["a"]


def test_the_one_node_that_moves_a_whole_numa_node_wins_however_many_alike_nodes_come_before_it() -> None:
    # Twenty nodes alike in free counts: nineteen split their 4 free legacy GPUs over two NUMA nodes, the last by
    # name holds all four in one. Every candidate is ranked (nodes of one grouping once), not the first few of a
    # bucket: the 4-GPU pod goes to the one node where its GPUs end up together.
    split = [NodeView(f"n{i:02d}", 8, 0, legacy_held=4, groups=(FreeGroup("numa-0", 2), FreeGroup("numa-1", 2)))
             for i in range(19)]
    whole = NodeView("n19", 8, 0, legacy_held=4, groups=(FreeGroup("numa-0", 4), FreeGroup("numa-1", 0)))
    (change,) = decide([*split, whole], [pod("dra", 4)], FREE).changes
    assert (change.node, change.dra, change.groups) == ("n19", 4, ("numa-0",))
