#!/usr/bin/env python3
"""The controller process at the scalability envelope: memory, garbage-collector pause and event cost of what its
informers keep, with every object kept whole (before bridge/controller/slim.py) against cut down (now).

    .venv/bin/python bench/controller_memory_bench.py [--nodes 5000] [--gpu-pods 30000] [--pending 10000]
                                                      [--other-pods 110000] [--images 30] [--events 3000]

The controller watches every Node and every unfinished Pod of the cluster. Here it is the real `Controller`
(bridge/controller/loop.py: its informers, their transforms, the incremental `ClusterState`) on a `RestKube`
client whose transport serves generated list pages (500 items each, as JSON text parsed by the client's own parser;
the client's pagination and per-page transform run as in production) instead of an API server, so that only the
controller's memory is measured. The objects are copies of a Running pod and its Node as a real kube-apiserver and
kubelet (v1.37.2) returned them (tests/controller/data): --gpu-pods bound pods with one `nvidia.com/gpu`, --pending
unbound ones (no node, status Pending/Unschedulable), --other-pods bound pods that ask for no GPU (the same pod
with its GPU request removed), and --nodes Nodes with --images entries in `status.images` (the kubelet reports up
to 50 by default; the captured node had pulled 2). Default: 150,000 pods and 5,000 nodes, the envelope the
migrate-report bench uses.

Each mode runs in a fresh interpreter (so its peak RSS is its own):
  whole   the informers keep whole objects (their transforms off) and the heap is never frozen: the controller
          before slim.py and `Controller.settle_heap`
  cut     the informers cut the objects down; the heap is not frozen
  frozen  the controller as shipped: cut objects, and the first decision's state check settles the heap (one full
          collection, then `gc.freeze()`)
Printed per mode: the time from start to the informers' sync, the first `build()` (every view and every pending
pod's demand, the check against a full rebuild), the settle after the first decision's writes (where it runs: outside
the decision's time), resident memory after them (VmRSS) and
the peak (VmHWM), objects the cyclic collector tracks (frozen ones included), one full collection (`gc.collect()`,
median of 3: what the process pays whenever the collector's oldest generation is due, which at this heap happens
every few thousand pod events or new plans), the cost of one pod watch event through the informer and the state (the
transform included; --events status updates of bound pods, mean, the collector off), and a full collection again
after those events (the objects they left are not frozen). Ratios against `whole`, same machine, same run.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATA = ROOT / "tests" / "controller" / "data"
PAGE = 500
MODES = ("whole", "cut", "frozen")


def _proc_status(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def templates(images: int) -> dict[str, str]:
    """JSON text of each kind of object, with NAME, UID, NODE and RV marks to fill in per object."""
    pod = json.loads((DATA / "real-pod-running.json").read_text())
    node = json.loads((DATA / "real-node.json").read_text())
    pod["metadata"].update(name="@NAME@", uid="@UID@", resourceVersion="@RV@", namespace="@NS@")
    pod["spec"]["nodeName"] = "@NODE@"
    other = copy.deepcopy(pod)
    for c in other["spec"]["containers"]:
        for part in ("limits", "requests"):
            (c.get("resources") or {}).get(part, {}).pop("nvidia.com/gpu", None)
    other["status"]["containerStatuses"][0]["allocatedResources"].pop("nvidia.com/gpu", None)
    pending = copy.deepcopy(pod)
    del pending["spec"]["nodeName"]
    pending["metadata"]["managedFields"] = pending["metadata"]["managedFields"][:1]
    pending["status"] = {"phase": "Pending", "qosClass": "Burstable", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastProbeTime": None,
        "lastTransitionTime": "2026-12-06T07:39:30Z",
        "message": "0/5000 nodes are available: 5000 Insufficient nvidia.com/gpu. preemption: 0/5000 nodes are "
                   "available: 5000 No preemption victims found for incoming pod."}]}
    node["metadata"].update(name="@NAME@", uid="@UID@", resourceVersion="@RV@")
    node["metadata"]["labels"]["kubernetes.io/hostname"] = "@NAME@"
    node["metadata"]["annotations"]["dra-bridge.io/split-status"] = node["metadata"]["annotations"][
        "dra-bridge.io/split-status"].replace('"node-0"', '"@NAME@"')
    node["status"]["images"] = [
        {"names": [f"registry.example/team-{i}/app@sha256:{i:064x}", f"registry.example/team-{i}/app:v{i}"],
         "sizeBytes": 1_000_000 * (i + 1)} for i in range(images)]
    return {"gpu": json.dumps(pod), "other": json.dumps(other), "pending": json.dumps(pending),
            "node": json.dumps(node)}


class Served:
    """The cluster's objects as list pages of JSON text, made when asked."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.t = templates(args.images)
        self.nodes = args.nodes
        self.kinds = [("gpu", args.gpu_pods), ("pending", args.pending), ("other", args.other_pods)]
        self.pods = sum(n for _, n in self.kinds)

    def pod_text(self, i: int, rv: int = 1) -> str:
        kind, at = "other", i
        for k, n in self.kinds:
            if at < n:
                kind = k
                break
            at -= n
        return (self.t[kind].replace("@NAME@", f"{kind}-{i:06d}").replace("@UID@", f"uid-pod-{i}")
                .replace("@NODE@", f"node-{i % self.nodes:05d}").replace("@NS@", f"ns-{i % 1000}")
                .replace("@RV@", str(rv)))

    def node_text(self, i: int) -> str:
        return (self.t["node"].replace("@NAME@", f"node-{i:05d}").replace("@UID@", f"uid-node-{i}")
                .replace("@RV@", "1"))

    def page(self, plural: str, start: int) -> str:
        total, make = (self.pods, self.pod_text) if plural == "pods" else (self.nodes, self.node_text)
        end = min(total, start + PAGE)
        more = f',"continue":"{end}"' if end < total else ""
        kind = "PodList" if plural == "pods" else "NodeList"  # as the API server names a page; its items have none
        return ('{"kind":"%s","apiVersion":"v1","metadata":{"resourceVersion":"1"%s},"items":[%s]}'
                % (kind, more, ",".join(make(i) for i in range(start, end))))


