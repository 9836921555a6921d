"""Device-plugin benchmark: latency of the kubelet-facing paths, measured over real unix sockets.

Run:  .venv/bin/python bench/deviceplugin_bench.py [--calls 2000] [--rounds 5] [--spacing MS] [--updates 100]
                                                  [--restarts 20] [--starts 3]

What it measures (targets from issues 2 and 25, for a 2-core machine):
* Allocate p50/p99 (1 GPU per call) of three servers on the same kind of unix socket in the same process, called
  in turn (call by call, the order rotating) in `--rounds` rounds: the bridge's device plugin with the ownership
  ledger's guard as `bridge node` wires it with DRA on ("ours"), the same plugin without the guard ("no-ledger", as
  with --dra off), and a bare echo DevicePlugin servicer (same proto messages, no logic). Printed per round, then
  the median over rounds of each ratio to echo (a shared machine moves single p99s by tens of percent) and of the
  guard's cost (ours - no-ledger at p50). Target (issue 25): ours/echo p99 <= 1.2x.
* ListAndWatch update latency: device-table change -> message received by a client stream (while the simulated
  kubelet's own stream is open too, as on a node), vs the bare servicer yielding on a trigger (ratio, no target),
  and health event from the simulated source -> received through the health pump (target < 100 ms).
* Kubelet restart (simulator deletes sockets, re-creates kubelet.sock) -> the plugin registered and its
  ListAndWatch stream connected again (target < 2 s).
* A real `bridge node --devices simulated:8xH100-80GB` subprocess: process start -> registration with the
  simulated kubelet (target < 1.5 s) and its RSS once registered (target < 80 MB).
Numbers are printed; nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as pb  # noqa: E402
from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as pb_grpc  # noqa: E402
from bridge.inventory.simulated import SimulatedSource  # noqa: E402
from bridge.node.daemon import NodeConfig, NodeDaemon  # noqa: E402
from bridge.sandbox.kubelet import KubeletSimulator  # noqa: E402

RESOURCE = "nvidia.com/gpu"


class EchoPlugin(pb_grpc.DevicePluginServicer):
    """The baseline: answers with the same message types and does nothing else."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.version = 0
        self.stopped = False

    def trigger(self) -> None:
        with self.cond:
            self.version += 1
            self.cond.notify_all()

    def Allocate(self, request, context):  # type: ignore[no-untyped-def]
        return pb.AllocateResponse(container_responses=[pb.ContainerAllocateResponse()])

    def ListAndWatch(self, request, context) -> Iterator[pb.ListAndWatchResponse]:  # type: ignore[no-untyped-def]
        seen = -1
        while context.is_active() and not self.stopped:
            with self.cond:
                if self.version == seen:
                    self.cond.wait(0.5)
                    continue
                seen = self.version
            yield pb.ListAndWatchResponse(devices=[pb.Device(ID=f"GPU-{i}", health="Healthy") for i in range(8)])


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def ms(v: float) -> str:
    return f"{v * 1000:8.3f} ms"


def time_calls(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def ledger_seams(source: SimulatedSource) -> dict[str, object]:
    """The production wiring of the ownership ledger into the device plugin (as `bridge node` with DRA on): the
    split controller's side_of for ListAndWatch and its guard for Allocate (every device legacy here)."""
    from bridge.ledger import Facts
    from bridge.node.split import SplitConfig, SplitController

    class NoHolders:
        def facts(self, *, fresh_claims: bool = False) -> Facts:
            return Facts()

        def legacy_facts(self) -> Facts:
            return Facts()

    split = SplitController(source.devices(), SplitConfig("bench"), sources=NoHolders())
    return {"side_of": split.side_of, "allocate_guard": split.guard_allocate}


def allocate_rounds(stubs: dict[str, pb_grpc.DevicePluginStub], req: pb.AllocateRequest, calls: int,
                    rounds: int, spacing: float = 0.0) -> list[dict[str, list[float]]]:
    """`rounds` rounds of `calls` Allocates per server, interleaved call by call (the order rotating), so machine
    noise hits every server alike within a round; `spacing` seconds of pause before each timed call."""
    names = list(stubs)
    for stub in stubs.values():
        time_calls(lambda: stub.Allocate(req), 200)  # warm up
    out = []
    for _ in range(rounds):
        times: dict[str, list[float]] = {n: [] for n in names}
        for i in range(calls):
            for k in range(len(names)):
                name = names[(i + k) % len(names)]
                stub = stubs[name]
                time.sleep(spacing)
                t = time.perf_counter()
                stub.Allocate(req)
                times[name].append(time.perf_counter() - t)
        out.append(times)
    return out


class AllocateServers:
    """The three Allocate servers of the comparison, in this process: "ours" (the plugin with the ledger's guard, as
    `bridge node` wires it with DRA on), "no-ledger" (the same plugin without the guard, as with --dra off, on a
    kubelet of its own), "echo" (the bare servicer). Also used by bench/deviceplugin_cost.py."""

    def __init__(self, tmp: Path) -> None:
        self.sim = KubeletSimulator(tmp / "k").start()
        self.source = SimulatedSource.from_spec("8xH100-80GB", "bench")
        self.daemon = NodeDaemon(NodeConfig(node_name="bench", kubelet_root=tmp / "k", http_address=None),
                                 self.source, **ledger_seams(self.source))  # type: ignore[arg-type]
        self.daemon.start()
        assert self.daemon.wait_registered(20)
        self.sim_bare = KubeletSimulator(tmp / "k0").start()
        self.bare = NodeDaemon(NodeConfig(node_name="bench", kubelet_root=tmp / "k0", http_address=None),
                               SimulatedSource.from_spec("8xH100-80GB", "bench"))
        self.bare.start()
        assert self.bare.wait_registered(20)
        self.echo = EchoPlugin()
        self.pool = ThreadPoolExecutor(max_workers=16)
        self.server = grpc.server(self.pool)
        pb_grpc.add_DevicePluginServicer_to_server(self.echo, self.server)
        echo_path = str(tmp / "k" / "device-plugins" / "echo.sock")
        self.server.add_insecure_port("unix:" + echo_path)
        self.server.start()
        assert self.daemon.plugin is not None and self.bare.plugin is not None
        self.channels = {"ours": grpc.insecure_channel("unix://" + self.daemon.plugin.socket_path),
                         "no-ledger": grpc.insecure_channel("unix://" + self.bare.plugin.socket_path),
                         "echo": grpc.insecure_channel("unix://" + echo_path)}
        self.stubs = {name: pb_grpc.DevicePluginStub(ch) for name, ch in self.channels.items()}
        self.gpu = self.source.devices()[0].uuid
        self.request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[self.gpu])])

    def stop_bare(self) -> None:
        self.channels.pop("no-ledger").close()
        self.stubs.pop("no-ledger")
        self.bare.stop()
        self.sim_bare.stop()

    def stop(self) -> None:
        if "no-ledger" in self.channels:
            self.stop_bare()
        for ch in self.channels.values():
            ch.close()
        self.echo.stopped = True
        self.server.stop(0).wait()
        self.pool.shutdown()
        self.daemon.stop()
        self.sim.stop()


