"""The node's ownership ledger (one side per GPU) and the state that must survive crashes (the checkpoint).

Everything that decides where a GPU serves is here, pure, in one package; the device plugin, the DRA half, the
node daemon, the report and `bridge node status` only call it:

* `sides` — `Side` (legacy | dra | withdrawn; typed, no fourth value);
* `target` — the split target parser and the Node label/annotation precedence (`parse_split`, `requested_split`,
  `fit_target`), used by the daemon and by `migrate-report` alike;
* `holders` — who holds a device, as facts (`Holder`, `Facts`);
* `choice` — which devices serve DRA for a count (fewest moves, free first, NVLink/NUMA islands);
* `moves` — one device's move and its phases;
* `ledger` — `Ledger`, `reconcile` (one evaluation), `guard_allocate` / `guard_prepare` (the two last lines of
  defence, and taking a free device back for an allocated claim);
* `status` — the versioned split-status document the daemon writes on its Node and everyone else reads;
* `checkpoint`, `state`, `lock` — the crash-safe checkpoint (sides, moves, prepared claims) and the file locks.

Usage (what `bridge.node.split` does on every evaluation, under its lock)::

    decision = reconcile(ledger, parse_split(request.text), facts, Observations(now, node_allocatable, ...))
    checkpoint.update(lambda d: d.with_sides(decision.ledger.sides, split=..., moves=decision.ledger.stored_moves()))
    ledger, refusals, events = guard_allocate(decision.ledger, device_ids, now)      # in Allocate
"""

from bridge.ledger.checkpoint import (
    Checkpoint,
    CheckpointCorrupt,
    CheckpointError,
    CheckpointFromPreviousBoot,
    ReadResult,
    read_boot_id,
)
from bridge.ledger.choice import choose_dra
from bridge.ledger.holders import Facts, Holder, HolderKind, describe_all
from bridge.ledger.ledger import (
    Decision,
    Ledger,
    LedgerConfig,
    MoveEvent,
    Observations,
    Pending,
    Refusal,
    Waiting,
    allocate_per_device,
    desired_dra,
    guard_allocate,
    guard_prepare,
    reconcile,
)
from bridge.ledger.lock import FileLock, LockTimeout, serialize_lock
from bridge.ledger.moves import Move, Phase
from bridge.ledger.sides import SIDES, Side, device_name, opposite, parse_side
from bridge.ledger.state import CheckpointData, ClaimState, PreparedClaim, PreparedDevice
from bridge.ledger.status import STATUS_KEY, SplitStatus, StatusError, build_status, decode, status_of
from bridge.ledger.target import (
    DEFAULT_SPLIT,
    SPLIT_KEY,
    Fit,
    SplitError,
    SplitRequest,
    SplitTarget,
    TargetResult,
    evaluate_request,
    fit_target,
    parse_split,
    requested_split,
)

__all__ = [
    "Checkpoint",
    "CheckpointCorrupt",
    "CheckpointData",
    "CheckpointError",
    "CheckpointFromPreviousBoot",
    "ClaimState",
    "DEFAULT_SPLIT",
    "Decision",
    "Facts",
    "FileLock",
    "Fit",
    "Holder",
    "HolderKind",
    "Ledger",
    "LedgerConfig",
    "LockTimeout",
    "Move",
    "MoveEvent",
    "Observations",
    "Pending",
    "Phase",
    "PreparedClaim",
    "PreparedDevice",
    "ReadResult",
    "Refusal",
    "SIDES",
    "SPLIT_KEY",
    "STATUS_KEY",
    "Side",
    "SplitError",
    "SplitRequest",
    "SplitStatus",
    "SplitTarget",
    "StatusError",
    "TargetResult",
    "Waiting",
    "allocate_per_device",
    "build_status",
    "choose_dra",
    "decode",
    "describe_all",
    "desired_dra",
    "device_name",
    "evaluate_request",
    "fit_target",
    "guard_allocate",
    "guard_prepare",
    "opposite",
    "parse_side",
    "parse_split",
    "read_boot_id",
    "reconcile",
    "requested_split",
    "serialize_lock",
    "status_of",
]
