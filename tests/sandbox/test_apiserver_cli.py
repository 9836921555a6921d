"""`bridge sandbox apiserver` run as a real process, used through the kubeconfig it writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import kubernetes
from click.testing import CliRunner

from bridge.cli import main

from .conftest import wait_for


def test_apiserver_command_serves_loaded_objects_until_interrupted(tmp_path: Path):
    (tmp_path / "objs").mkdir()
    (tmp_path / "objs" / "node.yaml").write_text("apiVersion: v1\nkind: Node\nmetadata: {name: gpu-1}\n")
    kubeconfig = tmp_path / "kc.yaml"
    env = dict(os.environ, BRIDGE_SANDBOX_APISERVER_RESOURCE_VERSIONS="v1beta1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge", "sandbox", "apiserver", "--kubeconfig-out", str(kubeconfig),
         "--load", str(tmp_path / "objs"), "--version", "1.33.1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_for(kubeconfig.exists, timeout=30)
        client = kubernetes.config.new_client_from_config(str(kubeconfig))
        assert kubernetes.client.CoreV1Api(client).read_node("gpu-1").metadata.name == "gpu-1"
        assert kubernetes.client.VersionApi(client).get_code().git_version == "v1.33.1"
        groups = {g.name: g for g in kubernetes.client.ApisApi(client).get_api_versions().groups}
        assert [v.version for v in groups["resource.k8s.io"].versions] == ["v1beta1"]
        client.close()
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "API emulator serving at http://127.0.0.1:" in out


def test_bad_options_and_invalid_objects_are_clear_errors(tmp_path: Path):
    runner = CliRunner()
    result = runner.invoke(main, ["sandbox", "apiserver", "--kubeconfig-out", str(tmp_path / "k"), "--resource-versions", "v2"])
    assert result.exit_code == 2 and "expected a comma-separated subset" in result.output
    result = runner.invoke(main, ["sandbox", "apiserver", "--kubeconfig-out", str(tmp_path / "k"), "--version", "1.34"])
    assert result.exit_code == 2 and "MAJOR.MINOR.PATCH" in result.output
    (tmp_path / "bad.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Bad_Name}\n")
    result = runner.invoke(main, ["sandbox", "apiserver", "--kubeconfig-out", str(tmp_path / "k"), "--load", str(tmp_path / "bad.yaml")])
    assert result.exit_code == 2 and "ConfigMap 'Bad_Name'" in result.output
    assert not (tmp_path / "k").exists()
