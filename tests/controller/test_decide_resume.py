"""A decision that goes on from the last decision's plan (bridge/controller/decide.py, `_Run`) is the decision planned
from scratch: over generated clusters (eligibility shapes, cool-downs, rate limits, floors) and sequences of the
events a controller sees between decisions (a new pod at the end of the queue or before it, a pod bound, a view
replaced, the clock moving), every decision with `reuse` equals the one with `reuse=False`.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

import bridge.controller.decide as core
from bridge.controller.decide import decide
from bridge.controller.model import Api, Memory, NodeView, PendingPod, Policy, PoolPolicy
from bridge.kvalues.placement import Constraints, Taint, Toleration
from tests.controller.test_decide_properties import clusters, pending

RESUME = settings(max_examples=150, deadline=None, derandomize=True)

ZONE = "topology.kubernetes.io/zone"
SHAPES = (  # what a pod may ask of its node: nothing, a zone, a zone and tolerating the dedicated nodes
    Constraints(),
    Constraints(node_selector=((ZONE, "z0"),)),
    Constraints(node_selector=((ZONE, "z1"),)),
    Constraints(tolerations=(Toleration("dedicated", "Equal", "ml", "NoSchedule"),)),
)


def shaped(nodes: list[NodeView], zones: list[int], tainted: list[bool]) -> list[NodeView]:
    return [replace(v, labels={ZONE: f"z{z}"}, taints=(Taint("dedicated", "ml", "NoSchedule"),) if t else ())
            for v, z, t in zip(nodes, zones, tainted)]


Event = tuple[str, Api, int, int, int, int, bool, float]
EVENTS = st.lists(st.tuples(
    # half of them a new pod at the end of the queue: the event a decision may go on from
    st.sampled_from(["new", "new", "new", "new", "new", "early", "bound", "view", "clock", "again"]),
    st.sampled_from(["legacy", "dra"]), st.integers(1, 6), st.integers(0, 3),  # a new pod's API, GPUs, shape
    st.sampled_from([0, 0, 0, 1]),  # its priority (1: ahead of the queue's end)
    st.integers(0, 20), st.booleans(),  # the pod bound or node replaced; a view replaced by an equal one or not
    st.sampled_from([0.0, 1.0, 30.0, 70.0]),  # the clock's step
), min_size=1, max_size=12)


@RESUME
@given(clusters(max_nodes=6, max_gpus=8, frozen=True), st.lists(st.integers(0, 1), min_size=6, max_size=6),
       st.lists(st.booleans(), min_size=6, max_size=6), pending(max_pods=10, max_gpus=6),
       st.lists(st.integers(0, 3), min_size=10, max_size=10), EVENTS, st.integers(0, 12), st.floats(0, 0.6),
       st.booleans())
def test_every_decision_going_on_from_the_last_plan_is_the_decision_planned_from_scratch(
        nodes: list[NodeView], zones: list[int], tainted: list[bool], pods: list[PendingPod], shapes: list[int],
        events: list[Event], budget: int, share: float, remembers: bool) -> None:
    nodes = shaped(nodes, zones, tainted)
    pods = [replace(p, constraints=SHAPES[s]) for p, s in zip(pods, shapes)]
    policy = Policy(pools={"a": PoolPolicy(share)}, max_moves_per_minute=budget, cooldown_s=50)
    memory = Memory({n.name: (float(i * 10), "to-dra" if i % 2 else "to-legacy") for i, n in enumerate(nodes)}
                    if remembers else {}, ((0.0, budget // 2),))  # type: ignore[arg-type]
    now, serial = 20.0, 100

    def check() -> None:
        got = decide(nodes, pods, policy, memory, now)
        assert got == decide(nodes, pods, policy, memory, now, reuse=False)

    core.decide([], [], policy)  # no plan of an earlier example to go on from
    check()
    for kind, api, gpus, shape, priority, which, fresh, step in events:
        serial += 1
        if kind in ("new", "early"):
            pods = [*pods, PendingPod(f"ns/q{serial}", api, gpus, "ns", priority=priority if kind == "new" else 0,
                                      since=float(serial) if kind == "new" else -float(serial),
                                      constraints=SHAPES[shape])]
        elif kind == "bound" and pods:
            pods = [p for i, p in enumerate(pods) if i != which % len(pods)]
        elif kind == "view":
            i = which % len(nodes)
            v = nodes[i]
            if not fresh and v.frozen != "unknown" and v.free("legacy"):
                v = replace(v, legacy_held=v.legacy_held + 1, groups=())
            nodes = [*nodes[:i], replace(v), *nodes[i + 1:]]
        elif kind == "clock":
            now += step
        check()


def bench_like(n: int, gpus: int) -> list[NodeView]:
    """Half of each node's GPUs legacy and free, the rest DRA and held: DRA pods wait for moves."""
    return [NodeView(f"node-{i:03d}", gpus, gpus // 2, dra_held=gpus // 2) for i in range(n)]


def thirty_dra_pods_waiting_for_moves() -> tuple[list[NodeView], list[PendingPod], Policy]:
    """A decision taken on 30 DRA pods that all need moves (its plan kept for the next one)."""
    nodes = bench_like(20, 8)
    pods = [PendingPod(f"ns/p{i}", "dra", 2, "ns", since=float(i)) for i in range(30)]
    policy = Policy(max_moves_per_minute=1000)
    decide(nodes, pods, policy)
    return nodes, pods, policy


def test_a_new_pod_at_the_end_of_the_queue_only_adds_its_step_to_the_last_plan() -> None:
    nodes, pods, policy = thirty_dra_pods_waiting_for_moves()
    kept = core._last
    assert kept is not None
    for i in range(30, 40):
        pods = [*pods, PendingPod(f"ns/p{i}", "dra", 1 + i % 3, "ns", since=float(i))]
        got = decide(nodes, pods, policy)
        assert core._last is kept, "planned from scratch"
        assert got == decide(nodes, pods, policy, reuse=False)


def test_a_new_pod_that_would_fit_before_the_pods_waiting_for_moves_is_planned_from_scratch() -> None:
    nodes, pods, policy = thirty_dra_pods_waiting_for_moves()
    kept = core._last
    pods = [*pods, PendingPod("ns/legacy", "legacy", 1, "ns", since=99.0)]  # fits at once, before every move
    got = decide(nodes, pods, policy)
    assert core._last is not kept
    assert got == decide(nodes, pods, policy, reuse=False)
    assert any(p.pod == "ns/legacy" and p.moves == 0 for p in got.placements)


def decide_twice(nodes: list[NodeView], pods: list[PendingPod], policy: Policy, memory: Memory, now: float,
                 new: PendingPod, memory_after: Memory | None = None, now_after: float | None = None) -> None:
    """Decide, add `new` at the end of the queue (and move the memory or the clock), decide again: that decision
    is the one planned from scratch."""
    decide(nodes, pods, policy, memory, now)
    memory, now = memory_after or memory, now if now_after is None else now_after
    pods = [*pods, new]
    assert decide(nodes, pods, policy, memory, now) == decide(nodes, pods, policy, memory, now, reuse=False)


def test_a_new_pod_after_the_floor_step_acted_is_planned_from_scratch() -> None:
    """The floor step moved the free DRA GPUs back to legacy after step 1; from scratch, the new DRA pod takes them in
    step 1, before the floor step runs."""
    nodes = [NodeView("a", 4, 2, legacy_held=2), NodeView("b", 4, 0, legacy_held=4)]
    policy = Policy(min_legacy_share=0.8, max_moves_per_minute=100)  # 7 of 8 GPUs: one short
    decide_twice(nodes, [], policy, Memory(), 0.0, PendingPod("ns/new", "dra", 2, "ns", since=1.0))


def test_a_new_pod_after_the_rate_limit_budget_changed_is_planned_from_scratch() -> None:
    nodes = bench_like(4, 8)
    pods = [PendingPod(f"ns/p{i}", "dra", 2, "ns", since=float(i)) for i in range(3)]
    policy = Policy(max_moves_per_minute=8)
    spent = Memory(recent_moves=((0.0, 4),))
    decide_twice(nodes, pods, policy, Memory(), 10.0, PendingPod("ns/new", "dra", 2, "ns", since=9.0), spent)


def test_a_new_pod_after_a_cool_down_began_is_planned_from_scratch() -> None:
    nodes = bench_like(2, 8)
    pods = [PendingPod("ns/p0", "dra", 2, "ns", since=0.0)]
    policy = Policy(max_moves_per_minute=100, cooldown_s=60)
    cooling = Memory({"node-000": (5.0, "to-legacy")})
    decide_twice(nodes, pods, policy, Memory(), 10.0, PendingPod("ns/new", "dra", 2, "ns", since=9.0), cooling)


def test_a_new_pod_after_the_clock_moved_is_planned_from_scratch_when_a_diagnosis_read_it() -> None:
    """A pod blocked by a cool-down says how many seconds are left: a second later, that message changes."""
    nodes = bench_like(1, 8)
    policy = Policy(max_moves_per_minute=100, cooldown_s=60)
    cooling = Memory({"node-000": (5.0, "to-legacy")})
    pods = [PendingPod("ns/p0", "dra", 2, "ns", since=0.0)]
    decide_twice(nodes, pods, policy, cooling, 10.0, PendingPod("ns/new", "dra", 3, "ns", since=9.0),
                 now_after=11.0)