def served_kube(served: Served, stop: threading.Event) -> Any:
    """The real `RestKube` client with `_json` answering from `served` instead of a transport: the pages of pods
    and nodes as bytes (read by the client's `page_decoder` where it is given one, else its parser), every other
    list empty, a discovery document serving pods, nodes and namespaces, and watches that send nothing until `stop`
    (the benches feed events by hand)."""
    from bridge.kube import jsonio
    from bridge.kube.client import RestKube
    from bridge.kube.discovery import build_discovery

    empty = b'{"kind":"List","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}'

    class Blocking:
        def __iter__(self) -> Iterator[Any]:
            stop.wait()
            return iter(())

        def close(self) -> None:
            stop.set()

    class ServedKube(RestKube):
        def _json(self, method: str, path: str, **kw: Any) -> Any:
            query = dict(kw.get("query") or ())
            plural = path.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
            raw = served.page(plural, int(query.get("continue") or 0)).encode() if plural in ("pods", "nodes") \
                else empty
            decode = kw.get("decode")
            decoded = decode(raw) if decode is not None else None
            return decoded if decoded is not None else jsonio.loads(raw)

        def watch(self, *a: Any, **kw: Any) -> Any:
            return Blocking()

        def discovery(self) -> Any:
            core = [{"name": n, "kind": k, "namespaced": ns, "verbs": ["list", "watch"]} for n, k, ns in (
                ("pods", "Pod", True), ("nodes", "Node", False), ("namespaces", "Namespace", False))]
            version = {"major": "1", "minor": "35", "gitVersion": "v1.35.0"}
            return build_discovery(version, [("v1", {"resources": core})])

    return ServedKube(None)  # type: ignore[arg-type]  # no transport: `_json` serves the pages


def full_collection_ms() -> float:
    """One collection of every generation, as CPython runs when the oldest is due (median of 3)."""
    pauses = []
    for _ in range(3):
        t = time.perf_counter()
        gc.collect()
        pauses.append(time.perf_counter() - t)
    return 1000 * statistics.median(pauses)


