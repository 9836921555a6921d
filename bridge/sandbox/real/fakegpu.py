"""Simulated GPUs whose files are real: each real node gets a driver root laid out as the GPU Operator's driver
container leaves it, at the node's `/run/nvidia/driver` (the driver container's root filesystem, which holds the
device nodes too), so that the runtime really gives a container what our CDI specs say and the chart's documented
GPU Operator values (`driverRoot` and `devRoot` both `/run/nvidia/driver`) work unchanged:

* `dev/`: `nvidia<minor>` (major 195, as NVIDIA's kernel module registers them), `nvidiactl` (195:255),
  `nvidia-uvm` and `nvidia-uvm-tools` (a dynamic major on a real machine; 235 here), made with mknod;
* the user-space files of one driver version where a distribution package puts them
  (`usr/lib/x86_64-linux-gnu/lib*.so.<version>` with their soname links, `usr/bin/nvidia-smi`, GSP firmware). The
  libraries are small placeholder files (no GPU here to drive); `nvidia-smi` is a shell script that lists the GPUs
  whose device nodes the container has, so a container's own output shows which GPUs it got.

The version is the simulated source's (`bridge.inventory.simulated.DEFAULT_DRIVER_VERSION`), which is what NVML
would report, so the daemon's driver discovery finds exactly these files.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from bridge.inventory.simulated import DEFAULT_DRIVER_VERSION

NVIDIA_MAJOR = 195
UVM_MAJOR = 235
LIBDIR = "usr/lib/x86_64-linux-gnu"
LIBRARIES = {"libcuda.so": "libcuda.so.1", "libnvidia-ml.so": "libnvidia-ml.so.1",
             "libnvidia-ptxjitcompiler.so": "libnvidia-ptxjitcompiler.so.1", "libnvidia-nvvm.so": "libnvidia-nvvm.so.4",
             "libcudadebugger.so": "libcudadebugger.so.1"}

NVIDIA_SMI = """#!/bin/sh
# A stand-in nvidia-smi from the sandbox's fake driver root: lists the GPUs whose device nodes this container has.
for d in /dev/nvidia[0-9]*; do
  [ -e "$d" ] || continue
  echo "GPU ${d#/dev/nvidia}: simulated (device node $d)"
done
"""


def _mknod(path: Path, major: int, minor: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        return
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))


def make_gpu_files(root: Path, minors: range, version: str = DEFAULT_DRIVER_VERSION) -> Path:
    """Create the device nodes and driver files under `root` (the dev root and the driver root)."""
    for m in minors:
        _mknod(root / "dev" / f"nvidia{m}", NVIDIA_MAJOR, m)
    _mknod(root / "dev" / "nvidiactl", NVIDIA_MAJOR, 255)
    _mknod(root / "dev" / "nvidia-uvm", UVM_MAJOR, 0)
    _mknod(root / "dev" / "nvidia-uvm-tools", UVM_MAJOR, 1)
    driver = root
    lib = driver / LIBDIR
    lib.mkdir(parents=True, exist_ok=True)
    for stem, soname in LIBRARIES.items():
        (lib / f"{stem}.{version}").write_bytes(b"\x7fELF placeholder of the sandbox's simulated driver\n")
        link = lib / soname
        if not link.is_symlink():
            link.symlink_to(f"{stem}.{version}")
    smi = driver / "usr/bin/nvidia-smi"
    smi.parent.mkdir(parents=True, exist_ok=True)
    smi.write_text(NVIDIA_SMI)
    smi.chmod(0o755)
    fw = driver / "lib/firmware/nvidia" / version / "gsp_ga10x.bin"
    fw.parent.mkdir(parents=True, exist_ok=True)
    fw.write_bytes(b"placeholder firmware\n")
    return root
