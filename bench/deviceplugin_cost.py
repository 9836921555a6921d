"""Instructions per Allocate of the device plugin with and without the ownership ledger's guard, and of a bare echo
servicer, counted by callgrind in one process (a count repeats where wall-clock p99s on a shared machine do not).

    .venv/bin/python bench/deviceplugin_cost.py [--calls 400] [--keep DIR]

The servers are bench/deviceplugin_bench.py's (`AllocateServers`: "ours" = the plugin with the guard as `bridge
node` wires it with DRA on, "no-ledger" = the same plugin without it, "echo" = the bare servicer, each on its own
unix socket), the client is a gRPC stub in the same process, and the whole process runs under
`valgrind --tool=callgrind`; callgrind dumps its counters whenever the process calls `os.getppid` (the phase
marker; nothing on these paths calls it). Phases, after a warm-up of every server: `--calls` Allocates (1 GPU) to
echo, to no-ledger, to ours, three times over (the passes show how well the counts repeat: a garbage collection or
a background thread's wake-up lands in one of them; the summary takes the median). Each count includes the
client's side of the call and every thread of the process, so the difference between two servers is exact and
their ratio understates the server's share; "guard" is ours - no-ledger, what the ledger adds per Allocate.
Also counted, in-process without gRPC: the pure `guard_allocate` (the fast path, one set lookup in the ledger's
per-side snapshot) vs `allocate_per_device` (the per-device rules), and `SplitController.guard_allocate` (lock,
holder text, guard). Needs valgrind (Debian package `valgrind`); takes a minute or two.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from callgrind import MARKER, totals  # noqa: E402

SERVERS = ("echo", "no-ledger", "ours")
PURE = ("guard_allocate (snapshot)", "allocate_per_device", "SplitController.guard_allocate")
PASSES = 3


def inner(calls: int) -> None:
    from deviceplugin_bench import AllocateServers, ledger_seams

    from bridge.inventory.simulated import SimulatedSource
    from bridge.ledger import Ledger, LedgerConfig, allocate_per_device, guard_allocate

    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="brc-", dir="/tmp") as d:
        servers = AllocateServers(Path(d))
        stubs, req = servers.stubs, servers.request
        for stub in stubs.values():
            for _ in range(50):
                stub.Allocate(req)
        os.getppid()  # dump: start-up and warm-up
        for _ in range(PASSES):
            for name in SERVERS:
                stub = stubs[name]
                for _ in range(calls):
                    stub.Allocate(req)
                os.getppid()
        servers.stop()
    source = SimulatedSource.from_spec("8xH100-80GB", "bench")
    devices = source.devices()
    ledger, cfg = Ledger.all_legacy(devices), LedgerConfig()
    ids = [devices[0].uuid]
    controller_guard = ledger_seams(source)["allocate_guard"]
    for fn in (lambda: guard_allocate(ledger, ids, 1.0, cfg, who="x"),
               lambda: allocate_per_device(ledger, ids, 1.0, cfg, who="x"),
               lambda: controller_guard(ids)):  # type: ignore[operator]
        fn()
        os.getppid()
        for _ in range(calls):
            fn()
        os.getppid()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=400, help="Allocate calls per server and pass")
    ap.add_argument("--keep", metavar="DIR", help="copy the callgrind files (one per phase) here")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.calls < 1:
        raise SystemExit("--calls must be at least 1")
    if args.inner:
        inner(args.calls)
        return
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    n = args.calls
    with tempfile.TemporaryDirectory() as d:
        out = Path(d)
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p", f"--dump-before={MARKER}",
               "--dump-instr=no", "--compress-strings=no", sys.executable, __file__, "--inner", "--calls", str(n)]
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=1800)
        pid = int(m[1]) if (m := re.search(r"==(\d+)==", proc.stderr)) else -1
        if proc.returncode != 0:
            raise SystemExit(f"the process under valgrind failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
        counts = totals(out, pid)
        # numbered dumps: 1 start-up; then one per server and pass; then per pure function a warm-up and a phase
        expected = 1 + PASSES * len(SERVERS) + 2 * len(PURE)
        if len(counts) != expected:
            raise SystemExit(f"expected {expected} callgrind dumps, found {len(counts)}: was {MARKER} renamed, or "
                             "called by something else?")
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            for f in out.iterdir():
                shutil.copy(f, args.keep)
    passes = [dict(zip(SERVERS, (c / n for c in counts[1 + i * len(SERVERS): 1 + (i + 1) * len(SERVERS)])))
              for i in range(PASSES)]
    pure = dict(zip(PURE, (c / n for c in counts[1 + PASSES * len(SERVERS) + 1::2])))
    print(f"python={sys.version.split()[0]} calls/phase={n} (instructions per Allocate, client side included)")
    for i, per in enumerate(passes):
        print(f"  pass {i + 1}: " + "   ".join(f"{k} {v:>10,.0f}" for k, v in per.items())
              + f"   guard (ours - no-ledger) {per['ours'] - per['no-ledger']:>8,.0f}   ours/echo "
                f"{per['ours'] / per['echo']:.3f}   no-ledger/echo {per['no-ledger'] / per['echo']:.3f}")
    med = {k: statistics.median(p[k] for p in passes) for k in SERVERS}
    print(f"  median: guard (ours - no-ledger) {med['ours'] - med['no-ledger']:,.0f}   ours/echo "
          f"{med['ours'] / med['echo']:.3f}   no-ledger/echo {med['no-ledger'] / med['echo']:.3f}")
    for k, v in pure.items():
        print(f"  in-process {k:<32} {v:>10,.0f}")


if __name__ == "__main__":
    main()
