"""NodePrepareResources latency against the local API emulator, with a bare echo RPC as the in-run baseline.

    .venv/bin/python bench/dra_prepare_bench.py [--iterations 200]

Each prepare is 1 claim with 1 GPU over a real unix socket (v1 DRAPlugin): claim GET from the emulator through
the official client, ownership/exclusivity checks, PrepareStarted checkpoint write (atomic rename, not fsynced:
see bridge/dra/prepare.py for why that is crash-safe), CDI spec write (fsync, on tmpfs when available),
PrepareCompleted checkpoint write (file + directory fsync). A fresh claim per iteration (unprepared afterwards) so nothing is answered
from the idempotence shortcut. The baseline is a unary RPC on the same kind of socket whose handler does nothing
(`pluginregistration.GetInfo` on the plugin's registration socket). Target: prepare p99 < 10 ms.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge._proto.dra.v1 import dra_pb2 as pb  # noqa: E402
from bridge._proto.dra.v1 import dra_pb2_grpc as pb_grpc  # noqa: E402
from bridge._proto.pluginregistration.v1 import pluginregistration_pb2 as reg_pb  # noqa: E402
from bridge._proto.pluginregistration.v1 import pluginregistration_pb2_grpc as reg_grpc  # noqa: E402
from bridge.dra.component import DraConfig, DraNode  # noqa: E402
from bridge.dra.plugin import PluginConfig  # noqa: E402
from bridge.dra.stores import CheckpointClaimStore  # noqa: E402
from bridge.inventory.simulated import devices_from_spec  # noqa: E402
from bridge.kube import connect  # noqa: E402
from bridge.ledger.checkpoint import Checkpoint  # noqa: E402
from bridge.sandbox.apiserver import ApiServer  # noqa: E402
from tests.dra.cluster import NODE, gpu, make_claim, make_pod  # noqa: E402


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=200)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="br-bench-", dir="/tmp"))
    # /var/run/cdi is a tmpfs on real nodes; use one here too when the machine has it (the checkpoint stays on disk).
    cdi_root = Path(tempfile.mkdtemp(prefix="br-cdi-", dir="/dev/shm")) if Path("/dev/shm").is_dir() else root / "cdi"
    (root / "boot_id").write_text("bench\n")
    with ApiServer() as srv:
        kc = srv.write_kubeconfig(root / "kubeconfig")
        api = connect(str(kc))
        node = DraNode(
            DraConfig(NODE, PluginConfig(kubelet_root=str(root / "kl"), health=False), cdi_root=cdi_root,
                      boot_id_path=root / "boot_id"),
            connect(str(kc)), devices_from_spec("8xH100-80GB", NODE), lambda _: "dra",
            CheckpointClaimStore(Checkpoint(root / "st", boot_id=lambda: "bench")),
        )
        node.start()
        pod = make_pod(api, "bench", "p", ["gpu"])
        claims = [make_claim(api, "bench", f"c{i}", pod, [gpu(f"gpu-{i % 8}")]) for i in range(args.iterations)]
        prep, echo = [], []
        with grpc.insecure_channel("unix://" + str(node.config.plugin.dra_socket)) as ch, \
                grpc.insecure_channel("unix://" + str(node.config.plugin.registration_socket)) as rch:
            stub, reg = pb_grpc.DRAPluginStub(ch), reg_grpc.RegistrationStub(rch)
            for i, c in enumerate(claims):
                ref = pb.Claim(namespace="bench", name=c["metadata"]["name"], uid=c["metadata"]["uid"])
                t = time.perf_counter()
                reg.GetInfo(reg_pb.InfoRequest(), timeout=5)
                echo.append(time.perf_counter() - t)
                t = time.perf_counter()
                resp = stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[ref]), timeout=45)
                prep.append(time.perf_counter() - t)
                assert not resp.claims[ref.uid].error, resp.claims[ref.uid].error
                stub.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(claims=[ref]), timeout=45)
        # The claim GET alone, through the same client, for attribution.
        gets = []
        for c in claims[:50]:
            t = time.perf_counter()
            api.get(api.resource_api().claims, c["metadata"]["name"], "bench")
            gets.append(time.perf_counter() - t)
        node.stop()
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(cdi_root, ignore_errors=True)
    ms = 1000.0
    p50, p99 = pct(prep, 50) * ms, pct(prep, 99) * ms
    e50, e99 = pct(echo, 50) * ms, pct(echo, 99) * ms
    print(f"iterations: {len(prep)}")
    print(f"NodePrepareResources (1 claim, 1 GPU): p50 {p50:.2f} ms  p99 {p99:.2f} ms  mean {statistics.mean(prep) * ms:.2f} ms")
    print(f"echo RPC (GetInfo, same socket kind):  p50 {e50:.3f} ms  p99 {e99:.3f} ms")
    print(f"ratio prepare/echo: p50 {p50 / e50:.1f}x  p99 {p99 / e99:.1f}x")
    print(f"claim GET alone (emulator, official client): p50 {pct(gets, 50) * ms:.2f} ms  p99 {pct(gets, 99) * ms:.2f} ms")
    print(f"CDI dir: {cdi_root}; checkpoint: {root / 'st'} (1 durable write per prepare call: file + directory fsync)")
    print(f"target prepare p99 < 10 ms: {'MET' if p99 < 10 else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
