"""wave-plan.sh as an operator runs it: executable, one wave per run, each flip to dra checked against the cluster
first (`bridge migrate-report --require-fixed`), every flip strict; and the wave plan reads the same in every
format."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from bridge.cli import main
from bridge.kube import connect
from bridge.kube.api import NAMESPACES
from bridge.report import load_snapshot, run_report
from bridge.sandbox.apiserver import ApiServer
from tests.report.conftest import EXAMPLE, load_example


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fixes")
    res = CliRunner().invoke(main, ["migrate-report", "--snapshot", str(EXAMPLE), "--emit-manifests", str(out)],
                             catch_exceptions=False)
    assert res.exit_code == 1
    return out


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The example loaded into the API emulator, and the environment wave-plan.sh needs to reach it."""
    with ApiServer(version="1.36.2") as srv:
        load_example(srv)
        kubeconfig = srv.write_kubeconfig(tmp_path / "kubeconfig")
        bridge = tmp_path / "bridge"
        bridge.write_text(f'#!/bin/sh\nexec {sys.executable} -m bridge "$@"\n')
        bridge.chmod(0o755)
        env = {**os.environ, "BRIDGE": str(bridge), "KUBECONFIG": str(kubeconfig), "NO_COLOR": "1"}
        env.pop("BRIDGE_NAMESPACE_STRICT", None)
        yield env


def _mode(env: dict[str, str], namespace: str) -> str:
    ns = connect(env["KUBECONFIG"]).get(NAMESPACES, namespace)
    return str((ns["metadata"].get("labels") or {}).get("dra-bridge.io/mode", "legacy"))


