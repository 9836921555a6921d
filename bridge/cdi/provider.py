"""The node's CDI policy and inventory, shared by the DRA and device-plugin halves (the I/O shell over the pure
builders): where the driver's files are, which device nodes exist, and whose spec a container gets.

* `CdiOptions` (from `bridge node`): `--driver-root`, `--dev-root` (host paths), `--host-root` (where this process
  sees the host's `/`), the `nvidia-cdi-hook` candidates, `--cdi-source`;
* `NodeCdi.inventory(gpus)`: a `DriverInventory` for a spec. The driver's files (libraries, binaries, firmware)
  are discovered once and refreshed every `files_ttl_s` (they change only with a driver install; a driver root
  that appears late, as under the GPU Operator, is picked up then). Device nodes, IPC sockets and the hook binary
  are checked on every call: they come and go at run time (`/dev/nvidia-uvm` appears when the module loads,
  persistenced may start later), and a stat is microseconds;
* `NodeCdi.toolkit_names(gpus)`: with `--cdi-source auto` the NVIDIA Container Toolkit's names when its spec
  names every one of `gpus`, else None (we write our own); `toolkit` requires them (`CdiConfigError` otherwise);
  `own` never uses them;
* `NodeCdi.describe(gpus)`: the start-up log lines that explain every choice (driver files found or why not,
  device nodes present, hooks or not, toolkit spec or not).

Driver version: the GPUs' `driver_version` as NVML reports it (all GPUs of a node run the one loaded kernel
module), which is what NVIDIA's generator matches library suffixes against.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bridge.cdi.discovery import (
    discover_device_nodes,
    discover_driver_files,
    discover_ipc_sockets,
    find_hook,
    host_root_path,
    read_firmware_class_path,
)
from bridge.cdi.driver import CONTROL_DEVICE_NODES, DriverFiles, DriverInventory, Root
from bridge.cdi.toolkit import DEFAULT_SPEC_DIRS, TOOLKIT_KIND, ToolkitScan, ToolkitSpecs
from bridge.cdi.writer import file_prefix
from bridge.inventory.model import DeviceID, GpuDevice

log = logging.getLogger(__name__)

CdiSource = Literal["auto", "toolkit", "own"]
CDI_SOURCES: tuple[CdiSource, ...] = ("auto", "toolkit", "own")
# Where the toolkit installs the hook: distribution packages, then the GPU Operator's toolkit container
# (NVIDIA/gpu-operator: <installDir>/toolkit/nvidia-cdi-hook, installDir /usr/local/nvidia).
DEFAULT_HOOK_PATHS = ("/usr/bin/nvidia-cdi-hook", "/usr/local/nvidia/toolkit/nvidia-cdi-hook")
DEFAULT_FILES_TTL_S = 60.0


class CdiConfigError(ValueError):
    """The CDI configuration cannot work on this node (e.g. `--cdi-source toolkit` and no toolkit spec names the
    GPUs). A configuration error: `bridge node` exits 2."""


@dataclass(frozen=True)
class CdiOptions:
    """How the node daemon builds CDI specs. The defaults suit simulated GPUs (no driver files, device nodes listed
    unchecked); `bridge node --devices nvml` sets `driver_root="/"` and `check_device_nodes=True`."""

    source: CdiSource = "auto"
    driver_root: str | None = None  # host path of the driver's user space; None: no driver files (simulated GPUs)
    dev_root: str = "/"  # host path under which dev/nvidia* live
    check_device_nodes: bool = False  # list only nodes that exist (real GPUs); off for simulated ones
    host_root: Path = Path("/")  # where this process sees the host's /
    hook_paths: tuple[str, ...] = DEFAULT_HOOK_PATHS  # host paths tried in order for nvidia-cdi-hook
    spec_dirs: tuple[str, ...] = DEFAULT_SPEC_DIRS  # host paths scanned for the toolkit's spec
    files_ttl_s: float = DEFAULT_FILES_TTL_S


def _minors(gpus: Sequence[GpuDevice]) -> list[int]:
    return [g.minor for g in gpus]


class NodeCdi:
    def __init__(self, options: CdiOptions, gpus: Sequence[GpuDevice], *, own_kinds: Sequence[str] = (),
                 kernel_release: str | None = None, firmware_class_path: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`own_kinds`: the kinds of the specs this daemon writes (their files are never the toolkit's)."""
        if options.source not in CDI_SOURCES:
            raise CdiConfigError(f"unknown CDI source {options.source!r}; choose from {', '.join(CDI_SOURCES)}")
        self.options = options
        self.gpus = tuple(gpus)
        versions = sorted({g.driver_version for g in gpus})
        self.version = versions[0] if versions else ""
        self._versions = versions
        self.driver_root: Root | None = None
        self.dev_root = Root.on_host(options.dev_root, options.host_root)
        self._locate_roots()
        self.toolkit = ToolkitSpecs(options.spec_dirs, options.host_root,
                                    ignore_prefixes=[file_prefix(k) for k in own_kinds])
        self._kernel_release = kernel_release if kernel_release is not None else os.uname().release
        self._firmware_class_path = firmware_class_path
        self._clock = clock
        self._lock = threading.Lock()
        self._files: DriverFiles | None = None
        self._files_at = 0.0

    # -- inventory ------------------------------------------------------------------------------------------------

    def _locate_roots(self) -> None:
        """Where this process reads the driver and dev roots (again at each files refresh: a driver root that
        appears late, under the GPU Operator, may be a symlink)."""
        opts = self.options
        self.driver_root = host_root_path(opts.host_root, opts.driver_root) if opts.driver_root else None
        self.dev_root = host_root_path(opts.host_root, opts.dev_root)

    def driver_files(self) -> DriverFiles:
        with self._lock:
            now = self._clock()
            if self._files is None or now - self._files_at >= self.options.files_ttl_s:
                self._locate_roots()
                self._files = self._discover_files()
                self._files_at = now
            return self._files

    def _discover_files(self) -> DriverFiles:
        if self.driver_root is None:
            return DriverFiles(root="", version=self.version)
        fw_path = self._firmware_class_path
        if fw_path is None:
            fw_path = read_firmware_class_path()
        return discover_driver_files(self.driver_root, self.version, kernel_release=self._kernel_release,
                                     firmware_class_path=fw_path)

    def inventory(self, gpus: Sequence[GpuDevice] | None = None) -> DriverInventory:
        """What a spec for `gpus` (default: every GPU of the node) can carry right now."""
        gpus = self.gpus if gpus is None else gpus
        files = self.driver_files()
        control, gpu_nodes = discover_device_nodes(self.dev_root, _minors(gpus),
                                                   check=self.options.check_device_nodes)
        ipc = discover_ipc_sockets(self.driver_root) if self.driver_root is not None and files.found else ()
        hook = find_hook(self.options.hook_paths, self.options.host_root) if files.found else None
        return DriverInventory(files=files, dev_root=self.dev_root.host, ipc_sockets=ipc, control_nodes=control,
                               gpu_nodes=gpu_nodes, hook_path=hook)

    # -- whose spec -----------------------------------------------------------------------------------------------

    def scan_toolkit(self) -> ToolkitScan:
        with self._lock:
            return self.toolkit.scan()

    def toolkit_names(self, gpus: Sequence[GpuDevice]) -> dict[DeviceID, str] | None:
        """The toolkit's qualified names for all of `gpus`, or None when our own spec is to be used."""
        if self.options.source == "own":
            return None
        scan = self.scan_toolkit()
        names = scan.names_for(gpus)
        if names is None and self.options.source == "toolkit":
            missing = ", ".join(f"{g.index} ({g.uuid})" for g in gpus if scan.name_for(g) is None)
            raise CdiConfigError(f"--cdi-source toolkit: no spec of kind {TOOLKIT_KIND} in "
                                 f"{', '.join(self.options.spec_dirs)} names GPU {missing}; regenerate it "
                                 "(nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml) or use --cdi-source auto")
        return names

    def check(self) -> None:
        """Fail at start when the configuration cannot work: `toolkit` source without a spec naming every GPU."""
        if self.options.source == "toolkit" and self.gpus:
            self.toolkit_names(self.gpus)

    # -- the start-up explanation ---------------------------------------------------------------------------------

    def describe(self) -> list[tuple[int, str]]:
        """(log level, message) lines saying what the specs will carry and why."""
        lines: list[tuple[int, str]] = []
        files = self.driver_files()
        if len(self._versions) > 1:
            lines.append((logging.WARNING, f"CDI: the GPUs report different driver versions "
                                           f"({', '.join(self._versions)}); matching files of {self.version}"))
        if self.driver_root is None:
            lines.append((logging.INFO, "CDI: no driver root (simulated GPUs, --driver-root not given): specs carry "
                                        "device nodes only, no driver libraries, binaries or firmware"))
        elif files.found:
            where = "" if str(self.driver_root.view) == self.driver_root.host else f" (read at {self.driver_root.view})"
            via = (f" (found through {files.ld_cache}: the standard library directories hold no "
                   f"lib*.so.{files.version})" if files.ld_cache else "")
            lines.append((logging.INFO, f"CDI: driver {files.version} at driver root {self.driver_root.host}{where}: "
                                        f"{len(files.libraries)} libraries in {', '.join(files.library_dirs)}{via}, "
                                        f"{len(files.binaries)} binaries, {len(files.firmware)} GSP firmware "
                                        f"file(s), {len(files.symlinks)} library link(s)"))
            lines += [(logging.WARNING, f"CDI: {p}") for p in files.problems]
        else:
            lines += [(logging.ERROR, f"CDI: {p}; specs carry device nodes only and containers get NO CUDA user "
                                      "space under runc + CDI (the NVIDIA runtime's legacy mode still injects it)")
                      for p in files.problems]
        inv = self.inventory()
        if self.options.check_device_nodes:
            present = [n.path for n in inv.control_nodes]
            missing = [p for p in CONTROL_DEVICE_NODES if p not in present]
            gpu_missing = [f"/dev/nvidia{g.minor}" for g in self.gpus if inv.gpu_node(g.minor) is None]
            level = logging.ERROR if gpu_missing or "/dev/nvidiactl" in missing else logging.INFO
            lines.append((level, f"CDI: device nodes under dev root {self.dev_root.host}: present "
                                 f"{', '.join(present) or 'none'}; missing {', '.join(missing + gpu_missing) or 'none'}"
                                 f"; {len(self.gpus) - len(gpu_missing)}/{len(self.gpus)} GPU nodes"))
        else:
            lines.append((logging.INFO, "CDI: device nodes listed without checking they exist (simulated GPUs; "
                                        "give --dev-root to check)"))
        if files.found:
            if inv.hook_path:
                lines.append((logging.INFO, f"CDI: nvidia-cdi-hook at {inv.hook_path}: specs run its create-symlinks "
                                            "and update-ldcache hooks"))
            else:
                lines.append((logging.WARNING, f"CDI: nvidia-cdi-hook not found at {', '.join(self.options.hook_paths)}"
                                               ": specs have no hooks (the image's loader cache is not updated; soname "
                                               "links are bind-mounted instead); install the NVIDIA Container Toolkit "
                                               "on the host to get them"))
        lines.append(self._describe_source())
        return lines

    def _describe_source(self) -> tuple[int, str]:
        src = self.options.source
        scan = self.scan_toolkit()
        named = [g for g in self.gpus if scan.name_for(g) is not None]
        files = ", ".join(scan.files) or f"none of kind {TOOLKIT_KIND} in {', '.join(self.options.spec_dirs)}"
        skipped = f" (skipped: {'; '.join(scan.problems)})" if scan.problems else ""
        if src == "own":
            return (logging.INFO, f"CDI source: own (--cdi-source own); toolkit specs on the node: {files}{skipped}")
        if self.gpus and len(named) == len(self.gpus):
            return (logging.INFO, f"CDI source: toolkit (--cdi-source {src}): {files} names all {len(self.gpus)} "
                                  f"GPU(s); prepared claims and Allocate return its names "
                                  f"(e.g. {scan.name_for(self.gpus[0])}) and write no spec of their own")
        if named:
            unnamed = ", ".join(str(g.index) for g in self.gpus if g not in named)
            return (logging.WARNING, f"CDI source: auto: {files} names {len(named)} of {len(self.gpus)} GPUs "
                                     f"(not GPU {unnamed}); a claim or container with any of those gets our own "
                                     f"spec, the others the toolkit's names{skipped}")
        return (logging.INFO, f"CDI source: own (--cdi-source {src}): no toolkit spec names these GPUs ({files})"
                              f"{skipped}")
