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
from bridge.report.findings import RULES, Finding, blocked_namespaces


def run_checks(ctx: CheckContext, only: frozenset[str] | None = None) -> list[Finding]:
    """Every rule (or those in `only`). Late rules run after the others, once `ctx.blocked` says which namespaces
    those block; asking for a late rule alone still runs the others first (and returns only what was asked)."""
    wanted = sorted(r for r in RULES if only is None or r in only)
    early = [r for r in sorted(RULES) if not RULES[r].late]
    late = [r for r in wanted if RULES[r].late]
    if late:
        wanted_early = set(wanted)
    else:
        early = [r for r in early if r in wanted]
        wanted_early = set(early)
    out: list[Finding] = []
    seen: list[Finding] = []
    for rule_id in early:
        found = list(RULES[rule_id].func(ctx))
        seen += found
        if rule_id in wanted_early:
            out += found
    ctx.blocked = blocked_namespaces(seen)
    for rule_id in late:
        out.extend(RULES[rule_id].func(ctx))
    out.sort(key=Finding.sort_key)
    return out


__all__ = ["CheckContext", "ReportOptions", "run_checks"]
