"""The NVIDIA Container Toolkit's own CDI spec on this node: which GPUs it names, resolved as the runtime would.

When `nvidia-ctk cdi generate` (or `nvidia-cdi-refresh.service`, which writes `/var/run/cdi/nvidia.yaml`) already
put a spec of kind `nvidia.com/gpu` on the node, handing out ITS names (`nvidia.com/gpu=GPU-<uuid>`) gives the
container exactly what the toolkit's maintainers decided, and avoids a second copy of every mount and hook.

Resolution follows the CDI cache (cncf-tags/container-device-interface `pkg/cdi/spec-dirs.go` `scanSpecDirs`,
`pkg/cdi/cache.go` `refresh`), because a name only helps if the runtime resolves it:

* directories in priority order, later wins: `/etc/cdi`, then `/var/run/cdi` (`DefaultSpecDirs`);
* only `*.json` and `*.yaml` files, no subdirectories; a file that fails to load is skipped (we check it with our
  CDI schema, `bridge.cdi.schema`; a toolkit spec newer than the CDI version we know is skipped too, and we fall
  back to our own spec);
* the same qualified name in two files: the higher-priority directory wins; in two files of the SAME directory
  the name is dropped from both, and it stays dropped even if a higher-priority directory defines it too (the
  cache deletes every conflicting name after the scan).

A GPU counts as named when a resolvable device is named by its UUID (the toolkit's `uuid` strategy), or by its
index (`index` strategy) or `gpu<index>` (`type-index`) with the GPU's own `/dev/nvidia<minor>` among that
device's nodes (so an index that means another GPU never matches). UUID names are preferred.

Reading is cached per file by (mtime, size, inode): a scan is a directory listing and a stat per file.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bridge.cdi.discovery import host_root_path
from bridge.cdi.schema import spec_problems
from bridge.inventory.model import DeviceID, GpuDevice

log = logging.getLogger(__name__)

TOOLKIT_KIND = "nvidia.com/gpu"
DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")  # CDI DefaultSpecDirs, lowest priority first
_SPEC_EXTENSIONS = (".json", ".yaml")

try:  # libyaml is 10x faster on a 20 KB toolkit spec; the pure loader gives the same result
    _Loader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Loader = yaml.SafeLoader


@dataclass(frozen=True)
class ToolkitDevice:
    name: str  # "GPU-…", "0", "gpu0", "all"
    spec_file: str  # the host path of the file that defines it
    device_nodes: tuple[str, ...]  # container paths of the device's own nodes

    @property
    def qualified(self) -> str:
        return f"{TOOLKIT_KIND}={self.name}"


@dataclass(frozen=True)
class ToolkitScan:
    """The toolkit's resolvable devices (name -> device) and what was found or skipped, for the log."""

    devices: Mapping[str, ToolkitDevice] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    def name_for(self, gpu: GpuDevice) -> str | None:
        """The toolkit's qualified name for `gpu`, or None when no resolvable device is that GPU."""
        by_uuid = self.devices.get(gpu.uuid)
        if by_uuid is not None:
            return by_uuid.qualified
        for name in (str(gpu.index), f"gpu{gpu.index}"):
            dev = self.devices.get(name)
            if dev is not None and gpu.device_node in dev.device_nodes:
                return dev.qualified
        return None

    def names_for(self, gpus: Sequence[GpuDevice]) -> dict[DeviceID, str] | None:
        """Names for ALL of `gpus`, or None when any is not named: one container never mixes the toolkit's spec and
        ours (both sets of mounts and hooks would be applied)."""
        out: dict[DeviceID, str] = {}
        for g in gpus:
            name = self.name_for(g)
            if name is None:
                return None
            out[g.uuid] = name
        return out


def _device_nodes(edits: Any) -> tuple[str, ...]:
    if not isinstance(edits, Mapping):
        return ()
    nodes = edits.get("deviceNodes") or []
    return tuple(str(n.get("path")) for n in nodes if isinstance(n, Mapping))


