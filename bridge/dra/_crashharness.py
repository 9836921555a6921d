"""TEST ENTRY POINT: the DRA half of the node daemon as a bare process, for crash tests and the benchmark.

    python -m bridge.dra._crashharness --kubeconfig K --node node-a --kubelet-root R --state-dir S \
        --cdi-root C --boot-id-file B [--devices 4xH100-80GB] [--legacy 0,1]

Simulated GPUs, the node's checkpoints (`<state-dir>/checkpoint.json` and the claim records' `claims.json` beside
it, opened as `bridge node` opens them), the real plugin sockets. Combined with `BRIDGE_CRASH_AT` (see
`crashpoints`) it dies with SIGKILL at a chosen step; tests restart it and let the kubelet simulator retry.
Runs until SIGTERM/SIGINT, then removes its sockets. Not a user command: `bridge node` is.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from bridge.dra.component import DraConfig, DraNode
from bridge.dra.plugin import PluginConfig
from bridge.dra.stores import CheckpointClaimStore, claims_checkpoint, open_checkpoint
from bridge.inventory.model import DeviceID
from bridge.ledger.sides import Side
from bridge.inventory.simulated import devices_from_spec
from bridge.kube import connect
from bridge.ledger.checkpoint import Checkpoint, read_boot_id
from bridge.logs import setup_logging


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bridge.dra._crashharness")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--kubelet-root", required=True)
    p.add_argument("--state-dir", required=True)
    p.add_argument("--cdi-root", required=True)
    p.add_argument("--boot-id-file", required=True)
    p.add_argument("--devices", default="4xH100-80GB")
    p.add_argument("--legacy", default="", help="comma-separated GPU indexes on the legacy side")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    setup_logging("text", args.log_level)

    devices = devices_from_spec(args.devices, args.node)
    legacy = {devices[int(i)].uuid for i in args.legacy.split(",") if i}

    def side_of(uuid: DeviceID) -> Side:
        return Side.LEGACY if uuid in legacy else Side.DRA

    def boot_id() -> str:
        return read_boot_id(args.boot_id_file)

    # as `bridge node` wires them (bridge.node.dual): the sides' checkpoint and the claim records' file, both in
    # the state directory here (no --claims-dir)
    checkpoint = Checkpoint(args.state_dir, boot_id=boot_id)
    claims = claims_checkpoint(args.state_dir, boot_id=boot_id)
    opened = open_checkpoint(checkpoint, claims)
    store = CheckpointClaimStore(claims, lock_dir=args.state_dir)
    node = DraNode(
        DraConfig(node_name=args.node, plugin=PluginConfig(kubelet_root=args.kubelet_root),
                  cdi_root=Path(args.cdi_root), boot_id_path=Path(args.boot_id_file)),
        connect(args.kubeconfig), devices, side_of, store,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    node.start()
    for corrupt in (opened.corrupt, opened.claims_corrupt):
        if corrupt is not None:
            print(f"CORRUPT-CHECKPOINT-MOVED-TO {corrupt.moved_to}", flush=True)
    print("READY", flush=True)
    try:
        while not stop.wait(0.5):  # timed: a signal taken by a gRPC thread still reaches the handler
            pass
    finally:
        node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
