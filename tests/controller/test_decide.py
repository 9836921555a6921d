"""The decision core, case by case: what moves, where, why, and what is never touched."""

from __future__ import annotations

import gc

import pytest

from bridge.controller.decide import decide, queue_order
from bridge.controller.model import Memory, NodeView, PendingPod, Policy, PoolPolicy
from bridge.kvalues.placement import Constraints, Taint, Toleration

FREE = Policy(max_moves_per_minute=1000, cooldown_s=60)


def dra_pods(n: int, gpus: int, ns: str = "team-a") -> list[PendingPod]:
    return [PendingPod(f"{ns}/train-{i}", "dra", gpus, ns, since=float(i)) for i in range(n)]


def legacy_pods(n: int, gpus: int, ns: str = "team-b") -> list[PendingPod]:
    return [PendingPod(f"{ns}/job-{i}", "legacy", gpus, ns, since=float(i)) for i in range(n)]


def test_pods_that_fit_free_gpus_of_their_api_move_nothing() -> None:
    nodes = [NodeView("gpu-node-1", 8, 4, dra_held=0, legacy_held=4)]
    d = decide(nodes, dra_pods(2, 2), FREE)
    assert d.changes == ()
    assert [p.moves for p in d.placements] == [0, 0]
    assert d.blocked == ()


def test_dra_pods_get_free_legacy_gpus_moved_with_the_reason_in_words() -> None:
    nodes = [NodeView("gpu-node-4", 8, 0, legacy_held=2)]
    d = decide(nodes, dra_pods(3, 2), FREE)
    (change,) = d.changes
    assert (change.node, change.previous, change.dra, change.target) == ("gpu-node-4", 0, 6, "6")
    assert change.reason == ("3 pending DRA pods in team-a need 6 GPUs; gpu-node-4 had 6 free legacy GPUs: "
                             "moving 6 to DRA")
    assert set(change.pods) == {"team-a/train-0", "team-a/train-1", "team-a/train-2"}


def test_the_node_needing_the_fewest_moves_is_chosen() -> None:
    nodes = [NodeView("a", 8, 0), NodeView("b", 8, 3, dra_held=0), NodeView("c", 8, 1)]
    d = decide(nodes, dra_pods(1, 4), FREE)
    (change,) = d.changes
    assert (change.node, change.moves) == ("b", 1)  # b already has 3 free DRA GPUs


def test_held_gpus_never_move() -> None:
    # Every legacy GPU of `busy` is held; the pod must go where free ones are.
    nodes = [NodeView("busy", 8, 0, legacy_held=8), NodeView("idle", 8, 0, legacy_held=6)]
    d = decide(nodes, dra_pods(1, 2), FREE)
    (change,) = d.changes
    assert change.node == "idle" and change.dra == 2
    assert NodeView("idle", 8, 0, legacy_held=6).is_safe(change.dra)


def test_a_pod_too_big_for_any_node_is_blocked_for_capacity_and_moves_nothing() -> None:
    nodes = [NodeView("a", 8, 0, legacy_held=5), NodeView("b", 8, 8, dra_held=6)]
    d = decide(nodes, dra_pods(1, 4), FREE)
    assert d.changes == ()
    (b,) = d.blocked
    assert b.reason == "no-capacity" and "the most is 3" in b.message


def test_pinned_and_settling_nodes_are_never_changed_but_their_free_gpus_serve_pods() -> None:
    nodes = [NodeView("pinned", 8, 2, frozen="pinned", frozen_reason="annotation dra-bridge.io/split-pinned=true"),
             NodeView("settling", 8, 0, frozen="settling", frozen_reason="moves under way (gpu-7)")]
    d = decide(nodes, dra_pods(1, 2) + legacy_pods(1, 4) + dra_pods(1, 3, "team-c"), FREE)
    assert d.changes == ()
    placed = {p.pod: p.node for p in d.placements}
    assert placed == {"team-a/train-0": "pinned", "team-b/job-0": "pinned"}
    (blocked,) = d.blocked
    assert (blocked.pod, blocked.reason) == ("team-c/train-0", "frozen")
    assert blocked.message == "needs 3 DRA GPUs; only settling nodes have room (e.g. settling: moves under way (gpu-7))"


def test_a_node_whose_state_is_unknown_offers_nothing_and_is_never_changed() -> None:
    nodes = [NodeView("dark", 0, 0, frozen="unknown", frozen_reason="no dra-bridge.io/split-status annotation")]
    d = decide(nodes, dra_pods(1, 1), FREE)
    assert d.changes == () and d.placements == ()
    assert d.blocked[0].reason == "no-matching-node"


