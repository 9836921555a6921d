#!/usr/bin/env python3
"""Print what the NVML source discovers on this machine, the CDI spec the daemon would write for GPU 0, then watch
health events for a few seconds.

For a real GPU machine:

    python scripts/nvml_check.py [--seconds 5] [--ignore-xids 94]
        [--driver-root / | /run/nvidia/driver] [--dev-root /] [--host-root /] [--cdi-hook-path PATH]
        [--cdi-source auto|toolkit|own]

The CDI part uses the same code and the same option meanings as `bridge node`: it explains what it found (driver
files for the NVML driver version, in NVIDIA's standard library directories or, when those hold none, through the
driver root's /etc/ld.so.cache, which the explanation then names; when nothing is found it lists the directories
searched and what the cache held; device nodes, nvidia-cdi-hook, the NVIDIA Container Toolkit's spec), prints the
per-claim spec for GPU 0 exactly as prepare would write it (our own spec, even when the toolkit's names would be
used; the explanation says which one a claim gets), checks it against the CDI schema, and writes nothing.
Exit status: 0 when discovery worked and the spec is valid, 1 with the error message otherwise.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bridge.cdi import (
    CDI_SOURCES,
    CdiBuildError,
    CdiConfigError,
    CdiOptions,
    CdiSpecInvalid,
    NodeCdi,
    build_claim_spec,
    claim_kind,
    validate_spec,
)
from bridge.cdi.provider import DEFAULT_HOOK_PATHS
from bridge.inventory import GpuDevice, InventoryError, parse_xid_list
from bridge.inventory.nvml import NvmlSource

EXAMPLE_CLAIM_UID = "00000000-0000-4000-8000-000000000000"


def cdi_report(devices: Sequence[GpuDevice], options: CdiOptions, *, driver: str = "gpu.dra-bridge.io") -> int:
    """Print the CDI explanation and GPU 0's claim spec; 0 when the spec is valid, 1 otherwise."""
    node_cdi = NodeCdi(options, devices)
    print("--- CDI (what `bridge node` would log at start) ---")
    for level, line in node_cdi.describe():
        print(f"{logging.getLevelName(level)} {line}")
    gpu0 = next(d for d in devices if d.index == min(g.index for g in devices))
    try:
        toolkit = node_cdi.toolkit_names([gpu0])
    except CdiConfigError as err:
        print(f"ERROR {err} (bridge node would exit 2)", file=sys.stderr)
        return 1
    if toolkit:
        print(f"a claim on GPU {gpu0.index} would get the toolkit's name {toolkit[gpu0.uuid]}; our own spec for it:")
    try:
        built = build_claim_spec(EXAMPLE_CLAIM_UID, [gpu0], kind=claim_kind(driver), inventory=node_cdi.inventory([gpu0]))
        validate_spec(built.document)
    except (CdiBuildError, CdiSpecInvalid) as err:
        print(f"CDI spec for GPU {gpu0.index} cannot be built: {err}", file=sys.stderr)
        return 1
    print(f"--- CDI spec for GPU {gpu0.index} ({gpu0.uuid}), claim {EXAMPLE_CLAIM_UID}: valid against the CDI "
          f"schema; CDI device {built.cdi_ids[gpu0.uuid]} ---")
    print(json.dumps(built.document, indent=2))
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="how long to watch health events (0: do not watch)")
    parser.add_argument("--ignore-xids", default="", help="extra XIDs to ignore, e.g. '94,95'")
    parser.add_argument("--driver-root", default="/", help="host path of the driver's user space (as bridge node)")
    parser.add_argument("--dev-root", default="/", help="host path under which dev/nvidia* exist")
    parser.add_argument("--host-root", default="/", help="where this process sees the host's /")
    parser.add_argument("--cdi-hook-path", default=None, help="host path of nvidia-cdi-hook (default: the usual places)")
    parser.add_argument("--cdi-source", choices=CDI_SOURCES, default="auto", help="as bridge node --cdi-source")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, *, nvml_module: Any = None) -> int:
    """`nvml_module`: a pynvml look-alike for tests (tests/inventory/fake_pynvml.py); default: the real one."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        source = NvmlSource(additional_ignored_xids=parse_xid_list(args.ignore_xids), nvml_module=nvml_module)
        devices = source.devices()
    except InventoryError as err:
        print(f"discovery failed: {err}", file=sys.stderr)
        return 1
    print(f"{len(devices)} GPU(s), ignored XIDs {sorted(source.ignored_xids)}")
    for d in devices:
        print(f"[{d.index}] {d.uuid} {d.product_name} minor={d.minor} mem={d.memory_bytes // 2**20}MiB "
              f"cc={d.compute_capability} arch={d.architecture} driver={d.driver_version} cuda={d.cuda_version} "
              f"pci={d.pci_bus_id} numa={d.numa_node} mig_capable={d.mig_capable} mig_enabled={d.mig_enabled}")
        for peer, links in d.nvlink_peers:
            print(f"      nvlink -> {peer} x{links}")
    status = 0
    if devices:
        options = CdiOptions(source=args.cdi_source, driver_root=args.driver_root, dev_root=args.dev_root,
                             check_device_nodes=True, host_root=Path(args.host_root),
                             hook_paths=(args.cdi_hook_path,) if args.cdi_hook_path else DEFAULT_HOOK_PATHS)
        status = cdi_report(devices, options)
    if args.seconds > 0:
        stop = threading.Event()
        timer = threading.Timer(args.seconds, stop.set)
        timer.start()
        start = time.monotonic()
        count = 0
        for event in source.health_events(stop):
            count += 1
            print(f"health event after {time.monotonic() - start:.2f}s: {event}")
        print(f"watched health events for {time.monotonic() - start:.2f}s: {count} event(s)")
    t0 = time.monotonic()
    source.close()
    print(f"close() took {time.monotonic() - t0:.2f}s")
    return status


if __name__ == "__main__":
    sys.exit(main())
