"""The controller's decision core against an earlier commit's, in one process, on the same inputs.

    .venv/bin/python bench/controller_ab.py [--base HEAD] [--rounds 7] [--nodes 5000] [--gpus 8] [--pending 10000]
                                            [--writes] [--max-moves-per-decision 500]
                                            [scenario ...]   (default: every scenario of controller_bench)

The base is `bridge/controller/decide.py` and the value classes it builds (`bridge/controller/model.py`) as they were
at --base (`git show`), loaded beside the working tree's as modules of their own (the base core imports the base
model); everything else comes from the working tree. The inputs are the working tree's values: the base core reads
them by their fields. Per scenario of bench/controller_bench.py (its
nodes and pods: real Node labels, shared constraints), both cores plan from scratch (`reuse=False`), alternating,
--rounds times each; printed: min and median in ms, and new/base of the mins. Before timing, the two decisions are
compared, field by field (the two models' classes differ): a change of the core that is meant to keep every decision
must print "same decision", else the bench stops.

--writes: instead of plans from scratch, the two decisions after one that wrote, as bench/controller_bench.py --writes
makes them (`writes_land`, one event: the changes come back as Nodes settling at their targets with a new pod, "echo",
then the daemons act, "acted"; both plan anew), each core in turn with its memory and clock; printed per kind: min
and median in ms, new/base of the mins, and the changes written (equal, else the bench stops). Each core is called as
the controller calls it (a base without `decide_how(freeze=)` collects a new plan, as it did).

Why in one process: on this shared machine a plan's time moves +-30 % between runs, more than most changes worth
trying; alternating the two cores within one process on the same objects leaves the machine's swing in both columns
alike. (Stop 41 tried two of the cuts that stop 44 kept, process against process, and could not see them.)
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import controller_bench as bench  # noqa: E402

from bridge.controller import decide as new_core  # noqa: E402
from bridge.controller.model import NodeView, PendingPod, Policy  # noqa: E402

CORE = "bridge/controller/decide.py"
MODEL = "bridge/controller/model.py"
IMPORT_MODEL = "from bridge.controller.model import"


def _load(name: str, source: str, where: Path) -> ModuleType:
    path = where / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (its dataclasses look their module up by name)
    spec.loader.exec_module(module)
    return module


def _shown(rev: str, path: str) -> str:
    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], capture_output=True, text=True)
    if shown.returncode != 0:
        raise SystemExit(f"controller_ab: cannot read {path} at {rev}: {shown.stderr.strip()}")
    return shown.stdout


def base_core(rev: str, where: Path) -> ModuleType:
    """`decide.py` as it was at `rev`, loaded as the module `base_decide`, importing `model.py` as it was at `rev`
    (`base_model`)."""
    _load("base_model", _shown(rev, MODEL), where)
    source = _shown(rev, CORE)
    if IMPORT_MODEL not in source:
        raise SystemExit(f"controller_ab: {CORE} at {rev} does not import its model as this bench expects")
    return _load("base_decide", source.replace(IMPORT_MODEL, "from base_model import"), where)


def plain(value: object) -> object:
    """A decision as nested tuples of field values: equal for equal decisions whatever classes hold them."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return tuple(plain(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, plain(v)) for k, v in value.items()))
    return value


def after_writes(core: ModuleType, nodes: list[NodeView], pods: list[PendingPod], arrivals: list[PendingPod],
                 policy: Policy) -> tuple[float, float | None, list[int]]:
    """`controller_bench.writes_land` with `core` as its core, one event: the echo's and the acted decision's times
    (None: no daemon had anything to act on), and the changes each decision wrote."""
    takes_freeze = "freeze" in core.decide_how.__code__.co_varnames

    def decide_how(*a: object, freeze: bool = False, **k: object) -> object:
        return core.decide_how(*a, **k, **({"freeze": freeze} if takes_freeze else {}))

    calls = types.SimpleNamespace(decide=core.decide, decide_how=decide_how, _Node=core._Node, _Seed=core._Seed)
    echo, _, acted, _, written = bench.writes_land(nodes, pods, iter(arrivals), policy, 1, calls)
    return echo[0], acted[0] if acted else None, written


