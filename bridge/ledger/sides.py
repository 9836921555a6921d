"""The three sides a device can be on (pure; the ledger's vocabulary).

Every GPU has exactly one `Side` at any instant:

* `LEGACY` — offered to the device plugin (`Healthy` in ListAndWatch), absent from the ResourceSlice;
* `DRA` — published in the ResourceSlice, reported `Unhealthy` in ListAndWatch so the kubelet's allocatable
  `nvidia.com/gpu` does not count it and no legacy pod can get it;
* `WITHDRAWN` — in transit between the two (a move is under way), offered to neither.

There is no fourth value: a device the ledger does not know is `None` where a side is asked for, never a string.
"""

from __future__ import annotations

from enum import StrEnum

from bridge.inventory.model import GpuDevice


class Side(StrEnum):
    LEGACY = "legacy"
    DRA = "dra"
    WITHDRAWN = "withdrawn"

    @property
    def api(self) -> str:
        """The API that serves the side, for messages."""
        return {Side.LEGACY: "the device plugin", Side.DRA: "DRA", Side.WITHDRAWN: "neither API (moving)"}[self]


SIDES: tuple[Side, ...] = tuple(Side)


def parse_side(value: object, where: str = "side") -> Side:
    """A stored side (checkpoint, status annotation); ValueError naming `where` for anything else."""
    if isinstance(value, str):
        try:
            return Side(value)
        except ValueError:
            pass
    raise ValueError(f"{where}: expected one of {', '.join(SIDES)}, got {value!r}")


def opposite(side: Side) -> Side:
    """The other serving side (LEGACY <-> DRA); WITHDRAWN has no opposite."""
    if side is Side.LEGACY:
        return Side.DRA
    if side is Side.DRA:
        return Side.LEGACY
    raise ValueError("a withdrawn device has no opposite side")


def device_name(gpu: GpuDevice) -> str:
    """The device's name in the ResourceSlice, in split values and in messages: `gpu-<index>`."""
    return f"gpu-{gpu.index}"


__all__ = ["SIDES", "Side", "device_name", "opposite", "parse_side"]
