"""`bridge webhook` as the process a Deployment runs: it serves against the API emulator, and stops cleanly on
SIGTERM/SIGINT even when the kernel hands the signal to one of its worker threads (an untimed wait in the main thread
would keep CPython from ever running the handler: the pod would be SIGKILLed after its grace period)."""

from __future__ import annotations

import ctypes
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from bridge.sandbox.apiserver import ApiServer
from tests.webhook.pki import Pki

ROOT = Path(__file__).resolve().parents[2]
SYS_TGKILL = 234  # x86_64; the test is skipped elsewhere


def tgkill(pid: int, tid: int, sig: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(SYS_TGKILL, pid, tid, sig) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {tid}, {sig}) failed")


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine != "x86_64",
                    reason="tgkill syscall number is for Linux x86_64")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_webhook_process_serves_and_stops_on_a_signal_sent_to_a_worker_thread(tmp_path: Path, sig: int) -> None:
    pki = Pki(tmp_path)
    pki.issue()
    srv = ApiServer(version="1.35.0").start()
    try:
        kubeconfig = srv.write_kubeconfig(tmp_path / "kubeconfig")
        with socket_port() as port:
            pass
        proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", "webhook", "--port", str(port), "--bind-address", "127.0.0.1",
             "--tls-cert-file", str(pki.cert_file), "--tls-key-file", str(pki.key_file),
             "--kubeconfig", str(kubeconfig), "--namespace", "dra-bridge"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            ctx = ssl.create_default_context(cafile=str(pki.ca_file))
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                assert proc.poll() is None, proc.communicate()[0]
                assert time.monotonic() < deadline, "webhook never became ready"
                time.sleep(0.1)
            workers = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid]
            assert workers  # informer, event recorder, HTTPS loop
            tgkill(proc.pid, workers[-1], sig)
            out, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, out
        assert "webhook stopping" in out
    finally:
        srv.stop()


class socket_port:
    """A free TCP port on 127.0.0.1 (bound and released)."""

    def __enter__(self) -> int:
        import socket

        self._s = socket.socket()
        self._s.bind(("127.0.0.1", 0))
        return int(self._s.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self._s.close()
