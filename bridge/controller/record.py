"""Where the controller's decisions are recorded, for people (`kubectl describe node`) and for `bridge migrate-report`.

Two places, both on the Node the decision is about:

1. **The Node annotation `dra-bridge.io/split-decision`**: the controller's latest decision for the node, a compact
   JSON document (schema below). It is written in the same request as the split target itself (one merge patch:
   the target never changes without its reason), travels with the Node into `kubectl get node -o yaml` and report
   snapshots, and needs no extra RBAC or CRD. In `--dry-run` only this annotation is written, with `"dryRun": true`,
   and the split key is left alone: the daemons act on the split key alone, so nothing moves.
2. **An Event on the Node** for every change: reason `SplitTargetChanged` (Normal), or `SplitTargetWouldChange`
   under `--dry-run`, with the same reason sentence. Events expire (an hour by default), the annotation stays.

Pending pods the controller cannot help get a Warning Event `GPUDemandBlocked` naming the reason (once per pod and
reason, at most `MAX_BLOCKED_EVENTS` per decision).

Schema, version 1 (readers accept the versions they know and refuse newer ones, naming the version)::

    {"version": 1,
     "time": "2025-06-01T12:00:00Z",      RFC 3339 UTC, when the controller decided
     "controller": "bridge-controller-7d9f-x2",   the leader's identity (the Lease holder)
     "dryRun": false,
     "previous": "2",                     the split value the Node carried ("" = none)
     "target": "4",                       the value written (or, under dryRun, that would have been written)
     "fromDra": 2, "toDra": 4, "moves": 2, "direction": "to-dra",
     "reason": "3 pending DRA pods in team-a need 6 GPUs; gpu-node-4 had 6 free legacy GPUs: moving 2 to DRA",
     "pods": ["team-a/train-0", …],       at most 10 of the pods this change serves
     "podCount": 3}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from bridge.humantext import clip
from bridge.kvalues.versioned import load_versioned

DECISION_KEY = "dra-bridge.io/split-decision"
DECISION_VERSION = 1
EVENT_COMPONENT = "dra-bridge-controller"
REASON_CHANGED = "SplitTargetChanged"
REASON_WOULD_CHANGE = "SplitTargetWouldChange"
REASON_BLOCKED = "GPUDemandBlocked"
REASON_UNREADABLE = "SplitStatusUnreadable"
MAX_PODS = 10
MAX_REASON = 600
MAX_BLOCKED_EVENTS = 20


class RecordError(ValueError):
    """A split-decision annotation that cannot be read."""


@dataclass(frozen=True)
class DecisionRecord:
    time: str
    controller: str
    dry_run: bool
    previous: str
    target: str
    from_dra: int
    to_dra: int
    direction: Literal["to-dra", "to-legacy"]
    reason: str
    pods: tuple[str, ...] = ()
    pod_count: int = 0

    @property
    def moves(self) -> int:
        return abs(self.to_dra - self.from_dra)

    def encode(self) -> str:
        reason = self.reason if len(self.reason) <= MAX_REASON else self.reason[: MAX_REASON - 3] + "..."
        doc = {"version": DECISION_VERSION, "time": self.time, "controller": self.controller, "dryRun": self.dry_run,
               "previous": self.previous, "target": self.target, "fromDra": self.from_dra, "toDra": self.to_dra,
               "moves": self.moves, "direction": self.direction, "reason": reason,
               "pods": list(self.pods[:MAX_PODS]), "podCount": max(self.pod_count, len(self.pods))}
        return json.dumps(doc, separators=(",", ":"))

    def summary(self) -> str:
        verb = "would set" if self.dry_run else "set"
        return (f"{self.time} {self.controller} {verb} {self.previous or '(none)'} -> {self.target} "
                f"({self.moves} {self.direction}): {self.reason}")


def _int(doc: Mapping[str, Any], key: str) -> int:
    v = doc.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise RecordError(f"{DECISION_KEY}.{key}: expected a count, got {clip(v)}")
    return v


def decode(text: str) -> DecisionRecord:
    doc = load_versioned(text, DECISION_KEY, DECISION_VERSION, RecordError, "written by a newer dra-bridge")
    direction = doc.get("direction")
    if direction not in ("to-dra", "to-legacy"):
        raise RecordError(f"{DECISION_KEY}.direction: expected to-dra or to-legacy, got {clip(direction)}")
    pods = doc.get("pods") or []
    if not isinstance(pods, list):
        raise RecordError(f"{DECISION_KEY}.pods: expected a list")
    return DecisionRecord(
        time=str(doc.get("time", "")), controller=str(doc.get("controller", "")), dry_run=bool(doc.get("dryRun")),
        previous=str(doc.get("previous", "")), target=str(doc.get("target", "")), from_dra=_int(doc, "fromDra"),
        to_dra=_int(doc, "toDra"), direction=direction, reason=str(doc.get("reason", "")),
        pods=tuple(str(p) for p in pods), pod_count=_int(doc, "podCount") if "podCount" in doc else len(pods))


def record_of(node: Mapping[str, Any]) -> DecisionRecord | None:
    """The controller's latest decision recorded on a Node object; None when there is none. Raises RecordError."""
    text = (((node.get("metadata") or {}).get("annotations")) or {}).get(DECISION_KEY)
    if not isinstance(text, str) or not text.strip():
        return None
    return decode(text)


__all__ = [
    "DECISION_KEY",
    "DECISION_VERSION",
    "DecisionRecord",
    "EVENT_COMPONENT",
    "MAX_BLOCKED_EVENTS",
    "REASON_BLOCKED",
    "REASON_CHANGED",
    "REASON_UNREADABLE",
    "REASON_WOULD_CHANGE",
    "RecordError",
    "decode",
    "record_of",
]