def test_a_reversal_waits_for_the_cool_down_but_the_same_direction_does_not() -> None:
    nodes = [NodeView("a", 8, 4)]
    memory = Memory(last_change={"a": (100.0, "to-dra")})
    policy = Policy(max_moves_per_minute=1000, cooldown_s=60)
    back = decide(nodes, legacy_pods(1, 6), policy, memory, now=130.0)
    assert back.changes == ()
    assert back.blocked[0].reason == "cooldown" and "30s of cool-down left" in back.blocked[0].message
    later = decide(nodes, legacy_pods(1, 6), policy, memory, now=161.0)
    assert [(c.node, c.dra) for c in later.changes] == [("a", 2)]
    more = decide(nodes, dra_pods(1, 6), policy, memory, now=130.0)
    assert [(c.node, c.dra) for c in more.changes] == [("a", 6)]


def test_one_decision_never_moves_gpus_both_ways_on_one_node() -> None:
    nodes = [NodeView("a", 8, 4)]
    d = decide(nodes, dra_pods(1, 6) + legacy_pods(1, 6), FREE)
    assert len(d.changes) == 1
    assert len(d.blocked) == 1 and d.blocked[0].reason in ("cooldown", "no-capacity")


def test_a_pool_at_its_minimum_legacy_share_gives_no_gpus_to_dra() -> None:
    policy = Policy(min_legacy_share=0.0, pools={"inference": PoolPolicy(0.75)}, max_moves_per_minute=1000)
    nodes = [NodeView("inf-1", 8, 2, dra_held=2, pool="inference"),
             NodeView("trn-1", 8, 0, pool="training", legacy_held=6)]
    d = decide(nodes, dra_pods(1, 2), policy)
    assert [(c.node, c.dra) for c in d.changes] == [("trn-1", 2)]  # inference already has 6 of 8 legacy = 0.75
    d2 = decide(nodes, dra_pods(1, 4), policy)
    assert d2.changes == ()
    assert d2.blocked[0].reason == "min-legacy-share" and "inference" in d2.blocked[0].message


def test_a_pool_below_its_minimum_legacy_share_gets_free_dra_gpus_back() -> None:
    policy = Policy(min_legacy_share=0.5, max_moves_per_minute=1000)
    nodes = [NodeView("a", 8, 8, dra_held=5), NodeView("b", 8, 6, dra_held=6)]
    d = decide(nodes, [], policy)
    (change,) = d.changes  # 2 legacy of 16; floor 8; only a's 3 free DRA GPUs can go back
    assert (change.node, change.dra, change.direction) == ("a", 5, "to-legacy")
    assert "below its minimum legacy share 0.5" in change.reason


def test_the_rate_limit_caps_moves_and_spends_what_is_left_on_the_best_node() -> None:
    policy = Policy(max_moves_per_minute=5)
    nodes = [NodeView("a", 8, 0), NodeView("b", 8, 0)]
    memory = Memory(recent_moves=((10.0, 2),))  # 2 moves 20 s ago: 3 left
    d = decide(nodes, dra_pods(2, 4), policy, memory, now=30.0)
    assert d.moves == 3
    assert {b.reason for b in d.blocked} == {"rate-limit"}
    (partial,) = d.changes
    # A minute later the budget is back: the node that got 3 finishes the first pod with one more move, and the
    # second pod's 4 come from the same node's free legacy GPUs (the best fit).
    nodes2 = [NodeView(partial.node, 8, 3), NodeView("b" if partial.node == "a" else "a", 8, 0)]
    d2 = decide(nodes2, dra_pods(2, 4), policy, Memory(recent_moves=((30.0, 3),)), now=91.0)
    assert [(c.node, c.moves) for c in d2.changes] == [(partial.node, 5)]
    assert d2.blocked == ()


