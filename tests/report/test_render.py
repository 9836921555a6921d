"""Renderers on the example snapshot: golden files, schema, width, colour, self-containment.

Regenerate the golden files after an intended change with:
    BRIDGE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/report/test_render.py
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import jsonschema
import pytest

from bridge.report import load_snapshot, run_report
from bridge.report.render import FORMATS
from tests.report.conftest import EXAMPLE

GOLDEN = Path(__file__).parent / "golden"
SCHEMA = Path(__file__).resolve().parents[2] / "bridge" / "report" / "render" / "report.schema.json"
SUFFIX = {"table": "txt", "json": "json", "markdown": "md", "html": "html"}


@pytest.fixture(scope="module")
def outputs() -> dict[str, str]:
    data = load_snapshot(EXAMPLE)
    return {fmt: run_report(data, output=fmt).text for fmt in FORMATS}


@pytest.mark.parametrize("fmt", FORMATS)
def test_output_matches_golden(outputs: dict[str, str], fmt: str) -> None:
    path = GOLDEN / f"report.{SUFFIX[fmt]}"
    if os.environ.get("BRIDGE_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(outputs[fmt])
    assert path.exists(), f"{path} missing: run with BRIDGE_UPDATE_GOLDEN=1"
    assert outputs[fmt] == path.read_text(), f"{fmt} output changed; regenerate with BRIDGE_UPDATE_GOLDEN=1 if intended"


@pytest.mark.parametrize("fmt", FORMATS)
def test_golden_has_no_timestamps_or_machine_paths(outputs: dict[str, str], fmt: str) -> None:
    text = outputs[fmt]
    assert str(EXAMPLE.parent) not in text and "/tmp" not in text and "/home" not in text
    assert not re.search(r"20\d\d-\d\d-\d\dT\d\d:\d\d", text)


def test_json_follows_the_documented_schema(outputs: dict[str, str]) -> None:
    doc = json.loads(outputs["json"])
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    assert doc["schemaVersion"] == "1"
    blocker = next(f for f in doc["findings"] if f["severity"] == "blocker")
    assert set(blocker) >= {"rule", "severity", "object", "message", "fix"}
    assert set(blocker["object"]) == {"kind", "namespace", "name"}


def test_example_report_says_what_an_operator_needs(outputs: dict[str, str]) -> None:
    doc = json.loads(outputs["json"])
    status = {n["name"]: n["status"] for n in doc["namespaces"]}
    assert status == {"team-batch": "ready", "team-nlp": "needs-config", "team-recsys": "blocked",
                      "team-research": "blocked", "team-speech": "ready", "team-vision": "needs-config"}
    assert doc["status"] == "blocked"
    assert [(s["namespace"], s["mode"]) for s in doc["wavePlan"]][:2] == [("team-batch", "shadow"), ("team-vision", "shadow")]
    backends = {n["name"]: n["backends"] for n in doc["nodes"]}
    assert backends["gpu-h100-1"] == ["bridge"] and backends["gpu-l40s-1"] == ["dra:gpu.nvidia.com"]
    assert backends["gpu-a100-1"] == ["device-plugin"]


def test_table_fits_100_columns_and_has_no_colour_unless_asked(outputs: dict[str, str]) -> None:
    assert max(len(line) for line in outputs["table"].splitlines()) <= 100
    assert "\x1b[" not in outputs["table"]
    coloured = run_report(load_snapshot(EXAMPLE), output="table", colour=True).text
    assert "\x1b[31mblocked" in coloured


def test_html_is_one_self_contained_file(outputs: dict[str, str]) -> None:
    html = outputs["html"]
    assert re.search(r"<(link|img|iframe)\b", html) is None
    assert re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html) is None
    assert "@import" not in html and "url(" not in html
    assert html.count("<svg") == 2


def test_readiness_chart_stays_readable_for_many_namespaces() -> None:
    from dataclasses import replace

    from bridge.report.render.html import MAX_BARS, readiness_chart

    report = run_report(load_snapshot(EXAMPLE)).report
    row = report.namespaces[0]
    many = replace(report, namespaces=[replace(row, name=f"ns-{i:04d}", gpus={"nvidia.com/gpu": i}) for i in range(500)])
    svg = readiness_chart(many)
    assert svg.count("<rect") == MAX_BARS + 3  # bars + legend
    assert "ns-0499" in svg and "ns-0000" not in svg and "of 500" in svg
