"""The live device table behind ListAndWatch and Allocate.

Invariants:
* The table is the single source of what the kubelet is told: every ListAndWatch message is a full `snapshot()`,
  and every change that could alter a message (health, ownership side) bumps `version` and wakes all streams.
* A device is reported `Healthy` only if it is healthy AND on the legacy side of the ownership ledger. A DRA-side
  or withdrawn device is reported `Unhealthy`, so the kubelet's allocatable shrinks and no legacy pod gets it.
* `refusal()` is the Allocate guard: unknown, unhealthy or not-legacy devices are refused, with the reason.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from bridge.deviceplugin.requests import show_id
from bridge.inventory.model import DeviceID, GpuDevice

LEGACY = "legacy"

SideOf = Callable[[DeviceID], str]


def all_legacy(_: DeviceID) -> str:
    """The ownership view when no ledger is wired in: every device belongs to the device plugin."""
    return LEGACY


@dataclass(frozen=True)
class DeviceReport:
    """One device as ListAndWatch reports it."""

    id: DeviceID
    healthy: bool  # as reported: physically healthy and on the legacy side
    numa_node: int | None
    physically_healthy: bool
    side: str


class DeviceTable:
    def __init__(self, devices: Iterable[GpuDevice], side_of: SideOf = all_legacy) -> None:
        self._devices = {d.uuid: d for d in devices}
        self._order = sorted(self._devices.values(), key=lambda d: (d.index, d.uuid))
        self._side_of = side_of
        self._health: dict[DeviceID, tuple[bool, str]] = {d.uuid: (True, "") for d in self._order}
        self._cond = threading.Condition()
        self._version = 0

    @property
    def devices(self) -> tuple[GpuDevice, ...]:
        return tuple(self._order)

    def device(self, device_id: str) -> GpuDevice | None:
        return self._devices.get(DeviceID(device_id))

    @property
    def version(self) -> int:
        with self._cond:
            return self._version

    def set_health(self, device_id: DeviceID, healthy: bool, reason: str = "") -> bool:
        """Record a health change; returns True (and wakes every stream) when the health actually changed."""
        with self._cond:
            if device_id not in self._health:
                return False
            if self._health[device_id][0] == healthy:
                self._health[device_id] = (healthy, reason or self._health[device_id][1])
                return False
            self._health[device_id] = (healthy, reason)
            self._bump()
            return True

    def ownership_changed(self) -> None:
        """The ledger moved a device between sides: push a fresh list to every stream."""
        with self._cond:
            self._bump()

    def wake(self) -> None:
        """Wake waiting streams without a change, so they can notice a cancelled RPC or a stop."""
        with self._cond:
            self._cond.notify_all()

    def _bump(self) -> None:
        self._version += 1
        self._cond.notify_all()

    def snapshot(self) -> tuple[int, tuple[DeviceReport, ...]]:
        with self._cond:
            version = self._version
            health = dict(self._health)
        reports = []
        for d in self._order:
            side = self._side_of(d.uuid)
            ok = health[d.uuid][0]
            reports.append(DeviceReport(d.uuid, ok and side == LEGACY, d.numa_node, ok, side))
        return version, tuple(reports)

    def wait_for_change(self, seen_version: int, timeout: float) -> int:
        """Block until `version` differs from `seen_version`, a `wake()`, or `timeout`; return the version."""
        with self._cond:
            if self._version == seen_version:
                self._cond.wait(timeout)
            return self._version

    def refusal(self, device_id: str) -> tuple[str, str] | None:
        """Why `device_id` must not be allocated, as (kind, message); None when it may be.

        kind is `unknown` (not in the inventory), `unhealthy`, or `not-legacy` (owned by another side)."""
        dev = self._devices.get(DeviceID(device_id))
        if dev is None:
            return "unknown", f"device {show_id(device_id)} is not in this node's inventory"
        with self._cond:
            healthy, reason = self._health[dev.uuid]
        if not healthy:
            why = f": {reason}" if reason else ""
            return "unhealthy", f"device {device_id} (GPU {dev.index}) is unhealthy{why}"
        side = self._side_of(dev.uuid)
        if side != LEGACY:
            return "not-legacy", (
                f"device {device_id} (GPU {dev.index}) is owned by the {side} side of the ownership ledger, "
                f"not by the device plugin"
            )
        return None
