"""One lifecycle for every real component (etcd, kube-apiserver, the controller manager, the scheduler, kubelets,
containerd), as controller-runtime's envtest does it (`pkg/internal/testing/process/process.go`): start the binary
with its arguments, poll a readiness probe until it answers or the deadline passes (failing with the reason and the
log's tail), stop with SIGTERM and then SIGKILL after a grace period.

Processes run under the sandbox's orphan guard (`bridge.sandbox.cluster.processes.ChildProcess`): a sandbox killed
with SIGKILL leaves none of them behind.
"""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bridge.sandbox.cluster.processes import ChildProcess

log = logging.getLogger(__name__)


class StartError(RuntimeError):
    """A component did not come up; the message names it, the last probe answer and its log's tail."""


# A probe returns "" when ready, else what it saw (for the error message).
Probe = Callable[[], str]


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now. Ask on the address the program will listen on: Linux hands out a port for
    127.0.0.1 that another process holds on the machine's own address. Between this call and the program's bind
    another one (a parallel test worker's kubelet) may take it: `lost_port_race` tells that failure apart."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


PORT_TRIES = 3  # a component that lost its port between `free_port` and its bind is started again on fresh ports


def lost_port_race(err: StartError) -> bool:
    """Whether a component exited because a port picked for it was taken meanwhile (Go's net package says
    "bind: address already in use", strerror(EADDRINUSE) "Address already in use")."""
    return "address already in use" in str(err).lower()


def start_on_fresh_ports(make: Callable[[], Component], start: Callable[[Component], object],
                         tries: int = PORT_TRIES) -> Component:
    """`start(make())`, where `make` picks the component's ports; when it lost a port to another process between
    the pick and its bind (`lost_port_race`), made and started again on fresh ones: `tries` starts in all."""
    for attempt in range(1, tries + 1):
        component = make()
        try:
            start(component)
            return component
        except StartError as err:
            if attempt == tries or not lost_port_race(err):
                raise
            _starting_again(component)
    raise AssertionError("unreachable: the last try returns or raises")


def _starting_again(component: Component) -> None:
    log.warning("%s lost a port to another process; starting it again on fresh ports", component.name)


def start_together(makes: Sequence[Callable[[], Component]], keep: Callable[[Component], object],
                   left: Callable[[], float]) -> list[Component]:
    """Start one component from each `make` at once (none needs another to become ready), then wait for each in
    turn; one that lost a port (`lost_port_race`) is made and started again on fresh ones (`start_on_fresh_ports`,
    with the tries it has left: `PORT_TRIES` starts in all, as for a component started alone). `keep` gets every
    component before it starts, so its owner stops it whatever happens; `left()` is the time left to wait. The
    components that serve, in the order of `makes`."""
    first = [make() for make in makes]
    for c in first:
        keep(c)
        c.child.start()
    out = []
    for make, c in zip(makes, first):
        try:
            c.wait_ready(left())
        except StartError as err:
            if PORT_TRIES == 1 or not lost_port_race(err):
                raise
            _starting_again(c)
            c = start_on_fresh_ports(make, lambda again: (keep(again), again.start(left())), tries=PORT_TRIES - 1)
        out.append(c)
    return out


def https_probe(port: int, path: str, *, ca: Path | None = None, cert: tuple[Path, Path] | None = None,
                host: str = "127.0.0.1") -> Probe:
    """GET https://host:port/path: ready on 200. Without `ca` the server certificate is not verified (the controller
    manager's and scheduler's self-signed serving certificates)."""
    if ca is None:
        ctx = ssl._create_unverified_context()  # noqa: S323 - a health probe on loopback, self-signed on purpose
    else:
        ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))

    def probe() -> str:
        try:
            conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=2)
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read(300).decode(errors="replace")
            conn.close()
            return "" if resp.status == 200 else f"{path} answered {resp.status}: {body.strip()}"
        except (OSError, ssl.SSLError, http.client.HTTPException) as err:
            return f"{path}: {err}"

    return probe


def http_probe(port: int, path: str, expect: str = "", host: str = "127.0.0.1") -> Probe:
    def probe() -> str:
        try:
            conn = http.client.HTTPConnection(host, port, timeout=2)
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read(300).decode(errors="replace")
            conn.close()
            if resp.status == 200 and expect in body:
                return ""
            return f"{path} answered {resp.status}: {body.strip()}"
        except (OSError, http.client.HTTPException) as err:
            return f"{path}: {err}"

    return probe


class Component:
    """A real program run as a child of the sandbox: `start()` returns once `probe` says ready."""

    def __init__(self, name: str, argv: list[str], log_path: Path, probe: Probe, *,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.probe = probe
        self.child = ChildProcess(name, argv, log_path, env=env)
        self.started_s = 0.0  # seconds from start to ready

    @property
    def log_path(self) -> Path:
        return self.child.log_path

    @property
    def pid(self) -> int | None:
        return self.child.pid

    def alive(self) -> bool:
        return self.child.alive()

    def start(self, timeout: float) -> Component:
        t0 = time.monotonic()
        self.child.start()
        self.wait_ready(timeout, since=t0)
        self.started_s = time.monotonic() - t0
        return self

    def wait_ready(self, timeout: float, *, since: float | None = None) -> None:
        deadline = (since or time.monotonic()) + timeout
        last = "not probed yet"
        while time.monotonic() < deadline:
            if not self.child.alive():
                code = self.child.proc.returncode if self.child.proc is not None else None
                raise StartError(f"{self.name} exited with status {code} before it was ready:\n"
                                 f"{self.child.log_tail(30)}")
            last = self.probe()
            if not last:
                return
            time.sleep(0.1)
        raise StartError(f"{self.name} was not ready within {timeout:.0f}s (last probe: {last}):\n"
                         f"{self.child.log_tail(30)}")

    def stop(self, grace: float = 10.0) -> int | None:
        return self.child.stop(grace)
