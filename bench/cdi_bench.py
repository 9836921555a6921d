"""Cost of a CUDA-complete per-claim CDI spec vs the device-nodes-only spec it replaced, same process, same disk.

    .venv/bin/python bench/cdi_bench.py [--iterations 300] [--libraries 60]

A fake 570.x host is built in a temp dir (tests/fakedriver.py), padded to --libraries versioned libraries (a real
570 install has about 40-60), with 8 GPUs' device nodes and nvidia-cdi-hook. Measured per claim, as prepare does
it (one GPU, a new claim UID each time):
  baseline   build the device-nodes-only spec (no inventory) + atomic write WITHOUT schema validation: what the
             daemon wrote before driver-root discovery
  inventory  NodeCdi.inventory(): driver files from the cache, device nodes / IPC sockets / hook stat'ed
  build      build_claim_spec from that inventory (pure)
  validate   validate_spec (spec-level edits cached per content, as in production)
  write      CdiSpecWriter.write: validate + temp file + fsync + rename + fsync dir
  full       inventory + build + write: the whole per-claim CDI cost inside NodePrepareResources
  toolkit    NodeCdi.toolkit_names() with a toolkit spec on the node (directory listing + stat, cached parse)
Spec files go to /dev/shm when the machine has it (/var/run/cdi is a tmpfs on a node).
Printed: mean and p99 in ms, and each as a ratio of the baseline.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.cdi import (  # noqa: E402
    CdiOptions,
    CdiSpecWriter,
    NodeCdi,
    build_claim_spec,
    claim_kind,
    validate_spec,
)
from bridge.atomicfile import atomic_write_bytes  # noqa: E402
from bridge.inventory import devices_from_spec  # noqa: E402
from tests.fakedriver import LIBDIR, VERSION, make_host, put_spec, toolkit_spec  # noqa: E402


def timed(n: int, call: Callable[[int], object]) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter()
        call(i)
        out.append(time.perf_counter() - t)
    return out


def p99(xs: list[float]) -> float:
    return sorted(xs)[max(0, int(len(xs) * 0.99) - 1)]


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--libraries", type=int, default=60)
    args = ap.parse_args()
    gpus = devices_from_spec("8xH100-80GB", "bench", driver_version=VERSION)
    with tempfile.TemporaryDirectory(prefix="cdi-bench-") as d:
        host = make_host(Path(d) / "host", [g.minor for g in gpus])
        lib = host / LIBDIR
        for i in range(max(0, args.libraries - len(list(lib.glob(f"*.so.{VERSION}"))))):
            (lib / f"libnvidia-extra{i}.so.{VERSION}").write_bytes(b"x")
        node = NodeCdi(CdiOptions(driver_root="/", check_device_nodes=True, host_root=host), gpus,
                       kernel_release="6.8.0", firmware_class_path="")
        kind = claim_kind()
        # /var/run/cdi is a tmpfs on a node: write to /dev/shm where the machine has it
        cdi_dir = Path(tempfile.mkdtemp(prefix="cdi-bench-", dir="/dev/shm" if Path("/dev/shm").is_dir() else d))
        writer = CdiSpecWriter(cdi_dir, kind)
        n = args.iterations
        gpu = [gpus[3]]
        inv = node.inventory(gpu)
        def old_write(i: int) -> None:
            doc = build_claim_spec(f"old-{i}", gpu).document
            atomic_write_bytes(writer.path_for(f"old-{i}"), (json.dumps(doc, indent=2) + "\n").encode())

        rows = {
            "baseline": timed(n, old_write),
            "inventory": timed(n, lambda i: node.inventory(gpu)),
            "build": timed(n, lambda i: build_claim_spec(f"b-{i}", gpu, inventory=inv)),
            "validate": timed(n, lambda i: validate_spec(build_claim_spec(f"v-{i}", gpu, inventory=inv).document)),
            "write": timed(n, lambda i: writer.write(f"w-{i}", build_claim_spec(f"w-{i}", gpu, inventory=inv).document)),
            "full": timed(n, lambda i: writer.write(f"f-{i}", build_claim_spec(
                f"f-{i}", gpu, inventory=node.inventory(gpu)).document)),
        }
        put_spec(host, "/var/run/cdi/nvidia.yaml", toolkit_spec(gpus))
        rows["toolkit"] = timed(n, lambda i: node.toolkit_names(gpu))
        mounts = len(build_claim_spec("x", gpu, inventory=inv).document["containerEdits"]["mounts"])
        shutil.rmtree(cdi_dir, ignore_errors=True)
    base = statistics.mean(rows["baseline"])
    print(f"per-claim CDI spec, 1 GPU, {mounts} mounts, {n} iterations")
    print(f"{'':10} {'mean ms':>9} {'p99 ms':>9} {'x baseline':>11}")
    for name, xs in rows.items():
        print(f"{name:10} {statistics.mean(xs) * 1e3:9.3f} {p99(xs) * 1e3:9.3f} {statistics.mean(xs) / base:11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
