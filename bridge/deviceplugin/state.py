"""The live device table behind ListAndWatch and Allocate.

Invariants:
* The table is the single source of what the kubelet is told: every ListAndWatch message is a full `snapshot()`,
  and every change that could alter a message (health, ownership side) bumps `version` and wakes all streams.
* A device is reported `Healthy` only if it is healthy AND on the legacy side of the ownership ledger. A DRA-side
  or withdrawn device is reported `Unhealthy`, so the kubelet's allocatable shrinks and no legacy pod gets it.
* `refusal()` refuses unknown and unhealthy devices; `claim()` is the ownership ledger's Allocate guard
  (`bridge.ledger.guard_allocate` through the split controller): only legacy-side devices, checked and recorded as
  held in one step under the ledger's lock. Without a ledger (`guard=None`) every device is legacy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from bridge.deviceplugin.requests import show_id
from bridge.inventory.model import DeviceID, GpuDevice
from bridge.ledger.ledger import Refusal
from bridge.ledger.sides import Side

SideOf = Callable[[DeviceID], Side | None]
# The ledger's Allocate guard: [] when the devices may be allocated (and are now recorded as held), else refusals.
AllocateGuard = Callable[[Sequence[str]], Sequence[Refusal]]


def all_legacy(_: DeviceID) -> Side | None:
    """The ownership view when no ledger is wired in: every device belongs to the device plugin."""
    return Side.LEGACY


@dataclass(frozen=True)
class DeviceReport:
    """One device as ListAndWatch reports it."""

    id: DeviceID
    healthy: bool  # as reported: physically healthy and on the legacy side
    numa_node: int | None
    physically_healthy: bool
    side: Side | None


class DeviceTable:
    def __init__(self, devices: Iterable[GpuDevice], side_of: SideOf = all_legacy,
                 guard: AllocateGuard | None = None) -> None:
        self._guard = guard
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

    def unhealthy(self) -> frozenset[DeviceID]:
        """Physically unhealthy devices (the device plugin reports them Unhealthy whatever their side)."""
        with self._cond:
            return frozenset(d for d, (ok, _) in self._health.items() if not ok)

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
            reports.append(DeviceReport(d.uuid, ok and side is Side.LEGACY, d.numa_node, ok, side))
        return version, tuple(reports)

    def wait_for_change(self, seen_version: int, timeout: float) -> int:
        """Block until `version` differs from `seen_version`, a `wake()`, or `timeout`; return the version."""
        with self._cond:
            if self._version == seen_version:
                self._cond.wait(timeout)
            return self._version

    def refusal(self, device_id: str, *, allocating: bool = False) -> tuple[str, str] | None:
        """Why `device_id` must not be allocated, as (kind, message); None when it may be.

        kind is `unknown` (not in the inventory), `unhealthy`, or `not-legacy` (owned by another side). With a ledger
        guard and `allocating`, the side is left to `claim` (the ledger lets an Allocate win a move that has not
        reached DRA yet); hints (GetPreferredAllocation) always see the side as ListAndWatch reports it."""
        dev = self._devices.get(DeviceID(device_id))
        if dev is None:
            return "unknown", f"device {show_id(device_id)} is not in this node's inventory"
        with self._cond:
            healthy, reason = self._health[dev.uuid]
        if not healthy:
            why = f": {reason}" if reason else ""
            return "unhealthy", f"device {device_id} (GPU {dev.index}) is unhealthy{why}"
        if allocating and self._guard is not None:
            return None
        side = self._side_of(dev.uuid)
        if side is not Side.LEGACY:
            return "not-legacy", (
                f"device {device_id} (GPU {dev.index}) is owned by the {side} side of the ownership ledger, "
                f"not by the device plugin"
            )
        return None

    def claim(self, device_ids: Sequence[str]) -> tuple[str, str] | None:
        """The ownership ledger's verdict on allocating `device_ids` (all of one Allocate call), recording them as
        held when allowed; (kind, message) when refused. Without a ledger guard: allowed."""
        if self._guard is None:
            return None
        refusals = list(self._guard(device_ids))
        if not refusals:
            return None
        first = refusals[0]
        more = f" (and {len(refusals) - 1} more device(s))" if len(refusals) > 1 else ""
        return ("not-legacy" if first.owner is not None else "unknown"), first.message + more
