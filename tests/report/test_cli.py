"""`bridge migrate-report` as a user runs it: formats, files, exit codes, environment variables."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from bridge.cli import main
from tests.report.conftest import EXAMPLE


def run(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, ["migrate-report", *args], env=env, catch_exceptions=False)


def test_help_documents_exit_codes() -> None:
    res = run("--help")
    assert res.exit_code == 0
    assert "0  no blockers" in res.output and "1  blockers found" in res.output and "2  usage error" in res.output


def test_blocked_example_exits_1_and_prints_the_table() -> None:
    res = run("--snapshot", str(EXAMPLE))
    assert res.exit_code == 1
    assert "Blockers" in res.output and "team-research" in res.output and "\x1b[" not in res.output


def test_the_readme_command_lists_what_real_clusters_hide() -> None:
    """The example carries one case of each finding added for issue 11; the README's first command shows them."""
    out = run("--snapshot", str(EXAMPLE), "-o", "json").output
    by_rule: dict[str, set[str]] = {}
    for f in json.loads(out)["findings"]:
        by_rule.setdefault(f["rule"], set()).add(f["severity"])
    expected = {"DRB015": "blocker", "DRB016": "warning", "DRB030": "blocker", "DRB033": "info", "DRB034": "blocker",
                "DRB035": "blocker", "DRB036": "blocker", "DRB042": "blocker", "DRB043": "blocker", "DRB050": "blocker"}
    for rule, severity in expected.items():
        assert severity in by_rule.get(rule, set()), rule
    table = run("--snapshot", str(EXAMPLE)).output
    assert all(rule in table for rule in expected)


def test_json_to_file_and_manifests(tmp_path: Path) -> None:
    out, fixes = tmp_path / "r.json", tmp_path / "fixes"
    res = run("--snapshot", str(EXAMPLE), "-o", "json", "--file", str(out), "--emit-manifests", str(fixes))
    assert res.exit_code == 1
    assert json.loads(out.read_text())["schemaVersion"] == "1"
    assert (fixes / "wave-plan.sh").exists() and (fixes / "quota-team-vision-gpu-quota.yaml").exists()


def test_options_come_from_environment_variables() -> None:
    res = run(env={"BRIDGE_REPORT_SNAPSHOT": str(EXAMPLE), "BRIDGE_REPORT_OUTPUT": "markdown",
                   "BRIDGE_REPORT_ASSUME_SPLIT": "all"})
    assert res.exit_code == 1 and res.output.startswith("# GPU migration report")
    assert "DRA split assumed: all" in res.output


def test_ready_cluster_exits_0(tmp_path: Path) -> None:
    (tmp_path / "ns.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n")
    (tmp_path / "version.json").write_text('{"gitVersion": "v1.35.1"}')
    (tmp_path / "api-versions.txt").write_text("v1\nresource.k8s.io/v1\n")
    res = run("--snapshot", str(tmp_path))
    assert res.exit_code == 0, res.output


def test_usage_and_input_errors_exit_2(tmp_path: Path) -> None:
    assert run("--snapshot", str(tmp_path / "missing")).exit_code == 2
    assert run("--snapshot", str(EXAMPLE), "--assume-split", "half").exit_code == 2
    assert run("--snapshot", str(EXAMPLE), "--kubeconfig", "x").exit_code == 2
    (tmp_path / "bad.yaml").write_text("kind: [")
    res = run("--snapshot", str(tmp_path))
    assert res.exit_code == 2 and "bad.yaml" in res.output
    notdp = tmp_path / "dp.yaml"
    notdp.write_text("hello: world\n")
    assert run("--snapshot", str(EXAMPLE), "--device-plugin-config", str(notdp)).exit_code == 2


def test_device_plugin_config_file_is_translated(tmp_path: Path) -> None:
    cfg = tmp_path / "dp.yaml"
    cfg.write_text("version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n")
    res = run("--snapshot", str(EXAMPLE), "--device-plugin-config", str(cfg), "-o", "json")
    doc = json.loads(res.output)
    assert any(f["rule"] == "DRB053" and f["object"] == {"kind": "File", "namespace": "", "name": "dp.yaml"}
               for f in doc["findings"])


def test_unreachable_cluster_exits_2(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:9'}\n"
        "users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n"
        "current-context: x\n")
    res = run("--kubeconfig", str(kubeconfig), "--timeout", "1")
    assert res.exit_code == 2 and "cannot reach" in res.output


def _on_a_terminal(env_extra: dict[str, str]) -> str:
    """Run the real CLI with stdout on a pseudo-terminal and return what it printed."""
    import os
    import pty
    import subprocess
    import sys

    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"} | env_extra
    proc = subprocess.Popen([sys.executable, "-m", "bridge", "migrate-report", "--snapshot", str(EXAMPLE)],
                            stdout=follower, stderr=subprocess.DEVNULL, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO once the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=60)
    os.close(leader)
    return b"".join(chunks).decode()


def test_colour_on_a_terminal_unless_no_color() -> None:
    assert "\x1b[31mblocked" in _on_a_terminal({})
    assert "\x1b[" not in _on_a_terminal({"NO_COLOR": "1"})


def test_colour_can_be_forced_when_piped() -> None:
    assert "\x1b[31m" in run("--snapshot", str(EXAMPLE), "--color").output
