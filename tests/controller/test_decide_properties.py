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
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.controller.decide import decide
from bridge.controller.model import Api, Decision, Memory, NodeView, PendingPod, Policy, PoolPolicy

PROPS = settings(max_examples=120, deadline=None, derandomize=True)
UNLIMITED = Policy(max_moves_per_minute=10_000, cooldown_s=0)


@st.composite
def node_views(draw: st.DrawFn, index: int, max_gpus: int, frozen: bool) -> NodeView:
    total = draw(st.integers(1, max_gpus))
    dra = draw(st.integers(0, total))
    state = draw(st.sampled_from(["", "", "", "pinned", "settling", "unknown"])) if frozen else ""
    if state == "unknown":
        return NodeView(f"n{index}", 0, 0, frozen="unknown", pool=draw(st.sampled_from("ab")))
    moving = draw(st.sampled_from([None, None, "to-dra", "to-legacy"])) if frozen else None
    return NodeView(f"n{index}", total, dra, dra_held=draw(st.integers(0, dra)),
                    legacy_held=draw(st.integers(0, total - dra)), pool=draw(st.sampled_from("ab")),
                    frozen=state, moving=moving)  # type: ignore[arg-type]


@st.composite
def clusters(draw: st.DrawFn, max_nodes: int = 3, max_gpus: int = 4, frozen: bool = False) -> list[NodeView]:
    n = draw(st.integers(1, max_nodes))
    return [draw(node_views(i, max_gpus, frozen)) for i in range(n)]


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
       st.floats(0, 1), st.floats(0, 1), st.integers(0, 150))
def test_cool_down_rate_limit_and_legacy_floor_hold(nodes: list[NodeView], pods: list[PendingPod], budget: int,
                                                    share_a: float, share_b: float, now: int) -> None:
    policy = Policy(pools={"a": PoolPolicy(share_a), "b": PoolPolicy(share_b)}, max_moves_per_minute=budget,
                    cooldown_s=100)
    last = {n.name: (float(i * 20), "to-dra" if i % 2 else "to-legacy") for i, n in enumerate(nodes)}
    memory = Memory(last_change=last, recent_moves=((float(now) - 30, budget // 3),))  # type: ignore[arg-type]
    d = decide(nodes, pods, policy, memory, now=float(now))
    assert d.moves <= memory.budget(policy, float(now))
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