def child(mode: str, args: argparse.Namespace) -> dict[str, float]:
    from bridge.controller.loop import Controller, ControllerOptions
    from bridge.controller.metrics import ControllerMetrics
    from bridge.kube import jsonio
    from bridge.kube.api import WatchEvent

    served = Served(args)
    stop = threading.Event()
    api = served_kube(served, stop)
    ctl = Controller(api, ControllerOptions(freeze_heap=mode == "frozen"), identity="bench",
                     metrics=ControllerMetrics(), is_leader=lambda: True, resource_api=None)
    if mode == "whole":
        for inf in ctl.informers:
            inf.transform = None
    gc.collect()
    rss0 = _proc_status("VmRSS")
    t0 = time.perf_counter()
    ctl.start()
    if not ctl.wait_synced(3600):
        raise SystemExit("the informers did not sync")
    sync_s = time.perf_counter() - t0
    out: dict[str, float] = {"sync_s": sync_s, "start_mib": rss0}
    t = time.perf_counter()
    state = ctl.build()  # the first decision's state: every view and demand, the check against a rebuild
    out["build_ms"] = 1000 * (time.perf_counter() - t)
    t = time.perf_counter()
    ctl.settle_when_due()  # once the first decision is written (`frozen` only)
    out["settle_ms"] = 1000 * (time.perf_counter() - t) if ctl.options.freeze_heap else 0.0
    out["views"], out["pending"] = float(len(state.views)), float(len(state.demand.pending))
    del state
    out.update(rss_mib=_proc_status("VmRSS"), peak_mib=_proc_status("VmHWM"),
               tracked=float(len(gc.get_objects()) + gc.get_freeze_count()), frozen=float(gc.get_freeze_count()))
    out["full_gc_ms"] = full_collection_ms()
    # Pod watch events: a status update of a bound GPU pod, as the kubelet writes them, through the informer's
    # event path (transform, store) and the state; the state read once per 100 events, as decisions would.
    texts = [served.pod_text(i % args.gpu_pods, rv=2 + i) for i in range(args.events)]
    gc.disable()  # the cost of the events themselves; the collector's share is the full collection above
    t = time.perf_counter()
    for i, text in enumerate(texts):
        ev = ctl.pods._apply(WatchEvent("MODIFIED", jsonio.loads(text.encode())))
        if ev is not None:
            ctl.pods.on_event(ev)
        if i % 100 == 99:
            ctl.cluster.state()
    out["event_us"] = 1e6 * (time.perf_counter() - t) / max(1, args.events)
    gc.enable()
    out["full_gc_after_ms"] = full_collection_ms()
    ctl.stop(1.0)
    return out


def cluster_args(doc: str | None, modes: tuple[str, ...]) -> argparse.ArgumentParser:
    """The served cluster's size (`Served`) and the child's mode: the arguments of this bench and of
    bench/report_live_bench.py."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--gpu-pods", type=int, default=30000)
    ap.add_argument("--pending", type=int, default=10000)
    ap.add_argument("--other-pods", type=int, default=110000)
    ap.add_argument("--images", type=int, default=30)
    ap.add_argument("--child", choices=modes)
    return ap


def run_modes(script: str, modes: tuple[str, ...], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Each mode in a fresh interpreter (`script --child=MODE`, the other arguments passed on): its printed result."""
    forwarded = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k != "child"]
    results: dict[str, dict[str, Any]] = {}
    for mode in modes:
        proc = subprocess.run([sys.executable, script, f"--child={mode}", *forwarded], capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"{mode}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
        results[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    return results


def main() -> None:
    ap = cluster_args(__doc__, MODES)
    ap.add_argument("--events", type=int, default=3000)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args)))
        return
    print(f"controller process: {args.nodes} nodes ({args.images} images each), {args.gpu_pods} bound GPU pods, "
          f"{args.pending} pending GPU pods, {args.other_pods} pods asking no GPU; load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    results = run_modes(__file__, MODES, args)
    w = results["whole"]
    for mode in MODES:
        assert (results[mode]["views"], results[mode]["pending"]) == (w["views"], w["pending"]), \
            "cut objects must give the same state"
    rows = [("informers' sync (list + events), s", "sync_s", "{:.1f}"),
            ("first build (state, check), ms", "build_ms", "{:.0f}"),
            ("settle after the first decision, ms", "settle_ms", "{:.0f}"),
            ("resident after it, MiB", "rss_mib", "{:.0f}"), ("peak resident, MiB", "peak_mib", "{:.0f}"),
            ("objects the collector tracks", "tracked", "{:,.0f}"), ("of them frozen", "frozen", "{:,.0f}"),
            ("one full collection, ms", "full_gc_ms", "{:.1f}"), ("one pod event, us", "event_us", "{:.0f}"),
            (f"full collection after {args.events} events, ms", "full_gc_after_ms", "{:.1f}")]
    print(f"{'':42} {'whole':>10} {'cut':>10} {'frozen':>10} {'cut/whole':>10} {'frozen/whole':>12}")
    for label, key, fmt in rows:
        c, f = results["cut"][key], results["frozen"][key]
        ratios = f"{c / w[key]:>10.2f} {f / w[key]:>12.3f}" if w[key] else ""
        print(f"{label:42} {fmt.format(w[key]):>10} {fmt.format(c):>10} {fmt.format(f):>10} {ratios}")
    print(f"state: {w['views']:.0f} GPU node views, {w['pending']:.0f} pending pods (equal in every mode); "
          f"interpreter at start {w['start_mib']:.0f} MiB; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
