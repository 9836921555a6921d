"""The rule catalogue (docs/rules.md), generated from the registered rules themselves: ID, title, what each detects
(its check's docstring), the severities its findings can have, and how it is fixed in general. Regenerate with
`bridge migrate-report --rules > docs/rules.md` (or `python scripts/gen_rules_doc.py`); tests/report/test_catalogue.py
fails when the file and the code disagree.
"""

from __future__ import annotations

from bridge.report.checks import run_checks  # noqa: F401 (registers every rule)
from bridge.report.findings import RETIRED, RULES, SEVERITIES

_HEADER = """# Rule catalogue

Every finding of `bridge migrate-report` carries one of these rule IDs. IDs are stable: tools and CI gates match on
them, and a withdrawn rule's ID is never reused. A finding's severity decides what it does to its object: a
**blocker** makes it blocked (the namespace is not planned, the report exits 1), a **warning** makes it needs-config
(it can move after the fix), **info** changes nothing. Each finding's own fix names its objects and the command or
change; the fix below is the rule's in general. Applying a finding's fix makes it disappear on the next run
(tests/report/test_every_fix_closes.py applies each one).

Generated from the code by `bridge migrate-report --rules` (`python scripts/gen_rules_doc.py` writes this file); do
not edit by hand.
"""


def markdown() -> str:
    lines = [_HEADER, "| ID | Rule | Severity |", "|---|---|---|"]
    for rid in sorted(RULES):
        r = RULES[rid]
        lines.append(f"| [{rid}](#{rid.lower()}) | {r.title} | {', '.join(_ordered(r.severities))} |")
    for rid in sorted(RULES):
        r = RULES[rid]
        lines += ["", f"## {rid}", "", f"**{r.title}** ({', '.join(_ordered(r.severities))})", "",
                  f"Detects: {r.detects}", "", f"Fix: {r.fix}"]
    if RETIRED:
        lines += ["", "## Retired IDs", ""]
        lines += [f"* {rid}: {why}" for rid, why in sorted(RETIRED.items())]
    return "\n".join(lines) + "\n"


def _ordered(severities: tuple[str, ...]) -> list[str]:
    return sorted(severities, key=SEVERITIES.index)


__all__ = ["markdown"]
