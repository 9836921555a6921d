"""Composition root of `bridge controller`: API connection, leader election, informers, the loop, /metrics.

Shutdown order (SIGTERM/SIGINT): the decision loop stops first (a write in progress finishes), then the lease is
released (so the standby replica takes over at its next retry instead of after a whole lease duration), then the
informers and the HTTP endpoint stop. client-go's ReleaseOnCancel asks exactly this of its callers: everything
the lease guards must be done before the release.

Losing the lease while running (the API server unreachable for longer than the renew deadline, or another replica
took over): the loop stops writing at once (`LeaderElector.is_leader`), the replica goes back to being a candidate
with its informers warm, and leads again when the lease is free. (client-go components usually exit instead; the
outcome is the same, without the relist.)
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass, field

from bridge.controller.loop import Controller, ControllerOptions
from bridge.controller.metrics import ControllerMetrics
from bridge.controller.policy import describe
from bridge.kube.api import KubeAPI, ResourceAPI
from bridge.kube.errors import NotFound
from bridge.kube.leaderelection import LeaderElectionConfig, LeaderElector

log = logging.getLogger(__name__)

SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
DEFAULT_LEASE = "dra-bridge-controller"


def default_identity() -> str:
    """client-go's convention: hostname (the pod name in a Deployment) + "_" + a random suffix, so a restarted
    replica never mistakes the previous process's lease for its own."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:12]}"


def default_namespace() -> str:
    ns = os.environ.get("POD_NAMESPACE", "").strip()
    if ns:
        return ns
    try:
        with open(SA_NAMESPACE_FILE, encoding="utf-8") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


@dataclass(frozen=True)
class LeaseOptions:
    enabled: bool = True
    namespace: str = ""
    name: str = DEFAULT_LEASE
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


@dataclass(frozen=True)
class AppOptions:
    controller: ControllerOptions = field(default_factory=ControllerOptions)
    lease: LeaseOptions = field(default_factory=LeaseOptions)
    identity: str = ""
    http_address: tuple[str, int] | None = ("127.0.0.1", 8080)


class _AlwaysLeader:
    """`--leader-elect=false`: a single replica that acts without a Lease (development, one-replica installs)."""

    def is_leader(self) -> bool:
        return True


def discover_resource_api(api: KubeAPI) -> ResourceAPI | None:
    try:
        return api.resource_api()
    except NotFound:
        log.warning("the cluster serves no resource.k8s.io version: DRA demand and claims are not read")
        return None


class App:
    """Everything one `bridge controller` process runs; `start()` returns at once, `stop()` shuts down in order."""

    def __init__(self, api: KubeAPI, options: AppOptions, *, lease_api: KubeAPI | None = None) -> None:
        """`lease_api` (default `api`): a client with short timeouts for the Lease, so a slow API server cannot
        keep a renewal waiting past the renew deadline."""
        self.api = api
        self.options = options
        self.identity = options.identity or default_identity()
        self.metrics = ControllerMetrics()
        self.elector: LeaderElector | None = None
        self._loop_stop = threading.Event()
        self._lease_stop = threading.Event()
        self._threads: list[threading.Thread] = []
        lease = options.lease
        if lease.enabled:
            cfg = LeaderElectionConfig(lease.namespace or default_namespace(), lease.name, self.identity,
                                       lease.lease_duration, lease.renew_deadline, lease.retry_period)
            self.elector = LeaderElector(lease_api or api, cfg, on_started_leading=self._on_leading)
            is_leader = self.elector.is_leader
        else:
            is_leader = _AlwaysLeader().is_leader
        self.controller = Controller(api, options.controller, identity=self.identity, metrics=self.metrics,
                                     is_leader=is_leader, resource_api=discover_resource_api(api))
        self.http = None
        if options.http_address is not None:
            from bridge.node.http import HealthServer

            self.http = HealthServer(options.http_address, self.metrics.registry,
                                     liveness={"decision-loop": self.controller.health},
                                     readiness={"informers": self.controller.readiness})

    def _on_leading(self) -> None:
        self.metrics.leader.set(1)
        self.controller.wake()

    def _elect(self) -> None:
        assert self.elector is not None
        while not self._lease_stop.is_set():
            self.elector.run(self._lease_stop)
            self.metrics.leader.set(0)
            self.controller.wake()
            self._lease_stop.wait(self.elector.config.retry_period)

    def start(self) -> App:
        opts = self.options.controller
        log.info("bridge controller %s starting%s; policy: %s", self.identity,
                 " in DRY-RUN mode (records what it would do, changes nothing)" if opts.dry_run else "",
                 describe(opts.policy))
        if self.http is not None:
            self.http.start()
        self.controller.start()
        loop = threading.Thread(target=self.controller.run, args=(self._loop_stop,), name="controller-loop",
                                daemon=True)
        self._threads.append(loop)
        loop.start()
        if self.elector is not None:
            elect = threading.Thread(target=self._elect, name="leader-election", daemon=True)
            self._threads.append(elect)
            elect.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._loop_stop.set()
        self.controller.wake()
        if self._threads:
            self._threads[0].join(timeout)  # the loop: no write may follow the release
        self._lease_stop.set()
        for t in self._threads[1:]:
            t.join(timeout)
        self.controller.stop()
        if self.http is not None:
            self.http.stop()
        log.info("bridge controller %s stopped", self.identity)


__all__ = ["App", "AppOptions", "DEFAULT_LEASE", "LeaseOptions", "default_identity", "default_namespace"]