def bench_allocate_and_stream(tmp: Path, calls: int, updates: int, rounds: int,
                              spacing: float = 0.0) -> dict[str, Any]:
    results: dict[str, Any] = {}
    servers = AllocateServers(tmp)
    results["rounds"] = allocate_rounds(servers.stubs, servers.request, calls, rounds, spacing)
    servers.stop_bare()
    ours, base, echo, daemon = servers.stubs["ours"], servers.stubs["echo"], servers.echo, servers.daemon
    source, gpu = servers.source, servers.gpu

    # ListAndWatch: table change -> received, vs echo trigger -> received.
    def stream_latency(stub: pb_grpc.DevicePluginStub, trigger: Callable[[int], None]) -> list[float]:
        stream = stub.ListAndWatch(pb.Empty())
        next(stream)  # initial full list
        lat = []
        for i in range(updates):
            t = time.perf_counter()
            trigger(i)
            next(stream)
            lat.append(time.perf_counter() - t)
        stream.cancel()
        return lat

    assert daemon.table is not None
    table = daemon.table
    l_ours = stream_latency(ours, lambda i: table.set_health(gpu, i % 2 == 1, "bench"))
    l_base = stream_latency(base, lambda i: echo.trigger())
    results["law_table_p50"], results["law_table_p99"] = pct(l_ours, 50), pct(l_ours, 99)
    results["law_echo_p50"], results["law_echo_p99"] = pct(l_base, 50), pct(l_base, 99)

    # Health event from the device source (XID) -> ListAndWatch message, end to end through the health pump.
    stream = ours.ListAndWatch(pb.Empty())
    next(stream)
    lat = []
    other = source.devices()[1].uuid
    for i in range(updates):
        t = time.perf_counter()
        if i % 2 == 0:
            source.inject_xid(other, 79)
        else:
            source.set_healthy(other)
        next(stream)
        lat.append(time.perf_counter() - t)
    stream.cancel()
    results["health_p50"], results["health_p99"] = pct(lat, 50), pct(lat, 99)

    servers.stop()
    return results


def bench_restarts(tmp: Path, restarts: int) -> list[float]:
    sim = KubeletSimulator(tmp / "r").start()
    daemon = NodeDaemon(NodeConfig(node_name="bench", kubelet_root=tmp / "r", http_address=None),
                        SimulatedSource.from_spec("8xH100-80GB", "bench"))
    daemon.start()
    assert daemon.wait_registered(20)
    out = []
    for i in range(restarts):
        sim.restart()
        t = time.perf_counter()
        ok = sim.devices.wait_for(lambda m: m.resource(RESOURCE).registrations >= i + 2
                                  and m.resource(RESOURCE).allocatable == 8, 20)
        out.append(time.perf_counter() - t if ok else float("inf"))
    daemon.stop()
    sim.stop()
    return out