def _run(plan_dir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(plan_dir / "wave-plan.sh"), *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_the_script_is_written_executable(plan_dir: Path) -> None:
    assert os.stat(plan_dir / "wave-plan.sh").st_mode & stat.S_IXUSR


def test_without_a_wave_it_lists_the_waves_and_changes_nothing(plan_dir: Path, cluster: dict[str, str]) -> None:
    res = _run(plan_dir, cluster)
    assert res.returncode == 2
    assert "wave 1: team-batch -> shadow" in res.stderr and "wave 2: team-nlp -> dra" in res.stderr
    assert _run(plan_dir, cluster, "99").returncode == 2
    assert _mode(cluster, "team-batch") == "legacy"


def test_one_wave_per_run(plan_dir: Path, cluster: dict[str, str]) -> None:
    """Wave 1 flips only wave 1 (strictness off: the emulator runs no webhook)."""
    res = _run(plan_dir, {**cluster, "BRIDGE_NAMESPACE_STRICT": "false"}, "1")
    assert res.returncode == 0, res.stderr
    assert _mode(cluster, "team-batch") == "shadow" and _mode(cluster, "team-nlp") == "shadow"  # nlp was shadow


def test_a_dra_step_waits_for_its_fix(plan_dir: Path, cluster: dict[str, str]) -> None:
    """team-nlp waits for DRB029 (preemption): the rescan still finds it, so nothing is flipped."""
    res = _run(plan_dir, {**cluster, "BRIDGE_NAMESPACE_STRICT": "false"}, "2")
    assert res.returncode == 1
    assert "team-nlp: NOT ready" in res.stdout and "DRB029" in res.stdout
    assert "wave 2: team-nlp is not ready for dra" in res.stderr
    assert _mode(cluster, "team-nlp") == "shadow"


def test_a_ready_step_is_still_refused_by_default_when_no_webhook_covers_the_namespace(
        plan_dir: Path, cluster: dict[str, str]) -> None:
    last = max(s.wave for s in run_report(load_snapshot(EXAMPLE)).report.waves)
    res = _run(plan_dir, cluster, str(last))
    assert res.returncode != 0
    assert "ready to flip" in res.stdout and "NOT changed" in res.stderr
    assert _mode(cluster, "team-batch") == "legacy"


# ---- --require-fixed on its own


def test_require_fixed_passes_for_a_ready_namespace_and_lists_what_is_left_otherwise() -> None:
    ok = CliRunner().invoke(main, ["migrate-report", "--snapshot", str(EXAMPLE), "--require-fixed", "team-batch"])
    assert ok.exit_code == 0 and ok.output.strip() == "team-batch: ready to flip, no blocker"
    left = CliRunner().invoke(main, ["migrate-report", "--snapshot", str(EXAMPLE),
                                     "--require-fixed", "team-research=DRB026"])
    assert left.exit_code == 1 and "team-research: NOT ready" in left.output and "DRB026 blocker" in left.output
    bad = CliRunner().invoke(main, ["migrate-report", "--snapshot", str(EXAMPLE), "--require-fixed", "x=oops"])
    assert bad.exit_code == 2


# ---- one vocabulary and one wave numbering in every format


@pytest.fixture(scope="module")
def outputs() -> dict[str, str]:
    data = load_snapshot(EXAMPLE)
    return {fmt: run_report(data, output=fmt).text for fmt in ("table", "markdown", "html", "json")}


def test_warnings_are_called_warnings_everywhere(outputs: dict[str, str]) -> None:
    doc = json.loads(outputs["json"])
    n = doc["summary"]["findings"]
    counts = f"{n['blocker']} blockers, {n['warning']} warnings, {n['info']} info"
    assert counts in outputs["table"] and counts in outputs["markdown"]
    for fmt in ("table", "markdown", "html"):
        assert "Needs configuration" not in outputs[fmt].replace("Warnings (needs configuration)", "")
        assert "a warning makes it needs-config" in outputs[fmt]
    assert "Warnings (needs configuration)" in outputs["table"] and "## Warnings (needs configuration)" in \
        outputs["markdown"]
    assert f">{n['warning']}</b>" in outputs["html"] and f"warnings ({n['warning']})" in outputs["html"]


def test_each_wave_number_appears_once_in_the_table_and_markdown(outputs: dict[str, str]) -> None:
    waves = sorted({s.wave for s in run_report(load_snapshot(EXAMPLE)).report.waves})
    table_waves = [line.split()[1] for line in outputs["table"].splitlines() if line.startswith("  wave ")]
    assert table_waves == [str(w) for w in waves]
    assert [line for line in outputs["markdown"].splitlines() if line.startswith("### Wave ")] == \
        [f"### Wave {w}" for w in waves]


# ---- --emit-manifests into a directory written before


def test_a_second_run_removes_what_the_first_wrote_and_no_longer_applies(tmp_path: Path) -> None:
    out = tmp_path / "fixes"
    first = CliRunner().invoke(main, ["migrate-report", "--snapshot", str(EXAMPLE), "--emit-manifests", str(out)])
    assert (out / "quota-team-vision-gpu-quota.yaml").exists() and first.exit_code == 1
    (out / "mig-1g.10gb.yaml").write_text("# edited by hand\n")  # changed since: kept, and named
    (out / "notes.txt").write_text("mine\n")  # never written by the report: untouched, not named
    paired = tmp_path / "snap"
    paired.mkdir()
    for f in EXAMPLE.iterdir():
        (paired / f.name).write_bytes(f.read_bytes())
    quotas = yaml.safe_load((paired / "resourcequotas.yaml").read_text())
    for q in quotas["items"]:  # team-vision's quota paired, as the first run's file says
        q["spec"]["hard"].update({"gpu.dra-bridge.io.deviceclass.resource.k8s.io/devices": "16",
                                  "requests.deviceclass.resource.kubernetes.io/gpu.dra-bridge.io": "16"})
    (paired / "resourcequotas.yaml").write_text(yaml.safe_dump(quotas))
    second = CliRunner().invoke(main, ["migrate-report", "--snapshot", str(paired), "--emit-manifests", str(out)])
    assert not (out / "quota-team-vision-gpu-quota.yaml").exists()
    assert "removed 1 file(s) an earlier run wrote there and this one does not: quota-team-vision-gpu-quota.yaml" \
        in second.output
    assert (out / "notes.txt").read_text() == "mine\n" and "notes.txt" not in second.output
    assert (out / "wave-plan.sh").exists() and (out / "mig-1g.10gb.yaml").exists()
