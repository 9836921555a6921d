"""`bridge node status`: a Node's split, read from the API (pure rendering; the CLI fetches the Node).

What it shows: the split the Node asks for now (label/annotation, parsed by `bridge.ledger.requested_split`), and
from the daemon's split-status annotation (`bridge.ledger.status`) the state, every device's side and holders, the
devices not yet where the target asks and why, and the latest refusals. When the daemon has not evaluated the
current request yet (or is not running), it says so instead of showing stale data as current; while its
evaluations fail, it shows the error. The table is for a terminal: every text from the annotation (a holder, a
reason, the request) has its control characters escaped (`bridge.humantext.escape`), so ESC or CR in an annotation
cannot drive the terminal; the JSON output escapes them as JSON does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bridge.humantext import clip, escape
from bridge.ledger.status import SplitStatus, StatusError, status_of, summary_counts
from bridge.ledger.target import SplitRequest, requested_split


@dataclass(frozen=True)
class NodeSplitView:
    node: str
    request: SplitRequest
    status: SplitStatus | None
    problem: str = ""  # why there is no usable status

    @property
    def current(self) -> bool:
        """The status answers the Node's request as it stands now."""
        return self.status is not None and self.status.requested == self.request.text


def view_of(node: Mapping[str, Any]) -> NodeSplitView:
    name = str((node.get("metadata") or {}).get("name", ""))
    request = requested_split(node)
    try:
        status = status_of(node)
    except StatusError as err:
        return NodeSplitView(name, request, None, str(err))
    if status is None:
        return NodeSplitView(name, request, None, f"node {name} has no split status: is `bridge node` running there "
                                                  "with DRA on (it writes the annotation after its first evaluation)?")
    return NodeSplitView(name, request, status)


def _table(rows: list[list[str]]) -> list[str]:
    rows = [[escape(c) for c in r] for r in rows]  # before the widths: an escape is wider than its character
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def render_table(v: NodeSplitView) -> str:
    lines = [f"Node {v.node}: requested {v.request.describe()}"]
    if v.request.conflict:
        lines.append(f"warning: {v.request.conflict}")
    s = v.status
    if s is None:
        lines.append(v.problem)
        return _lines(lines)
    if not v.current:
        lines.append(f"note: the daemon last evaluated {clip(s.requested)}; it has not written a status for the current "
                     "request yet (or is not running)")
    lines.append(f"state: {s.state} — {s.message} (updated {s.updated})")
    if s.checkpoint_error is not None:
        lines.append(f"error: the checkpoint cannot be written since {s.checkpoint_error.since}: "
                     f"{s.checkpoint_error.message}; the split shown is the last one saved, changes wait (retried)")
    if s.evaluation_error is not None:
        lines.append(f"error: evaluating the split fails since {s.evaluation_error.since}: "
                     f"{s.evaluation_error.message}; the devices shown are from the last evaluation (retried)")
    rows = [["DEVICE", "SIDE", "UUID", "HOLDERS"]]
    rows += [[d.name, d.side.value, d.uuid, "; ".join(d.holders) or "-"] for d in s.devices]
    lines += ["", *_table(rows)]
    if s.pending:
        rows = [["DEVICE", "MOVE", "PHASE", "WHY"]]
        rows += [[p.device, f"{p.source.value}->{p.target.value}", p.phase, p.reason] for p in s.pending]
        lines += ["", "Not yet where the target asks:", *_table(rows)]
    if s.stuck:
        rows = [["CLAIM", "POD", "DEVICE", "HELD BY (LEGACY)", "SINCE"]]
        rows += [[x.claim, x.pod or "-", x.device, x.holder, x.since] for x in s.stuck]
        lines += ["", "Claims stuck behind a legacy pod (allocated a GPU after it left DRA):", *_table(rows)]
        lines += [f"  {x.message}" for x in s.stuck]
    if s.refusals:
        rows = [["TIME", "API", "DEVICE", "MESSAGE"]]
        rows += [[r.time, r.api, r.device or "-", r.message] for r in s.refusals]
        lines += ["", "Latest refusals:", *_table(rows)]
    return _lines(lines)


def _lines(lines: list[str]) -> str:
    """The lines for a terminal: every text from the annotation escaped (ESC, CR: bridge.humantext)."""
    return "\n".join(escape(line) for line in lines)


def render_json(v: NodeSplitView) -> str:
    s = v.status
    doc: dict[str, Any] = {
        "node": v.node,
        "requested": {"value": v.request.text, "source": v.request.source, "conflict": v.request.conflict},
        "current": v.current,
        "problem": v.problem,
        "status": None if s is None else json.loads(s.encode()),
    }
    if s is not None:
        doc["summary"] = summary_counts(s.devices)
    return json.dumps(doc, indent=2)


__all__ = ["NodeSplitView", "render_json", "render_table", "view_of"]
