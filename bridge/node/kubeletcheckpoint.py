"""Read-only view of the kubelet's device-manager checkpoint (`<kubelet-root>/device-plugins/kubelet_internal_checkpoint`).

Why we read it: the PodResources `List` reports the devices of a pod's containers and sidecars only (kubernetes/
kubernetes pkg/kubelet/apis/podresources/server_v1.go iterates `pod.Spec.Containers`, plus restartable init
containers), so a running **non-restartable init container** holding a GPU is invisible there. The device manager
allocates every container of a pod at admission, init containers included, and records each allocation in this
file right after the plugin's `Allocate` answered (pkg/kubelet/cm/devicemanager/manager.go
`allocateContainerResources` -> `writeCheckpoint`). It is the only place on the node that says *which* device IDs
an init container got. It does not say whether that container still runs, and entries of finished pods linger
until the kubelet's next `UpdateAllocatedDevices`, so `bridge.node.holders` pairs it with the pods bound to this
node and their init-container statuses (see there for the rule).

Format (pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go, `Data`):

    {"Data": {"PodDeviceEntries": [{"PodUID": "…", "ContainerName": "…", "ResourceName": "nvidia.com/gpu",
                                    "DeviceIDs": {"0": ["GPU-…"], "-1": ["GPU-…"]}, "AllocResp": "<base64>"}],
              "RegisteredDevices": {"nvidia.com/gpu": ["GPU-…"]}},
     "Checksum": 1234567890, "BootID": "…"}

`DeviceIDs` maps a NUMA node to IDs (kubelets before 1.20 wrote a plain list; both are read). The checksum is
Go-specific (FNV-32a over a spew dump of `Data`) and is not verified: the kubelet writes the file through its
checkpoint manager's file store, which writes a temporary file and renames it (pkg/kubelet/util/store/filestore.go),
so a reader never sees a torn file. We never write it.

**Read like our own checkpoint**, because it is read on every evaluation and anyone who can write the kubelet's
directory decides what is there: through `bridge.atomicfile.read_regular` (O_NOFOLLOW | O_NONBLOCK, regular files
only, checked on the descriptor, at most `MAX_FILE_BYTES`), so a symlink to /dev/zero (once 2.1 GiB of daemon
memory), a FIFO (an `open` blocked for ever) or a 1 GiB file (1.26 GiB, under a 512 MiB pod limit an OOM kill in a
loop) is refused before it is read; and decoded by the bounded JSON decoder (`bridge.kvalues.documents`: 64
levels, the kubelet's document nests five deep), so deep JSON is an error, not a RecursionError. A refusal is a
`KubeletCheckpointError`; the caller (`bridge.node.holders`) then treats the legacy side's holders as unknown:
nothing moves.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from bridge.atomicfile import UnreadableFile, read_regular
from bridge.kvalues.documents import DocumentError, load_json

CHECKPOINT_FILE = "kubelet_internal_checkpoint"
# A node's entries: one per container holding a device (110 pods by default, a few containers each), each with
# its device IDs and the plugin's Allocate answer in base64: well under a MiB. 8 MiB leaves room and bounds memory.
MAX_FILE_BYTES = 8 << 20


class KubeletCheckpointError(ValueError):
    """The file exists but cannot be used: not a regular file, too large, nested too deeply, or not the device
    manager's checkpoint format."""


@dataclass(frozen=True)
class PodDevicesEntry:
    pod_uid: str
    container: str
    resource: str
    device_ids: tuple[str, ...]


def _ids(raw: Any, where: str) -> tuple[str, ...]:
    if isinstance(raw, list):
        groups: list[Any] = [raw]
    elif isinstance(raw, dict):
        groups = list(raw.values())
    else:
        raise KubeletCheckpointError(f"{where}.DeviceIDs: expected a list or a map of lists")
    out: list[str] = []
    for group in groups:
        if not isinstance(group, list) or not all(isinstance(i, str) for i in group):
            raise KubeletCheckpointError(f"{where}.DeviceIDs: expected lists of strings")
        out.extend(group)
    return tuple(dict.fromkeys(out))


def parse(raw: bytes | str) -> tuple[PodDevicesEntry, ...]:
    try:
        doc = load_json(raw, "the kubelet's device-manager checkpoint", max_bytes=MAX_FILE_BYTES)
    except DocumentError as err:
        raise KubeletCheckpointError(str(err)) from err
    data = doc.get("Data") if isinstance(doc, dict) else None
    if not isinstance(data, dict):
        raise KubeletCheckpointError("no Data object")
    entries = data.get("PodDeviceEntries") or []
    if not isinstance(entries, list):
        raise KubeletCheckpointError("Data.PodDeviceEntries: expected a list")
    out = []
    for i, e in enumerate(entries):
        where = f"Data.PodDeviceEntries[{i}]"
        if not isinstance(e, dict):
            raise KubeletCheckpointError(f"{where}: expected an object")
        fields = [e.get(k) for k in ("PodUID", "ContainerName", "ResourceName")]
        if not all(isinstance(f, str) for f in fields):
            raise KubeletCheckpointError(f"{where}: PodUID, ContainerName and ResourceName must be strings")
        out.append(PodDevicesEntry(str(fields[0]), str(fields[1]), str(fields[2]), _ids(e.get("DeviceIDs"), where)))
    return tuple(out)


def read(path: str | os.PathLike[str], resource: str | None = None) -> tuple[PodDevicesEntry, ...] | None:
    """The entries (of `resource` when given); None when the file does not exist. Raises KubeletCheckpointError
    (not a regular file, too large, bad format) or OSError (unreadable)."""
    try:
        raw = read_regular(path, MAX_FILE_BYTES)
    except UnreadableFile as err:
        raise KubeletCheckpointError(err.reason) from err
    if raw is None:
        return None
    entries = parse(raw)
    return entries if resource is None else tuple(e for e in entries if e.resource == resource)


__all__ = ["CHECKPOINT_FILE", "KubeletCheckpointError", "MAX_FILE_BYTES", "PodDevicesEntry", "parse", "read"]
