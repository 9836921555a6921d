#!/usr/bin/env python3
"""Writes docs/rules.md, the rule catalogue, from the registered rules (bridge.report.catalogue).

Usage: python scripts/gen_rules_doc.py   (the same text as `bridge migrate-report --rules`)
"""

from __future__ import annotations

from pathlib import Path

from bridge.report.catalogue import markdown

if __name__ == "__main__":
    out = Path(__file__).resolve().parent.parent / "docs" / "rules.md"
    out.write_text(markdown())
    print(f"wrote {out}")
