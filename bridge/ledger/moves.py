"""One device's move between the two APIs: the phases, as values (pure; `bridge.ledger.ledger` advances them).

A move starts only when the device is free on its current side; its side becomes `withdrawn` at once, so neither
API offers it from then on. It is done when the scheduler can see the withdrawal, and nothing grabbed the device:

legacy -> dra
  `waiting-node-status`: the device plugin reports the device Unhealthy, so the kubelet's allocatable shrinks; the
  scheduler counts `nvidia.com/gpu` from the Node's `status.allocatable`, which the kubelet posts every
  `nodeStatusUpdateFrequency` (10 s by default). The move waits until the Node shows a count no larger than what the
  device plugin offers now (`Observations.node_allocatable`), seen for `settle_s` (the scheduler's informer lag).
dra -> legacy
  `waiting-slice`: the ResourceSlice without the device must be confirmed written (`Observations.published_dra`);
  `waiting-scheduler`: then `scheduler_grace_s`, for the scheduler's informer and for bindings it already decided
  on the old slice (PreBind writes the claim's allocation, then Bind) to land where we can see them.
both
  `verifying`: the holders of the source side must be known and empty. A holder aborts the move: the device goes
  back to its source side (the holder got it through that API; it was never offered on the target side).
legacy -> dra, taken back for a claim (`Move.reclaim`)
  `waiting-legacy-holder`: a ResourceClaim was allocated a device that had left DRA meanwhile (the scheduler decided
  on an older ResourceSlice and wrote the allocation late: see `bridge.node.nodepods`) and a legacy container holds
  it. The device is withdrawn at once (no new legacy pod gets it) and becomes DRA the moment its legacy holders are
  gone; it goes back to legacy if the claim goes away first. This phase has no timeout: the legacy pod may run for
  days, and the claim's pod shows why it waits (`bridge.node.split`).

Any phase ends after `move_timeout_s` (abort, back to the source side, and a cooldown before the device is tried
again; a move to legacy gets `scheduler_grace_s` on top, its grace being a wait by design): a kubelet that does not post node status, or an API server that cannot be reached, must not keep a GPU
offered to nobody. A device found `withdrawn` without a recorded move (a checkpoint from an older daemon) has an
unknown source: its move checks both sides.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from bridge.inventory.model import DeviceID
from bridge.ledger.sides import Side


class Phase(StrEnum):
    NODE_STATUS = "waiting-node-status"
    SLICE = "waiting-slice"
    SCHEDULER = "waiting-scheduler"
    VERIFY = "verifying"
    RECLAIM = "waiting-legacy-holder"


@dataclass(frozen=True)
class Move:
    device: DeviceID
    source: Side  # LEGACY, DRA, or WITHDRAWN when unknown (see the module docstring)
    target: Side  # LEGACY or DRA
    started_at: float
    phase: Phase
    phase_since: float

    @staticmethod
    def begin(device: DeviceID, source: Side, target: Side, now: float) -> Move:
        if target not in (Side.LEGACY, Side.DRA) or source == target:
            raise ValueError(f"no move from {source} to {target}")
        first = Phase.NODE_STATUS if target is Side.DRA else Phase.SLICE
        return Move(device, source, target, now, first, now)

    @staticmethod
    def reclaim(device: DeviceID, now: float) -> Move:
        """Legacy -> DRA for a claim already allocated the device, waiting for its legacy holders to go."""
        return Move(device, Side.LEGACY, Side.DRA, now, Phase.RECLAIM, now)

    def at(self, phase: Phase, now: float) -> Move:
        return replace(self, phase=phase, phase_since=now)

    @property
    def direction(self) -> str:
        return f"{self.source}->{self.target}" if self.source is not Side.WITHDRAWN else f"?->{self.target}"

    @property
    def sides_to_verify(self) -> tuple[Side, ...]:
        return (self.source,) if self.source in (Side.LEGACY, Side.DRA) else (Side.LEGACY, Side.DRA)


__all__ = ["Move", "Phase"]
