"""The real `bridge webhook` in a sandbox cluster: a child process serving HTTPS on loopback with a throwaway
certificate, registered in the cluster's API server (the emulator, or kube-apiserver on the real backend) by a
MutatingWebhookConfiguration whose `caBundle` is that certificate, with the entry
`examples/webhook/mutatingwebhookconfiguration.yaml` recommends (`bridge.webhook.registration.webhook_entry`:
opt-in `namespaceSelector` on `dra-bridge.io/mode`, `matchConditions`, fail open, 5 s, reinvocation, no side
effects on dry run) and a `url` instead of a Service (the emulator calls URLs only; kube-apiserver, without a
kube-proxy here, reaches the loopback URL directly)."""

from __future__ import annotations

import http.client
import socket
import ssl
import sys
import time
from pathlib import Path

from bridge.kube.api import MUTATING_WEBHOOKS, NAMESPACES, KubeAPI, Obj
from bridge.kube.errors import AlreadyExists
from bridge.sandbox.apiserver.tls import write_self_signed
from bridge.sandbox.cluster.processes import ChildProcess
from bridge.webhook.selfsigned import registration

WEBHOOK_NAMESPACE = "dra-bridge"
CONFIG_NAME = "dra-bridge"


class StartError(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def configuration(url: str, ca_pem: bytes) -> Obj:
    """The registration `bridge webhook --self-signed` writes (one builder for both; see bridge/webhook/selfsigned.py)."""
    return registration(url, ca_pem, WEBHOOK_NAMESPACE)


class SandboxWebhook:
    def __init__(self, work_dir: Path, kubeconfig: Path, *, extra_args: tuple[str, ...] = ()) -> None:
        self.dir = work_dir / "webhook"
        self.kubeconfig = kubeconfig
        self.extra_args = extra_args
        self.port = 0
        self.process: ChildProcess | None = None
        self.ca_pem = b""

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/mutate"

    def start(self, api: KubeAPI, timeout: float = 60.0) -> SandboxWebhook:
        self.dir.mkdir(parents=True, exist_ok=True)
        cert, key = write_self_signed(self.dir, "127.0.0.1")
        self.ca_pem = cert.read_bytes()
        self.port = free_port()
        try:  # first: the webhook's serve check dry-runs a pod in its own namespace as soon as it starts
            api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": WEBHOOK_NAMESPACE}})
        except AlreadyExists:
            pass
        self.process = ChildProcess("webhook", [
            sys.executable, "-m", "bridge", "webhook", "--port", str(self.port), "--bind-address", "127.0.0.1",
            "--tls-cert-file", str(cert), "--tls-key-file", str(key), "--kubeconfig", str(self.kubeconfig),
            "--namespace", WEBHOOK_NAMESPACE, "--log-format", "json", *self.extra_args,
        ], self.dir / "webhook.log").start()
        self._wait_healthy(timeout)
        api.create(MUTATING_WEBHOOKS, configuration(self.url, self.ca_pem))
        return self

    def _wait_healthy(self, timeout: float) -> None:
        assert self.process is not None
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if not self.process.alive():
                raise StartError(f"bridge webhook exited ({self.process.proc and self.process.proc.returncode}):\n"
                                 f"{self.process.log_tail()}")
            try:
                conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=2)
                conn.request("GET", "/readyz")  # ready: caches synced and the API server checked
                if conn.getresponse().status == 200:
                    return
            except (OSError, ssl.SSLError, http.client.HTTPException) as err:
                last = str(err)
            time.sleep(0.1)
        raise StartError(f"bridge webhook was not ready (/readyz) within {timeout:.0f}s ({last}):\n"
                         f"{self.process.log_tail()}")

    def stop(self, grace: float = 10.0) -> None:
        if self.process is not None:
            self.process.stop(grace)

    def restart(self, timeout: float = 60.0) -> None:
        """Run the webhook again (after `stop()`, or while it runs) on the same port with the same certificate, so
        the registration stays valid: a webhook that went away and came back, as a Deployment's pod restarts."""
        assert self.process is not None, "start() the webhook first"
        self.process.stop()
        self.process.start()
        self._wait_healthy(timeout)
