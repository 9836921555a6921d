#!/usr/bin/env python3
"""Print what the NVML source discovers on this machine, then watch health events for a few seconds.

For a real GPU machine (no GPU here): `python scripts/nvml_check.py [--seconds 5] [--ignore-xids 94]`.
Exit status: 0 when discovery worked, 1 with the InventoryError message when it did not.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time

from bridge.inventory import InventoryError, parse_xid_list
from bridge.inventory.nvml import NvmlSource


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="how long to watch health events")
    parser.add_argument("--ignore-xids", default="", help="extra XIDs to ignore, e.g. '94,95'")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        source = NvmlSource(additional_ignored_xids=parse_xid_list(args.ignore_xids))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
