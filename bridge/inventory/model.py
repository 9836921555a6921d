"""The device model every component shares.

A `GpuDevice` is an immutable snapshot of one physical GPU as discovered at start. Health is not part of the
snapshot: it changes at run time and arrives as `HealthEvent`s from the same source. Sources implement the
`DeviceSource` protocol; the node daemon is wired with one in its composition root, tests pass fakes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import NewType, Protocol

# The device-plugin device ID: the GPU UUID (NVIDIA's default deviceIDStrategy), so a node taken over from the
# vendor device plugin keeps its running pods' assignments.
DeviceID = NewType("DeviceID", str)


class InventoryError(RuntimeError):
    """Discovery failed (NVML missing or erroring, a bad --devices spec, an unreadable YAML file)."""


@dataclass(frozen=True)
class GpuDevice:
    index: int
    uuid: DeviceID
    minor: int  # /dev/nvidia<minor>
    product_name: str  # e.g. "NVIDIA H100 80GB HBM3"
    memory_bytes: int
    compute_capability: str  # "9.0"
    architecture: str  # "Hopper"
    driver_version: str  # "550.54.15"
    cuda_version: str  # "12.4"
    pci_bus_id: str  # "0000:18:00.0"
    numa_node: int | None = None
    mig_capable: bool = False
    mig_enabled: bool = False
    # UUIDs of GPUs reachable over NVLink, with the number of active links to each.
    nvlink_peers: tuple[tuple[DeviceID, int], ...] = field(default=())

    @property
    def device_node(self) -> str:
        return f"/dev/nvidia{self.minor}"

    def nvlink_links_to(self, other: DeviceID) -> int:
        return next((n for peer, n in self.nvlink_peers if peer == other), 0)


def nvlink_islands(devices: Sequence[GpuDevice]) -> dict[DeviceID, int]:
    """Each GPU's NVLink island: the connected components of the NVLink peer graph among `devices` (pure).

    A link counts when either end lists the other (NVML reports both ends, a YAML file may list one), whatever its
    number of links; peers outside `devices` are ignored. Islands are numbered 0, 1, ... in the order of their
    lowest-index GPU, so the same inventory always gives the same numbers. A GPU with no NVLink peer among `devices`
    (a PCIe card) is in no island and absent from the result: an island of one says nothing about placement.
    An HGX board (every GPU on the NVSwitch fabric) is one island; two boards in one node are two."""
    ids = {g.uuid for g in devices}
    adjacent: dict[DeviceID, set[DeviceID]] = {g.uuid: set() for g in devices}
    for g in devices:
        for peer, links in g.nvlink_peers:
            if links > 0 and peer in ids and peer != g.uuid:
                adjacent[g.uuid].add(peer)
                adjacent[peer].add(g.uuid)
    out: dict[DeviceID, int] = {}
    island = -1
    for g in sorted(devices, key=lambda d: (d.index, d.uuid)):
        if g.uuid in out or not adjacent[g.uuid]:
            continue
        island += 1
        stack = [g.uuid]
        out[g.uuid] = island
        while stack:
            for peer in adjacent[stack.pop()]:
                if peer not in out:
                    out[peer] = island
                    stack.append(peer)
    return out


def topology_group(nvlink: int | None, numa: int | None) -> str:
    """The topology group a GPU counts in when whole groups are preferred: its NVLink island when it has one, else
    its NUMA node, else "" (unknown). One rule for the node daemon's device choice (bridge/ledger/choice.py) and
    `bridge controller` (which reads both numbers from the split status)."""
    if nvlink is not None:
        return f"nvlink-{nvlink}"
    if numa is not None:
        return f"numa-{numa}"
    return ""


def topology_groups(devices: Sequence[GpuDevice]) -> dict[DeviceID, str]:
    """`topology_group` of every device (pure)."""
    islands = nvlink_islands(devices)
    return {g.uuid: topology_group(islands.get(g.uuid), g.numa_node) for g in devices}


@dataclass(frozen=True)
class HealthEvent:
    """A device changed health. `xid` is set for NVML XID events; `reason` is for humans (logs, Events)."""

    uuid: DeviceID
    healthy: bool
    reason: str
    xid: int | None = None


class DeviceSource(Protocol):
    """Where devices and their health come from.

    `devices()` is called once at start (it may be slow: NVML init); `health_events` blocks, yielding events
    until `stop` is set, and must return promptly (within about a second) after it is set.
    """

    name: str

    def devices(self) -> tuple[GpuDevice, ...]: ...

    def health_events(self, stop: threading.Event) -> Iterator[HealthEvent]: ...

    def close(self) -> None: ...
