"""The device manager's checkpoint `device-plugins/kubelet_internal_checkpoint`, written as the kubelet writes it.

Written from kubernetes/kubernetes:
* pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go: the file is `json.Marshal` of
  `Data{Data: checkpointData{PodDeviceEntries []PodDevicesEntry, RegisteredDevices map[string][]string},
  Checksum}`, fields in that order; `PodDevicesEntry{PodUID, ContainerName, ResourceName, DeviceIDs
  DevicesPerNUMA (map[int64][]string), AllocResp []byte}`. Go's encoding/json writes a nil slice as `null`, map
  keys as strings sorted bytewise (so NUMA node "-1" before "0", "10" before "2"), and `[]byte` as padded standard
  base64. Newer kubelets add `BootID` after `Checksum` (omitempty, outside the checksummed data); it is not
  written here, as kubelets before it did not, and readers treat its absence as "".
* pkg/kubelet/checkpointmanager/checksum/checksum.go: `Checksum` is FNV-32a (widened to uint64) over
  k8s.io/apiserver pkg/util/hash `DeepHashObject(checkpointData)`: go-spew's `%#v` rendering with `SortKeys`,
  `SpewKeys`, `DisableMethods` (and, since the dump.ForHash rewrite, `DisablePointerAddresses`,
  `DisableCapacities`, which change nothing for this type). `spew_dump` reproduces that rendering for exactly
  this structure; the golden values in tests/sandbox/test_kubelet_dmcheckpoint.py were computed by go-spew
  d8f796af (the version kubernetes vendors) through the kubelet's own type definitions.
* pkg/kubelet/cm/devicemanager/manager.go (@7510f32): `writeCheckpoint` runs after every ListAndWatch update
  (`genericDeviceUpdateCallback`), after every container allocation that called Allocate
  (`allocateContainerResources`), and when `GetCapacity` drops a resource whose endpoint stopped too long ago. It
  records `RegisteredDevices` = the HEALTHY devices per resource, and the entries of `podDevices`
  (`toCheckpointData`: one per pod, container and resource with its allocate response, device IDs grouped by the
  NUMA nodes of the device's topology, -1 when it has none). `UpdateAllocatedDevices` forgets ended pods in
  memory only, so their entries stay in the file until the next write. The checkpoint manager writes through a
  temporary file and a rename (pkg/kubelet/util/store/filestore.go), never a torn file.
* `readCheckpoint` (at kubelet start): the entries come back as allocations; each resource of
  `RegisteredDevices` comes back with no devices and a stopped endpoint until its plugin registers again. A file
  whose checksum does not match is refused (`ErrCorruptCheckpoint`): the kubelet logs it and starts without.

Entries and map keys are written sorted here (Go's map order is random, so any order is one the kubelet could write,
and the checksum is computed over the order written).
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

CHECKPOINT_FILE = "kubelet_internal_checkpoint"
NODE_WITHOUT_TOPOLOGY = -1  # manager.go nodeWithoutTopology
_FNV32_OFFSET = 0x811C9DC5
_FNV32_PRIME = 0x01000193
_GO_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


class CheckpointCorrupt(ValueError):
    """The file is not a device-manager checkpoint, or its checksum does not match (ErrCorruptCheckpoint)."""


@dataclass(frozen=True)
class Entry:
    """One `PodDevicesEntry`."""

    pod_uid: str
    container: str
    resource: str
    device_ids: Mapping[int, tuple[str, ...]]  # NUMA node -> device IDs, in allocation order
    alloc_resp: bytes | None  # the marshalled ContainerAllocateResponse (None: nil)


def _spew_bytes(value: bytes | None) -> str:
    if value is None:
        return "([]uint8)<nil>"
    return "([]uint8)[" + " ".join(str(b) for b in value) + "]"


def _spew_list(items: Sequence[str]) -> str:
    return "[" + " ".join(items) + "]"


def spew_dump(entries: Sequence[Entry] | None, registered: Mapping[str, Sequence[str]] | None) -> str:
    """go-spew `%#v` of `checkpointData` as DeepHashObject configures it (see the module docstring)."""
    if entries is None:
        body = "([]checkpoint.PodDevicesEntry)<nil>"
    else:
        parts = []
        for e in entries:
            numa = " ".join(f"{node}:{_spew_list(e.device_ids[node])}" for node in sorted(e.device_ids))
            parts.append(f"{{PodUID:(string){e.pod_uid} ContainerName:(string){e.container} "
                         f"ResourceName:(string){e.resource} DeviceIDs:(checkpoint.DevicesPerNUMA)map[{numa}] "
                         f"AllocResp:{_spew_bytes(e.alloc_resp)}}}")
        body = "([]checkpoint.PodDevicesEntry)[" + " ".join(parts) + "]"
    if registered is None:
        reg = "(map[string][]string)<nil>"
    else:
        reg = "(map[string][]string)map[" + " ".join(
            f"{k}:{_spew_list(list(registered[k]))}" for k in sorted(registered)) + "]"
    return f"(checkpoint.checkpointData){{PodDeviceEntries:{body} RegisteredDevices:{reg}}}"


def fnv32a(data: bytes) -> int:
    h = _FNV32_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV32_PRIME) & 0xFFFFFFFF
    return h


def checksum(entries: Sequence[Entry] | None, registered: Mapping[str, Sequence[str]] | None) -> int:
    return fnv32a(spew_dump(entries, registered).encode())


def encode(entries: Sequence[Entry] | None, registered: Mapping[str, Sequence[str]] | None) -> bytes:
    """The file's bytes, exactly as `json.Marshal(Data)` writes them."""
    def entry(e: Entry) -> dict[str, object]:
        ids = {str(node): list(e.device_ids[node]) for node in sorted(e.device_ids, key=str)}
        resp = None if e.alloc_resp is None else base64.b64encode(e.alloc_resp).decode()
        return {"PodUID": e.pod_uid, "ContainerName": e.container, "ResourceName": e.resource, "DeviceIDs": ids,
                "AllocResp": resp}

    data = {"PodDeviceEntries": None if entries is None else [entry(e) for e in entries],
            "RegisteredDevices": None if registered is None else {k: list(registered[k]) for k in sorted(registered)}}
    doc = {"Data": data, "Checksum": checksum(entries, registered)}
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    # encoding/json escapes HTML characters and the JS line separators inside strings (they occur nowhere else)
    for char, escaped in _GO_ESCAPES:
        text = text.replace(char, escaped)
    return text.encode()


