"""Small formatting helpers shared by the renderers."""

from __future__ import annotations

from bridge.report.findings import Finding
from bridge.report.report import Report


def fmt_gpus(gpus: dict[str, int]) -> str:
    """{"nvidia.com/gpu": 4, "nvidia.com/mig-1g.10gb": 3} -> "4 gpu, 3 mig-1g.10gb"."""
    if not gpus:
        return "-"
    return ", ".join(f"{v} {k.split('/', 1)[-1]}" for k, v in gpus.items())


def grouped_findings(report: Report, severity: str) -> list[Finding]:
    return [f for f in report.findings if f.severity == severity]
