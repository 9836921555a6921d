"""NodePrepareResources latency against the local API emulator, with a bare echo RPC as the in-run baseline.

    .venv/bin/python bench/dra_prepare_bench.py [--iterations 300] [--rounds 1] [--spacing MS] [--go-floor]
                                                [--ab-sync 300] [--state-dir DIR] [--claims-dir DIR] [--cdi-dir DIR]
    BENCH_NO_LEDGER=1 ...   # without the ownership ledger's prepare guard (the node daemon always wires it)

Three processes, as on a node: the API emulator (`python -m bridge sandbox apiserver`), the DRA daemon
(`DraNode`: prepare core + gRPC servers; this script re-run with `--daemon`), and this process as the kubelet
(the gRPC client). Nothing the daemon measures shares a GIL with the emulator or the client.

Each prepare is 1 claim with 1 GPU over a real unix socket (v1 DRAPlugin). What the kubelet waits for: the claim
GET from the emulator through the official client (on the read pool, outside the node lock: every call reads the
claim, `bridge/dra/claimreads.py`), the node lock, ownership/exclusivity checks, the PrepareStarted record
write, the CDI spec write, the PrepareCompleted record write. Both record writes are atomic renames without fsync of
the claim records' file (claims.json); one fsync of it and its directory follows right after the call on a
background thread (see bridge/dra/prepare.py for why the kubelet need not wait for it). Where the files live is the
chart's layout: the claim records and the CDI specs on a tmpfs (its /var/run/dra-bridge and /var/run/cdi: here new
dirs under /dev/shm when the machine has it, or --claims-dir / --cdi-dir), the ownership sides' checkpoint on disk
(under /tmp unless --state-dir says otherwise; a prepare does not write it). `--claims-dir` pointed at the state
dir gives the layout before the claim records had a file of their own.

Two kinds of prepare, interleaved per iteration:
* fresh: a new claim (unprepared afterwards, outside the timing), the full two-phase path;
* repeat: the same claim again while it is prepared (what a kubelet restart asks): the GET, the comparison of the
  allocation with the record, the answer from the record, no write.
The baseline is a unary RPC on the same kind of socket, served by the same daemon process, whose handler does
nothing (`pluginregistration.GetInfo`), run interleaved with the prepares. Attribution lines: the claim GET alone
(this process -> emulator), the daemon's own view (its latency histogram: mean; its process CPU per iteration, less
sensitive to the machine's load than the percentiles), the storage floor in the claims dir (two unsynced
renames of a claims.json-sized file, what a fresh prepare writes in the call, and one file + directory fsync, what
the background sync adds per call). The machine's load average is printed before and after: on a shared machine the
percentiles move with it. Targets: fresh prepare p99 <= 5 ms on a quiet machine (issue 25; <= 10 ms before it).
`--rounds N` runs the claims N times over, one round after another in the same processes (each unprepared claim is
fresh again), prints each round's p50/p99 and judges the target on the median of the rounds' p99: a single round's
p99 rests on its 3 slowest calls of 300, and moved between 3.5 and 5.7 ms on one day on this machine.

`--spacing MS` pauses before each timed call. Back to back (the default, and how issue 25's figures were taken)
every call finds the daemon's threads awake and its code and data in the CPU's caches; a kubelet prepares one pod's
claims at a time, seconds apart, so on a node every call is a cold one. On this 2-core VM a pause of 20 ms doubles the
daemon's CPU time per iteration (3.8 -> 8.3 ms) and nearly triples the echo's latency (p50 0.48 -> 1.36 ms); the cold
figure is the one a node sees (stop 47, --rounds 3: fresh p50 4.49, median p99 6.33 ms against 1.97 / 2.77 back to
back).

`--go-floor` also sends each fresh claim, after our two prepares, to bench/godra: a DRA plugin in Go on the upstream
kubelet-plugin helper, whose prepare is the helper's claim GET (client-go, against the same emulator) and checks with
no driver work: what the same call costs when its gRPC server and GET are compiled code. Its process and calls load
the machine too, so ours reads slower beside it than without it (stop 47, --rounds 3: ours fresh p50 3.30, floor 1.54
ms back to back; 4.74 and 2.27 with --spacing 20: 2.0-2.2x the floor either way).

`--ab-sync N` adds an in-process comparison of the prepare core (no gRPC) with the fsync in the call (the policy
before `bridge/dra/deferredsync.py`) and deferred after it, alternating call by call against the same emulator.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge._proto.dra.v1 import dra_pb2 as pb  # noqa: E402
from bridge._proto.dra.v1 import dra_pb2_grpc as pb_grpc  # noqa: E402
from bridge._proto.pluginregistration.v1 import pluginregistration_pb2 as reg_pb  # noqa: E402
from bridge._proto.pluginregistration.v1 import pluginregistration_pb2_grpc as reg_grpc  # noqa: E402
from bridge.atomicfile import fsync_dir  # noqa: E402
from bridge.kube import connect  # noqa: E402
from bridge.dra.stores import CLAIMS_NAME  # noqa: E402
from bridge.ledger.checkpoint import _replace_unsynced  # noqa: E402
from bench.realbench import build_go, pct  # noqa: E402
from tests.dra.cluster import NODE, gpu, make_claim, make_pod  # noqa: E402

BOOT_ID = "bench"
READY = "daemon ready"
GO_FLOOR = Path(__file__).resolve().parent / "godra"


# -- the daemon process ------------------------------------------------------------------------------------------

def run_daemon(kubeconfig: str, root: Path, cdi_root: Path, state_dir: Path, claims_dir: Path) -> int:
    from bridge.dra.component import DraConfig, DraNode
    from bridge.dra.plugin import PluginConfig
    from bridge.dra.stores import CheckpointClaimStore, claims_checkpoint
    from bridge.inventory.simulated import devices_from_spec
    from bridge.ledger import Facts, Ledger, Side
    from bridge.ledger.checkpoint import Checkpoint
    from bridge.node.split import SplitConfig, SplitController

    class NoHolders:
        def facts(self, *, fresh_claims: bool = False) -> Facts:
            return Facts()

        def legacy_facts(self) -> Facts:
            return Facts()

    (root / "boot_id").write_text(BOOT_ID + "\n")
    devices = devices_from_spec("8xH100-80GB", NODE)
    checkpoint = Checkpoint(state_dir, boot_id=lambda: BOOT_ID)
    # The production wiring (`bridge node` with DRA on): every prepare goes through the ownership ledger's guard.
    split = None if os.environ.get("BENCH_NO_LEDGER") else SplitController(
        devices, SplitConfig(NODE), sources=NoHolders(), checkpoint=checkpoint,
        initial=Ledger(tuple(devices), {g.uuid: Side.DRA for g in devices}))
    node = DraNode(
        DraConfig(NODE, PluginConfig(kubelet_root=str(root / "kl"), health=False), cdi_root=cdi_root,
                  boot_id_path=root / "boot_id"),
        connect(kubeconfig), devices, lambda _: Side.DRA,
        CheckpointClaimStore(claims_checkpoint(claims_dir, boot_id=lambda: BOOT_ID), lock_dir=state_dir),
        ownership=split,
    )
    node.start()
    print(READY, node.config.plugin.dra_socket, node.config.plugin.registration_socket, flush=True)
    cpu_start = time.process_time()  # every thread of the daemon, user + system
    sys.stdin.read()  # the client closes our stdin when it is done
    node.preparer.syncer.flush(timeout=5.0)  # the last call's background sync belongs to the run
    cpu = time.process_time() - cpu_start
    count = total = 0.0
    for metric in node.metrics.seconds.collect():
        for sample in metric.samples:
            if sample.labels.get("op") == "prepare" and sample.name.endswith("_count"):
                count = sample.value
            if sample.labels.get("op") == "prepare" and sample.name.endswith("_sum"):
                total = sample.value
    node.stop()
    print(f"daemon prepare mean {total / count * 1000 if count else 0:.3f} ms over {count:.0f} calls (the driver's "
          f"latency histogram, fresh and repeat); daemon CPU "
          f"{cpu * 1e6 / max(count / 2, 1):.0f} us per iteration (fresh + repeat + unprepare + echo, all threads, "
          "background syncs included)", flush=True)
    return 0


# -- the client (kubelet) process --------------------------------------------------------------------------------

def start_emulator(kubeconfig: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "bridge", "sandbox", "apiserver", "--kubeconfig-out", str(kubeconfig),
           "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # printed once serving, after the kubeconfig was written
    if "serving at" not in line:
        proc.kill()
        raise SystemExit(f"the API emulator did not start: {line!r}")
    return proc


def storage_floor(directory: Path, size: int, n: int) -> tuple[list[float], list[float]]:
    """In `directory` (the claims dir): (two unsynced replaces of a claims.json-sized file: a fresh prepare's writes in
    the call, one fsync of that file and of its directory: the background sync after it)."""
    path = directory / "floor.json"
    data = b"x" * size
    writes, syncs = [], []
    for _ in range(n):
        t = time.perf_counter()
        _replace_unsynced(path, data)
        _replace_unsynced(path, data)
        writes.append(time.perf_counter() - t)
        t = time.perf_counter()
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(directory)
        syncs.append(time.perf_counter() - t)
    path.unlink(missing_ok=True)
    return writes, syncs


def ab_sync(kubeconfig: Path, root: Path, cdi_root: Path, n: int) -> dict[str, list[float]]:
    """The prepare core in this process, two preparers against the same emulator, alternating call by call (so
    machine noise hits both alike): "in call" = the kubelet waits for the fsync (PrepareCompleted and unprepare
    written durably, the policy before the deferred sync), "deferred" = production (renames in the call, one
    coalesced fsync right after it)."""
    from bridge.dra.claims import ClaimRef
    from bridge.dra.prepare import ClaimRecord, Preparer
    from bridge.dra.slices import device_name
    from bridge.dra.stores import CheckpointClaimStore, ClaimCdi
    from bridge.inventory.simulated import devices_from_spec
    from bridge.ledger import Side
    from bridge.ledger.checkpoint import Checkpoint

    class SyncInCall(CheckpointClaimStore):
        def commit(self, put: Sequence[ClaimRecord] = (), remove: Sequence[str] = (), *,
                   durable: bool = True) -> None:
            super().commit(put, remove, durable=not any(r.state == "PrepareStarted" for r in put))

        def sync(self) -> None:
            pass

    api = connect(str(kubeconfig))
    pod = make_pod(api, "ab", "p", ["gpu"])
    claims = [make_claim(api, "ab", f"c{i}", pod, [gpu(f"gpu-{i % 8}")]) for i in range(2 * n)]
    devices = devices_from_spec("8xH100-80GB", NODE)
    preparers = {}
    for mode, store_cls in (("in call", SyncInCall), ("deferred", CheckpointClaimStore)):
        store = store_cls(Checkpoint(root / f"ab-{mode.replace(' ', '-')}", boot_id=lambda: BOOT_ID))
        preparers[mode] = Preparer(kube=connect(str(kubeconfig)), driver="gpu.dra-bridge.io", pool=NODE,
                                   devices=devices, device_name=device_name, side_of=lambda _u: Side.DRA,
                                   store=store, cdi=ClaimCdi(cdi_root / mode.replace(" ", "-"), "gpu.dra-bridge.io"),
                                   boot_id=BOOT_ID, record_events=False)
    out: dict[str, list[float]] = {mode: [] for mode in preparers}
    for i in range(n):
        modes = list(preparers) if i % 2 else list(reversed(preparers))
        for k, mode in enumerate(modes):
            c = claims[2 * i + k]
            ref = ClaimRef("ab", c["metadata"]["name"], c["metadata"]["uid"])
            t = time.perf_counter()
            result = preparers[mode].prepare([ref])[ref.uid]
            out[mode].append(time.perf_counter() - t)
            assert not result.error, result.error
            preparers[mode].unprepare([ref])
    return out


def one_round(stub: pb_grpc.DRAPluginStub, reg: reg_grpc.RegistrationStub, claims: list[dict],
              prep: list[float], repeat: list[float], echo: list[float], spacing: float = 0.0,
              floor: tuple[pb_grpc.DRAPluginStub, list[float]] | None = None) -> None:
    """Per claim: the echo, a fresh prepare, the same prepare again, the Go floor's prepare of it (with `floor`: its
    stub and timings), the unprepare (untimed); `spacing` seconds of pause before each timed call (0: back to
    back)."""
    for c in claims:
        ref = pb.Claim(namespace="bench", name=c["metadata"]["name"], uid=c["metadata"]["uid"])
        time.sleep(spacing)
        t = time.perf_counter()
        reg.GetInfo(reg_pb.InfoRequest(), timeout=5)
        echo.append(time.perf_counter() - t)
        request = pb.NodePrepareResourcesRequest(claims=[ref])
        time.sleep(spacing)
        t = time.perf_counter()
        resp = stub.NodePrepareResources(request, timeout=45)
        prep.append(time.perf_counter() - t)
        assert not resp.claims[ref.uid].error, resp.claims[ref.uid].error
        time.sleep(spacing)
        t = time.perf_counter()
        again = stub.NodePrepareResources(request, timeout=45)
        repeat.append(time.perf_counter() - t)
        assert again == resp, (again, resp)
        if floor is not None:
            time.sleep(spacing)
            t = time.perf_counter()
            theirs = floor[0].NodePrepareResources(request, timeout=45)
            floor[1].append(time.perf_counter() - t)
            assert not theirs.claims[ref.uid].error, theirs.claims[ref.uid].error
        un = stub.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(claims=[ref]), timeout=45)
        assert not un.claims[ref.uid].error, un.claims[ref.uid].error


def start_go_floor(binary: Path, kubeconfig: Path, root: Path) -> tuple[subprocess.Popen[bytes], str]:
    """bench/godra for this node's claims, its sockets under `root` (it publishes no slice: the daemon's is the
    node's); the process and its DRA socket once it listens."""
    plugin_dir = root / "godra"
    proc = subprocess.Popen([str(binary), "--driver", "gpu.dra-bridge.io", "--node-name", NODE,
                             "--kubeconfig", str(kubeconfig), "--publish=false", "--plugin-dir", str(plugin_dir),
                             "--registrar-dir", str(root / "godra-registry")], stdout=subprocess.DEVNULL)
    socket = plugin_dir / "dra.sock"
    deadline = time.monotonic() + 30
    while not socket.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"bench/godra did not listen on {socket} (exit {proc.poll()})")
        time.sleep(0.05)
    return proc, str(socket)


