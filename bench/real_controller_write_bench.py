"""How long the controller takes to write a decision, against a real kube-apiserver: our Writer vs bare HTTPS.

    .venv/bin/python bench/real_controller_write_bench.py [--changes 300] [--rounds 3] [--threads 4]

Only etcd and kube-apiserver v1.37.2 run (no controller manager, no scheduler): nothing else talks to the server.
Issue 25 times the controller's core; the decision reaches the cluster only once written. The loop writes each
change with `bridge.controller.writer.Writer`, one after another in the decision thread: a merge patch of the Node
(the split key and the decision record, with the resourceVersion the decision was made from) and then an Event on
the Node. The changes are the core's own (`decide` on bench/controller_bench.py's `moves` scenario, --changes of
them), so the records and Events have the sizes a real decision writes; a Node of each change's name exists.

Per round:
1. Each change written twice, on two Nodes of its own, interleaved (each client goes first half the time):
     ours   `Writer.apply` of that one change (the product's code: record, patch, log line, metrics, Event)
     bare   the same two requests with `http.client` on one kept-alive TLS connection: the floor any client pays
   with the API server's own time for them (`apiserver_request_duration_seconds` `_sum`/`_count` across the pass:
   PATCH nodes and POST events, per request). Printed: p50/p99 of a change (both requests), ours/bare, and the
   client's CPU per change (this process).
2. A whole decision: every change written by one `Writer.apply`, as the controller's loop does (the patches in a
   row, each change's Event alongside the next patch), against the baseline of the same changes written one at a
   time (`Writer.apply` per change: its patch, then its Event, then the next change: what the loop did before the
   Events went alongside), on Nodes of their own, alternating which goes first per round. Wall time per change and
   the ratio.
   --threads N: what writing the changes on a pool of N threads would give (bench only: not what the controller
   does, see bridge/controller/writer.py), wall per change and the ratio to one at a time.
The medians over the rounds follow, and what a whole decision costs to write at the median per change, for the sizes
bench/controller_bench.py's scenarios decide at 5,000 nodes (`moves*`, the default policy: 16 changes; `scarce`:
2,444; `moves`: 3,753).
The machine's load average is printed before and after: on this shared 2-core machine the API server, etcd and this
process share the cores, so parallel writes gain less here than against a control plane of its own.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.controller_bench import UNCAPPED, nodes_for, pods_for  # noqa: E402
from bench.realbench import AdminHttps, api_server_alone, hist_sum, load, parse_metrics, pct  # noqa: E402
from bridge.controller.decide import decide  # noqa: E402
from bridge.controller.metrics import ControllerMetrics  # noqa: E402
from bridge.controller.model import TargetChange  # noqa: E402
from bridge.controller.nodestatus import SPLIT_KEY  # noqa: E402
from bridge.controller.record import DECISION_KEY, EVENT_COMPONENT, REASON_CHANGED  # noqa: E402
from bridge.controller.writer import Writer  # noqa: E402
from bridge.kube import connect  # noqa: E402
from bridge.kube.api import NODES, Obj  # noqa: E402
from bridge.kube.events import build_event  # noqa: E402

DECISION_SIZES = (("moves* (default policy)", 16), ("scarce", 2444), ("moves", 3753))


def core_changes(count: int) -> list[TargetChange]:
    """The first `count` target changes the core decides in the `moves` scenario on twice as many nodes."""
    rng = random.Random(1)
    nodes = nodes_for("moves", 2 * count, 8, rng)
    changes = list(decide(nodes, pods_for("moves", 4 * count, rng), UNCAPPED, reuse=False).changes)
    if len(changes) < count:
        raise SystemExit(f"the core made {len(changes)} changes, fewer than --changes {count}")
    return changes[:count]


def on_node(change: TargetChange, name: str) -> TargetChange:
    """The same change about another Node (each client writes its own Nodes)."""
    return TargetChange(name, change.previous, change.dra, change.previous_target, change.reason, change.pods,
                        change.groups)


class BareWriter:
    """The two requests of a change over one kept-alive TLS connection (the admin's), nothing else."""

    def __init__(self, raw: AdminHttps, writer: Writer) -> None:
        self.raw, self.writer = raw, writer

    def write(self, change: TargetChange, node: Obj) -> None:
        meta = node["metadata"]
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"], "annotations": {
            DECISION_KEY: self.writer.record_for(change).encode(), SPLIT_KEY: change.target}}}
        status, body = self.raw.request("PATCH", f"/api/v1/nodes/{change.node}", json.dumps(patch).encode(),
                                        {"Content-Type": "application/merge-patch+json"})
        if status != 200:
            raise RuntimeError(f"PATCH node {change.node}: HTTP {status}: {body[:200]!r}")
        event = build_event(json.loads(body), REASON_CHANGED, f"set {SPLIT_KEY} -> {change.target}: {change.reason}",
                            component=EVENT_COMPONENT)
        status, body = self.raw.request("POST", "/api/v1/namespaces/default/events", json.dumps(event).encode(),
                                        {"Content-Type": "application/json"})
        if status != 201:
            raise RuntimeError(f"POST event: HTTP {status}: {body[:200]!r}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--changes", type=int, default=300, help="changes written per client per round (default 300)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; medians are printed (default 3)")
    ap.add_argument("--threads", default="4", help="thread counts for the parallel comparison, comma separated "
                                                   "('': none; default 4)")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",") if t.strip()]

    changes = core_changes(args.changes)
    print(f"load average before: {load()}", flush=True)
    with api_server_alone("bench-controller-write-") as plane:
        api = connect(plane.admin_kubeconfig)
        raw = AdminHttps(plane)
        sets = {"ours": "ours", "bare": "bare", "one at a time": "row", "decision": "apply",
                **{f"{t} threads": f"x{t}" for t in threads}}
        for prefix in sets.values():
            for c in changes:
                api.create(NODES, {"apiVersion": "v1", "kind": "Node",
                                   "metadata": {"name": f"{prefix}-{c.node}", "labels": {"bench": prefix}}})
        writer = Writer(api, identity="bench-controller", dry_run=False, metrics=ControllerMetrics())
        bare = BareWriter(raw, writer)

        def nodes_of(prefix: str) -> dict[str, Obj]:
            return {n["metadata"]["name"]: n for n in api.list(NODES, label_selector=f"bench={prefix}")["items"]}

        def server_time() -> tuple[float, float]:
            samples = parse_metrics(raw.get("/metrics"))
            s1, c1 = hist_sum(samples, "apiserver_request_duration_seconds", verb="PATCH", resource="nodes")
            s2, c2 = hist_sum(samples, "apiserver_request_duration_seconds", verb="POST", resource="events")
            return s1 + s2, c1 + c2

        print(f"{len(changes)} changes per client per round (the core's, `moves` scenario); decision record "
              f"{len(writer.record_for(changes[0]).encode())} bytes", flush=True)
        ms = 1000.0
        rows: dict[str, list[float]] = {k: [] for k in ("server/request", "bare p50", "bare p99", "ours p50",
                                                        "ours p99", "ours/bare p50", "ours cpu", "bare cpu")}
        modes = ["one at a time", "decision", *(f"{t} threads" for t in threads)]
        decision: dict[str, list[float]] = {m: [] for m in modes}
        for rnd in range(1, args.rounds + 1):
            mine, theirs = nodes_of("ours"), nodes_of("bare")
            t_ours: list[float] = []
            t_bare: list[float] = []
            cpu = {"ours": 0.0, "bare": 0.0}
            s0, c0 = server_time()
            for i, c in enumerate(changes):
                ours_c, bare_c = on_node(c, f"ours-{c.node}"), on_node(c, f"bare-{c.node}")
                steps: list[tuple[str, Callable[[], Any]]] = [
                    ("ours", lambda: writer.apply([ours_c], mine, lambda: True)),
                    ("bare", lambda: bare.write(bare_c, theirs[bare_c.node]))]
                for who, step in steps if i % 2 else steps[::-1]:
                    p, t = time.process_time(), time.perf_counter()
                    out = step()
                    (t_ours if who == "ours" else t_bare).append(time.perf_counter() - t)
                    cpu[who] += time.process_time() - p
                    if who == "ours" and len(out) != 1:
                        raise RuntimeError(f"the Writer did not write {ours_c.node}")
            s1, c1 = server_time()
            vals = {"server/request": (s1 - s0) / max(1.0, c1 - c0) * ms,
                    "bare p50": pct(t_bare, 50) * ms, "bare p99": pct(t_bare, 99) * ms,
                    "ours p50": pct(t_ours, 50) * ms, "ours p99": pct(t_ours, 99) * ms,
                    "ours/bare p50": pct(t_ours, 50) / pct(t_bare, 50),
                    "ours cpu": cpu["ours"] / len(changes) * ms, "bare cpu": cpu["bare"] / len(changes) * ms}
            for k, v in vals.items():
                rows[k].append(v)
            print(f"round {rnd}, one change (ms, 2 requests): " + ", ".join(
                f"{k} {v:.2f}" for k, v in vals.items()), flush=True)
            order = modes if rnd % 2 else modes[::-1]
            for mode in order:
                prefix = sets[mode]
                decision[mode].append(write_decision(writer, changes, prefix, nodes_of(prefix), mode))
            print(f"round {rnd}, a decision of {len(changes)} changes (ms per change): " + ", ".join(
                f"{m} {decision[m][-1] * ms:.2f}" for m in modes), flush=True)
        print("\nmedians over the rounds, one change (ms: its Node patch and its Event):")
        med = {name: statistics.median(series) for name, series in rows.items()}
        for name, value in med.items():
            print(f"  {name:<16} {value:7.2f}{'x' if '/' in name and 'server' not in name else ''}")
        one = statistics.median(decision["one at a time"])
        print(f"medians over the rounds, a decision of {len(changes)} changes (ms per change):")
        print(f"  one at a time (before the Events went alongside) {one * ms:7.2f}")
        for mode in modes[1:]:
            per = statistics.median(decision[mode])
            what = "Writer.apply, as the controller writes" if mode == "decision" else "bench only"
            print(f"  {mode + ' (' + what + ')':<48} {per * ms:7.2f}   {one / per:.2f}x the speed of one at a time")
        per = statistics.median(decision["decision"])
        print("a whole decision at the medians (one at a time / Writer.apply):")
        for name, size in DECISION_SIZES:
            print(f"  {name:<24} {size:>5} changes: {size * one:8.2f} s / {size * per:8.2f} s")
        print(f"load average after: {load()}")
    return 0


def write_decision(writer: Writer, changes: Sequence[TargetChange], prefix: str, nodes: dict[str, Obj],
                   mode: str) -> float:
    """Wall seconds per change to write every change (on the Nodes named `prefix`-...) in `mode`: one `Writer.apply`
    ("decision"), one `Writer.apply` per change ("one at a time"), or the latter on a pool ("N threads")."""
    mine = [on_node(c, f"{prefix}-{c.node}") for c in changes]
    t = time.perf_counter()
    if mode == "decision":
        done = len(writer.apply(mine, nodes, lambda: True))
    elif mode == "one at a time":
        done = sum(len(writer.apply([c], nodes, lambda: True)) for c in mine)
    else:
        with ThreadPoolExecutor(int(mode.split()[0])) as pool:
            done = sum(pool.map(lambda c: len(writer.apply([c], nodes, lambda: True)), mine))
    per = (time.perf_counter() - t) / len(mine)
    if done != len(mine):
        raise RuntimeError(f"{len(mine) - done} of {len(mine)} changes not written ({mode})")
    return per


if __name__ == "__main__":
    sys.exit(main())
