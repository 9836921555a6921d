"""The real `bridge controller` in a sandbox cluster: one child process on loopback, watching the emulator.

It runs as the chart runs it, with three differences a one-machine cluster calls for:
* one replica, so `--no-leader-elect` (the chart's two replicas elect a leader through a Lease; a single process
  that always leads decides exactly as that leader does);
* its `/healthz`, `/readyz` and `/metrics` on a free loopback port (`url`), and the cluster waits for `/readyz`
  (the controller's informers have listed Nodes, Pods and claims) before it reports itself started, so a test or
  the demo never creates pods that the controller has not seen the nodes for;
* `--interval` from the cluster spec (`controller_interval`; the controller's own default is 5 s), so the short
  timings of tests and `bridge demo --fast` apply to its decisions too.

Anything else (`--dry-run`, `--cooldown`, `--max-moves-per-minute`, `--min-legacy-share`, ...) is passed through
`ClusterSpec.controller_args` (`bridge sandbox cluster --controller-args "..."`), as `bridge controller --help`
lists it.
"""

from __future__ import annotations

import http.client
import sys
import time
from pathlib import Path

from bridge.sandbox.cluster.processes import ChildProcess
from bridge.sandbox.cluster.webhook import free_port


class ControllerStartError(RuntimeError):
    """The controller exited or never became ready; the message carries its log's tail."""


class SandboxController:
    def __init__(self, work_dir: Path, kubeconfig: Path, *, interval: float,
                 extra_args: tuple[str, ...] = ()) -> None:
        self.dir = work_dir / "controller"
        self.kubeconfig = kubeconfig
        self.interval = interval
        self.extra_args = extra_args
        self.port = 0
        self.process: ChildProcess | None = None

    @property
    def url(self) -> str:
        """Base URL of its health and metrics endpoint (`/healthz`, `/readyz`, `/metrics`)."""
        return f"http://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        # The resync must not be shorter than the interval (the controller refuses that); 30 s is its default.
        resync = max(30.0, self.interval)
        return [sys.executable, "-m", "bridge", "controller", "--kubeconfig", str(self.kubeconfig),
                "--no-leader-elect", "--http-address", f"127.0.0.1:{self.port}", "--interval", f"{self.interval:g}",
                "--resync", f"{resync:g}", "--log-format", "json", *self.extra_args]

    def start(self, timeout: float = 60.0) -> SandboxController:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process = ChildProcess("bridge controller", self.argv(), self.dir / "controller.log").start()
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if not self.process.alive():
                raise ControllerStartError(
                    f"bridge controller exited with status {self.process.proc and self.process.proc.returncode}:\n"
                    f"{self.process.log_tail()}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/readyz")
                response = conn.getresponse()
                body = response.read().decode(errors="replace")
                conn.close()
                if response.status == 200:
                    return
                last = body.strip().replace("\n", "; ")
            except (OSError, http.client.HTTPException) as err:
                last = str(err)
            time.sleep(0.1)
        raise ControllerStartError(f"bridge controller was not ready within {timeout:.0f}s ({last}):\n"
                                   f"{self.process.log_tail()}")

    def stop(self, grace: float = 10.0) -> int | None:
        return self.process.stop(grace) if self.process is not None else None
