"""The DRA kubelet-plugin facade: the DRA service socket and the registration socket, started and stopped together.

Layout (the Go helper's, k8s.io/dynamic-resource-allocation kubeletplugin/draplugin.go):
* registration socket `<kubelet-root>/plugins_registry/<driver>-reg.sock`, DRA socket
  `<kubelet-root>/plugins/<driver>/dra.sock`;
* with a pod UID (rolling update: two daemon instances at once, the kubelet may use either), the names become
  `<driver>-<podUID>-reg.sock` and `dra-<podUID>.sock`, so the new instance never deletes the old one's sockets.

Order matters: the DRA server listens before the registration socket appears (the kubelet dials the endpoint as
soon as it has registered us), and on stop the registration socket goes first, then the DRA socket. We delete
only our own socket files (stale ones at start, ours at stop): a socket left behind keeps a dead driver
registered or sends the kubelet into a 30-minute reconnect backoff (kubernetes#128696, #132660).
The registration server stays up for the whole life of the process.

Both servers are `bridge.grpcserver.GrpcServer`s: health streams take `max_streams` workers of their own
(refused beyond that), and `stop()` is bounded: `grace` for in-flight calls, then cancelled, and a worker still
stuck after that is abandoned instead of holding SIGTERM up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bridge.dra import health as health_mod
from bridge.dra import registration, servicer
from bridge.dra.health import HealthBoard
from bridge.dra.registration import RegistrationServicer, RegistrationStatus
from bridge.dra.servicer import PrepareCore
from bridge.dra.slices import DEFAULT_DRIVER, SliceError, validate_driver_name
from bridge.grpcserver import DEFAULT_MAX_STREAMS, DEFAULT_WORKERS, GrpcServer
from bridge.unixsock import SocketPathError, check_socket_path, remove_stale_socket

log = logging.getLogger(__name__)

DEFAULT_KUBELET_ROOT = "/var/lib/kubelet"
# Both sockets: the kubelet (root) dials them. Never left at the umask's mode: under umask 0 a world-writable
# registration socket would let anyone on the node tell us the kubelet unregistered the plugin.
SOCKET_MODE = 0o660


@dataclass(frozen=True)
class PluginConfig:
    driver: str = DEFAULT_DRIVER
    kubelet_root: str = DEFAULT_KUBELET_ROOT
    pod_uid: str | None = None  # set from the downward API for rolling updates
    health: bool = True
    # What GetInfo advertises, newest first. Narrowing it is for compatibility tests and odd kubelets only.
    dra_services: tuple[str, ...] = registration.DRA_SERVICES
    health_resend_interval: float = health_mod.DEFAULT_RESEND_INTERVAL_S
    health_timeout_seconds: int = health_mod.DEFAULT_HEALTH_TIMEOUT_S
    max_workers: int = DEFAULT_WORKERS  # unary calls (Prepare/Unprepare); health streams get their own
    max_streams: int = DEFAULT_MAX_STREAMS  # concurrent health streams (a kubelet opens one per plugin)

    @property
    def registry_dir(self) -> Path:
        return Path(self.kubelet_root) / "plugins_registry"

    @property
    def plugin_dir(self) -> Path:
        return Path(self.kubelet_root) / "plugins" / self.driver

    @property
    def registration_socket(self) -> Path:
        name = f"{self.driver}-{self.pod_uid}-reg.sock" if self.pod_uid else f"{self.driver}-reg.sock"
        return self.registry_dir / name

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / (f"dra-{self.pod_uid}.sock" if self.pod_uid else "dra.sock")

    def check(self) -> None:
        """Fail early, naming the path, when a socket path or the driver name is unusable."""
        try:
            validate_driver_name(self.driver)
        except SliceError as err:
            raise SocketPathError(str(err)) from err
        check_socket_path(self.registration_socket)
        check_socket_path(self.dra_socket)
        if self.pod_uid is not None and ("/" in self.pod_uid or not self.pod_uid):
            raise SocketPathError(f"pod UID {self.pod_uid!r} cannot be part of a socket name")


class DraPlugin:
    """Serves `DRAPlugin` v1 + v1beta1 (and `DRAResourceHealth` v1alpha1 + v1 when a board is given) on the DRA
    socket, and `pluginregistration.Registration` on the registration socket."""

    def __init__(self, config: PluginConfig, core: PrepareCore, board: HealthBoard | None = None, *,
                 on_status: Callable[[RegistrationStatus], None] | None = None) -> None:
        config.check()
        self.config = config
        self.core = core
        self.board = board if config.health else None
        self.registration = RegistrationServicer(
            config.driver,
            str(config.dra_socket),
            registration.supported_versions(health=self.board is not None, dra_services=config.dra_services),
            on_status=on_status,
        )
        self._dra_server: GrpcServer | None = None
        self._reg_server: GrpcServer | None = None

    @property
    def running(self) -> bool:
        return self._reg_server is not None

    def start(self) -> None:
        cfg = self.config
        cfg.plugin_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        cfg.registry_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
        for sock in (cfg.dra_socket, cfg.registration_socket):
            if remove_stale_socket(sock):
                log.info("removed a stale socket of ours", extra={"socket": str(sock)})

        streams = cfg.max_streams if self.board is not None else 0
        dra = GrpcServer("dra", workers=cfg.max_workers, max_streams=streams)
        servicer.add_to_server(self.core, dra.server)
        if self.board is not None:
            health_mod.add_to_server(
                self.board, dra.server, resend_interval=cfg.health_resend_interval,
                timeout_seconds=cfg.health_timeout_seconds, max_streams=streams,
            )
        dra.serve_unix(str(cfg.dra_socket), SOCKET_MODE)
        self._dra_server = dra

        reg = GrpcServer("dra-reg", workers=4)
        registration.add_to_server(self.registration, reg.server)
        reg.serve_unix(str(cfg.registration_socket), SOCKET_MODE)
        self._reg_server = reg
        log.info(
            "DRA plugin serving",
            extra={"driver": cfg.driver, "dra_socket": str(cfg.dra_socket), "registration": str(cfg.registration_socket),
                   "versions": ",".join(self.registration.versions)},
        )

    def stop(self, grace: float = 2.0) -> None:
        """Stop serving and remove our own sockets (SIGTERM path), in at most about `grace` + 4 s per server
        whatever the handlers do. Safe to call twice."""
        if self.board is not None:
            self.board.close()  # ends health streams so the server can stop within the grace period
        for server, sock in ((self._reg_server, self.config.registration_socket), (self._dra_server, self.config.dra_socket)):
            if server is not None:
                server.stop(grace)
            try:
                remove_stale_socket(sock)
            except SocketPathError:
                log.warning("not removing a non-socket file at our socket path", extra={"path": str(sock)})
        self._reg_server = self._dra_server = None
        log.info("DRA plugin stopped", extra={"driver": self.config.driver})
