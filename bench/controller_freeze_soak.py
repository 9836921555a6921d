"""What freezing each new plan (`decide_how(freeze=True)`, the controller's default) leaves in the heap between two
settles of the controller's heap (`Controller.settle_heap`, at every state check).

    .venv/bin/python bench/controller_freeze_soak.py [--nodes 1000] [--pending 3000] [--decisions 300]
                                                      [--settle-every 100] [--cycles 200]

A plan has no reference cycles, so reference counting frees it when the next one replaces it, frozen or not
(tests/controller/test_decide.py). What is young when a plan is frozen is frozen with it: a reference cycle among
those objects is garbage that no collection sees until the next settle, which unfreezes everything and collects it.
Here, between decisions, the caller makes --cycles objects that refer to themselves (the informers' and the
writer's garbage of that kind: an exception's traceback, say) and replaces one node's view; the decisions run on
`controller_bench`'s `moves*` nodes and pods under the default policy, the queue's tail changing, with a settle every
--settle-every decisions. Printed at each settle: resident memory and frozen objects before it, what it collected,
and both after it. Flat numbers from settle to settle: the frozen garbage is bounded by what the process makes
between two settles.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import controller_bench as bench  # noqa: E402

from bridge.controller.decide import decide_how  # noqa: E402
from bridge.controller.model import Memory  # noqa: E402


class Cycle:
    """An object that refers to itself, with a few hundred bytes: only the cyclic collector can free it."""

    def __init__(self) -> None:
        self.me = self
        self.pad = [0] * 100


def rss_mib() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 // 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pending", type=int, default=3000)
    ap.add_argument("--decisions", type=int, default=300)
    ap.add_argument("--settle-every", type=int, default=100)
    ap.add_argument("--cycles", type=int, default=200)
    args = ap.parse_args()
    policy = dict(bench.SCENARIOS)["moves*"]
    nodes, pods = bench.scenario_inputs("moves*", args.nodes, 8, args.pending)
    rng = random.Random(0)
    hows: dict[str, int] = {}
    print(f"{args.decisions} decisions ({args.nodes} nodes, {args.pending} pending pods, moves*), {args.cycles} "
          f"garbage cycles between two, a settle every {args.settle_every}")
    for i in range(1, args.decisions + 1):
        garbage = [Cycle() for _ in range(args.cycles)]
        del garbage
        at = rng.randrange(len(nodes))
        nodes[at] = replace(nodes[at])
        _, how = decide_how(nodes, pods[: len(pods) - 7 + i % 7], policy, Memory(), float(i), freeze=True)
        hows[how] = hows.get(how, 0) + 1
        if i % args.settle_every == 0:
            before, frozen = rss_mib(), gc.get_freeze_count()
            gc.unfreeze()
            found = gc.collect()
            gc.freeze()
            print(f"  after decision {i}: {before} MiB resident, {frozen} objects frozen; the settle collected "
                  f"{found} unreachable ones: {rss_mib()} MiB, {gc.get_freeze_count()} frozen")
    print(f"  plans: {hows}")


if __name__ == "__main__":
    main()