def write(directory: Path, entries: Sequence[Entry], registered: Mapping[str, Iterable[str]]) -> Path:
    """Write the checkpoint atomically (temporary file, fsync, rename), as the kubelet's file store does.
    `toCheckpointData` starts from a nil slice, so no entries is `null`."""
    reg = {k: sorted(v) for k, v in registered.items()}
    ordered = sorted(entries, key=lambda e: (e.pod_uid, e.container, e.resource))
    blob = encode(ordered or None, reg)
    path = Path(directory) / CHECKPOINT_FILE
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def read(directory: Path) -> tuple[list[Entry], dict[str, list[str]]] | None:
    """`readCheckpoint`: None when there is no file; CheckpointCorrupt when it cannot be used."""
    try:
        raw = (Path(directory) / CHECKPOINT_FILE).read_bytes()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw)
        data = doc["Data"]
        entries = [Entry(str(e["PodUID"]), str(e["ContainerName"]), str(e["ResourceName"]),
                         {int(k): tuple(v) for k, v in (e.get("DeviceIDs") or {}).items()},
                         None if e.get("AllocResp") is None else base64.b64decode(e["AllocResp"]))
                   for e in data.get("PodDeviceEntries") or []]
        registered = {str(k): list(v) for k, v in (data.get("RegisteredDevices") or {}).items()}
        stored = int(doc["Checksum"])
        raw_entries = data.get("PodDeviceEntries")
        raw_registered = data.get("RegisteredDevices")
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise CheckpointCorrupt(f"{CHECKPOINT_FILE}: not a device-manager checkpoint ({err})") from err
    if stored != checksum(None if raw_entries is None else entries, None if raw_registered is None else registered):
        raise CheckpointCorrupt(f"{CHECKPOINT_FILE}: checkpoint is corrupted (checksum mismatch)")
    return entries, registered


__all__ = ["CHECKPOINT_FILE", "CheckpointCorrupt", "Entry", "NODE_WITHOUT_TOPOLOGY", "checksum", "encode",
           "fnv32a", "read", "spew_dump", "write"]
