"""Renderers: table (terminal), json (schema in report.schema.json), markdown, html (one self-contained file)."""

from __future__ import annotations

from bridge.report.render.html import render_html
from bridge.report.render.json import render_json
from bridge.report.render.markdown import render_markdown
from bridge.report.render.table import render_table
from bridge.report.report import Report

FORMATS = ("table", "json", "markdown", "html")


def render(report: Report, fmt: str, *, colour: bool = False) -> str:
    if fmt == "table":
        return render_table(report, colour=colour)
    if fmt == "json":
        return render_json(report)
    if fmt == "markdown":
        return render_markdown(report)
    if fmt == "html":
        return render_html(report)
    raise ValueError(f"unknown output format {fmt!r} (one of {', '.join(FORMATS)})")


__all__ = ["FORMATS", "render"]
