"""Under a bursty random workload on both APIs (seeded, fixed number of steps), the controller keeps its promises.

The cluster is simulated (tests/controller/simcluster.py): node daemons that move only free devices, a scheduler
that binds pods at random among the nodes that fit, and the real decision core reading the real status documents.
One step is one second. Promises:

* the one-owner rule holds throughout: no held device ever moves, no pod is bound to a device of the other side;
* no flapping: no node reverses direction inside the cool-down, and the number of target changes stays bounded
  (never more than the pods that arrived; none once the work is done);
* no pending pod waits, while enough free GPUs for it exist on one node (either side), longer than the cool-down
  plus one move, plus one decision interval for the controller to notice, the daemon's lag in seeing the target,
  and one step for the scheduler to bind;
* GPUs are not moved twice for the same pods while a daemon has not yet acted on a target;
* every pod runs in the end.
"""

from __future__ import annotations

import random

import pytest

from bridge.controller.model import Policy
from tests.controller.simcluster import Sim, cluster

STEPS = 600
QUIET_FROM = 450  # no arrivals after this step: the tail shows the controller goes quiet


def run(seed: int, *, nodes: int, gpus: int, burst_every: int, burst: tuple[int, int], durations: tuple[int, int],
        policy: Policy, move_time: int = 3, interval: int = 2, daemon_lag: int = 0) -> tuple[Sim, int]:
    sim = Sim(cluster(nodes, gpus), policy, seed=seed, move_time=move_time, interval=interval, daemon_lag=daemon_lag)
    rng = random.Random(seed)
    arrivals = 0
    for t in range(STEPS):
        if t < QUIET_FROM:
            if t % burst_every == 0:
                dra_share = rng.random()  # each burst leans to one API or the other
                for _ in range(rng.randint(*burst)):
                    sim.arrive("dra" if rng.random() < dra_share else "legacy", rng.randint(1, 4),
                               rng.randint(*durations))
                    arrivals += 1
            elif rng.random() < 0.05:
                sim.arrive(rng.choice(["dra", "legacy"]), rng.randint(1, 4), rng.randint(*durations))
                arrivals += 1
        sim.step()
    return sim, arrivals


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("shape", "nodes", "burst_every", "burst", "durations", "lag"), [
    ("moderate", 6, 50, (5, 15), (20, 120), 0),
    ("heavy", 4, 25, (4, 12), (10, 60), 0),
    ("slow-daemons", 4, 25, (4, 12), (10, 60), 4),  # daemons see a target only after two decisions
])
def test_bursty_workload_converges_without_flapping(seed: int, shape: str, nodes: int, burst_every: int,
                                                     burst: tuple[int, int], durations: tuple[int, int],
                                                     lag: int) -> None:
    policy = Policy(max_moves_per_minute=10_000, cooldown_s=30)
    move_time, interval = 3, 2
    sim, arrivals = run(seed, nodes=nodes, gpus=8, burst_every=burst_every, burst=burst, durations=durations,
                        policy=policy, move_time=move_time, interval=interval, daemon_lag=lag)
    assert sim.violations == []
    assert sim.reversals_inside_cooldown() == []
    assert 0 < len(sim.changes) <= arrivals
    last_bound = max(p.bound_at for p in sim.finished + sim.running)
    assert all(t <= last_bound for t, *_ in sim.changes), "a target changed after every pod had been served"
    bound = policy.cooldown_s + lag + move_time + interval + 1
    assert sim.worst_wait_with_room() <= bound
    moved = sum(m for *_, m in sim.changes)
    asked = sum(p.gpus for p in sim.finished + sim.running)
    assert moved <= asked, "never more GPUs moved than the pods asked for (no pod is served twice)"
    assert sim.pending == [], "every pod runs in the end"


def test_the_rate_limit_holds_in_every_minute_of_a_bursty_workload() -> None:
    policy = Policy(max_moves_per_minute=8, cooldown_s=30)
    sim, _ = run(7, nodes=4, gpus=8, burst_every=25, burst=(4, 12), durations=(10, 60), policy=policy)
    assert sim.violations == []
    for start in range(STEPS):
        window = sum(m for t, _, _, m in sim.changes if start <= t < start + 60)
        assert window <= 8, f"{window} moves in the minute from step {start}"
    assert sim.pending == []