def bench_process(tmp: Path, starts: int) -> tuple[list[float], list[float]]:
    start_times, rss = [], []
    for i in range(starts):
        root = tmp / f"p{i}"
        sim = KubeletSimulator(root).start()
        env = {**os.environ, "BRIDGE_NODE_NAME": "bench", "BRIDGE_KUBELET_ROOT": str(root),
               "BRIDGE_DEVICE_PLUGIN_DIR": str(root / "device-plugins"),
               "BRIDGE_HTTP_ADDRESS": "off", "BRIDGE_DEVICES": "simulated:8xH100-80GB", "BRIDGE_LOG_LEVEL": "warning"}
        t = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-m", "bridge", "node"], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ok = sim.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 8, 30)
        start_times.append(time.perf_counter() - t if ok else float("inf"))
        time.sleep(1.0)  # let it settle before reading RSS
        with open(f"/proc/{p.pid}/status") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        rss.append(kb / 1024)
        p.terminate()
        p.wait(20)
        sim.stop()
    return start_times, rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000, help="Allocate calls per server and round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--spacing", type=float, default=0.0, metavar="MS",
                    help="pause MS milliseconds before each timed Allocate (default 0: back to back); a kubelet "
                         "allocates once per container start, so on a node each call finds the server's threads "
                         "asleep (try --spacing 20 --calls 300)")
    ap.add_argument("--updates", type=int, default=100)
    ap.add_argument("--restarts", type=int, default=20)
    ap.add_argument("--starts", type=int, default=3)
    args = ap.parse_args()
    logging.disable(logging.WARNING)  # the daemon logs every injected XID; keep the output to the numbers
    with tempfile.TemporaryDirectory(prefix="brb-", dir="/tmp") as d:
        tmp = Path(d)
        r = bench_allocate_and_stream(tmp, args.calls, args.updates, args.rounds, args.spacing / 1000)
        restarts = bench_restarts(tmp, args.restarts)
        starts, rss = bench_process(tmp, args.starts)

    def line(label: str, value: str, target: str, ok: bool) -> None:
        print(f"{label:<48} {value:>22}   target {target:<12} {'ok' if ok else 'MISSED'}")

    spaced = f"{args.spacing:g} ms apart" if args.spacing else "back to back"
    print(f"device-plugin bench ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; {args.rounds} rounds of "
          f"{args.calls} Allocate calls per server, {spaced}, {args.updates} updates)")
    print("Allocate, per round: p50 / p99 of ours (ledger on), no-ledger, echo; ratios to echo")
    ratios: dict[str, list[float]] = {"ours p99": [], "no-ledger p99": [], "ours p50": [], "no-ledger p50": []}
    guard: list[float] = []
    for i, rnd in enumerate(r["rounds"]):
        p = {name: (pct(v, 50), pct(v, 99)) for name, v in rnd.items()}
        for name in ("ours", "no-ledger"):
            ratios[f"{name} p50"].append(p[name][0] / p["echo"][0])
            ratios[f"{name} p99"].append(p[name][1] / p["echo"][1])
        guard.append(p["ours"][0] - p["no-ledger"][0])
        print(f"  round {i + 1}: " + "   ".join(f"{name} {ms(a).strip()} / {ms(b).strip()}" for name, (a, b) in p.items())
              + f"   p99 ratio ours {ratios['ours p99'][-1]:.2f}x, no-ledger {ratios['no-ledger p99'][-1]:.2f}x")
    med = {k: statistics.median(v) for k, v in ratios.items()}
    print(f"{'Allocate p50 ratio to echo, median of rounds':<48} ours {med['ours p50']:.2f}x   no-ledger "
          f"{med['no-ledger p50']:.2f}x")
    print(f"{'the guard at p50 (ours - no-ledger), median':<48} {statistics.median(guard) * 1e6:>19.1f} us")
    line("Allocate p99 ratio ours/echo, median of rounds", f"{med['ours p99']:.2f}x", "<= 1.2x", med["ours p99"] <= 1.2)
    print(f"{'Allocate p99 ratio no-ledger/echo, median':<48} {med['no-ledger p99']:>21.2f}x")
    print(f"{'ListAndWatch update ours (table) p50/p99':<48} {ms(r['law_table_p50'])} / {ms(r['law_table_p99'])}")
    print(f"{'ListAndWatch update echo p50/p99':<48} {ms(r['law_echo_p50'])} / {ms(r['law_echo_p99'])}")
    law_ratio = r["law_table_p99"] / r["law_echo_p99"]
    print(f"{'ListAndWatch update p99 ratio ours/echo':<48} {law_ratio:>19.2f}x")
    line("health event -> ListAndWatch p99 (p50 " + ms(r["health_p50"]).strip() + ")", ms(r["health_p99"]),
         "< 100 ms", r["health_p99"] < 0.1)
    worst = max(restarts)
    line(f"kubelet restart -> re-registered, median (max {worst:.3f} s)", f"{statistics.median(restarts):.3f} s",
         "< 2 s", worst < 2)
    line(f"process start -> registered, median of {len(starts)}", f"{statistics.median(starts):.3f} s", "< 1.5 s",
         statistics.median(starts) < 1.5)
    line(f"daemon RSS with 8 GPUs, max of {len(rss)}", f"{max(rss):.1f} MB", "< 80 MB", max(rss) < 80)


if __name__ == "__main__":
    main()