def test_one_decision_moves_at_most_its_limit_and_the_next_decision_goes_on() -> None:
    policy = Policy(max_moves_per_minute=1000, max_moves_per_decision=6)
    nodes = [NodeView("a", 8, 0), NodeView("b", 8, 0), NodeView("c", 8, 0)]
    d = decide(nodes, dra_pods(3, 4), policy)
    assert d.moves == 6
    assert [p.pod for p in d.placements] == ["team-a/train-0"]  # 4 moved for it, 2 more towards the next pod
    assert [(b.pod, b.reason) for b in d.blocked] == [("team-a/train-1", "rate-limit"),
                                                      ("team-a/train-2", "rate-limit")]
    assert d.blocked[0].message.endswith("the limit of 6 moves per decision is reached (the next decision goes on)")
    # The next decision, 5 s later, has 6 of its own (the minute's window has 994 left): the first pod bound where
    # its 4 moved, the second pod gets its last 2 there and the third pod 4 on another node.
    (change,) = d.changes
    after = [NodeView(n.name, 8, change.dra, dra_held=4) if n.name == change.node else n for n in nodes]
    d2 = decide(after, dra_pods(3, 4)[1:], policy, Memory().after(d, 0.0), now=5.0)
    assert d2.moves == 6 and d2.blocked == ()
    assert [p.moves for p in d2.placements] == [2, 4]


def test_under_a_dry_run_the_limit_per_decision_says_every_decision_plans_the_same_moves() -> None:
    # Nothing a dry run plans is written or remembered, so no decision goes further than this one: the pods past the
    # limit are not told that the next decision goes on. The moves are the same as in a real run.
    policy = Policy(max_moves_per_minute=1000, max_moves_per_decision=6)
    nodes = [NodeView("a", 8, 0), NodeView("b", 8, 0), NodeView("c", 8, 0)]
    real = decide(nodes, dra_pods(3, 4), policy)
    dry = decide(nodes, dra_pods(3, 4), policy, Memory(dry_run=True))
    assert dry.changes == real.changes and [b.pod for b in dry.blocked] == [b.pod for b in real.blocked]
    words = "the limit of 6 moves per decision is reached"
    assert [b.message for b in real.blocked] == [f"needs 4 GPUs moved on a; {words} (the next decision goes on)",
                                                 f"needs 2 GPUs moved on a; {words} (the next decision goes on)"]
    assert [b.message for b in dry.blocked] == [
        f"needs 4 GPUs moved on a; {words} (a dry run writes nothing: every decision plans the same first 6)",
        f"needs 2 GPUs moved on a; {words} (a dry run writes nothing: every decision plans the same first 6)"]
    # The flag outlives the memory's own upkeep, as the loop keeps it.
    assert Memory(dry_run=True).forget({"a"}, policy, 10.0).after(real, 10.0).dry_run


def test_the_rate_limit_names_itself_where_it_is_lower_than_the_limit_per_decision() -> None:
    policy = Policy(max_moves_per_minute=10, max_moves_per_decision=6)
    memory = Memory(recent_moves=((0.0, 8),))  # 2 left this minute, 6 per decision
    d = decide([NodeView("a", 8, 0)], dra_pods(1, 4), policy, memory, now=30.0)
    assert d.moves == 2
    assert d.blocked[0].message.endswith("the limit of 10 moves per minute is reached")


def test_zero_moves_per_minute_pauses_every_move() -> None:
    d = decide([NodeView("a", 8, 0)], dra_pods(1, 1), Policy(max_moves_per_minute=0))
    assert d.changes == () and d.blocked[0].reason == "rate-limit"


def test_gpus_move_only_on_nodes_the_pod_may_run_on() -> None:
    wants_h100 = Constraints(node_selector=(("nvidia.com/gpu.product", "H100"),))
    tainted = NodeView("h100-tainted", 8, 0, labels={"nvidia.com/gpu.product": "H100"},
                       taints=(Taint("dedicated", "ml", "NoSchedule"),))
    plain = NodeView("a100", 8, 0, labels={"nvidia.com/gpu.product": "A100"})
    ok = NodeView("h100", 8, 0, labels={"nvidia.com/gpu.product": "H100"})
    pod = PendingPod("ml/p", "dra", 2, "ml", constraints=wants_h100)
    assert [c.node for c in decide([tainted, plain, ok], [pod], FREE).changes] == ["h100"]
    assert decide([tainted, plain], [pod], FREE).blocked[0].reason == "no-matching-node"
    tolerant = PendingPod("ml/p", "dra", 2, "ml", constraints=Constraints(
        wants_h100.node_selector, tolerations=(Toleration("dedicated", "Equal", "ml", "NoSchedule"),)))
    assert [c.node for c in decide([tainted, plain], [tolerant], FREE).changes] == ["h100-tainted"]


