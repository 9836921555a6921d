"""The device model every component shares.

A `GpuDevice` is an immutable snapshot of one physical GPU as discovered at start. Health is not part of the
snapshot: it changes at run time and arrives as `HealthEvent`s from the same source. Sources implement the
`DeviceSource` protocol; the node daemon is wired with one in its composition root, tests pass fakes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
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