def resolve(specs: Sequence[tuple[int, str, Mapping[str, Any]]]) -> dict[str, ToolkitDevice]:
    """The resolvable `nvidia.com/gpu` devices of already loaded, valid specs, given as (priority, host path,
    document) in scan order (pure; the CDI cache's conflict rules)."""
    devices: dict[str, tuple[int, ToolkitDevice]] = {}
    conflicts: set[str] = set()
    for priority, path, doc in specs:
        if doc.get("kind") != TOOLKIT_KIND:
            continue
        for d in doc["devices"]:
            dev = ToolkitDevice(str(d["name"]), path, _device_nodes(d.get("containerEdits")))
            old = devices.get(dev.name)
            if old is not None and old[0] > priority:
                continue
            if old is not None and old[0] == priority:
                conflicts.add(dev.name)
                continue
            devices[dev.name] = (priority, dev)
    return {name: dev for name, (_, dev) in devices.items() if name not in conflicts}


def parse_spec_text(text: str, path: str) -> Any:
    if path.endswith(".json"):
        return json.loads(text)
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader (CSafeLoader or SafeLoader)


def _stringify_names(doc: Any) -> Any:
    """YAML `name: 0` is the string "0" to the Go loader (target-typed YAML-to-JSON); PyYAML says int."""
    if isinstance(doc, dict) and isinstance(doc.get("devices"), list):
        for d in doc["devices"]:
            if isinstance(d, dict) and isinstance(d.get("name"), int | float) and not isinstance(d["name"], bool):
                d["name"] = str(d["name"])
    return doc


class ToolkitSpecs:
    """Scans the CDI spec directories (host paths, read through `host_root`) for the toolkit's spec."""

    def __init__(self, spec_dirs: Sequence[str] = DEFAULT_SPEC_DIRS, host_root: Path | str = "/",
                 *, ignore_prefixes: Sequence[str] = ()) -> None:
        """`ignore_prefixes`: file-name prefixes of our own specs (never the toolkit's, skip parsing them)."""
        self.spec_dirs = tuple(spec_dirs)
        self.host_root = host_root
        self.ignore_prefixes = tuple(ignore_prefixes)
        self._cache: dict[str, tuple[tuple[int, int, int], Mapping[str, Any] | None, str | None]] = {}

    def _load(self, path: Path, host_path: str) -> tuple[Mapping[str, Any] | None, str | None]:
        try:
            st = path.stat()
        except OSError as err:
            return None, f"{host_path}: {err.strerror or err}"
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        cached = self._cache.get(host_path)
        if cached is not None and cached[0] == key:
            return cached[1], cached[2]
        doc: Mapping[str, Any] | None = None
        problem: str | None = None
        try:
            loaded = _stringify_names(parse_spec_text(path.read_text(encoding="utf-8"), host_path))
        except (OSError, ValueError, yaml.YAMLError) as err:
            problem = f"{host_path}: not readable as a CDI spec: {err}"
        else:
            if not isinstance(loaded, dict):
                problem = f"{host_path}: not a CDI spec (not an object)"
            elif loaded.get("kind") != TOOLKIT_KIND:
                doc = loaded  # another vendor's spec: kept only to know it is not ours to check
            else:
                errors = spec_problems(loaded)
                if errors:
                    problem = f"{host_path}: skipped, as the runtime would skip it: {'; '.join(errors[:3])}"
                else:
                    doc = loaded
        self._cache[host_path] = (key, doc, problem)
        return doc, problem

    def scan(self) -> ToolkitScan:
        specs: list[tuple[int, str, Mapping[str, Any]]] = []
        files: list[str] = []
        problems: list[str] = []
        seen: set[str] = set()
        for priority, root in enumerate(host_root_path(self.host_root, d) for d in self.spec_dirs):
            try:
                names = sorted(os.listdir(root.view))
            except OSError:
                continue
            for name in names:
                if not name.endswith(_SPEC_EXTENSIONS) or name.startswith(self.ignore_prefixes):
                    continue
                path = root.view / name
                if path.is_dir():
                    continue
                host_path = root.host_path(name)
                seen.add(host_path)
                doc, problem = self._load(path, host_path)
                if problem:
                    problems.append(problem)
                if doc is not None and doc.get("kind") == TOOLKIT_KIND:
                    files.append(host_path)
                    specs.append((priority, host_path, doc))
        for gone in set(self._cache) - seen:
            del self._cache[gone]
        return ToolkitScan(resolve(specs), tuple(files), tuple(problems))
