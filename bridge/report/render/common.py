"""Small formatting helpers shared by the renderers."""

from __future__ import annotations

from bridge.report.checks.simulation import NamespaceCapacity
from bridge.report.findings import Finding
from bridge.report.report import Report, WaveStep
from bridge.report.sources import KINDS


def fmt_gpus(gpus: dict[str, int]) -> str:
    """{"nvidia.com/gpu": 4, "nvidia.com/mig-1g.10gb": 3} -> "4 gpu, 3 mig-1g.10gb"."""
    if not gpus:
        return "-"
    return ", ".join(f"{v} {k.split('/', 1)[-1]}" for k, v in gpus.items())


def fmt_capacity(c: NamespaceCapacity | None, short: bool = False) -> str:
    """The DRA CAPACITY cell: fits (as things are), fits moving (with the GPUs the controller moves), fits alone
    (not after the namespaces before it in the wave plan), or how many pods would stay Pending (after the
    controller's moves, when it acts)."""
    if c is None:
        return "-"
    m = c.moves if c.moves is not None and c.moves.by == "controller" else None
    if c.cumulative.fits:
        return "fits"
    if m is not None and m.cumulative is not None and m.cumulative.fits:
        return "fits, moving" if short else "fits with the controller's moves"
    if c.alone.fits or (m is not None and m.alone.fits):
        return "fits alone"
    pending = m.alone.pending if m is not None else c.alone.pending
    return f"{pending} pending" if short else f"{pending} pods pending"


def fmt_api(api: str) -> str:
    """A workload's API for tables: legacy, DRA, mixed, or "-"."""
    return {"dra": "DRA", "none": "-"}.get(api, api)


def grouped_findings(report: Report, severity: str) -> list[Finding]:
    return [f for f in report.findings if f.severity == severity]


# One vocabulary in every format: a finding's severity is blocker / warning / info; an object's status is blocked /
# needs-config / ready (its worst finding). Headings and counts use these words only.
SEVERITY_HEADING = {"blocker": "Blockers", "warning": "Warnings (needs configuration)", "info": "Information"}
LEGEND = ("A blocker makes its object blocked, a warning makes it needs-config (it can move after the fix); "
          "info changes nothing.")


def severity_counts(report: Report) -> dict[str, int]:
    return {k: sum(1 for f in report.findings if f.severity == k) for k in ("blocker", "warning", "info")}


def counts_text(report: Report) -> str:
    """"3 blockers, 10 warnings, 12 info"."""
    sev = severity_counts(report)
    return f"{sev['blocker']} blockers, {sev['warning']} warnings, {sev['info']} info"


NOT_READ_NAMED = 8  # kinds a "not read" line names; the JSON's notRead has every one


def not_read_text(report: Report) -> str:
    """"12 Secret, 3 Service (the report reads only ClusterPolicy, ...)": the objects of kinds the report does not
    read, most first; "" when it read every object. Past `NOT_READ_NAMED` kinds the rest are one count."""
    if not report.not_read:
        return ""
    counts = list(report.not_read.items())
    shown = [f"{n} {kind}" for kind, n in counts[:NOT_READ_NAMED]]
    rest = counts[NOT_READ_NAMED:]
    if rest:
        shown.append(f"{sum(n for _, n in rest)} of {len(rest)} other kinds")
    return f"{', '.join(shown)} (the report reads only {', '.join(sorted(KINDS))})"


def waves(report: Report) -> list[tuple[int, list[WaveStep]]]:
    """The wave plan grouped by wave number, in order: each wave is one run of `wave-plan.sh N`."""
    out: list[tuple[int, list[WaveStep]]] = []
    for step in report.waves:
        if not out or out[-1][0] != step.wave:
            out.append((step.wave, []))
        out[-1][1].append(step)
    return out