def stop_go_floor(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(30)


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=300, help="claims per round")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds over the same claims, one after another; with more than one, the target is judged "
                         "on the median of the rounds' p99 (single rounds on a shared machine move +-30 %%)")
    ap.add_argument("--spacing", type=float, default=0.0, metavar="MS",
                    help="pause MS milliseconds before each timed call (default 0: back to back, as the issue's "
                         "figures were taken); a kubelet prepares one pod's claims at a time, its calls seconds "
                         "apart, so on a node every call meets a daemon whose threads slept (20 is enough for that)")
    ap.add_argument("--go-floor", action="store_true",
                    help="also prepare each claim through bench/godra, a DRA plugin in Go on the upstream kubelet-"
                         "plugin helper that GETs the claim and answers with no driver work (built once; needs Go)")
    ap.add_argument("--state-dir", type=Path, help="where the checkpoint lives (default: a new dir under /tmp)")
    ap.add_argument("--claims-dir", type=Path,
                    help="where the claim records (claims.json) live (default: a new dir under /dev/shm, as the "
                         "chart's tmpfs /var/run/dra-bridge); the state dir: the layout before they had their own")
    ap.add_argument("--cdi-dir", type=Path, help="where CDI specs go (default: a new dir under /dev/shm)")
    ap.add_argument("--ab-sync", type=int, default=0, metavar="N",
                    help="also compare, in this process, N prepares that wait for the fsync with N that defer it")
    ap.add_argument("--daemon", nargs=5, metavar=("KUBECONFIG", "ROOT", "CDI", "STATE", "CLAIMS"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.daemon:
        kc, root, cdi, state, claims = args.daemon
        return run_daemon(kc, Path(root), Path(cdi), Path(state), Path(claims))

    root = Path(tempfile.mkdtemp(prefix="br-bench-", dir="/tmp"))
    # /var/run is a tmpfs on real nodes (CDI specs, the chart's claims dir); use one here too when the machine has it
    # (the sides' checkpoint stays on disk).
    shm = Path("/dev/shm")
    cdi_root = args.cdi_dir or (Path(tempfile.mkdtemp(prefix="br-cdi-", dir=shm)) if shm.is_dir() else root / "cdi")
    claims_dir = args.claims_dir or (Path(tempfile.mkdtemp(prefix="br-claims-", dir=shm)) if shm.is_dir()
                                     else root / "claims")
    state_dir = args.state_dir or root / "st"
    state_dir.mkdir(parents=True, exist_ok=True)
    claims_dir.mkdir(parents=True, exist_ok=True)
    kubeconfig = root / "kubeconfig"
    emulator = start_emulator(kubeconfig)
    daemon: subprocess.Popen[str] | None = None
    godra: subprocess.Popen[bytes] | None = None
    try:
        api = connect(str(kubeconfig))
        pod = make_pod(api, "bench", "p", ["gpu"])
        claims = [make_claim(api, "bench", f"c{i}", pod, [gpu(f"gpu-{i % 8}")]) for i in range(args.iterations)]
        daemon = subprocess.Popen(
            [sys.executable, __file__, "--daemon", str(kubeconfig), str(root), str(cdi_root), str(state_dir),
             str(claims_dir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert daemon.stdin is not None and daemon.stdout is not None
        ready = daemon.stdout.readline().split()
        if ready[:2] != READY.split():
            raise SystemExit(f"the daemon did not start: {ready}")
        dra_socket, reg_socket = ready[2], ready[3]

        floor_socket = None
        binary = build_go(GO_FLOOR, "the Go floor (--go-floor)") if args.go_floor else None
        if binary is not None:
            godra, floor_socket = start_go_floor(binary, kubeconfig, root)
        prep: list[float] = []
        repeat: list[float] = []
        echo: list[float] = []
        floor: list[float] = []
        rounds: list[tuple[float, float, float, str]] = []  # per round: fresh p50, fresh p99, echo p99, load before
        load_before = load()
        with grpc.insecure_channel("unix://" + dra_socket) as ch, \
                grpc.insecure_channel("unix://" + reg_socket) as rch, contextlib.ExitStack() as more:
            stub, reg = pb_grpc.DRAPluginStub(ch), reg_grpc.RegistrationStub(rch)
            theirs = None
            if floor_socket is not None:
                fch = more.enter_context(grpc.insecure_channel("unix://" + floor_socket))
                theirs = (pb_grpc.DRAPluginStub(fch), floor)
            for _ in range(args.rounds):  # unprepared at the end of each iteration, a claim is fresh again next round
                first, round_load = len(prep), load()
                one_round(stub, reg, claims, prep, repeat, echo, args.spacing / 1000, theirs)
                rounds.append((pct(prep[first:], 50), pct(prep[first:], 99), pct(echo[first:], 99), round_load))
        load_after = load()
        if godra is not None:  # (not beside the attribution below)
            stop_go_floor(godra)
            godra = None
        checkpoint_size = (claims_dir / CLAIMS_NAME).stat().st_size
        daemon.stdin.close()
        daemon_view = daemon.stdout.read().strip()
        daemon.wait(30)
        # Attribution, after the daemon is gone: the claim GET alone, the storage floor.
        gets = []
        for c in claims[:100]:
            time.sleep(args.spacing / 1000)
            t = time.perf_counter()
            api.get(api.resource_api().claims, c["metadata"]["name"], "bench")
            gets.append(time.perf_counter() - t)
        floor_writes, floor_syncs = storage_floor(claims_dir, checkpoint_size, 100)
        ab = ab_sync(kubeconfig, root, cdi_root, args.ab_sync) if args.ab_sync else {}
    finally:
        if godra is not None:
            stop_go_floor(godra)
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
        emulator.send_signal(signal.SIGTERM)
        emulator.wait(30)
        shutil.rmtree(root, ignore_errors=True)
        if args.cdi_dir is None:
            shutil.rmtree(cdi_root, ignore_errors=True)
        if args.claims_dir is None:
            shutil.rmtree(claims_dir, ignore_errors=True)

    ms = 1000.0
    p50, p99 = pct(prep, 50) * ms, pct(prep, 99) * ms
    r50, r99 = pct(repeat, 50) * ms, pct(repeat, 99) * ms
    e50, e99 = pct(echo, 50) * ms, pct(echo, 99) * ms
    spaced = f"{args.spacing:g} ms apart" if args.spacing else "back to back"
    print(f"iterations: {len(prep)} ({args.rounds} x {args.iterations}), calls {spaced}  (emulator, daemon and "
          "client in 3 processes; "
          f"{os.cpu_count()} CPUs; load average {load_before} before, {load_after} after)")
    print(f"NodePrepareResources fresh  (1 claim, 1 GPU): p50 {p50:.2f} ms  p99 {p99:.2f} ms  "
          f"mean {statistics.mean(prep) * ms:.2f} ms")
    print(f"NodePrepareResources repeat (prepared claim): p50 {r50:.2f} ms  p99 {r99:.2f} ms  "
          f"mean {statistics.mean(repeat) * ms:.2f} ms")
    print(f"echo RPC (GetInfo, same socket kind):  p50 {e50:.3f} ms  p99 {e99:.3f} ms")
    if floor:
        f50, f99 = pct(floor, 50) * ms, pct(floor, 99) * ms
        print(f"Go floor (bench/godra: the helper's claim GET and checks, no driver work): p50 {f50:.2f} ms  "
              f"p99 {f99:.2f} ms;  fresh prepare/floor: p50 {p50 / f50:.1f}x  p99 {p99 / f99:.1f}x")
    print(f"ratio fresh prepare/echo: p50 {p50 / e50:.1f}x  p99 {p99 / e99:.1f}x;  "
          f"repeat/echo: p50 {r50 / e50:.1f}x  p99 {r99 / e99:.1f}x")
    print(f"claim GET alone (emulator, official client): p50 {pct(gets, 50) * ms:.2f} ms  "
          f"p99 {pct(gets, 99) * ms:.2f} ms")
    print(daemon_view)
    print(f"storage floor in the claims dir ({checkpoint_size}-byte file): 2 unsynced replaces (in the call) "
          f"p50 {pct(floor_writes, 50) * ms:.2f} ms  p99 {pct(floor_writes, 99) * ms:.2f} ms;  file + directory "
          f"fsync (after the call) p50 {pct(floor_syncs, 50) * ms:.2f} ms  p99 {pct(floor_syncs, 99) * ms:.2f} ms")
    for mode, values in ab.items():
        print(f"A/B in-process prepare core, fsync {mode:8s}: p50 {pct(values, 50) * ms:.2f} ms  "
              f"p90 {pct(values, 90) * ms:.2f} ms  p99 {pct(values, 99) * ms:.2f} ms  "
              f"mean {statistics.mean(values) * ms:.2f} ms  ({len(values)} calls, alternating)")
    print(f"CDI dir: {cdi_root}; claims dir: {claims_dir}; state dir: {state_dir}")
    judged = p99
    if len(rounds) > 1:
        for k, (round_p50, round_p99, echo_p99, before) in enumerate(rounds, 1):
            print(f"  round {k}: fresh p50 {round_p50 * ms:.2f} ms  p99 {round_p99 * ms:.2f} ms  (echo p99 "
                  f"{echo_p99 * ms:.3f} ms; load average {before} before)")
        judged = statistics.median(r[1] for r in rounds) * ms
        lo, hi = min(r[1] for r in rounds) * ms, max(r[1] for r in rounds) * ms
        print(f"median of the {len(rounds)} rounds' fresh p99: {judged:.2f} ms (rounds {lo:.2f}-{hi:.2f}); "
              f"p99 over all {len(prep)}: {p99:.2f} ms")
    what = "the median of the rounds' p99" if len(rounds) > 1 else "p99"
    print(f"target fresh prepare p99 <= 5 ms on a quiet machine (issue 25), {what}: "
          f"{'MET' if judged <= 5 else 'NOT MET'}  (<= 10 ms: {'met' if judged <= 10 else 'not met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
