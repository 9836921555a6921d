"""The one adapter between the node daemons' published state and the core's `NodeView` (pure).

Everything the controller knows about a node's GPUs comes through `node_view`, so a change of the daemon's status
schema is an edit of this file only.

**Read:** the Node annotation `dra-bridge.io/split-status`, a JSON document the node daemon writes whenever its
split changes (schema version 1, defined and decoded by the node daemon's ledger, bridge/ledger/status.py):

    {"version": 1, "node": "gpu-node-7", "updated": "…",
     "requested": {"value": "4", "source": "annotation|label|flag|default"},
     "state": "converged|converging|refused", "message": "…", "wanted": 4,
     "devices": [{"name": "gpu-0", "uuid": "GPU-…", "side": "legacy|dra|withdrawn", "numa": 0, "nvlink": 0,
                  "holders": ["…"]}],
     "pending": [{"device": "gpu-5", "from": "legacy", "to": "dra", "phase": "…", "reason": "…"}],
     "refusals": [...]}

Only these fields are used; others are ignored, so the daemon may add fields without a version bump. A document
with a newer `version` is not guessed at: the node becomes `unknown` (never changed, offers nothing) with a message
naming both versions. A device entry may carry `"numa": <int>` and `"nvlink": <island>`; free devices are then
grouped by NVLink island, by NUMA node where a device has no island (`FreeGroup`, for the core's whole-group
preference); when a device has neither, the node's free devices count as one group. The document is decoded by
the ledger's own `decode` (one schema, one parser), so a field the daemon writes wrongly is refused here the same way
`bridge node status` and `migrate-report` refuse it.

**Counts** (model.py explains them): `dra` = devices on the DRA side plus withdrawn devices in a move *to* DRA
(moves under way land); held = devices of a side with holders, plus on the DRA side every device an allocated claim
names (the status may lag a fresh allocation), and on the legacy side at least the `nvidia.com/gpu` requested by the
pods bound to the node (the status may lag a fresh binding). The youngest bound pods that make up that lag are named
in `NodeView.unreported`, so the core fits their GPUs to the topology groups one pod at a time.

**Frozen nodes** (offer their free GPUs, but the controller writes nothing):
* `pinned`: the annotation or label `dra-bridge.io/split-pinned: "true"` (any value but "false" pins, so a typo
  errs on the safe side), or the *label* `dra-bridge.io/dra-devices` (the operator's form of the key; writing the
  annotation would silently override it, since the daemon reads the annotation first).
* `settling`: the daemon has not yet acted on the target the Node carries now (`requested` differs from the
  annotation; the node is then planned with the split that target gives, when free devices can reach it, so the
  pods a fresh target was written for are not served a second time elsewhere), its evaluations fail
  (`evaluationError`), moves are under way in both
  directions, a withdrawn device has no pending entry, a claim is allocated a device not on the DRA side (the
  daemon is taking it back), some holders are unknown, or the daemon refused the target (its message is kept).
Moves under way in one direction do not freeze a node: they count as landed (`dra`), and `NodeView.moving` lets the
core add more moves that way (a second pod for the same node) but none the other way until they land.
* `unknown`: no status (no daemon on the node), an unreadable status, a status about another node, or a Node
  whose Ready condition is False/Unknown. An unreadable status (not JSON, too large, nested too deeply: the bounded
  decoder's errors, bridge.kvalues.documents) is also named in `NodeView.unreadable`, so the controller records a
  Warning Event `SplitStatusUnreadable` on that Node and counts it (`dra_bridge_controller_unreadable_nodes`); one
  node's broken status never fails the decision for the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.controller.model import Api, Direction, FreeGroup, Frozen, NodeView
from bridge.humantext import clip
from bridge.kvalues.placement import taints_of
from bridge.ledger import Side, parse_split
from bridge.ledger.status import STATUS_KEY, STATUS_VERSION, StatusError, decode
from bridge.ledger.target import SPLIT_KEY

# The daemon's keys, from the modules that define them (one schema, one parser).
PIN_KEY = "dra-bridge.io/split-pinned"
POOL_LABEL = "dra-bridge.io/pool"
IN_FLIGHT = frozenset({"waiting-node-status", "waiting-slice", "waiting-scheduler", "verifying"})


@dataclass(frozen=True)
class DeviceState:
    name: str
    side: Side
    held: bool
    group: str = ""


@dataclass(frozen=True)
class NodeStatus:
    """The fields of the daemon's status document the controller uses."""

    node: str
    requested: str
    source: str
    state: str
    message: str
    devices: tuple[DeviceState, ...]
    moving_to: Mapping[str, Side]  # device -> target side, for devices in a move under way
    unknown_holders: tuple[str, ...]  # devices whose side's holders the daemon cannot read
    evaluation_error: str = ""  # the daemon's evaluations fail: what it shows was not re-evaluated


