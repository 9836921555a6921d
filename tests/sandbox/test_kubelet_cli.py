"""`bridge sandbox kubelet`: the kubelet simulator as a process (device plugins + PodResources; DRA with a kubeconfig)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from bridge.kube import NODES, connect
from bridge.sandbox.apiserver import ApiServer

ROOT = Path(__file__).resolve().parents[2]


def test_the_kubelet_simulator_serves_its_sockets_with_the_dra_side_and_removes_them_on_sigterm(short_tmp: Path) -> None:
    with ApiServer() as srv:
        kubeconfig = srv.write_kubeconfig(short_tmp / "kubeconfig")
        api = connect(str(kubeconfig))
        api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}})
        proc = subprocess.Popen([sys.executable, "-m", "bridge", "sandbox", "kubelet", "--root", str(short_tmp / "kl"),
                                 "--node-name", "node-a", "--kubeconfig", str(kubeconfig)],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            sockets = [short_tmp / "kl" / "device-plugins" / "kubelet.sock", short_tmp / "kl" / "pod-resources" / "kubelet.sock"]
            while not all(p.is_socket() for p in sockets) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert all(p.is_socket() for p in sockets)
        finally:
            proc.send_signal(signal.SIGTERM)
            stdout, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr
        assert "DRA side on" in stdout
        assert not any(p.exists() for p in sockets)


def test_a_missing_kubeconfig_is_a_usage_error(short_tmp: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "bridge", "sandbox", "kubelet", "--root", str(short_tmp),
                          "--node-name", "n", "--kubeconfig", str(short_tmp / "nope")],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--kubeconfig" in out.stderr
