"""Properties of the decision core over generated clusters (hypothesis, derandomized: the same examples every run).

* never a target that would move a held device, never a change on a pinned/settling/unknown node, never one
  against the moves under way on a node;
* the plan the core makes fits: no node is asked for more GPUs of a side than it has free;
* demand is met whenever free capacity of the right kind exists somewhere: a pod left pending has no node with
  enough free GPUs on either side (after the pods served before it);
* the number of moves is minimal, checked by brute force over every safe target of every node on small clusters,
  given where the pods that already fit are placed (the scheduler binds those itself, before any move: see
  bridge/controller/decide.py);
* the limits hold: no reversal inside the cool-down, never more moves than the rate-limit budget, and a to-DRA move
  never takes a pool below its minimum legacy share.

Nodes carry topology groups (NVLink islands / NUMA nodes, sometimes lagging the counts as a status may) in every
property above, and the topology preference has its own: a pod that needs moves goes to a node where it ends in one
group, else where the moved GPUs come from one group, whenever a node needing as few moves offers that; a pod that
fits goes where it fits one group whenever a node offers that; and a change names only groups of its node that had
the GPUs it moves.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.controller.decide import decide
from bridge.controller.model import Api, Decision, FreeGroup, Memory, NodeView, PendingPod, Policy, PoolPolicy

PROPS = settings(max_examples=120, deadline=None, derandomize=True)
TOPOLOGY = settings(max_examples=80, deadline=None, derandomize=True)
UNLIMITED = Policy(max_moves_per_minute=10_000, cooldown_s=0)


@st.composite
def free_groups(draw: st.DrawFn, legacy: int, dra: int, lagging: bool) -> tuple[FreeGroup, ...]:
    """`legacy` and `dra` free GPUs spread over up to 3 groups (none: no topology); `lagging`: the groups may show a
    few more free GPUs than the counts (a binding the daemon has not reported yet)."""
    n = draw(st.integers(0, 3))
    if n == 0:
        return ()
    if lagging:
        legacy += draw(st.integers(0, 2))
    names = draw(st.permutations(["nvlink-0", "nvlink-1", "numa-0", "numa-1"]))[:n]
    counts = [[0, 0] for _ in range(n)]
    for side, total in enumerate((legacy, dra)):
        for _ in range(total):
            counts[draw(st.integers(0, n - 1))][side] += 1
    return tuple(FreeGroup(name, c[0], c[1]) for name, c in zip(names, counts))


@st.composite
def node_views(draw: st.DrawFn, index: int, max_gpus: int, frozen: bool, lagging: bool = True) -> NodeView:
    total = draw(st.integers(1, max_gpus))
    dra = draw(st.integers(0, total))
    state = draw(st.sampled_from(["", "", "", "pinned", "settling", "unknown"])) if frozen else ""
    if state == "unknown":
        return NodeView(f"n{index}", 0, 0, frozen="unknown", pool=draw(st.sampled_from("ab")))
    moving = draw(st.sampled_from([None, None, "to-dra", "to-legacy"])) if frozen else None
    dra_held = draw(st.integers(0, dra))
    legacy_held = draw(st.integers(0, total - dra))
    groups = draw(free_groups(total - dra - legacy_held, dra - dra_held, lagging))
    return NodeView(f"n{index}", total, dra, dra_held=dra_held, legacy_held=legacy_held,
                    pool=draw(st.sampled_from("ab")), frozen=state, moving=moving,  # type: ignore[arg-type]
                    groups=groups)


@st.composite
def clusters(draw: st.DrawFn, max_nodes: int = 3, max_gpus: int = 4, frozen: bool = False,
             lagging: bool = True) -> list[NodeView]:
    n = draw(st.integers(1, max_nodes))
    return [draw(node_views(i, max_gpus, frozen, lagging)) for i in range(n)]


@st.composite
def pending(draw: st.DrawFn, max_pods: int = 5, max_gpus: int = 3) -> list[PendingPod]:
    n = draw(st.integers(0, max_pods))
    return [PendingPod(f"ns/p{i}", draw(st.sampled_from(["legacy", "dra"])), draw(st.integers(1, max_gpus)), "ns",
                       priority=draw(st.integers(0, 1)), since=float(i)) for i in range(n)]


def final_dra(nodes: list[NodeView], d: Decision) -> dict[str, int]:
    out = {n.name: n.dra for n in nodes}
    out.update({c.node: c.dra for c in d.changes})
    return out


def residual(nodes: list[NodeView], pods: list[PendingPod], d: Decision) -> dict[str, dict[Api, int]]:
    """Free GPUs per node and side once the changes land and the placed pods run."""
    dra = final_dra(nodes, d)
    by_key = {p.key: p for p in pods}
    used: dict[tuple[str, Api], int] = defaultdict(int)
    for pl in d.placements:
        used[(pl.node, by_key[pl.pod].api)] += by_key[pl.pod].gpus
    out = {}
    for n in nodes:
        if n.frozen == "unknown":
            continue
        out[n.name] = {"dra": dra[n.name] - n.dra_held - used[(n.name, "dra")],
                       "legacy": n.total - dra[n.name] - n.legacy_held - used[(n.name, "legacy")]}
    return out


@PROPS
@given(clusters(max_nodes=6, max_gpus=8, frozen=True), pending(max_pods=10, max_gpus=6),
       st.integers(0, 40), st.floats(0, 1), st.integers(0, 200))
def test_no_target_moves_a_held_device_or_touches_a_frozen_node(nodes: list[NodeView], pods: list[PendingPod],
                                                                 budget: int, share: float, since: int) -> None:
    memory = Memory(last_change={"n0": (0.0, "to-dra"), "n1": (0.0, "to-legacy")})
    policy = Policy(min_legacy_share=share, max_moves_per_minute=budget, cooldown_s=100)
    d = decide(nodes, pods, policy, memory, now=float(since))
    by_name = {n.name: n for n in nodes}
    for c in d.changes:
        node = by_name[c.node]
        assert node.frozen == "", f"changed a {node.frozen} node: {c}"
        assert node.moving in (None, c.direction), f"{c} goes against the moves under way on {node}"
        lo, hi = node.safe_range
        assert lo <= c.dra <= hi, f"{c} would move a held device of {node}"
        assert c.previous == node.dra


@PROPS
@given(clusters(max_nodes=5, max_gpus=8, frozen=True), pending(max_pods=10, max_gpus=6))
def test_the_plan_fits_the_free_gpus(nodes: list[NodeView], pods: list[PendingPod]) -> None:
    d = decide(nodes, pods, UNLIMITED)
    for name, free in residual(nodes, pods, d).items():
        assert free["dra"] >= 0 and free["legacy"] >= 0, f"{name} over-committed: {free} after {d}"
    served = {p.pod for p in d.placements} | {b.pod for b in d.blocked}
    assert served == {p.key for p in pods}, "every pending pod is either placed or blocked with a reason"


@PROPS
@given(clusters(max_nodes=5, max_gpus=8), pending(max_pods=10, max_gpus=6))
def test_demand_is_met_whenever_free_capacity_exists_somewhere(nodes: list[NodeView], pods: list[PendingPod]) -> None:
    d = decide(nodes, pods, UNLIMITED)
    left = residual(nodes, pods, d)
    for b in d.blocked:
        assert b.reason == "no-capacity", b
        roomy = [n for n, free in left.items() if free["dra"] + free["legacy"] >= b.gpus]
        assert not roomy, f"{b.pod} left pending although {roomy} have {b.gpus} free GPUs: {d}"


def _packable(caps: list[list[int]], pods: list[PendingPod]) -> bool:
    """Whether `pods` fit `caps` ([free legacy, free dra] per node), by exhaustive search."""
    order = sorted(pods, key=lambda p: -p.gpus)

    def place(k: int) -> bool:
        if k == len(order):
            return True
        side = 0 if order[k].api == "legacy" else 1
        tried = set()
        for c in caps:
            if tuple(c) in tried or c[side] < order[k].gpus:
                continue
            tried.add(tuple(c))
            c[side] -= order[k].gpus
            if place(k + 1):
                return True
            c[side] += order[k].gpus
        return False

    return place(0)


def brute_force_moves(nodes: list[NodeView], fixed: dict[str, dict[Api, int]], pods: list[PendingPod]) -> int | None:
    """The fewest moves of any safe target vector under which `pods` fit, with `fixed` GPUs already taken."""
    ranges = [range(n.safe_range[0], n.safe_range[1] + 1) for n in nodes]
    best = None
    for targets in itertools.product(*ranges):
        moves = sum(abs(t - n.dra) for t, n in zip(targets, nodes))
        if best is not None and moves >= best:
            continue
        caps = [[n.total - t - n.legacy_held - fixed[n.name]["legacy"], t - n.dra_held - fixed[n.name]["dra"]]
                for t, n in zip(targets, nodes)]
        if all(c >= 0 for cap in caps for c in cap) and _packable(caps, pods):
            best = moves
    return best


@settings(max_examples=300, deadline=None, derandomize=True)
@given(clusters(max_nodes=3, max_gpus=4), pending(max_pods=5, max_gpus=3))
def test_moves_are_minimal_by_brute_force_on_small_clusters(nodes: list[NodeView], pods: list[PendingPod]) -> None:
    d = decide(nodes, pods, UNLIMITED)
    by_key = {p.key: p for p in pods}
    fixed: dict[str, dict[Api, int]] = {n.name: {"legacy": 0, "dra": 0} for n in nodes}
    for pl in d.placements:
        if pl.moves == 0 and not any(pl.pod in c.pods for c in d.changes):
            fixed[pl.node][by_key[pl.pod].api] += by_key[pl.pod].gpus
    moved = [by_key[pl.pod] for pl in d.placements if pl.moves > 0]
    assert d.moves == brute_force_moves(nodes, fixed, moved), d


@PROPS
@given(clusters(max_nodes=6, max_gpus=8), pending(max_pods=10, max_gpus=6), st.integers(0, 30),
       st.floats(0, 1), st.floats(0, 1), st.integers(0, 150), st.integers(1, 40))
def test_cool_down_rate_limit_and_legacy_floor_hold(nodes: list[NodeView], pods: list[PendingPod], budget: int,
                                                    share_a: float, share_b: float, now: int, per_decision: int
                                                    ) -> None:
    policy = Policy(pools={"a": PoolPolicy(share_a), "b": PoolPolicy(share_b)}, max_moves_per_minute=budget,
                    cooldown_s=100, max_moves_per_decision=per_decision)
    last = {n.name: (float(i * 20), "to-dra" if i % 2 else "to-legacy") for i, n in enumerate(nodes)}
    memory = Memory(last_change=last, recent_moves=((float(now) - 30, budget // 3),))  # type: ignore[arg-type]
    d = decide(nodes, pods, policy, memory, now=float(now))
    assert d.moves <= budget - budget // 3 and d.moves <= per_decision
    for c in d.changes:
        t, direction = last[c.node]
        assert direction == c.direction or now - t >= policy.cooldown_s, f"reversal inside the cool-down: {c}"
    dra = final_dra(nodes, d)
    for pool in "ab":
        members = [n for n in nodes if n.pool == pool]
        total = sum(n.total for n in members)
        floor = policy.min_legacy(pool, total)
        before = sum(n.legacy for n in members)
        after = sum(n.total - dra[n.name] for n in members)
        assert after >= min(before, floor), f"pool {pool} pushed below its floor: {before} -> {after}"


# ---- the topology preference ----------------------------------------------------------------------------------------

def _tier(node: NodeView, api: Api, need: int) -> int:
    """0: the pod (every free GPU of `api` on the node plus `need` moved ones) ends in one group; 1: the moved GPUs
    come from one group; 2: neither. A node without topology is one group."""
    groups = node.groups or (FreeGroup("", node.free("legacy"), node.free("dra")),)
    give: Api = "legacy" if api == "dra" else "dra"
    if any(g.free(give) >= need and g.free(api) == node.free(api) for g in groups):
        return 0
    return 1 if any(g.free(give) >= need for g in groups) else 2


@TOPOLOGY
@given(clusters(max_nodes=6, max_gpus=8, lagging=False), st.sampled_from(["legacy", "dra"]), st.integers(1, 8))
def test_a_pod_needing_moves_goes_where_its_gpus_are_one_group_when_a_node_needing_as_few_offers_that(
        nodes: list[NodeView], api: Api, gpus: int) -> None:
    d = decide(nodes, [PendingPod("ns/p", api, gpus, "ns")], UNLIMITED)
    if not d.changes:
        return
    (change,) = d.changes
    need = {n.name: gpus - n.free(api) for n in nodes if n.free("legacy") + n.free("dra") >= gpus}
    fewest = min(need.values())
    by_name = {n.name: n for n in nodes}
    assert change.moves == fewest == need[change.node]
    best = min(_tier(by_name[name], api, k) for name, k in need.items() if k == fewest)
    assert _tier(by_name[change.node], api, fewest) == best, f"{change} on {by_name[change.node]}"
    if best < 2 and by_name[change.node].groups:
        (group,) = change.groups
        assert any(g.name == group for g in by_name[change.node].groups)
    else:
        assert change.groups == (), "a move spanning groups (or a node without topology) promises no group"


@st.composite
def grouped_nodes(draw: st.DrawFn) -> list[NodeView]:
    """2-5 nodes of 16 GPUs whose free GPUs all sit in 2 or 3 known groups (where the fit preference can bite)."""
    out = []
    for i in range(draw(st.integers(2, 5))):
        groups = tuple(FreeGroup(f"nvlink-{k}", draw(st.integers(0, 2)), draw(st.integers(0, 3)))
                       for k in range(draw(st.integers(2, 3))))
        free_legacy, free_dra = sum(g.legacy for g in groups), sum(g.dra for g in groups)
        dra = free_dra + draw(st.integers(0, 16 - free_legacy - free_dra))
        out.append(NodeView(f"n{i}", 16, dra, dra_held=dra - free_dra, legacy_held=16 - dra - free_legacy,
                            groups=groups))
    return out


@TOPOLOGY
@given(grouped_nodes(), st.sampled_from(["legacy", "dra"]), st.integers(2, 4))
def test_a_pod_that_fits_is_placed_where_it_fits_one_group_when_a_node_offers_that(
        nodes: list[NodeView], api: Api, gpus: int) -> None:
    d = decide(nodes, [PendingPod("ns/p", api, gpus, "ns")], UNLIMITED)
    if d.changes or d.blocked:
        return
    (placed,) = d.placements
    def one_group(n: NodeView) -> bool:
        return any(g.free(api) >= gpus for g in n.groups)

    if any(one_group(n) for n in nodes if n.free(api) >= gpus):
        assert one_group(next(n for n in nodes if n.name == placed.node))


@TOPOLOGY
@given(clusters(max_nodes=5, max_gpus=8), pending(max_pods=10, max_gpus=6))
def test_a_change_names_only_groups_of_its_node_that_had_the_gpus_it_moves(nodes: list[NodeView],
                                                                          pods: list[PendingPod]) -> None:
    d = decide(nodes, pods, UNLIMITED)
    by_name = {n.name: n for n in nodes}
    for c in d.changes:
        groups = {g.name: g for g in by_name[c.node].groups}
        giving: Api = "legacy" if c.direction == "to-dra" else "dra"
        assert set(c.groups) <= set(groups), c
        assert all(groups[g].free(giving) > 0 for g in c.groups), f"{c} names a group with nothing to give"
        assert len(c.groups) <= c.moves


@PROPS
@given(clusters(max_nodes=6, max_gpus=8, frozen=True), pending(max_pods=10, max_gpus=6),
       clusters(max_nodes=6, max_gpus=8, frozen=True), st.lists(st.booleans(), min_size=6, max_size=6),
       st.integers(0, 12))
def test_a_decision_on_views_it_saw_before_is_the_decision_on_fresh_ones(
        nodes: list[NodeView], pods: list[PendingPod], others: list[NodeView], keep: list[bool], budget: int) -> None:
    """The core memoises what it derives from a view object (the controller hands unchanged nodes' views to the next
    decision as the same objects); a decision on a mix of seen and new view objects equals the one on fresh copies."""
    policy = Policy(max_moves_per_minute=budget, cooldown_s=60)
    memory = Memory({"n1": (0.0, "to-dra")})
    decide(nodes, pods, policy, memory, 10.0)
    by_name = {n.name: n for n in others}
    mixed = [n if k or n.name not in by_name else by_name[n.name] for n, k in zip(nodes, keep)]
    got = decide(mixed, pods, policy, memory, 10.0)
    decide([], [], policy)  # the memo keeps the views of the last decision only: now none
    assert got == decide([replace(n) for n in mixed], pods, policy, memory, 10.0)
