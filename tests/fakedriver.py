"""Fake NVIDIA driver installs for CDI tests: a host tree in a temp dir laid out like a real 570.x install.

`make_host(root)` builds, under `root` (the "host's /", passed to the daemon as `--host-root`):

* `usr/lib/x86_64-linux-gnu/`: the versioned driver libraries a 570 `.run`/package install leaves (file names from
  NVIDIA's 570.124.06 Linux x86_64 installer manifest), with the soname and dev links the installer and ldconfig
  create, a `vdpau/` library, the legacy `libnvidia-nvvm70.so.4`, and unrelated libraries that must NOT be mounted;
* `usr/bin/`: the utilities (`nvidia-debugdump` left non-executable: it must not be picked up);
* `lib/firmware/nvidia/<v>/gsp_*.bin`;
* `run/nvidia-persistenced/socket` (a real unix socket file);
* `dev/`: character device nodes (major 195, like the real ones) for the given minors and control nodes,
  created with mknod; tests skip with a reason where the process may not create device nodes (CAP_MKNOD);
* optionally `usr/bin/nvidia-cdi-hook` (executable).

And `toolkit_spec(gpus)`: a spec shaped like `nvidia-ctk cdi generate` output (index and uuid names, `all`).
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from bridge.inventory.model import GpuDevice

VERSION = "570.124.06"
LIBDIR = "usr/lib/x86_64-linux-gnu"
# versioned library -> soname link the installer creates (None: no soname link)
LIBRARIES = {
    "libcuda.so": "libcuda.so.1",
    "libnvidia-ml.so": "libnvidia-ml.so.1",
    "libnvidia-ptxjitcompiler.so": "libnvidia-ptxjitcompiler.so.1",
    "libnvidia-nvvm.so": "libnvidia-nvvm.so.4",
    "libcudadebugger.so": "libcudadebugger.so.1",
    "libnvidia-gpucomp.so": None,
    "libnvidia-cfg.so": "libnvidia-cfg.so.1",
    "libnvidia-opencl.so": "libnvidia-opencl.so.1",
    "libnvidia-allocator.so": "libnvidia-allocator.so.1",
    "libnvidia-pkcs11-openssl3.so": None,
    "libGLX_nvidia.so": "libGLX_nvidia.so.0",
    "libnvidia-glcore.so": None,
}
UNRELATED_LIBRARIES = ("libz.so.1.3", "libstdc++.so.6.0.33", "libcuda.so.550.54.15.bak")
BINARIES = ("nvidia-smi", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server")
FIRMWARE = ("gsp_ga10x.bin", "gsp_tu10x.bin")
NVIDIA_MAJOR = 195


def _touch(path: Path, mode: int = 0o644, data: bytes = b"\x7fELF fake\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)
    return path


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def make_driver_files(root: Path, version: str = VERSION, *, libdir: str = LIBDIR) -> Path:
    lib = root / libdir
    for stem, soname in LIBRARIES.items():
        _touch(lib / f"{stem}.{version}")
        if soname:
            _link(lib / soname, f"{stem}.{version}")
    _link(lib / "libnvidia-ml.so", "libnvidia-ml.so.1")  # the dev link some distributions ship
    _touch(lib / "vdpau" / f"libvdpau_nvidia.so.{version}")
    _link(lib / "vdpau" / "libvdpau_nvidia.so.1", f"libvdpau_nvidia.so.{version}")
    _touch(lib / "libnvidia-nvvm70.so.4")
    for name in UNRELATED_LIBRARIES:
        _touch(lib / name)
    for name in BINARIES:
        _touch(root / "usr/bin" / name, 0o755)
    _touch(root / "usr/bin/nvidia-debugdump", 0o644)  # not executable: not a binary to mount
    for name in FIRMWARE:
        _touch(root / "lib/firmware/nvidia" / version / name)
    return root


def make_socket(path: Path) -> None:
    """A unix socket file at `path`, however long the path: bound under a short directory, then renamed into place
    (a socket path is limited to 107 bytes; a test's tmp_path under pytest-xdist can be longer)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    short = Path(tempfile.mkdtemp(prefix="sock-", dir="/tmp"))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(str(short / "s"))
        os.rename(short / "s", path)
    finally:
        s.close()
        shutil.rmtree(short, ignore_errors=True)


def mknod(path: Path, minor: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(NVIDIA_MAJOR, minor))
    except PermissionError as err:
        pytest.skip(f"creating fake device nodes needs CAP_MKNOD: {err}")


def make_dev(root: Path, minors: Iterable[int], control: Sequence[str] = ("nvidiactl", "nvidia-uvm")) -> Path:
    for m in minors:
        mknod(root / "dev" / f"nvidia{m}", m)
    for i, name in enumerate(control):
        mknod(root / "dev" / name, 255 - i)
    return root


def make_hook(root: Path, path: str = "/usr/bin/nvidia-cdi-hook") -> str:
    _touch(root / path.lstrip("/"), 0o755, b"#!/bin/sh\nexit 0\n")
    return path


def make_host(root: Path, minors: Iterable[int] = (), *, version: str = VERSION, hook: bool = True,
              persistenced: bool = True, control: Sequence[str] = ("nvidiactl", "nvidia-uvm")) -> Path:
    """A whole fake host: driver files at `root` (driver root `/`), device nodes, optionally the hook."""
    make_driver_files(root, version)
    make_dev(root, minors, control)
    if hook:
        make_hook(root)
    if persistenced:
        make_socket(root / "run/nvidia-persistenced/socket")
    return root


def put_spec(host: Path, path: str, doc: dict[str, Any] | str) -> Path:
    """Write a spec file at host path `path` under the fake host (JSON for .json, else YAML; a str as is)."""
    import json

    import yaml

    p = host / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    text = doc if isinstance(doc, str) else (json.dumps(doc) if p.suffix == ".json" else yaml.safe_dump(doc))
    p.write_text(text)
    return p


def toolkit_spec(gpus: Sequence[GpuDevice], *, names: Sequence[str] = ("index", "uuid"),
                 version: str = "0.5.0") -> dict[str, Any]:
    """A spec like `nvidia-ctk cdi generate` writes: one device per GPU per name strategy, plus `all`."""
    devices: list[dict[str, Any]] = []
    for strategy in names:
        for g in gpus:
            name = str(g.index) if strategy == "index" else g.uuid
            devices.append({"name": name, "containerEdits": {"deviceNodes": [
                {"path": g.device_node, "hostPath": g.device_node}]}})
    devices.append({"name": "all", "containerEdits": {"deviceNodes": [
        {"path": g.device_node, "hostPath": g.device_node} for g in gpus]}})
    return {"cdiVersion": version, "kind": "nvidia.com/gpu", "devices": devices,
            "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"],
                               "deviceNodes": [{"path": "/dev/nvidiactl", "hostPath": "/dev/nvidiactl"}],
                               "mounts": [{"hostPath": f"/{LIBDIR}/libcuda.so.{VERSION}",
                                           "containerPath": f"/{LIBDIR}/libcuda.so.{VERSION}",
                                           "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]}]}}