def test_nodes_that_differ_only_in_labels_no_pod_reads_are_checked_once_for_their_constraints(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every real Node has labels of its own (its hostname): a plan checks a pod's constraints once per group of nodes
    alike in the labels those constraints name, their taints and their cordon, and still tells apart a node without
    a label from one whose label is empty."""
    nodes = [NodeView(f"n{i}", 8, 0, labels={"kubernetes.io/hostname": f"n{i}", "zone": "a" if i < 6 else "b"})
             for i in range(10)]
    nodes += [NodeView("n10", 8, 0, labels={"kubernetes.io/hostname": "n10", "zone": ""}),
              NodeView("n11", 8, 0, labels={"kubernetes.io/hostname": "n11"}),
              NodeView("n12", 8, 0, labels={"kubernetes.io/hostname": "n12", "zone": "a"}, unschedulable=True)]
    checks: list[str] = []
    allows = Constraints.allows

    def counted(self: Constraints, name: str, *rest: object) -> bool:
        checks.append(name)
        return allows(self, name, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(Constraints, "allows", counted)
    in_b = Constraints(node_selector=(("zone", "b"),))
    empty_zone = Constraints(node_selector=(("zone", ""),))
    pods = [PendingPod("ml/b", "dra", 8, "ml", constraints=in_b),
            PendingPod("ml/empty", "dra", 8, "ml", since=1.0, constraints=empty_zone),
            PendingPod("ml/any", "dra", 8, "ml", since=2.0)]
    d = decide(nodes, pods, FREE, reuse=False)
    assert {p.pod: p.node for p in d.placements} == {"ml/b": "n6", "ml/empty": "n10", "ml/any": "n0"}
    # zone a, zone b, zone "", no zone, and zone a cordoned: five groups for each of the two constraints that read
    # the zone; two groups (cordoned or not) for the pod without constraints
    assert len(checks) == 5 + 5 + 2


def test_a_cordoned_node_gets_no_moves() -> None:
    nodes = [NodeView("cordoned", 8, 0, unschedulable=True), NodeView("open", 8, 0, legacy_held=7)]
    d = decide(nodes, dra_pods(1, 1), FREE)
    assert [c.node for c in d.changes] == ["open"]


def test_reasons_name_every_namespace_a_change_serves() -> None:
    nodes = [NodeView("n", 8, 0)]
    d = decide(nodes, dra_pods(1, 2, "team-a") + dra_pods(2, 1, "team-b"), FREE)
    (change,) = d.changes
    assert change.reason.startswith("3 pending DRA pods (team-a: 1, team-b: 2) need 4 GPUs; n had 8 free legacy")


def test_legacy_demand_takes_free_dra_gpus_back() -> None:
    nodes = [NodeView("n", 8, 8, dra_held=3)]
    d = decide(nodes, legacy_pods(1, 4), FREE)
    (change,) = d.changes
    assert (change.dra, change.direction) == (4, "to-legacy")
    assert change.reason.startswith("1 pending legacy pod in team-b needs 4 GPUs; n had 5 free DRA GPUs")


def test_higher_priority_pods_are_served_first_when_gpus_are_scarce() -> None:
    nodes = [NodeView("n", 4, 0)]
    low = PendingPod("a/low", "dra", 4, "a", priority=0, since=0.0)
    high = PendingPod("a/high", "dra", 4, "a", priority=100, since=50.0)
    assert [p.key for p in queue_order([low, high])] == ["a/high", "a/low"]
    d = decide(nodes, [low, high], FREE)
    assert d.changes[0].pods == ("a/high",)
    assert [b.pod for b in d.blocked] == ["a/low"]


def test_decisions_are_deterministic() -> None:
    nodes = [NodeView(f"n{i}", 8, i % 3, legacy_held=i % 4) for i in range(20)]
    pods = dra_pods(15, 3) + legacy_pods(10, 2)
    assert decide(nodes, pods, FREE) == decide(list(reversed(nodes)), list(reversed(pods)), FREE)


def test_a_node_with_moves_under_way_moves_further_their_way_only() -> None:
    moving = NodeView("m", 8, 2, moving="to-dra")
    assert [(c.node, c.dra) for c in decide([moving], dra_pods(1, 4), FREE).changes] == [("m", 4)]
    back = decide([moving], legacy_pods(1, 7), FREE)
    assert back.changes == () and back.blocked[0].reason == "cooldown"
    assert "moving GPUs the other way" in back.blocked[0].message


def test_a_decision_leaves_the_garbage_collector_as_it_found_it() -> None:
    """The core pauses Python's cyclic collector while it runs (half its time at scale went to collections walking
    the caller's heap); the caller's setting comes back, whichever it was, also when a decision raises."""
    nodes, pods = [NodeView("n", 8, 2)], dra_pods(3, 2)
    assert gc.isenabled()
    decide(nodes, pods, FREE)
    assert gc.isenabled()
    gc.disable()
    try:
        decide(nodes, pods, FREE)
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(AttributeError):
        decide([None], pods, FREE)  # type: ignore[list-item]
    assert gc.isenabled()


def many_nodes_and_pods() -> tuple[list[NodeView], list[PendingPod]]:
    return [NodeView(f"n{i:03d}", 8, 4, dra_held=1, legacy_held=1) for i in range(300)], dra_pods(600, 1)


def test_a_decision_that_makes_a_new_plan_hands_its_objects_to_the_oldest_generation() -> None:
    """The plan it keeps lives until the next plan: the decision that made it collects the young generations once
    as it ends, so the collections of the next decisions (one pod each, a few ms) do not walk it."""
    nodes, pods = many_nodes_and_pods()
    decide([], [], FREE)  # no plan to go on from
    decide(nodes, pods, FREE)
    young, middle, _ = gc.get_count()
    assert middle == 0 and young < 100, gc.get_count()


def test_the_young_objects_of_a_plan_stay_where_they_are_when_the_caller_paused_the_collector() -> None:
    nodes, pods = many_nodes_and_pods()
    decide([], [], FREE)
    gc.disable()
    try:
        decide(nodes, pods, FREE)
        assert gc.get_count()[0] > 1000
    finally:
        gc.enable()


def test_a_plan_has_no_reference_cycles_so_reference_counting_frees_it_when_the_next_one_replaces_it() -> None:
    """What lets the controller freeze a new plan instead of collecting it (`decide_how(freeze=True)`): a frozen
    object no collection walks is still freed by reference counting, unless it is in a cycle."""
    import weakref

    import bridge.controller.decide as core

    nodes, pods = many_nodes_and_pods()
    taints = [NodeView(v.name, 8, 0, legacy_held=2, taints=(Taint("pool", "x", "NoSchedule"),)) for v in nodes[:50]]
    tolerating = Constraints(tolerations=(Toleration("pool", "Equal", "x", "NoSchedule"),))
    shaped = [*pods, *(PendingPod(f"x/p-{i}", "dra", 3, "x", since=1e3 + i, constraints=tolerating)
                       for i in range(80))]
    decide([], [], FREE)
    decide([*taints, *nodes[50:]], shaped, Policy(max_moves_per_minute=40))  # fits, moves, rate-limited, blocked
    run = core._last
    assert run is not None and run.planner.indexes and run.blocked and run.by_moves
    alive = [weakref.ref(o) for o in (run, run.planner, *run.planner.indexes.values())]
    del run
    gc.disable()
    try:
        decide([], [], FREE)  # replaces it
        assert [r() for r in alive] == [None] * len(alive), "freed without a collection"
    finally:
        gc.enable()


def tracked(obj: object) -> bool:
    """Whether the collector's passes walk `obj` (a frozen object is in no generation)."""
    return any(o is obj for o in gc.get_objects())


def test_a_new_plan_is_frozen_where_the_caller_settles_its_heap_and_collected_otherwise() -> None:
    import bridge.controller.decide as core
    from bridge.controller.decide import decide_how

    nodes, pods = many_nodes_and_pods()
    gc.unfreeze()
    try:
        decide([], [], FREE)
        _, how = decide_how(nodes, pods, FREE, freeze=True)
        assert how == "from-scratch"
        assert core._last is not None and not tracked(core._last.planner), "frozen: no collection walks it"
        frozen = gc.get_freeze_count()
        assert frozen > 1000 and gc.get_count()[0] < 100
        _, how = decide_how(nodes, [*pods, PendingPod("team-a/late", "dra", 1, "team-a", since=1e6)], FREE,
                            freeze=True)
        assert how == "went-on" and gc.get_freeze_count() <= frozen, "only a new plan is frozen"
        decide([], [], FREE)
        _, how = decide_how(nodes, pods, FREE)
        assert how == "from-scratch" and tracked(core._last.planner), "collected once, as by default"
        assert gc.get_count()[1] == 0
    finally:
        gc.unfreeze()  # the rest of the test session's heap is not this test's to freeze
