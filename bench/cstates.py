"""Run a command with the CPUs kept out of deep idle states: what a latency-tuned node sees (root only).

    sudo .venv/bin/python bench/cstates.py -- .venv/bin/python bench/dra_prepare_bench.py --rounds 3 --spacing 20

Holds /dev/cpu_dma_latency open with 0 µs for the life of the command (the kernel's PM QoS interface: while it is
open no CPU enters an idle state with a longer exit latency than that; `tuned`'s latency-performance and
network-latency profiles do the same with 1 µs or 0). A call that finds the daemon idle then pays the wake-up of a
polling CPU, not of a halted one, so comparing a `--spacing` bench with and without this wrapper separates what the
idle state costs a cold call from what the cold caches cost. On a VM the guest's idle driver (here `haltpoll`) is
what this limits; the host may still deschedule the vCPU.

Prints the idle driver and governor, then runs the command and exits with its status.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

QOS = "/dev/cpu_dma_latency"


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return "unknown"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        fd = os.open(QOS, os.O_WRONLY)
    except OSError as err:
        print(f"cannot open {QOS} ({err.strerror}): run as root on a kernel with PM QoS", file=sys.stderr)
        return 2
    try:
        os.write(fd, struct.pack("i", 0))
        print(f"holding {QOS} at 0 us (cpuidle driver {_read('/sys/devices/system/cpu/cpuidle/current_driver')}, "
              f"governor {_read('/sys/devices/system/cpu/cpuidle/current_governor_ro')})", flush=True)
        return subprocess.run(argv).returncode
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
