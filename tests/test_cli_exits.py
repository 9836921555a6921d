"""Every listening command answers a port in use with the port and how to choose another (never a traceback), and
configuration or connection errors exit 2 in every command (bridge/cli/exits.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from bridge.sandbox.apiserver import ApiServer
from tests.webhook.pki import Pki

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def bridge(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "NODE_NAME")}
    return subprocess.run([sys.executable, "-m", "bridge", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=90, env={**base, **(env or {})})


def test_sandbox_apiserver_port_in_use(busy_port: int, tmp_path: Path) -> None:
    r = bridge("sandbox", "apiserver", "--port", str(busy_port), "--kubeconfig-out", str(tmp_path / "k"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"127.0.0.1:{busy_port} is already in use" in r.stderr
    assert "--port (env BRIDGE_SANDBOX_APISERVER_PORT)" in r.stderr and "--port 0 picks a free port" in r.stderr


def test_node_http_port_in_use(busy_port: int, short_tmp: Path) -> None:
    r = bridge("node", "--node-name", "n1", "--devices", "simulated:1xL4", "--kubelet-root", str(short_tmp / "k"),
    "--device-plugin-dir", str(short_tmp / "k" / "device-plugins"),
               "--state-dir", str(short_tmp / "s"), "--cdi-root", str(short_tmp / "c"), "--dra", "off",
               "--http-address", f"127.0.0.1:{busy_port}")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert (f"bridge node: health and metrics endpoint: 127.0.0.1:{busy_port} is already in use" in r.stderr
            and "--http-address (env BRIDGE_HTTP_ADDRESS), or turn it off with --http-address off" in r.stderr)


def test_webhook_port_in_use_and_unreachable_api(busy_port: int, tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    pki.issue()
    with ApiServer() as srv:
        kubeconfig = srv.write_kubeconfig(tmp_path / "kubeconfig")
        r = bridge("webhook", "--tls-cert-file", str(pki.cert_file), "--tls-key-file", str(pki.key_file),
                   "--kubeconfig", str(kubeconfig), "--bind-address", "127.0.0.1", "--port", str(busy_port))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"webhook HTTPS port: 127.0.0.1:{busy_port} is already in use" in r.stderr
    assert "--port (env BRIDGE_WEBHOOK_PORT)" in r.stderr
    # the API server is gone now: a connection error, bounded by --api-timeout
    r = bridge("webhook", "--tls-cert-file", str(pki.cert_file), "--tls-key-file", str(pki.key_file),
               "--kubeconfig", str(kubeconfig), "--api-timeout", "1", "--port", "1")
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.startswith("bridge webhook:")


def test_unreachable_api_is_exit_2_for_the_one_shot_commands(unreachable_kubeconfig: Path) -> None:
    kubeconfig = unreachable_kubeconfig
    for args in (["namespace", "status", "--timeout", "1"], ["migrate-report", "--timeout", "1"]):
        r = bridge(*args, "--kubeconfig", str(kubeconfig))
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr


def test_controller_http_port_in_use(busy_port: int, tmp_path: Path) -> None:
    with ApiServer() as srv:
        kubeconfig = srv.write_kubeconfig(tmp_path / "kubeconfig")
        r = bridge("controller", "--kubeconfig", str(kubeconfig), "--no-leader-elect",
                   "--http-address", f"127.0.0.1:{busy_port}")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"health and metrics endpoint: 127.0.0.1:{busy_port} is already in use" in r.stderr
    assert "--http-address (env BRIDGE_CONTROLLER_HTTP_ADDRESS), or turn it off with --http-address off" in r.stderr
