"""All checks, registered by ID on import. `run_checks` runs every rule and returns findings in a stable order
(severity, rule, namespace, kind, name), so renderers and golden files never depend on dict order."""

from __future__ import annotations

from bridge.report.checks import (  # noqa: F401 (register)
    capacity,
    cluster,
    dpconfig,
    namespaces,
    nodes,
    operators,
    workloads,
)
from bridge.report.checks.context import CheckContext, ReportOptions
from bridge.report.findings import RULES, Finding


def run_checks(ctx: CheckContext, only: frozenset[str] | None = None) -> list[Finding]:
    out: list[Finding] = []
    for rule_id in sorted(RULES):
        if only is not None and rule_id not in only:
            continue
        out.extend(RULES[rule_id].func(ctx))
    out.sort(key=Finding.sort_key)
    return out


__all__ = ["CheckContext", "ReportOptions", "run_checks"]
