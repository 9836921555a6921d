"""Ownership-ledger benchmark: how long the ledger itself takes to move a GPU, and what its guards cost.

Run:  .venv/bin/python bench/ledger_bench.py [--moves 100] [--calls 20000]

1. Split target change -> device offered on the other side, with the scheduler grace and the node-status wait
   excluded (both 0 / already satisfied): the production `SplitController` with the production `HolderSources`
   (a real PodResources `List` over a unix socket against the kubelet simulator's server, the kubelet-checkpoint
   read, our checkpoint's prepared claims, a pods-on-this-node snapshot from a static stub instead of the API
   watch) and a real checkpoint (durable writes) under /tmp. Each move is two evaluations, as on a node: the one
   that sees the new target withdraws the GPU (checkpoint write, ListAndWatch/slice listeners), the next one
   (the Node already shows the smaller count; the slice write already confirmed) verifies and offers it.
   legacy->dra and dra->legacy are timed separately, from `evaluate()` with the new target until a listener sees
   the GPU on the other side. Baseline, same run: the I/O floor of one move (2 holder gatherings + 2 durable
   checkpoint updates) measured alone.
2. Guard cost per call, in-process (no gRPC): `SplitController.guard_allocate` (legacy GPU: lock, check, record
   the answered Allocate), `guard_prepare` + `prepare_done` (DRA GPU), vs `DeviceTable.refusal` (the per-device
   check Allocate made before) and a bare lock acquire.
3. The same handlers with and without the ledger, interleaved call by call in this process (so machine noise hits
   both alike): the device plugin's `Allocate` handler (protobuf in and out, a stub gRPC context) and the prepare
   core `Preparer.prepare` (claim from an in-memory API, records in memory, CDI spec on /dev/shm), each
   followed by its undo outside the timing. The end-to-end figures over real sockets are
   bench/deviceplugin_bench.py and bench/dra_prepare_bench.py, which wire the guard as `bridge node` does
   (`--no-ledger` / `BENCH_NO_LEDGER=1` without it); on a shared 2-core machine their run-to-run noise is larger
   than the guard.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bridge.deviceplugin.state import DeviceTable  # noqa: E402
from bridge.inventory.simulated import devices_from_spec  # noqa: E402
from bridge.ledger import Checkpoint, Ledger, LedgerConfig, Side  # noqa: E402
from bridge.node.holders import HolderSources  # noqa: E402
from bridge.node.nodepods import PodsSnapshot  # noqa: E402
from bridge.node.split import SplitConfig, SplitController  # noqa: E402
from bridge.sandbox.kubelet.devicemanager import DeviceManager  # noqa: E402
from bridge.sandbox.kubelet.podresources import PodResourcesServer  # noqa: E402

NODE = "bench"
RESOURCE = "nvidia.com/gpu"


class StaticPods:
    """The pods-on-this-node view, synced and empty (what `NodePods` answers on an idle node, without the API)."""

    def snapshot(self) -> PodsSnapshot:
        return PodsSnapshot(True, True, "", (), {})

    def refresh_claims(self, *, every: bool = False, ended_interval_s: float = 5.0) -> None:
        return None


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def ms(v: float) -> str:
    return f"{v * 1000:8.3f} ms"


def us(v: float) -> str:
    return f"{v * 1e6:8.2f} us"


def node_obj(target: str, allocatable: int) -> dict:
    return {"metadata": {"name": NODE, "annotations": {"dra-bridge.io/dra-devices": target}},
            "status": {"allocatable": {RESOURCE: str(allocatable)}}}


def bench_moves(tmp: Path, moves: int) -> dict[str, list[float]]:
    devices = devices_from_spec("8xH100-80GB", NODE)
    manager = DeviceManager(tmp / "kl" / "device-plugins")
    podres = PodResourcesServer(tmp / "kl", manager)
    podres.start()
    checkpoint = Checkpoint(tmp / "st", boot_id=lambda: "bench")
    sources = HolderSources(devices, resource_name=RESOURCE, driver="gpu.dra-bridge.io", node_name=NODE,
                            podresources_socket=podres.socket_path,
                            kubelet_checkpoint=tmp / "kl" / "device-plugins" / "kubelet_internal_checkpoint",
                            pods=StaticPods(),  # type: ignore[arg-type]
                            prepared=lambda: [])
    arrived = threading.Event()
    want: dict[str, Side] = {}
    published: set[str] = set()

    def listener(led: Ledger) -> None:
        published.clear()
        published.update(g.uuid for g in led.on(Side.DRA))  # a slice write confirmed at once
        if want and all(led.sides[u] is s for u, s in want.items()):
            arrived.set()

    ctl = SplitController(devices, SplitConfig(NODE, ledger=LedgerConfig(scheduler_grace_s=0, settle_s=0)),
                          sources=sources, checkpoint=checkpoint, published=lambda: frozenset(published),
                          listeners=[listener])
    gpu7 = devices[7].uuid
    out: dict[str, list[float]] = {"legacy->dra": [], "dra->legacy": []}
    try:
        ctl.evaluate(node_obj("0", 8))
        for _ in range(moves):
            for target, side, alloc_after in (("1", Side.DRA, 7), ("0", Side.LEGACY, 8)):
                arrived.clear()
                want.clear()
                want[gpu7] = side
                t = time.perf_counter()
                ctl.evaluate(node_obj(target, 8 if side is Side.DRA else 7))  # withdraws
                ctl.evaluate(node_obj(target, alloc_after - (1 if side is Side.DRA else 0)))  # visible: offered
                if not arrived.wait(5):
                    raise SystemExit(f"the move to {side} did not finish: {ctl.last}")
                out["legacy->dra" if side is Side.DRA else "dra->legacy"].append(time.perf_counter() - t)
        floor = []
        for _ in range(moves):
            t = time.perf_counter()
            for _ in range(2):
                sources.facts()
                checkpoint.update(lambda d: d.with_sides(dict(ctl.ledger.sides), split="0"))
            floor.append(time.perf_counter() - t)
        out["floor"] = floor
    finally:
        podres.stop()
    return out


def timed(fn, n: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


class NoHolders:
    def facts(self, *, fresh_claims: bool = False):  # type: ignore[no-untyped-def]
        from bridge.ledger import Facts

        return Facts()

    def legacy_facts(self):  # type: ignore[no-untyped-def]
        return self.facts()


def bench_guards(calls: int) -> dict[str, list[float]]:
    devices = devices_from_spec("8xH100-80GB", NODE)
    legacy = SplitController(devices, SplitConfig(NODE), sources=NoHolders())
    dra = SplitController(devices, SplitConfig(NODE), sources=NoHolders(),
                          initial=Ledger(tuple(devices), {g.uuid: Side.DRA for g in devices}))
    table = DeviceTable(devices)
    lock = threading.Lock()
    ids = [g.uuid for g in devices]
    i = 0

    def allocate() -> None:
        nonlocal i
        i += 1
        assert legacy.guard_allocate([ids[i % 8]]) == []

    def prepare() -> None:
        nonlocal i
        i += 1
        assert dra.guard_prepare([ids[i % 8]], "ns/c", f"uid-{i}") == []
        dra.prepare_done(f"uid-{i}")

    def old_check() -> None:
        nonlocal i
        i += 1
        assert table.refusal(ids[i % 8]) is None

    def bare_lock() -> None:
        with lock:
            pass

    return {"guard_allocate": timed(allocate, calls), "guard_prepare+done": timed(prepare, calls),
            "DeviceTable.refusal (before)": timed(old_check, calls), "bare lock": timed(bare_lock, calls)}


class StubContext:
    """What the Allocate handler needs of a gRPC context (aborting raises, as grpc does)."""

    def abort(self, code, details):  # type: ignore[no-untyped-def]
        raise RuntimeError(f"{code}: {details}")


def bench_handlers(calls: int) -> dict[str, list[float]]:
    from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as pb
    from bridge.deviceplugin.allocate import AllocationConfig
    from bridge.deviceplugin.metrics import DevicePluginMetrics
    from bridge.deviceplugin.servicer import DevicePluginServicer
    from bridge.dra.claims import ClaimRef
    from bridge.dra.prepare import Preparer
    from bridge.dra.slices import device_name
    from bridge.dra.stores import ClaimCdi
    from bridge.kube.api import ResourceAPI
    from tests.dra.fakekube import FakeKube
    from tests.dra.memstore import MemoryClaimStore

    devices = devices_from_spec("8xH100-80GB", NODE)
    ids = [g.uuid for g in devices]
    legacy = SplitController(devices, SplitConfig(NODE), sources=NoHolders())
    dra = SplitController(devices, SplitConfig(NODE), sources=NoHolders(),
                          initial=Ledger(tuple(devices), {g.uuid: Side.DRA for g in devices}))
    from prometheus_client import CollectorRegistry

    alloc = {name: DevicePluginServicer(DeviceTable(devices, guard=guard), AllocationConfig(),
                                        DevicePluginMetrics(CollectorRegistry(), RESOURCE))
             for name, guard in (("off", None), ("on", legacy.guard_allocate))}
    kube = FakeKube()
    claims = ResourceAPI("v1").claims
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    with tempfile.TemporaryDirectory(prefix="brl-cdi-", dir=shm) as cdi_dir:
        prep = {name: Preparer(kube=kube, driver="gpu.dra-bridge.io", pool=NODE, devices=devices,
                               device_name=device_name, side_of=lambda _u: Side.DRA, store=MemoryClaimStore(),
                               cdi=ClaimCdi(cdi_dir, "gpu.dra-bridge.io"), boot_id="bench", ownership=own,
                               record_events=False)
                for name, own in (("off", None), ("on", dra))}
        out: dict[str, list[float]] = {k: [] for k in ("Allocate off", "Allocate on", "prepare off", "prepare on")}
        ctx = StubContext()
        for i in range(calls):
            for mode in ("off", "on") if i % 2 else ("on", "off"):
                req = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[ids[i % 8]])])
                t = time.perf_counter()
                alloc[mode].Allocate(req, ctx)  # type: ignore[arg-type]
                out[f"Allocate {mode}"].append(time.perf_counter() - t)
                uid = f"uid-{mode}-{i}"
                kube.put(claims, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                                  "metadata": {"name": uid, "namespace": "ns", "uid": uid},
                                  "spec": {"devices": {"requests": [{"name": "gpu"}]}},
                                  "status": {"allocation": {"devices": {"results": [
                                      {"request": "gpu", "driver": "gpu.dra-bridge.io", "pool": NODE,
                                       "device": f"gpu-{i % 8}"}]}}}})
                ref = ClaimRef("ns", uid, uid)
                t = time.perf_counter()
                outcome = prep[mode].prepare([ref])[uid]
                out[f"prepare {mode}"].append(time.perf_counter() - t)
                assert not outcome.error, outcome.error
                prep[mode].unprepare([ref])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moves", type=int, default=100)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--handler-calls", type=int, default=2000)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    logging.getLogger("bridge").setLevel(logging.WARNING)  # one INFO line per evaluation is the product, not the bench
    with tempfile.TemporaryDirectory(prefix="brl-", dir="/tmp") as d:
        moves = bench_moves(Path(d), args.moves)
    guards = bench_guards(args.calls)
    handlers = bench_handlers(args.handler_calls)
    print(f"ledger bench ({os.cpu_count()} CPUs; {args.moves} moves each way; {args.calls} guard calls each)")
    floor = statistics.median(moves["floor"])
    for key in ("legacy->dra", "dra->legacy"):
        v = moves[key]
        print(f"target change -> offered, {key:<12} p50/p99 {ms(pct(v, 50))} / {ms(pct(v, 99))}   "
              f"median / I/O floor {statistics.median(v) / floor:5.2f}x")
    print(f"I/O floor of one move (2 holder gatherings + 2 durable checkpoint writes) median {ms(floor)}")
    base = statistics.median(guards["bare lock"])
    for key, v in guards.items():
        print(f"{key:<32} p50/p99 {us(pct(v, 50))} / {us(pct(v, 99))}   median / bare lock "
              f"{statistics.median(v) / base:7.1f}x")
    for op in ("Allocate", "prepare"):
        off, on = handlers[f"{op} off"], handlers[f"{op} on"]
        print(f"{op + ' handler, ledger off/on':<32} p50 {us(pct(off, 50))} / {us(pct(on, 50))}   p99 "
              f"{us(pct(off, 99))} / {us(pct(on, 99))}   added p50 {us(pct(on, 50) - pct(off, 50))} "
              f"({pct(on, 50) / pct(off, 50):4.2f}x)")


if __name__ == "__main__":
    main()
