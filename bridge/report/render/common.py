"""Small formatting helpers shared by the renderers."""

from __future__ import annotations

from bridge.report.findings import Finding
from bridge.report.report import Report, WaveStep


def fmt_gpus(gpus: dict[str, int]) -> str:
    """{"nvidia.com/gpu": 4, "nvidia.com/mig-1g.10gb": 3} -> "4 gpu, 3 mig-1g.10gb"."""
    if not gpus:
        return "-"
    return ", ".join(f"{v} {k.split('/', 1)[-1]}" for k, v in gpus.items())


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


def waves(report: Report) -> list[tuple[int, list[WaveStep]]]:
    """The wave plan grouped by wave number, in order: each wave is one run of `wave-plan.sh N`."""
    out: list[tuple[int, list[WaveStep]]] = []
    for step in report.waves:
        if not out or out[-1][0] != step.wave:
            out.append((step.wave, []))
        out[-1][1].append(step)
    return out
