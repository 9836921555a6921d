"""Renderers on the example snapshot: golden files, schema, width, colour, self-containment.

Regenerate the golden files after an intended change with:
    BRIDGE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/report/test_render.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import OrderedDict
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

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
                      "team-research": "blocked", "team-rl": "blocked", "team-speech": "ready",
                      "team-vision": "blocked"}
    assert doc["status"] == "blocked"
    assert [(s["namespace"], s["mode"]) for s in doc["wavePlan"]][:2] == [("team-batch", "shadow"), ("team-nlp", "dra")]
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


def _with_kinds_not_read(tmp_path: Path) -> Path:
    """The example snapshot and, in one more file, 3 Secrets, 12 Services and 3 Events: kinds the report does not
    read."""
    snap = tmp_path / EXAMPLE.name  # the report names the directory
    shutil.copytree(EXAMPLE, snap)
    more = [{"apiVersion": "v1", "kind": kind, "metadata": {"name": f"{kind.lower()}-{i}", "namespace": "team-nlp"}}
            for kind, n in (("Secret", 3), ("Service", 12), ("Event", 3)) for i in range(n)]
    (snap / "more.yaml").write_text(yaml.safe_dump_all(more))
    return snap


_NOT_READ = ("Not read: 12 Service, 3 Event, 3 Secret (the report reads only ClusterPolicy, ClusterQueue, ConfigMap, "
             "CronJob, DaemonSet, Deployment, DeviceClass, Job, Lease, LocalQueue, Namespace, Node, Pod, "
             "PriorityClass, ReplicaSet, ResourceClaim, ResourceClaimTemplate, ResourceQuota, ResourceSlice, "
             "StatefulSet)")


def test_every_format_says_how_many_objects_of_which_kinds_the_report_did_not_read(tmp_path: Path,
                                                                                   outputs: dict[str, str]) -> None:
    """Most first, kinds of as many objects by name, then the kinds it reads; the rest of the report is the
    example's."""
    data = load_snapshot(_with_kinds_not_read(tmp_path))
    out = {fmt: run_report(data, output=fmt).text for fmt in FORMATS}
    table = out["table"].splitlines()
    at = next(i for i, line in enumerate(table) if line.startswith("Not read: "))
    assert table[at - 1].startswith("Kubernetes ") and table[at + 4].startswith("Overall: ")  # wrapped, indented
    assert " ".join(line.strip() for line in table[at:at + 4]) == _NOT_READ
    assert max(len(line) for line in table) <= 100
    assert "\n".join(table[:at] + table[at + 4:]) + "\n" == outputs["table"]
    assert f"\n- {_NOT_READ}\n- **Overall: " in out["markdown"]
    assert out["markdown"].replace(f"- {_NOT_READ}\n", "") == outputs["markdown"]
    assert f"<p>{_NOT_READ}</p></header>" in out["html"]
    assert out["html"].replace(f"\n<p>{_NOT_READ}</p>", "") == outputs["html"]
    doc = json.loads(out["json"])
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    assert list(doc.pop("notRead").items()) == [("Service", 12), ("Event", 3), ("Secret", 3)]
    assert doc == json.loads(outputs["json"])


def test_a_report_that_read_every_object_has_no_not_read_line(outputs: dict[str, str]) -> None:
    assert not [fmt for fmt, text in outputs.items() if "Not read" in text]
    assert "notRead" not in json.loads(outputs["json"])


def test_past_eight_kinds_not_read_the_rest_are_one_count_in_the_text_and_every_kind_in_the_json() -> None:
    from tests.report.conftest import cluster

    data = cluster(*[{"kind": f"Kind{k:02d}", "metadata": {"name": f"o{i}"}} for k in range(11) for i in range(k + 1)])
    said = ("Not read: 11 Kind10, 10 Kind09, 9 Kind08, 8 Kind07, 7 Kind06, 6 Kind05, 5 Kind04, 4 Kind03, "
            "6 of 3 other kinds (the report reads only ClusterPolicy,")
    assert said in run_report(data, output="table").text.replace("\n    ", " ")
    assert f"- {said}" in run_report(data, output="markdown").text
    assert f"<p>{said}" in run_report(data, output="html").text
    assert json.loads(run_report(data, output="json").text)["notRead"] == {f"Kind{k:02d}": k + 1 for k in range(11)}


def test_a_kind_not_read_is_escaped_as_each_format_escapes_what_the_input_says() -> None:
    from tests.report.conftest import cluster

    data = cluster({"kind": "Evil|<b>\x1b[2J", "metadata": {"name": "x"}})
    assert "Not read: 1 Evil|<b>\\x1b[2J (" in run_report(data, output="table").text
    assert "- Not read: 1 Evil\\|<b>" in run_report(data, output="markdown").text
    assert "<p>Not read: 1 Evil|&lt;b&gt;" in run_report(data, output="html").text
    assert json.loads(run_report(data, output="json").text)["notRead"] == {"Evil|<b>\x1b[2J": 1}


def test_readiness_chart_stays_readable_for_many_namespaces() -> None:
    from dataclasses import replace

    from bridge.report.render.html import MAX_BARS, readiness_chart

    report = run_report(load_snapshot(EXAMPLE)).report
    row = report.namespaces[0]
    many = replace(report, namespaces=[replace(row, name=f"ns-{i:04d}", gpus={"nvidia.com/gpu": i}) for i in range(500)])
    svg = readiness_chart(many)
    assert svg.count("<rect") == MAX_BARS + 3  # bars + legend
    assert "ns-0499" in svg and "ns-0000" not in svg and "of 500" in svg


