"""The node's split status: ONE versioned, documented schema, written by the node daemon, read by everyone else.

Where: the Node annotation `dra-bridge.io/split-status` (JSON, compact). Chosen over a separate object because it
travels with the Node: `kubectl get node -o yaml`, a `migrate-report` snapshot and `bridge node status` all see it
without extra RBAC or a CRD, and it disappears with the Node. The daemon writes it (merge patch on the Node's
metadata) only when its content changes, so a quiet node costs no writes; `updated` is the time of the last change,
not a heartbeat (the daemon's liveness is its pod's readiness). Size: devices x (name, UUID, side, NUMA node, NVLink
island, up to 4 holders) plus at most 8 pending entries and 5 refusals, every message cut at 300 characters: about
2 KiB for 8 GPUs, and `encode` drops the holder details if a document would still exceed 16 KiB, well inside the
256 KiB that all of a Node's annotations share.

Schema, version 1 (readers accept any version they know and refuse newer ones, naming the version):

    {"version": 1,
     "node": "gpu-node-7",
     "updated": "2025-06-01T12:00:00Z",                  RFC 3339 UTC, when the content last changed
     "requested": {"value": "4", "source": "annotation"},   source: annotation | label | flag | default
     "state": "converging",                              converged | converging | refused
     "message": "…",                                     the refusal, or a one-line summary
     "wanted": 4,                                        devices the target puts on DRA (null when refused)
     "counts": {"legacy": 4, "dra": 3, "withdrawn": 1},
     "devices": [{"name": "gpu-0", "uuid": "GPU-…", "side": "legacy", "numa": 0, "nvlink": 0,
                  "holders": ["pod a/b container c (legacy container)"]}],
     "pending": [{"device": "gpu-5", "from": "legacy", "to": "dra", "phase": "held",
                  "reason": "gpu-5 held by pod ml/train-7 container init (legacy init container); will move when free"}],
     "refusals": [{"time": "…", "api": "prepare", "device": "gpu-3", "message": "…"}],
     "stuck": [{"device": "gpu-3", "claim": "ml/infer-gpu", "pod": "ml/infer", "holder": "pod team/train-1 …",
                "since": "…", "message": "…"}],
     "checkpointError": {"since": "…", "message": "…"},  only while the checkpoint cannot be written
     "evaluationError": {"since": "…", "message": "…"}}  only while evaluations of the split fail

`devices[].numa` is the GPU's NUMA node, absent when unknown. `devices[].nvlink` (optional, added without a version
bump: older readers ignore it) is the GPU's NVLink island: the connected components of the node's NVLink peer graph
(NVML's links, or the simulated source's), numbered 0, 1, ... in the order of their lowest-index GPU, so the same
inventory always publishes the same numbers; absent for a GPU with no NVLink peer on the node (a PCIe card). Two
GPUs with the same `nvlink` can reach each other over NVLink (perhaps through others); an HGX board is one island.
`bridge controller` groups free devices by island, by NUMA node where a GPU has no island
(`bridge.inventory.model.topology_group`, the rule the daemon's own device choice follows).
`pending[].phase` is a move phase (`waiting-node-status`, `waiting-slice`, `waiting-scheduler`, `verifying`) for a
device in transit, or `held`, `unknown` (its side's holders cannot be read), `cooldown` (its last move timed out)
for one that has not started. `refusals[].api` is `split`, `allocate` or `prepare`. `stuck` (optional, added without a version bump) lists the
claims that were allocated a GPU after it had left DRA (a binding the scheduler decided on an older slice and wrote
late) while a legacy container holds it: each waits for that container (`pending[].phase` `waiting-legacy-holder`
says the same per device), since `since` (RFC 3339), and `message` says what to do. `checkpointError` (optional,
added without a version bump: older readers ignore it) says since when the daemon cannot write its checkpoint and
why: the split it shows is the last one saved, and the change the target asks for waits (retried with backoff).
`evaluationError` (optional, likewise) says since when evaluating the split fails and why (a holder source that
raises, a bug): the document is the last evaluated one with `message` "error: …" and a `converged` state turned
`converging` (what it shows was not re-evaluated; `requested` is still what the daemon last evaluated), and the
evaluation is retried with backoff until it succeeds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bridge.humantext import clip
from bridge.inventory.model import nvlink_islands, topology_group
from bridge.kvalues.versioned import load_versioned
from bridge.ledger.holders import Facts, describe_all, distinct
from bridge.ledger.ledger import Decision
from bridge.ledger.moves import Phase
from bridge.ledger.sides import SIDES, Side, device_name, parse_side
from bridge.ledger.target import RequestSource, SplitRequest

STATUS_KEY = "dra-bridge.io/split-status"
STATUS_VERSION = 1
MAX_MESSAGE = 300
MAX_HOLDERS = 4
MAX_PENDING = 8
MAX_REFUSALS = 5
MAX_STUCK = 8
MAX_BYTES = 16 * 1024
STATES = ("converged", "converging", "refused")
REFUSAL_APIS = ("split", "allocate", "prepare")
_SOURCES = ("annotation", "label", "flag", "default")


class StatusError(ValueError):
    """A split-status annotation that cannot be read (not JSON, newer version, malformed field)."""


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


@dataclass(frozen=True)
class DeviceStatus:
    name: str
    uuid: str
    side: Side
    holders: tuple[str, ...] = ()
    numa: int | None = None
    nvlink: int | None = None  # NVLink island (see the module docstring)

    @property
    def group(self) -> str:
        """The topology group for whole-group placement: NVLink island, else NUMA node, else "" (unknown)."""
        return topology_group(self.nvlink, self.numa)


@dataclass(frozen=True)
class PendingStatus:
    device: str
    source: Side
    target: Side
    phase: str
    reason: str


@dataclass(frozen=True)
class RefusalStatus:
    time: str
    api: Literal["split", "allocate", "prepare"]
    device: str
    message: str


@dataclass(frozen=True)
class StuckStatus:
    """A claim waiting for a GPU that a legacy container holds (see the module docstring)."""

    device: str
    claim: str  # "ns/name"
    pod: str  # "ns/name" of the claim's pod, "" when unknown
    holder: str  # who holds the GPU on the legacy side
    since: str  # RFC 3339 UTC, when the daemon first saw it stuck
    message: str


@dataclass(frozen=True)
class CheckpointErrorStatus:
    since: str  # RFC 3339 UTC, the first failed write of this outage
    message: str


@dataclass(frozen=True)
class EvaluationErrorStatus:
    since: str  # RFC 3339 UTC, the first failed evaluation of this run of failures
    message: str


@dataclass(frozen=True)
class SplitStatus:
    node: str
    updated: str
    requested: str
    source: RequestSource
    state: Literal["converged", "converging", "refused"]
    message: str
    wanted: int | None
    devices: tuple[DeviceStatus, ...] = ()
    pending: tuple[PendingStatus, ...] = ()
    refusals: tuple[RefusalStatus, ...] = field(default=())
    checkpoint_error: CheckpointErrorStatus | None = None
    stuck: tuple[StuckStatus, ...] = ()
    evaluation_error: EvaluationErrorStatus | None = None

    def counts(self) -> dict[str, int]:
        return {s.value: sum(1 for d in self.devices if d.side is s) for s in SIDES}

    def same_content(self, other: SplitStatus | None) -> bool:
        """Equal apart from `updated` (the daemon writes only when this is False)."""
        return other is not None and _doc(self, with_time=False) == _doc(other, with_time=False)

    def encode(self) -> str:
        doc = _doc(self, with_time=True)
        text = json.dumps(doc, separators=(",", ":"), sort_keys=False)
        if len(text.encode()) > MAX_BYTES:
            for d in doc["devices"]:
                d["holders"] = d["holders"][:1]
            text = json.dumps(doc, separators=(",", ":"))
        return text


def _doc(s: SplitStatus, *, with_time: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {"version": STATUS_VERSION, "node": s.node}
    if with_time:
        doc["updated"] = s.updated
    doc.update({
        "requested": {"value": s.requested, "source": s.source},
        "state": s.state,
        "message": _cut(s.message),
        "wanted": s.wanted,
        "counts": s.counts(),
        "devices": [{"name": d.name, "uuid": d.uuid, "side": d.side.value,
                     **({"numa": d.numa} if d.numa is not None else {}),
                     **({"nvlink": d.nvlink} if d.nvlink is not None else {}),
                     "holders": [_cut(h) for h in d.holders[:MAX_HOLDERS]]
                     + ([f"and {len(d.holders) - MAX_HOLDERS} more"] if len(d.holders) > MAX_HOLDERS else [])}
                    for d in s.devices],
        "pending": [{"device": p.device, "from": p.source.value, "to": p.target.value, "phase": p.phase,
                     "reason": _cut(p.reason)} for p in s.pending[:MAX_PENDING]],
        "refusals": [{"time": r.time, "api": r.api, "device": r.device, "message": _cut(r.message)}
                     for r in s.refusals[-MAX_REFUSALS:]],
    })
    if s.stuck:
        doc["stuck"] = [{"device": x.device, "claim": x.claim, "pod": x.pod, "holder": _cut(x.holder),
                         "since": x.since, "message": _cut(x.message)} for x in s.stuck[:MAX_STUCK]]
    if s.checkpoint_error is not None:
        doc["checkpointError"] = {"since": s.checkpoint_error.since, "message": _cut(s.checkpoint_error.message)}
    if s.evaluation_error is not None:
        doc["evaluationError"] = {"since": s.evaluation_error.since, "message": _cut(s.evaluation_error.message)}
    return doc


def _field(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    v = d.get(key)
    if not isinstance(v, kind) or isinstance(v, bool) and kind is int:
        raise StatusError(f"{where}.{key}: unexpected value {clip(v)}")
    return v


def _optional_int(d: Mapping[str, Any], key: str) -> int | None:
    """An optional small number (NUMA node, NVLink island): absent or anything but a non-negative int reads as
    unknown, so a reader never fails on a field it can do without."""
    v = d.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def decode(text: str) -> SplitStatus:
    """Read a split-status annotation; `StatusError` naming what is wrong."""
    doc = load_versioned(text, STATUS_KEY, STATUS_VERSION, StatusError, "written by a newer dra-bridge: upgrade this one")
    req = _field(doc, "requested", dict, "status")
    source = _field(req, "source", str, "status.requested")
    state = _field(doc, "state", str, "status")
    if source not in _SOURCES or state not in STATES:
        raise StatusError(f"{STATUS_KEY}: unknown requested.source {clip(source)} or state {clip(state)}")
    wanted = doc.get("wanted")
    if wanted is not None and (not isinstance(wanted, int) or isinstance(wanted, bool)):
        raise StatusError(f"{STATUS_KEY}.wanted: expected a number or null, got {clip(wanted)}")
    try:
        devices = tuple(DeviceStatus(_field(d, "name", str, "devices[]"), str(d.get("uuid", "")),
                                     parse_side(d.get("side"), "devices[].side"),
                                     tuple(str(h) for h in d.get("holders") or []),
                                     _optional_int(d, "numa"), _optional_int(d, "nvlink"))
                        for d in _field(doc, "devices", list, "status"))
        pending = tuple(PendingStatus(_field(p, "device", str, "pending[]"), parse_side(p.get("from"), "pending[].from"),
                                      parse_side(p.get("to"), "pending[].to"), str(p.get("phase", "")),
                                      str(p.get("reason", "")))
                        for p in doc.get("pending") or [])
        refusals = tuple(RefusalStatus(str(r.get("time", "")), r["api"] if r.get("api") in REFUSAL_APIS else "split",
                                       str(r.get("device", "")), str(r.get("message", "")))
                         for r in doc.get("refusals") or [])
        cp = doc.get("checkpointError")
        checkpoint_error = (CheckpointErrorStatus(str(cp.get("since", "")), str(cp.get("message", "")))
                            if isinstance(cp, dict) else None)
        stuck = tuple(StuckStatus(*(str(x.get(k, "")) for k in ("device", "claim", "pod", "holder", "since",
                                                                   "message")))
                      for x in doc.get("stuck") or [] if isinstance(x, dict))
        ev = doc.get("evaluationError")
        evaluation_error = (EvaluationErrorStatus(str(ev.get("since", "")), str(ev.get("message", "")))
                            if isinstance(ev, dict) else None)
    except (ValueError, TypeError, AttributeError) as err:
        raise StatusError(f"{STATUS_KEY}: {err}") from err
    return SplitStatus(node=str(doc.get("node", "")), updated=str(doc.get("updated", "")),
                       requested=str(_field(req, "value", str, "status.requested")), source=source,
                       state=state, message=str(doc.get("message", "")), wanted=wanted, devices=devices,
                       pending=pending, refusals=refusals, checkpoint_error=checkpoint_error, stuck=stuck,
                       evaluation_error=evaluation_error)


def status_of(node: Mapping[str, Any] | None) -> SplitStatus | None:
    """The status annotation of a Node object; None when there is none. Raises StatusError when unreadable."""
    text = (((node or {}).get("metadata") or {}).get("annotations") or {}).get(STATUS_KEY)
    if not isinstance(text, str) or not text.strip():
        return None
    return decode(text)


def build_status(*, node: str, request: SplitRequest, decision: Decision, facts: Facts,
                 refusals: Sequence[RefusalStatus], updated: str,
                 checkpoint_error: CheckpointErrorStatus | None = None,
                 stuck_since: Mapping[tuple[str, str], str] | None = None,
                 evaluation_error: EvaluationErrorStatus | None = None) -> SplitStatus:
    """The status document for one evaluation (pure). `stuck_since`: (device name, claim holder `who`) -> when it
    was first seen stuck (else `updated`)."""
    led = decision.ledger
    islands = nvlink_islands(led.devices)
    devices = []
    for gpu in led.devices:
        side = led.sides[gpu.uuid]
        sides = (side,) if side is not Side.WITHDRAWN else (Side.LEGACY, Side.DRA)
        holders = tuple(dict.fromkeys(h.describe() for h in distinct(
            h for s in sides for h in led.holders(gpu.uuid, s, facts))))
        devices.append(DeviceStatus(device_name(gpu), str(gpu.uuid), side, holders, gpu.numa_node,
                                    islands.get(gpu.uuid)))
    pending = [PendingStatus(w.name, led.moves[w.device].source if w.device in led.moves else w.side, w.target,
                             w.phase, w.reason) for w in decision.waiting]
    listed = {w.device for w in decision.waiting}
    for uuid, mv in sorted(led.moves.items(), key=lambda kv: led.name_of(kv[0])):
        if uuid not in listed:
            pending.append(PendingStatus(led.name_of(uuid), mv.source, mv.target, mv.phase.value, "withdrawn just now"))
    if decision.refusal:
        message = decision.refusal
    else:
        message = summary_counts(devices)
        if decision.wanted is not None and decision.state != "converged":
            message += f"; the target puts {decision.wanted} on DRA"
    stuck = tuple(StuckStatus(w.name, _claim_ref(c.who), c.pod, describe_all(w.blockers),
                              (stuck_since or {}).get((w.name, c.who), updated), w.reason)
                  for w in decision.waiting if w.phase == Phase.RECLAIM and w.blockers for c in distinct(w.claims))
    return SplitStatus(node=node, updated=updated, requested=request.text, source=request.source,
                       state=decision.state, message=message, wanted=decision.wanted, devices=tuple(devices),
                       pending=tuple(pending), refusals=tuple(refusals), checkpoint_error=checkpoint_error,
                       stuck=stuck, evaluation_error=evaluation_error)


def _claim_ref(who: str) -> str:
    """"claim ml/x (pod ml/p)" -> "ml/x"."""
    return who.split(" ", 2)[1] if who.startswith("claim ") else who


def summary_counts(devices: Sequence[DeviceStatus]) -> str:
    c = {s: sum(1 for d in devices if d.side is s) for s in SIDES}
    text = f"{c[Side.DRA]} of {len(devices)} GPUs on DRA"
    return text + (f", {c[Side.WITHDRAWN]} moving" if c[Side.WITHDRAWN] else "")


__all__ = [
    "CheckpointErrorStatus",
    "DeviceStatus",
    "EvaluationErrorStatus",
    "PendingStatus",
    "RefusalStatus",
    "STATUS_KEY",
    "STATUS_VERSION",
    "SplitStatus",
    "StatusError",
    "StuckStatus",
    "build_status",
    "decode",
    "status_of",
    "summary_counts",
]