def decode_status(text: str) -> NodeStatus:
    """The daemon's document, read by the ledger's own decoder (`StatusError` naming what is wrong), reduced to what
    the core needs."""
    doc = decode(text)
    devices = tuple(DeviceState(d.name, d.side, bool(d.holders), d.group) for d in doc.devices)
    moving = {p.device: p.target for p in doc.pending if p.phase in IN_FLIGHT}
    unknown = tuple(p.device for p in doc.pending if p.phase == "unknown")
    return NodeStatus(doc.node, doc.requested, doc.source, doc.state, doc.message, devices, moving, unknown,
                      doc.evaluation_error.message if doc.evaluation_error is not None else "")


def _meta(node: Mapping[str, Any]) -> Mapping[str, Any]:
    return node.get("metadata") or {}


def pin_reason(node: Mapping[str, Any]) -> str:
    """Why an operator owns this node's target ("" when the controller may set it)."""
    meta = _meta(node)
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    for where, source in (("annotation", annotations), ("label", labels)):
        value = source.get(PIN_KEY)
        if value is not None and str(value).strip().lower() != "false":
            extra = "" if str(value).strip().lower() == "true" else f" (value {clip(value)} is not \"true\"; pinned)"
            return f"{where} {PIN_KEY}={value}{extra}"
    if SPLIT_KEY in labels:
        return f"label {SPLIT_KEY}={labels[SPLIT_KEY]} (the operator's form of the split key)"
    return ""


def _dra_count(text: str, total: int) -> int | None:
    try:
        t = parse_split(text)
    except ValueError:
        return None
    count = {"none": 0, "all": total}.get(t.kind, t.count if t.kind == "count" else len(t.devices))
    return count if count <= total else None


def _acted_on(status: NodeStatus, target: str) -> bool:
    return status.source == "annotation" and _same_split(target, status.requested)


def _same_split(a: str, b: str) -> bool:
    if a.strip() == b.strip():
        return True
    try:
        x, y = parse_split(a), parse_split(b)
    except ValueError:
        return False
    def norm(t: Any) -> tuple[str, int, tuple[str, ...]]:
        return t.kind, t.count, tuple(d.lower() for d in t.devices)

    return norm(x) == norm(y)


