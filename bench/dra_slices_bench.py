"""ResourceSlice publishing: health event -> slice visible, and the cost of one reconcile.

    .venv/bin/python bench/dra_slices_bench.py [--events 40] [--reps 30] [--sizes 8,256]

Everything runs in this process against the API emulator on loopback (the emulator's HTTP server threads share the
GIL with the client, so absolute numbers are pessimistic for a real cluster; ratios are the point).

1. Health -> slice. A `SlicePublisher` (debounce 50 ms, the default) is fed by a pump thread reading the
   simulated source's `health_events`, exactly as the node daemon wires it. For each event the clock starts at
   `inject_xid` / `set_healthy` and stops when a separate watch on ResourceSlices sees the taint appear / vanish.
   Printed: p50 / p99 / max. Target (issue 4): under 1 s.
2. Reconcile cost for N devices (8 and 256 by default, 256 = two slices):
   * floor  - one LIST of our slices (field-selected), the request every reconcile starts with;
   * noop   - `reconcile_once()` when nothing changed (LIST + pure compare, no write);
   * change - `reconcile_once()` after a health flip (LIST + every slice of the pool written, generation + 1);
   * pure   - `desired_slices()` alone (no I/O).
   Printed: p50 per path and noop/floor, change/floor ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bridge.dra.slicepublisher import SlicePublisher
from bridge.dra.slices import NodeRef, SliceInputs, desired_slices
from bridge.inventory.model import HealthEvent
from bridge.inventory.simulated import SimulatedSource
from bridge.kube import NODES, KubeAPI, connect
from bridge.kube.watch import Informer
from bridge.sandbox.apiserver import ApiServer


def pct(samples: list[float], p: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def ms(x: float) -> str:
    return f"{x * 1000:8.2f} ms"


def timed(fn: Callable[[], object], reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def health_to_slice(api: KubeAPI, events: int) -> list[float]:
    node = "bench-health"
    api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    source = SimulatedSource.from_spec("8xH100-80GB", node)
    devices = source.devices()
    target = devices[3]
    pub = SlicePublisher(api, devices, node_name=node, dra_devices=[d.uuid for d in devices])
    stop = threading.Event()

    def pump() -> None:
        for ev in source.health_events(stop):
            pub.set_health(ev)

    tainted = threading.Event()
    clean = threading.Event()

    def on_event(ev: object) -> None:
        obj = ev.object  # type: ignore[attr-defined]
        for dev in obj["spec"]["devices"]:
            if dev["name"] == f"gpu-{target.index}":
                (tainted if dev.get("taints") else clean).set()
                (clean if dev.get("taints") else tainted).clear()

    watcher = Informer(api, api.resource_api().slices, field_selector=f"spec.nodeName={node}", on_event=on_event)
    threads = [threading.Thread(target=pump, daemon=True), threading.Thread(target=watcher.run, args=(stop,),
                                                                            daemon=True)]
    samples: list[float] = []
    with pub:
        for t in threads:
            t.start()
        if not pub.wait_synced(30) or not watcher.wait_synced(30):
            sys.exit("publisher or watcher did not sync")
        for i in range(events):
            want = tainted if i % 2 == 0 else clean
            want.clear()
            t0 = time.perf_counter()
            if i % 2 == 0:
                source.inject_xid(target.uuid, 79)
            else:
                source.set_healthy(target.uuid)
            if not want.wait(10):
                sys.exit(f"event {i}: slice did not change within 10 s")
            samples.append(time.perf_counter() - t0)
        stop.set()
    return samples


def reconcile_cost(api: KubeAPI, count: int, reps: int) -> dict[str, list[float]]:
    node = f"bench-{count}"
    api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    source = SimulatedSource.from_spec(f"{count}xH100-80GB", node)
    devices = source.devices()
    pub = SlicePublisher(api, devices, node_name=node, dra_devices=[d.uuid for d in devices], watch=False)
    pub.reconcile_once()
    rapi = api.resource_api()
    selector = pub.selector
    floor = timed(lambda: api.list(rapi.slices, field_selector=selector), reps)
    noop = timed(pub.reconcile_once, reps)
    flip = [False]

    def change() -> None:
        flip[0] = not flip[0]
        pub.set_health(HealthEvent(devices[0].uuid, healthy=not flip[0], reason="bench", xid=None))
        result = pub.reconcile_once()
        assert result.changed

    changed = timed(change, reps)
    node_ref = NodeRef(node, "uid")
    pure = timed(lambda: desired_slices(SliceInputs(node=node_ref, dra_devices=devices)), reps)
    return {"floor": floor, "noop": noop, "change": changed, "pure": pure}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=40)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--sizes", default="8,256")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, ApiServer(version="1.34.2",
                                                       resource_versions=("v1", "v1beta2", "v1beta1")) as srv:
        kc = Path(d) / "kubeconfig"
        srv.write_kubeconfig(kc)
        api = connect(kc)
        samples = health_to_slice(api, args.events)
        print(f"health event -> ResourceSlice visible ({len(samples)} events, taint on/off alternating)")
        print(f"  p50 {ms(statistics.median(samples))}   p99 {ms(pct(samples, 99))}   max {ms(max(samples))}"
              f"   target < 1000 ms: {'met' if pct(samples, 99) < 1 else 'MISSED'}")
        for count in (int(x) for x in args.sizes.split(",")):
            r = reconcile_cost(api, count, args.reps)
            med = {k: statistics.median(v) for k, v in r.items()}
            print(f"reconcile, {count} devices ({args.reps} reps, p50)")
            print(f"  floor (1 LIST)      {ms(med['floor'])}")
            print(f"  noop reconcile      {ms(med['noop'])}   x{med['noop'] / med['floor']:.2f} of floor")
            print(f"  changed reconcile   {ms(med['change'])}   x{med['change'] / med['floor']:.2f} of floor")
            print(f"  desired_slices()    {ms(med['pure'])}")


if __name__ == "__main__":
    main()
