"""Node state that must survive crashes: the ownership ledger (one side per device) and the checkpoint.

Usage (node daemon start-up and prepare)::

    from bridge.ledger import (Checkpoint, CheckpointCorrupt, Ownership, PreparedClaim, parse_split,
                               plan_static_split, serialize_lock)

    cp = Checkpoint(state_dir)
    try:
        stored = cp.read()
    except CheckpointCorrupt as err:        # the bad file is already moved aside; err.moved_to says where
        log.error("%s", err); stored = None  # rebuild from the API and PodResources
    if stored and stored.previous_boot:
        cp.update(lambda d: d.without_claims(), adopt_previous_boot=True)

    own = Ownership.adopt(devices, stored.data.sides) if stored and stored.exists else Ownership.all_legacy(devices)
    plan = plan_static_split(own, parse_split(node_label or None), in_use_legacy, in_use_dra)
    if isinstance(plan, SplitRefused): log.error(plan.message)     # nothing changed
    else: cp.update(lambda d: d.with_sides(plan.ownership.sides, split=node_label))

    with serialize_lock(state_dir):                                # around every Prepare / Unprepare
        refusals = own.check_prepare(uuids)                        # last line of defence
        cp.update(lambda d: d.with_claim(PreparedClaim(uid, ns, name, "PrepareStarted", devices)))
        ...write CDI...
        cp.update(lambda d: d.with_claim(replace(claim, state="PrepareCompleted")))
"""

from bridge.ledger.checkpoint import (
    Checkpoint,
    CheckpointCorrupt,
    CheckpointError,
    CheckpointFromPreviousBoot,
    ReadResult,
    read_boot_id,
)
from bridge.ledger.lock import FileLock, LockTimeout, serialize_lock
from bridge.ledger.ownership import (
    DEFAULT_SPLIT,
    Busy,
    Ownership,
    OwnershipError,
    Refusal,
    Side,
    SplitPlan,
    SplitRefused,
    SplitTarget,
    device_name,
    parse_split,
    plan_static_split,
)
from bridge.ledger.state import CheckpointData, ClaimState, PreparedClaim, PreparedDevice

__all__ = [
    "DEFAULT_SPLIT",
    "Busy",
    "Checkpoint",
    "CheckpointCorrupt",
    "CheckpointData",
    "CheckpointError",
    "CheckpointFromPreviousBoot",
    "ClaimState",
    "FileLock",
    "LockTimeout",
    "Ownership",
    "OwnershipError",
    "PreparedClaim",
    "PreparedDevice",
    "ReadResult",
    "Refusal",
    "Side",
    "SplitPlan",
    "SplitRefused",
    "SplitTarget",
    "device_name",
    "parse_split",
    "plan_static_split",
    "read_boot_id",
    "serialize_lock",
]