def _ready(node: Mapping[str, Any]) -> bool:
    for c in (node.get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == "Ready":
            return c.get("status") == "True"
    return True  # a Node without conditions (just registered, or a stand-in) is not held against it


def _groups(devices: list[DeviceState], free: Mapping[Api, list[DeviceState]]) -> tuple[FreeGroup, ...]:
    """Free devices per topology group, largest first; () when some device of the node has no group."""
    if any(not d.group for d in devices):
        return ()
    counts: dict[Api, dict[str, int]] = {"legacy": {}, "dra": {}}
    for api, free_of in free.items():
        for d in free_of:
            counts[api][d.group] = counts[api].get(d.group, 0) + 1
    legacy, dra = counts["legacy"], counts["dra"]
    groups = [FreeGroup(g, legacy.get(g, 0), dra.get(g, 0)) for g in sorted(set(legacy) | set(dra))]
    return tuple(sorted(groups, key=lambda f: (-(f.legacy + f.dra), -f.legacy, f.name)))


def node_view(node: Mapping[str, Any], *, allocated: frozenset[str] | set[str] = frozenset(),
              legacy_requested: int | None = None, legacy_bound: Sequence[int] = (),
              pool_label: str = POOL_LABEL) -> NodeView:
    """The core's view of one Node object (see the module docstring). `legacy_bound`: the `nvidia.com/gpu` of each
    pod bound to the node, in the scheduler's queue order, so that the bindings the status does not count yet can be
    named (`NodeView.unreported`); `legacy_requested`, their sum unless given (a caller that knows only the sum)."""
    if legacy_requested is None:
        legacy_requested = sum(legacy_bound)
    meta = _meta(node)
    name = str(meta.get("name", ""))
    labels = dict(meta.get("labels") or {})
    annotations = meta.get("annotations") or {}
    target = str(annotations.get(SPLIT_KEY, "")).strip()
    common: dict[str, Any] = {
        "pool": labels.get(pool_label, ""),
        "target": target,
        "labels": labels,
        "taints": taints_of(node),
        "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
    }

    def unknown(reason: str, unreadable: str = "") -> NodeView:
        return NodeView(name, 0, 0, frozen="unknown", frozen_reason=reason, unreadable=unreadable, **common)

    text = annotations.get(STATUS_KEY)
    if not isinstance(text, str) or not text.strip():
        return unknown(f"no {STATUS_KEY} annotation (is the bridge's node daemon running there?)")
    try:
        status = decode_status(text)
    except StatusError as err:  # bounded (bridge.kvalues.documents): this node only, never the decision
        return unknown(str(err), str(err))
    if status.node and status.node != name:
        return unknown(f"{STATUS_KEY} describes node {clip(status.node)}, not {name!r}")
    if not _ready(node):
        return unknown("the Node is not Ready")

    total = len(status.devices)
    by_side: dict[Side, list[DeviceState]] = {side: [] for side in Side}
    for d in status.devices:
        by_side[d.side].append(d)
    to_dra = [d for d in by_side[Side.WITHDRAWN] if status.moving_to.get(d.name) is Side.DRA]
    dra = len(by_side[Side.DRA]) + len(to_dra)
    dra_side_names = {d.name for d in by_side[Side.DRA]} | {d.name for d in to_dra}
    held_dra = {d.name for d in by_side[Side.DRA] if d.held} | (set(allocated) & dra_side_names)
    legacy_side = by_side[Side.LEGACY] + [d for d in by_side[Side.WITHDRAWN] if d not in to_dra]
    reported = sum(1 for d in by_side[Side.LEGACY] if d.held)
    held_legacy = min(max(reported, legacy_requested), len(legacy_side))

    frozen: Frozen = ""
    reason = pin_reason(node)
    if reason:
        frozen = "pinned"
    else:
        reason = _settling(status, target, set(allocated) - dra_side_names)
        if reason:
            frozen = "settling"
    if target and not _acted_on(status, target):
        # The daemon has not seen the Node's target yet (typically the one this controller just wrote): plan with
        # the split it will have, when that is reachable by moving free devices only, so the pods it was written
        # for are not given GPUs a second time elsewhere.
        pending = _dra_count(target, total)
        if pending is not None and len(held_dra) <= pending <= total - held_legacy:
            dra = pending
    # Free devices as the counts see them: a device moving to a side counts there (moves under way land).
    free_devices: dict[Api, list[DeviceState]] = {
        "dra": [d for d in by_side[Side.DRA] + to_dra if d.name not in held_dra],
        "legacy": [d for d in legacy_side if not (d.side is Side.LEGACY and d.held)],
    }
    groups = _groups(list(status.devices), free_devices)
    directions = {status.moving_to.get(d.name) for d in by_side[Side.WITHDRAWN]}
    moving: Direction | None = None
    if directions == {Side.DRA}:
        moving = "to-dra"
    elif directions == {Side.LEGACY}:
        moving = "to-legacy"
    return NodeView(name, total, dra, dra_held=len(held_dra), legacy_held=held_legacy, frozen=frozen,
                    frozen_reason=reason, groups=groups, moving=moving,
                    unreported=_unreported(legacy_bound, held_legacy - reported), **common)


def _unreported(bound: Sequence[int], surplus: int) -> tuple[tuple[Api, int], ...]:
    """The youngest of the bound legacy pods (`bound`, oldest first) whose GPUs make up `surplus`, the GPUs the
    status does not count as held yet: the kubelet admits pods, and so asks the daemon for their GPUs, in about the
    order the scheduler bound them, so the daemon has reported the older ones. () where no such pods make it up
    exactly (a holder the controller does not see, pods admitted out of order): the core then fits the surplus as one
    take. Only the core's topology preference reads this; every count stays as the status and the pods say."""
    if surplus <= 0:
        return ()
    bound = [n for n in bound if n > 0]
    total, start = 0, len(bound)
    while start > 0 and total < surplus:
        start -= 1
        total += bound[start]
    return tuple(("legacy", n) for n in bound[start:]) if total == surplus else ()


def _settling(status: NodeStatus, target: str, stray: set[str]) -> str:
    withdrawn = [d.name for d in status.devices if d.side is Side.WITHDRAWN]
    directions = {status.moving_to.get(d) for d in withdrawn}
    if None in directions:
        return f"withdrawn devices without a move under way ({', '.join(sorted(withdrawn))})"
    if len(directions) > 1:
        return f"moves under way in both directions ({', '.join(sorted(withdrawn))})"
    if status.state == "refused":
        return f"the node daemon refused its target: {status.message}"
    if status.evaluation_error:
        return f"the node daemon cannot evaluate its split: {status.evaluation_error}"
    if stray:
        return f"allocated claims name {', '.join(sorted(stray))}, not on the DRA side yet (the daemon takes them back)"
    if status.unknown_holders:
        return f"holders of {', '.join(status.unknown_holders)} cannot be read by the node daemon"
    if target:
        if not _acted_on(status, target):
            return f"the node daemon has not acted on {SPLIT_KEY}={clip(target)} yet (it reports {clip(status.requested)})"
    elif status.source == "annotation":
        return "the node daemon still reports the removed annotation"
    return ""


__all__ = [
    "DeviceState",
    "IN_FLIGHT",
    "NodeStatus",
    "PIN_KEY",
    "POOL_LABEL",
    "SPLIT_KEY",
    "STATUS_KEY",
    "STATUS_VERSION",
    "StatusError",
    "decode_status",
    "node_view",
    "pin_reason",
]