def _edge_clusters() -> dict[str, object]:
    from tests.report.conftest import cluster, container, deployment, namespace, node, spec

    long_ns = "team-" + "x" * 58  # 63 characters, the longest namespace name
    long_app = deployment("inference-" + "y" * 243, long_ns, 3,
                          spec(container({"nvidia.com/gpu": 2, "nvidia.com/mig-7g.80gb": 1, "nvidia.com/gpu.shared": 1}),
                               volumes=[{"name": "d", "hostPath": {"path": "/dev/nvidia-uvm-tools"}}]))
    return {
        "empty-unknown-version": cluster(version="", api_versions=None),
        "no-dra-api": cluster(namespace("a", "dra"), version="v1.30.1", api_versions=()),
        "unreadable": cluster(unreadable={"pods": "forbidden: the credentials may not list pods"}),
        "long-names": cluster(namespace(long_ns, "DRA-please"), long_app,
                              node("gpu-node-" + "z" * 240, 8, runtime="docker://24.0.7")),
        "kinds-not-read": cluster(*[{"kind": kind, "metadata": {"name": "x"}}
                                    for kind in ("Service", "K" * 300, *(f"Custom{n}" for n in range(20)))]),
    }


@pytest.mark.parametrize("name", sorted(_edge_clusters()))
def test_edge_reports_follow_the_schema_and_fit_100_columns(name: str) -> None:
    data = _edge_clusters()[name]
    schema = json.loads(SCHEMA.read_text())
    for split in ("current", "all", "3"):
        doc = json.loads(run_report(data, output="json", assume_split=split).text)  # type: ignore[arg-type]
        jsonschema.validate(doc, schema)
    table = run_report(data, output="table", colour=False).text  # type: ignore[arg-type]
    assert max(len(line) for line in table.splitlines()) <= 100, max(table.splitlines(), key=len)


def test_schema_rejects_what_the_output_must_not_contain(outputs: dict[str, str]) -> None:
    """The schema is strict enough to catch drift: an undocumented field or a finding without a fix fails it."""
    schema = json.loads(SCHEMA.read_text())
    doc = json.loads(outputs["json"])
    doc["findings"][0]["extra"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema)
    doc = json.loads(outputs["json"])
    del doc["findings"][0]["fix"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema)
    doc = json.loads(outputs["json"])
    doc["undocumented"] = True
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema)


def test_table_summary_fits_100_columns_at_the_envelope() -> None:
    from dataclasses import replace

    report = run_report(load_snapshot(EXAMPLE)).report
    big = replace(report, counts={"gpuWorkloads": 54321, "pods": 150000, "nodes": 5000},
                  findings=report.findings * 2000)
    from bridge.report.render.table import render_table

    for colour in (False, True):
        text = render_table(big, colour=colour)
        plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
        assert max(len(line) for line in plain.splitlines()) <= 100
    assert "150000 pods" in plain.replace("\n    ", " ")


def test_json_is_written_item_by_item_yet_equals_one_dump_of_the_whole_document() -> None:
    """render_json streams the long lists (the memory peak at 150,000 pods) and must stay byte-identical to
    json.dumps(indent=2) of the document, empty lists included."""
    from dataclasses import replace

    from bridge.report.render.json import render_json, to_dict

    report = run_report(load_snapshot(EXAMPLE)).report
    deep: object = ["leaf", 1.5, None, True, {"k\u00e9y\n": "v\"\t"}]
    for _ in range(70):
        deep = {"nested": deep, "empty": {}, "none": [], "tuple": (1, "two")}
    odd = replace(report.findings[0], details={"deep": deep})
    for r in (report, replace(report, findings=[], waves=[], workloads=[], nodes=[], namespaces=[]),
              replace(report, findings=[odd])):
        assert render_json(r) == json.dumps(to_dict(r), indent=2) + "\n"


_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(alphabet=st.characters(max_codepoint=0x7f)),
    st.text(), st.sampled_from(["\x7f", "a\x00b\x1f", "\u2028", "\ud800", "1e16", "NaN"]))
_KEYS = st.one_of(st.text(max_size=8), st.integers(min_value=-3, max_value=3), st.booleans())
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.lists(inner, max_size=3).map(tuple),
    st.dictionaries(st.text(max_size=8), inner, max_size=4),
    st.dictionaries(_KEYS, inner, max_size=3),
    st.dictionaries(st.text(max_size=4), inner, max_size=3).map(lambda d: OrderedDict(reversed(d.items())))),
    max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_a_list_item_written_by_orjson_is_the_standard_librarys_bytes(value: object) -> None:
    """render_json writes the long lists' items with orjson where that gives the same bytes (`_item`): any value,
    floats, big integers, non-ASCII, control characters, DEL, tuples, non-string keys and dict subclasses included."""
    from bridge.report.render.json import _item, _pretty

    assert _item(value) == _pretty(value, 2)


def test_rule_lists_wrap_under_their_column_instead_of_being_cut() -> None:
    from dataclasses import replace

    report = run_report(load_snapshot(EXAMPLE)).report
    many = ("DRB020", "DRB021", "DRB026", "DRB034", "DRB036")
    report.namespaces[0] = replace(report.namespaces[0], rules=many)
    from bridge.report.render.table import render_table

    lines = render_table(report).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(report.namespaces[0].name))
    column = lines[start].index(many[0])
    block = [lines[start]] + [line for line in lines[start + 1:start + 3] if line[:column].strip() == ""]
    assert " ".join(line[column:].strip() for line in block).split() == list(many)
    assert max(len(line) for line in lines) <= 100 and "DRB02~" not in "\n".join(lines)
