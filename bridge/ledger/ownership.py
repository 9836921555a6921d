"""The ownership ledger: one side per device, and the static split (pure; no I/O, no clocks).

Invariant: every GPU has exactly one side at any instant.

* `legacy` — offered to the device plugin (`Healthy` in ListAndWatch), absent from the ResourceSlice;
* `dra` — published in the ResourceSlice, reported `Unhealthy` in ListAndWatch so the kubelet cannot give it to
  a legacy pod;
* `withdrawn` — in transit between the two, offered to neither.

Default for a node that says nothing: every device `legacy` (split `"0"`). A node taken over from the vendor
device plugin has running pods holding GPUs through the legacy API, and new legacy pods keep arriving until their
namespace flips; moving any device to DRA on takeover could take a GPU from under a running pod or silently shrink
the node's `nvidia.com/gpu` allocatable. DRA capacity is opted into per node (`dra-devices: N|all|gpu-6,gpu-7`).

Which N devices: the N highest indexes (`8` GPUs, `N=2` -> `gpu-6`, `gpu-7`). Rejected alternative: spreading
them across NUMA nodes. Highest-first (1) is deterministic and easy to state in a label, (2) keeps the DRA block
contiguous, which on two-socket servers is one NUMA node and on a DGX-1 one NVLink quad while N <= half, which is
what a multi-GPU DRA claim wants, and (3) leaves the low indexes, which device-plugin allocations tend to fill
first, on the legacy side, so the split is least likely to be refused because a device is busy.

A split is applied only when no device that would change side is in use on its current side; otherwise the whole
split is refused (`SplitRefused`) naming every busy device and its holder. Never a partial, unsafe move.
`check_allocate` / `check_prepare` are the last line of defence in the two servers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from bridge.inventory.model import DeviceID, GpuDevice

Side = Literal["legacy", "dra", "withdrawn"]
SIDES: tuple[Side, ...] = ("legacy", "dra", "withdrawn")
DEFAULT_SPLIT = "0"
SPLIT_EXAMPLES = "'0', 'all', '2', 'gpu-6,gpu-7' or GPU UUIDs"
_NAME_RE = re.compile(r"^gpu-(\d+)$")


class OwnershipError(ValueError):
    """A split value or a device reference that cannot be understood for this node."""


def device_name(gpu: GpuDevice) -> str:
    """The device's name in the ResourceSlice and in messages: `gpu-<index>`."""
    return f"gpu-{gpu.index}"


@dataclass(frozen=True)
class SplitTarget:
    kind: Literal["none", "all", "count", "devices"]
    count: int = 0
    devices: tuple[str, ...] = ()  # "gpu-<index>" names or UUIDs, as given
    text: str = ""


def parse_split(text: str | None) -> SplitTarget:
    """Parse a node's split: `"0"` (or empty/None: the default, all legacy), `"all"`, `"N"`, or a device list."""
    raw = (text or "").strip()
    if raw in ("", "0", "none"):
        return SplitTarget("none", text=raw or DEFAULT_SPLIT)
    if raw == "all":
        return SplitTarget("all", text=raw)
    if raw.isdigit():
        return SplitTarget("count", count=int(raw), text=raw)
    items = [i.strip() for i in raw.split(",")]
    if any(not i for i in items):
        raise OwnershipError(f"invalid DRA device split {text!r}: empty item; expected {SPLIT_EXAMPLES}")
    for item in items:
        if not (_NAME_RE.match(item) or item.startswith("GPU-")):
            raise OwnershipError(f"invalid DRA device split {text!r}: {item!r} is neither a count, 'all', a "
                                 f"'gpu-<index>' name nor a GPU UUID; expected {SPLIT_EXAMPLES}")
    if len(set(items)) != len(items):
        raise OwnershipError(f"invalid DRA device split {text!r}: a device is listed twice; expected {SPLIT_EXAMPLES}")
    return SplitTarget("devices", devices=tuple(items), text=raw)


def resolve(ref: str, devices: Sequence[GpuDevice]) -> GpuDevice:
    m = _NAME_RE.match(ref)
    for gpu in devices:
        if gpu.uuid == ref or (m and gpu.index == int(m.group(1))):
            return gpu
    raise OwnershipError(f"unknown device {ref!r}: this node has {', '.join(device_name(g) for g in devices)}")


def dra_selection(target: SplitTarget, devices: Sequence[GpuDevice]) -> frozenset[DeviceID]:
    """The devices `target` puts on the DRA side (all others go legacy)."""
    if target.kind == "none":
        return frozenset()
    if target.kind == "all":
        return frozenset(g.uuid for g in devices)
    if target.kind == "count":
        if target.count > len(devices):
            raise OwnershipError(f"DRA device split {target.text!r} asks for {target.count} devices but this node "
                                 f"has {len(devices)}")
        ordered = sorted(devices, key=lambda g: g.index, reverse=True)
        return frozenset(g.uuid for g in ordered[:target.count])
    return frozenset(resolve(ref, devices).uuid for ref in target.devices)


@dataclass(frozen=True)
class Refusal:
    """One device an operation may not use, and why (for per-claim errors, gRPC errors, Events)."""

    device: DeviceID
    name: str
    owner: Side | Literal["unknown"]
    message: str


