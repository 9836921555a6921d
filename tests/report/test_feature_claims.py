"""Every "alpha/beta/GA in 1.xx" a finding says comes from the one feature table (bridge.kvalues.features), and the
table's rows say where each stage was checked."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from bridge.kvalues.features import FEATURE_BY_KEY, FEATURES, Feature, Stage
from bridge.report import load_snapshot
from bridge.report.checks import CheckContext, ReportOptions, run_checks
from bridge.report.findings import Finding
from bridge.report.model import build_model
from bridge.report.sources import ServerVersion
from tests.report.conftest import EXAMPLE, REPO

# "beta in 1.36", "targets beta in 1.38", "GA in 1.34": a milestone of a row the message names.
MILESTONE = re.compile(r"\b(alpha|beta|GA) in v?1\.(\d+)")
# "is beta (on by default) on v1.36.2": the stage the table gives that release.
STAGE_AT = re.compile(r"\bis (not available|alpha \(off by default\)|beta \(off by default\)|beta \(on by default\)|GA)"
                      r" on v?1\.(\d+)")
# Anything else that puts a stage word next to a release is a claim the table did not produce.
ANY_CLAIM = re.compile(r"\b(alpha|beta|GA|stable)\b[^;]{0,40}?(?<![\d.])1\.(\d\d)(?!\d)")


def _rows_named(text: str) -> list[Feature]:
    return [f for f in FEATURES if (f.gate and f.gate in text) or f"KEP-{f.kep}" in text]


def claim_problems(text: str) -> list[str]:
    problems: list[str] = []
    covered: set[int] = set()
    rows = _rows_named(text)
    for m in MILESTONE.finditer(text):
        covered.add(m.start())
        stage, minor = m.group(1), int(m.group(2))
        if not any((stage, (1, minor)) in f.milestones() for f in rows):
            problems.append(f"{m.group(0)!r}: no row named in the message has {stage} in 1.{minor}")
    for m in STAGE_AT.finditer(text):
        covered.add(m.start() + 3)  # the stage word after "is "
        label, minor = m.group(1), int(m.group(2))
        if not any(f.stage(1, minor).label == label for f in rows):
            problems.append(f"{m.group(0)!r}: the table gives another stage for 1.{minor}")
    for m in ANY_CLAIM.finditer(text):
        if m.start() not in covered:
            problems.append(f"{m.group(0)!r}: a stage claim not produced by the feature table")
    return problems


def test_the_checker_catches_claims_the_table_does_not_make() -> None:
    assert claim_problems("needs DRAExtendedResource, KEP-5004: alpha in 1.34, beta in 1.36, GA in 1.37") == []
    assert claim_problems("before DRAPreemption, KEP-5690: targets beta in 1.38") == []
    assert claim_problems("DRAConsumableCapacity (KEP-5075) is beta (on by default) on v1.36.1") == []
    assert claim_problems("preemption (KEP-5690, alpha in 1.38)")  # the row says beta, not alpha
    assert claim_problems("KEP-6406 (DRAExtendedResourceCapacity, alpha in 1.38)")  # provisional: no stage at all
    assert claim_problems("DRAConsumableCapacity (KEP-5075) is GA on v1.36.1")
    assert claim_problems("DRA is GA (resource.k8s.io/v1) from 1.34")  # not written by the table
    assert claim_problems("the beta API works; upgrade to 1.34+") == []  # a sentence apart: not a claim


# ---- the table itself


@pytest.mark.parametrize("f", FEATURES, ids=lambda f: f.key)
def test_every_row_cites_where_its_stages_were_checked(f: Feature) -> None:
    assert re.search(r"kubernetes/(kubernetes|enhancements) \S+\.(go|yaml)", f.source), f.source
    for stage, (_, minor) in f.milestones():
        assert f"1.{minor}" in f.source, f"{f.key}: {stage} 1.{minor} is not in its source note"
    if f.gate is None:
        assert f.milestones() == [] and f.status == "provisional"


def test_the_corrected_stages() -> None:
    preemption = FEATURE_BY_KEY["dra-preemption"]
    assert preemption.milestones() == [("beta", (1, 38))] and preemption.planned
    assert preemption.claim("beta") == "targets beta in 1.38"
    capacity = FEATURE_BY_KEY["extended-resource-capacity"]
    assert capacity.gate is None and capacity.stage(1, 40) is Stage.ABSENT
    assert capacity.history() == "KEP-6406 (provisional, no feature gate in Kubernetes yet)"
    health = FEATURE_BY_KEY["resource-health"]
    assert health.claim("beta") == "beta in 1.36" and health.stage(1, 36) is Stage.BETA
    dra = FEATURE_BY_KEY["dra"]
    assert dra.stage(1, 33) is Stage.BETA_OFF and dra.claim("beta") == "beta in 1.32 (off by default)"


# ---- every message the report produces


def _messages(version: str, served: tuple[str, ...] | None) -> list[Finding]:
    data = load_snapshot(EXAMPLE)
    major, minor = (int(x) for x in version.lstrip("v").split(".")[:2])
    data.version = ServerVersion(version, major, minor)
    if served is not None:
        data.api_versions = frozenset({"v1", *served})
    return run_checks(CheckContext(build_model(data), ReportOptions()))


@pytest.mark.parametrize("version,served", [
    ("v1.31.4", ()), ("v1.33.2", ("resource.k8s.io/v1beta1",)), ("v1.33.2", ("resource.k8s.io/v1",)),
    ("v1.34.2", None), ("v1.36.1", None), ("v1.37.0", None), ("v1.38.0", None),
])
def test_every_stage_claim_in_a_finding_comes_from_the_table(version: str, served: tuple[str, ...] | None) -> None:
    fs = _messages(version, served)
    assert fs
    problems = [f"{f.rule} {f.object}: {p}" for f in fs for text in (f.message, f.fix) for p in claim_problems(text)]
    assert problems == []


def test_no_stage_claim_is_written_by_hand_in_the_report_sources() -> None:
    offenders = []
    for path in sorted((REPO / "bridge" / "report").rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\b(alpha|beta|GA)\b,? (in |from )?v?1\.\d\d\b", line) or \
                    re.search(r"\b(alpha|beta|GA) \(?1\.\d\d\)?", line):
                offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert offenders == []


def test_a_table_change_changes_the_messages() -> None:
    """The messages read the table: moving a stage moves the claim (no copy of the table anywhere else)."""
    import bridge.kvalues.features as table

    original = table.FEATURE_BY_KEY["dra-preemption"]
    table.FEATURE_BY_KEY["dra-preemption"] = replace(original, beta=(1, 39))
    try:
        fs = [f for f in _messages("v1.34.2", None) if f.rule == "DRB029"]
        assert fs and all("targets beta in 1.39" in f.message for f in fs)
    finally:
        table.FEATURE_BY_KEY["dra-preemption"] = original


def test_sources_note_is_in_the_json_feature_list(tmp_path: Path) -> None:
    from bridge.report import run_report

    import json

    doc = json.loads(run_report(load_snapshot(EXAMPLE), output="json").text)
    by_gate = {f["kep"]: f for f in doc["features"]}
    assert by_gate["5690"]["source"].startswith("kubernetes/enhancements")
    assert by_gate["6406"]["gate"] == "" and "provisional" in by_gate["6406"]["stage"] + by_gate["6406"]["source"]
