"""The driver's user space on this node as plain values: what `bridge.cdi.discovery` found, what the spec builders
(`bridge.cdi.edits`, `bridge.cdi.spec`) turn into container edits. Pure: no filesystem access here.

Two path worlds meet in these values, and mixing them is the classic bug of CDI generators that run in a container:

* a **host path** is what the container runtime on the node resolves (`hostPath` of a mount or a device node, a
  hook's `path`): `/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06` under the GPU Operator;
* a **container path** is where the file appears inside the workload's container
  (`/usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06`): the path relative to the driver root, as NVIDIA's
  generator does (NVIDIA/nvidia-container-toolkit `internal/discover/mounts.go` `relativeTo`);
* the daemon itself reads the host through a **view** (`Root.view`): `/` when it runs on the host, or the mount
  point of a hostPath volume in a DaemonSet. Views never appear in a spec.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

# The shared nodes every CUDA process may open (NVIDIA/nvidia-container-toolkit pkg/nvcdi/common-nvml.go
# `controlDeviceNodeDiscoverer`); /dev/nvidia-uvm* appear only once nvidia-uvm is loaded, /dev/nvidia-modeset with
# nvidia-modeset.
CONTROL_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


@functools.lru_cache(maxsize=1024)  # every Allocate joins the same few device paths
def join_host(root: str, path: str) -> str:
    """`("/run/nvidia/driver", "/usr/lib/x.so")` -> `"/run/nvidia/driver/usr/lib/x.so"`; root `/` leaves it."""
    if root in ("", "/"):
        return posixpath.normpath("/" + path.lstrip("/"))
    return posixpath.normpath(root.rstrip("/") + "/" + path.lstrip("/"))


@dataclass(frozen=True)
class Root:
    """A directory of the host (`host`, written into specs) and where this process reads it (`view`)."""

    host: str
    view: Path

    @classmethod
    def on_host(cls, host: str, host_root_view: Path | str = "/") -> Root:
        """The host directory `host` as seen through a view of the host's `/` (e.g. a hostPath mount at /host)."""
        if not host.startswith("/"):
            raise ValueError(f"{host!r} is not an absolute host path")
        return cls(posixpath.normpath(host), Path(join_host(str(host_root_view), host)))

    def host_path(self, path: str) -> str:
        """The host path of `path`, a path inside this root (`/usr/bin/nvidia-smi`)."""
        return join_host(self.host, path)

    def view_path(self, path: str) -> Path:
        """Where this process reads `path`, a path inside this root."""
        return Path(join_host(str(self.view), path))


@dataclass(frozen=True)
class HostFile:
    """One file to bind-mount: from `host_path` on the host to `container_path` in the container."""

    host_path: str
    container_path: str


@dataclass(frozen=True)
class DeviceNode:
    """A device node: `path` in the container, `host_path` on the host (they differ under a dev root other than /)."""

    path: str
    host_path: str


@dataclass(frozen=True)
class Symlink:
    """A link the `create-symlinks` hook makes in the container: `link` (absolute) pointing at `target`."""

    target: str
    link: str

    def arg(self) -> str:
        return f"{self.target}::{self.link}"


@dataclass(frozen=True)
class DriverFiles:
    """The files of one driver version under one driver root (libraries, utilities, GSP firmware).

    `library_dirs` are the container paths of the directories holding the driver's libraries (what
    `update-ldcache --folder` gets); `symlinks` are the links the host has next to those libraries (sonames such as
    `libcuda.so.1`, dev links such as `libcuda.so`) plus `libcuda.so -> libcuda.so.1`, which NVIDIA always adds.
    `ld_cache` is the host path of the loader cache (`<root>/etc/ld.so.cache`) through which the library
    directories were found, "" when the standard search directories held them.
    `problems` say, for the log, why something expected was not found (no driver root, a version mismatch)."""

    root: str
    version: str
    libraries: tuple[HostFile, ...] = ()
    library_dirs: tuple[str, ...] = ()
    ld_cache: str = ""
    symlinks: tuple[Symlink, ...] = ()
    binaries: tuple[HostFile, ...] = ()
    firmware: tuple[HostFile, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def found(self) -> bool:
        return bool(self.libraries)


@dataclass(frozen=True)
class DriverInventory:
    """Everything a spec needs, as found at one moment.

    * `files`: the driver's libraries, binaries and firmware (changes only with a driver install, so the
      provider caches it);
    * `ipc_sockets`: persistenced / fabric manager sockets that exist now (mounted without `ro`, NVIDIA's IPC mount
      options);
    * `control_nodes`: the shared device nodes present now (`/dev/nvidiactl`, `/dev/nvidia-uvm`, ...);
    * `gpu_nodes`: `/dev/nvidia<minor>` of each GPU whose node is present, keyed by minor;
    * `hook_path`: the host path of `nvidia-cdi-hook` when it exists, else None (then the spec has no hooks and
      soname links are bind-mounted instead, see `bridge.cdi.edits`).
    """

    files: DriverFiles
    dev_root: str = "/"
    ipc_sockets: tuple[HostFile, ...] = ()
    control_nodes: tuple[DeviceNode, ...] = ()
    gpu_nodes: tuple[tuple[int, DeviceNode], ...] = ()
    hook_path: str | None = None
    notes: tuple[str, ...] = field(default=())

    def gpu_node(self, minor: int) -> DeviceNode | None:
        return next((n for m, n in self.gpu_nodes if m == minor), None)

    @classmethod
    def device_nodes_only(cls, minors: Iterable[int], *, version: str = "",
                          notes: tuple[str, ...] = ()) -> DriverInventory:
        """No driver files; every device node listed unchecked at the host's /dev (simulated GPUs)."""
        return cls(files=DriverFiles(root="", version=version),
                   control_nodes=tuple(DeviceNode(p, p) for p in CONTROL_DEVICE_NODES),
                   gpu_nodes=tuple((m, DeviceNode(f"/dev/nvidia{m}", f"/dev/nvidia{m}")) for m in dict.fromkeys(minors)),
                   notes=notes)
