"""The safe move of one device between sides: withdraw -> grace -> verify -> offer (pure state machine).

Time and observations come in as arguments (`now`, who holds the device), so the machine is deterministic and the
dynamic-move loop that drives it owns all I/O.

1. `begin_move`: only a device that is free on its current side (not `withdrawn`) may start; its side becomes
   `withdrawn`, so neither API offers it from now on.
2. `step_move` before `grace_s` has passed since the withdrawal: nothing changes (`waiting`). The grace period lets
   the kubelet (ListAndWatch update) and the scheduler (ResourceSlice update) see the withdrawal; anything they
   had already decided before seeing it shows up as a holder within the grace.
3. `step_move` after the grace: the caller reports the holders it verified (PodResources for legacy, allocated
   claims of pods bound to this node for dra). Any holder aborts the move: the device returns to its source side
   (the holder got it through that API) and the abort names the holder. No holder: the device is offered on the
   target side (`offered`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from bridge.inventory.model import DeviceID
from bridge.ledger.ownership import Ownership, Refusal, Side

Phase = Literal["withdrawn", "offered", "aborted"]


@dataclass(frozen=True)
class Move:
    device: DeviceID
    source: Side
    target: Side
    withdrawn_at: float
    phase: Phase = "withdrawn"
    reason: str = ""

    @property
    def done(self) -> bool:
        return self.phase != "withdrawn"


def begin_move(own: Ownership, device: str, target: Side, now: float,
               holders: Mapping[str, str]) -> tuple[Ownership, Move] | Refusal:
    """Withdraw `device` from its side toward `target`; a Refusal when it may not move now."""
    uuid = DeviceID(device)
    source = own.side_of(uuid)
    if source is None:
        return Refusal(uuid, device, "unknown", f"device {device} is not a GPU of this node; move refused")
    name = own.name_of(uuid)
    if target == "withdrawn" or source == target:
        return Refusal(uuid, name, source, f"device {name} is already {source}; cannot move it to {target}")
    if source == "withdrawn":
        return Refusal(uuid, name, source, f"device {name} is already being moved; wait for that move to finish")
    if uuid in holders:
        return Refusal(uuid, name, source,
                       f"device {name} is held on the {source} side by {holders[uuid]}; move refused")
    return own.with_sides({uuid: "withdrawn"}), Move(uuid, source, target, withdrawn_at=now)


def step_move(own: Ownership, move: Move, now: float, grace_s: float,
              holders: Mapping[str, str]) -> tuple[Ownership, Move]:
    """Advance a move: wait out the grace, then verify `holders` (uuid -> who) and offer or abort."""
    if move.done or now < move.withdrawn_at + grace_s:
        return own, move
    holder = holders.get(move.device)
    if holder is not None:
        name = own.name_of(move.device)
        return (own.with_sides({move.device: move.source}),
                replace(move, phase="aborted",
                        reason=f"{name} was taken by {holder} during the grace period; returned to {move.source}"))
    return own.with_sides({move.device: move.target}), replace(move, phase="offered")