def writes(base: ModuleType, args: argparse.Namespace, names: list[str]) -> None:
    policies = dict(bench.with_moves_per_decision(args.max_moves_per_decision))
    print(f"controller core after its own writes, working tree vs {args.base}: {args.nodes} nodes x {args.gpus} GPUs, "
          f"{args.pending} pending pods, alternating, {args.rounds} rounds each (ms)")
    print(f"  {'scenario':<13} {'kind':<6} {'base min':>9} {'new min':>8} {'new/base':>9} {'base med':>9} "
          f"{'new med':>8}")
    for scenario in args.scenarios or names:
        nodes, pods = bench.scenario_inputs(scenario, args.nodes, args.gpus, args.pending + 1)
        pods, arrivals = pods[: args.pending], pods[args.pending:]
        times: dict[str, dict[str, list[float]]] = {"echo": {"base": [], "new": []}, "acted": {"base": [], "new": []}}
        written: dict[str, list[int]] = {}
        if after_writes(base, nodes, pods, arrivals, policies[scenario])[1] is None:
            print(f"  {scenario:<13} the first decision writes nothing: no decision after writes")
            continue
        for _ in range(args.rounds):
            for name, core in (("base", base), ("new", new_core)):
                echo, acted, written[name] = after_writes(core, nodes, pods, arrivals, policies[scenario])
                assert acted is not None, f"{name} wrote nothing where the base did"
                times["echo"][name].append(echo)
                times["acted"][name].append(acted)
        if written["base"] != written["new"]:
            raise SystemExit(f"controller_ab: {scenario}: the two cores wrote differently: {written}")
        for kind, t in times.items():
            b, n = min(t["base"]), min(t["new"])
            print(f"  {scenario:<13} {kind:<6} {b * 1000:>9.1f} {n * 1000:>8.1f} {n / b:>9.2f} "
                  f"{statistics.median(t['base']) * 1000:>9.1f} {statistics.median(t['new']) * 1000:>8.1f}"
                  f"   wrote {written['new']}")


def main() -> None:
    names = [s for s, _ in bench.SCENARIOS]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="HEAD", help="the commit whose core is the baseline (default: HEAD)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--pending", type=int, default=10000)
    ap.add_argument("--writes", action="store_true", help="the decisions after one that wrote, not plans from scratch")
    ap.add_argument("--max-moves-per-decision", type=int, default=Policy().max_moves_per_decision,
                    help="as bench/controller_bench.py's (a base before stop 46 has no such limit: give 1000000)")
    ap.add_argument("scenarios", nargs="*", metavar="scenario", help=f"any of {', '.join(names)} (default: all)")
    args = ap.parse_args()
    unknown = [s for s in args.scenarios if s not in names]
    if unknown:
        ap.error(f"unknown scenario {', '.join(unknown)}: any of {', '.join(names)}")
    policies = dict(bench.with_moves_per_decision(args.max_moves_per_decision))
    with tempfile.TemporaryDirectory() as tmp:
        base = base_core(args.base, Path(tmp))
        if args.writes:
            writes(base, args, names)
            return
        print(f"controller core, working tree vs {args.base}: {args.nodes} nodes x {args.gpus} GPUs, {args.pending} "
              f"pending pods, plans from scratch alternating, {args.rounds} rounds each (ms)")
        print(f"  {'scenario':<13} {'base min':>9} {'new min':>8} {'new/base':>9} {'base med':>9} {'new med':>8}")
        for scenario in args.scenarios or names:
            policy = policies[scenario]
            nodes, pods = bench.scenario_inputs(scenario, args.nodes, args.gpus, args.pending)
            decisions = (core.decide(nodes, pods, policy, reuse=False) for core in (base, new_core))
            if plain(next(decisions)) != plain(next(decisions)):
                raise SystemExit(f"controller_ab: {scenario}: the two cores decide differently")
            times: dict[str, list[float]] = {"base": [], "new": []}
            for _ in range(args.rounds):
                for name, core in (("base", base), ("new", new_core)):
                    start = time.perf_counter()
                    core.decide(nodes, pods, policy, reuse=False)
                    times[name].append(time.perf_counter() - start)
            b, n = min(times["base"]), min(times["new"])
            print(f"  {scenario:<13} {b * 1000:>9.1f} {n * 1000:>8.1f} {n / b:>9.2f} "
                  f"{statistics.median(times['base']) * 1000:>9.1f} {statistics.median(times['new']) * 1000:>8.1f}"
                  f"   same decision")


if __name__ == "__main__":
    main()
