"""The rule catalogue (docs/rules.md) is generated from the rules: it matches the code, lists every rule with what it
detects, its severities and its fix, and `bridge migrate-report --rules` prints the same text."""

from __future__ import annotations

from click.testing import CliRunner

from bridge.cli import main
from bridge.report.catalogue import markdown
from bridge.report.findings import RULES
from tests.report.conftest import REPO

DOC = REPO / "docs" / "rules.md"


def test_docs_rules_md_is_what_the_rules_generate() -> None:
    assert DOC.read_text() == markdown(), "docs/rules.md is stale: python scripts/gen_rules_doc.py"


def test_every_rule_is_in_the_catalogue_with_what_it_detects_its_severities_and_fix() -> None:
    text = DOC.read_text()
    for rid, r in RULES.items():
        assert f"## {rid}\n" in text and f"| [{rid}](#{rid.lower()}) | {r.title} |" in text
        assert len(r.detects) > 30 and len(r.fix) > 15, rid
        assert f"Detects: {r.detects}" in text and f"Fix: {r.fix}" in text


def test_the_cli_prints_the_catalogue_and_exits_0_without_scanning() -> None:
    res = CliRunner().invoke(main, ["migrate-report", "--rules"])
    assert res.exit_code == 0 and res.output == markdown()