@dataclass(frozen=True)
class Ownership:
    """An immutable snapshot of the ledger: devices and their sides. Methods return new snapshots."""

    devices: tuple[GpuDevice, ...]
    sides: Mapping[DeviceID, Side] = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = {g.uuid for g in self.devices}
        missing = known - set(self.sides)
        extra = set(self.sides) - known
        if missing or extra:
            raise OwnershipError(f"ledger does not match the devices: missing {sorted(missing)}, unknown "
                                 f"{sorted(extra)}")
        bad = {u: s for u, s in self.sides.items() if s not in SIDES}
        if bad:
            raise OwnershipError(f"invalid sides in ledger: {bad}")

    @classmethod
    def all_legacy(cls, devices: Sequence[GpuDevice]) -> Ownership:
        """The default ledger for a node that says nothing (see module docstring)."""
        return cls(tuple(devices), {g.uuid: "legacy" for g in devices})

    @classmethod
    def adopt(cls, devices: Sequence[GpuDevice], stored: Mapping[DeviceID, str]) -> Ownership:
        """Ledger from a checkpoint: stored sides for known devices; devices new to the node start legacy;
        stored devices no longer present are dropped."""
        sides: dict[DeviceID, Side] = {}
        for g in devices:
            side = stored.get(g.uuid, "legacy")
            if side not in SIDES:
                raise OwnershipError(f"invalid side {side!r} for {g.uuid} in the checkpoint")
            sides[g.uuid] = side
        return cls(tuple(devices), sides)

    def name_of(self, uuid: str) -> str:
        gpu = next((g for g in self.devices if g.uuid == uuid), None)
        return device_name(gpu) if gpu else uuid

    def side_of(self, uuid: str) -> Side | None:
        return self.sides.get(DeviceID(uuid))

    def on(self, side: Side) -> tuple[GpuDevice, ...]:
        return tuple(g for g in self.devices if self.sides[g.uuid] == side)

    def legacy_devices(self) -> tuple[GpuDevice, ...]:
        return self.on("legacy")

    def dra_devices(self) -> tuple[GpuDevice, ...]:
        return self.on("dra")

    def withdrawn_devices(self) -> tuple[GpuDevice, ...]:
        return self.on("withdrawn")

    def with_sides(self, changes: Mapping[DeviceID, Side]) -> Ownership:
        return Ownership(self.devices, {**self.sides, **changes})

    def _check(self, ids: Iterable[str], side: Side, api: str) -> list[Refusal]:
        out = []
        for raw in ids:
            uuid = DeviceID(raw)
            owner = self.sides.get(uuid)
            if owner == side:
                continue
            if owner is None:
                out.append(Refusal(uuid, raw, "unknown", f"device {raw} is not a GPU of this node; {api} refused"))
            else:
                out.append(Refusal(uuid, self.name_of(uuid), owner,
                                   f"device {self.name_of(uuid)} ({uuid}) is on the {owner} side, not {side}; "
                                   f"{api} refused"))
        return out

    def check_allocate(self, ids: Iterable[str]) -> list[Refusal]:
        """Device-plugin Allocate may only hand out legacy-side devices."""
        return self._check(ids, "legacy", "device-plugin Allocate")

    def check_prepare(self, uuids: Iterable[str]) -> list[Refusal]:
        """NodePrepareResources may only prepare DRA-side devices."""
        return self._check(uuids, "dra", "DRA NodePrepareResources")


@dataclass(frozen=True)
class Busy:
    device: DeviceID
    name: str
    side: Side
    holder: str


@dataclass(frozen=True)
class SplitPlan:
    ownership: Ownership
    moves: tuple[tuple[DeviceID, Side, Side], ...]  # (device, from, to); empty when already converged


@dataclass(frozen=True)
class SplitRefused:
    target: str
    busy: tuple[Busy, ...]

    @property
    def message(self) -> str:
        held = "; ".join(f"{b.name} ({b.device}) is held on the {b.side} side by {b.holder}" for b in self.busy)
        return (f"DRA device split {self.target!r} refused: it would move devices that are in use: {held}. "
                "Nothing was changed; retry when they are free or choose other devices.")


def plan_static_split(current: Ownership, target: SplitTarget, in_use_legacy: Mapping[str, str],
                      in_use_dra: Mapping[str, str]) -> SplitPlan | SplitRefused:
    """The ledger after applying `target`, or a refusal naming every busy device that would have to move.

    `in_use_legacy`: uuid -> holder on the device-plugin side (e.g. "pod ns/name container c" from PodResources);
    `in_use_dra`: uuid -> holder on the DRA side (e.g. "claim ns/name"). A withdrawn device is in use if either
    side holds it. Raises OwnershipError when the target itself does not fit this node.
    """
    want_dra = dra_selection(target, current.devices)
    moves: list[tuple[DeviceID, Side, Side]] = []
    busy: list[Busy] = []
    for gpu in current.devices:
        have = current.sides[gpu.uuid]
        want: Side = "dra" if gpu.uuid in want_dra else "legacy"
        if have == want:
            continue
        holders: list[tuple[Side, str]] = []
        if have in ("legacy", "withdrawn") and gpu.uuid in in_use_legacy:
            holders.append(("legacy", in_use_legacy[gpu.uuid]))
        if have in ("dra", "withdrawn") and gpu.uuid in in_use_dra:
            holders.append(("dra", in_use_dra[gpu.uuid]))
        busy.extend(Busy(gpu.uuid, device_name(gpu), side, who) for side, who in holders if side != want)
        moves.append((gpu.uuid, have, want))
    if busy:
        return SplitRefused(target.text, tuple(busy))
    return SplitPlan(current.with_sides({u: to for u, _, to in moves}), tuple(moves))
