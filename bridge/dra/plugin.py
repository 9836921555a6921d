"""The DRA kubelet-plugin facade: the DRA service socket and the registration socket, started and stopped together.

Layout (the Go helper's, k8s.io/dynamic-resource-allocation kubeletplugin/draplugin.go):
* registration socket `<kubelet-root>/plugins_registry/<driver>-reg.sock`, DRA socket
  `<kubelet-root>/plugins/<driver>/dra.sock`;
* with a pod UID (rolling update: two daemon instances at once, the kubelet may use either), the names become
  `<driver>-<podUID>-reg.sock` and `dra-<podUID>.sock`, so the new instance never deletes the old one's sockets.

Order matters: the DRA server listens before the registration socket appears (the kubelet dials the endpoint as
soon as it has registered us), and on stop the registration socket goes first, then the DRA socket. We delete
only our own socket files (stale ones at start, ours at stop, and then only while the file is still the socket we
created): a socket left behind keeps a dead driver registered or sends the kubelet into a 30-minute reconnect
backoff (kubernetes#128696, #132660). The registration server stays up for the whole life of the process.

Our sockets heal: a supervisor thread checks both every `poll_interval_s` (0.1 s) against the identity (inode,
device, ctime) each had when we created it. A DRA socket that disappeared or was replaced is served again (old
server stopped first: gRPC unlinks the path of a server it stops) and the registration socket is then re-created
too, so the kubelet's plugin watcher sees a new socket and registers the plugin again (GetInfo, a fresh client
and health stream). A registration socket that disappeared is re-created; the kubelet deregistered the plugin
when it went (pkg/kubelet/pluginmanager: a Remove event) and registers it again on the Create. Each re-creation
is logged at WARNING and counted (`recreated`); a failure is retried on the next poll.

Both servers are `bridge.grpcserver.GrpcServer`s: health streams take `max_streams` workers of their own
(refused beyond that), and `stop()` is bounded: `grace` for in-flight calls, then cancelled, and a worker still
stuck after that is abandoned instead of holding SIGTERM up.
"""

from __future__ import annotations

import logging
import threading
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
from bridge.unixsock import (
    SocketIdentity,
    SocketPathError,
    check_socket_path,
    remove_own_socket,
    remove_stale_socket,
    socket_identity,
    url_dial_problem,
)

log = logging.getLogger(__name__)

DEFAULT_KUBELET_ROOT = "/var/lib/kubelet"
# Both sockets: the kubelet (root) dials them. Never left at the umask's mode: under umask 0 a world-writable
# registration socket would let anyone on the node tell us the kubelet unregistered the plugin.
SOCKET_MODE = 0o660


def check_plain_endpoint(endpoint: str) -> None:
    """The DRA socket path we advertise must be what the kubelet dials. The kubelet dials `"unix:" + endpoint`, which
    gRPC reads as a URL: a path starting with `//` names a host, `?` and `#` end the path, `%xx` is decoded. So such
    a path was never dialled as written, and from 1.38 the kubelet refuses it at registration ("must be a plain
    path", or "must be an absolute path": kubernetes pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go
    `validateEndpoint`, v1.38.0-beta.0), leaving the node without DRA. Refused here, at start-up, naming the path."""
    if not endpoint.startswith("/"):
        raise SocketPathError(f"DRA socket path {endpoint!r} must be absolute (check --kubelet-root)")
    what = url_dial_problem(endpoint)
    if what is not None:
        raise SocketPathError(f"DRA socket path {endpoint!r} {what}: the kubelet dials it as a unix: URL, which "
                              f"would name another path, and kubelets from 1.38 refuse it; check --kubelet-root")


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
    poll_interval_s: float = 0.1  # how often the supervisor checks that our sockets are still there
    # A server replaced to re-create its socket: in-flight calls get this long before they are cancelled.
    recreate_grace_s: float = 0.2

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
        check_plain_endpoint(str(self.dra_socket))
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
        self._dra_id: SocketIdentity | None = None
        self._reg_id: SocketIdentity | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self.recreated = 0  # sockets re-created after they disappeared

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
        self._stopping.clear()
        with self._lock:
            self._serve_dra()
            self._serve_registration()
        log.info(
            "DRA plugin serving",
            extra={"driver": cfg.driver, "dra_socket": str(cfg.dra_socket), "registration": str(cfg.registration_socket),
                   "versions": ",".join(self.registration.versions)},
        )
        self._supervisor = threading.Thread(target=self._supervise, name="dra-sockets", daemon=True)
        self._supervisor.start()

    def _serve_dra(self) -> None:
        cfg = self.config
        streams = cfg.max_streams if self.board is not None else 0
        dra = GrpcServer("dra", workers=cfg.max_workers, max_streams=streams)
        servicer.add_to_server(self.core, dra.server)
        if self.board is not None:
            health_mod.add_to_server(
                self.board, dra.server, resend_interval=cfg.health_resend_interval,
                timeout_seconds=cfg.health_timeout_seconds, max_streams=streams,
            )
        self._dra_id = dra.serve_unix(str(cfg.dra_socket), SOCKET_MODE)
        self._dra_server = dra

    def _serve_registration(self) -> None:
        reg = GrpcServer("dra-reg", workers=4)
        registration.add_to_server(self.registration, reg.server)
        self._reg_id = reg.serve_unix(str(self.config.registration_socket), SOCKET_MODE)
        self._reg_server = reg

    # -- healing ------------------------------------------------------------------------------------------------

    def _supervise(self) -> None:
        while not self._stopping.wait(self.config.poll_interval_s):
            try:
                self.heal()
            except Exception:  # noqa: BLE001 - one failed attempt must not end healing for the life of the daemon
                log.exception("cannot re-create a DRA socket; retrying", extra={"driver": self.config.driver})

    def heal(self) -> list[str]:
        """Re-create whichever of our sockets disappeared or was replaced (see the module docstring); return the
        paths re-created. Called by the supervisor; safe to call from anywhere."""
        cfg = self.config
        done: list[str] = []
        with self._lock:
            if self._stopping.is_set() or self._reg_server is None:
                return done
            dra_ok = socket_identity(cfg.dra_socket) == self._dra_id
            reg_ok = socket_identity(cfg.registration_socket) == self._reg_id
            if not dra_ok:
                log.warning("our DRA socket disappeared or was replaced: serving it again and re-registering",
                            extra={"driver": cfg.driver, "socket": str(cfg.dra_socket)})
                if self._dra_server is not None:
                    self._dra_server.stop(cfg.recreate_grace_s)  # before binding again: gRPC unlinks its path
                    self._dra_server = None
                self._serve_dra()
                done.append(str(cfg.dra_socket))
                # A new registration socket makes the kubelet register us again (fresh client, health stream).
                if reg_ok:
                    remove_own_socket(cfg.registration_socket, self._reg_id)
                reg_ok = False
            if not reg_ok:
                if str(cfg.dra_socket) not in done:
                    log.warning("our registration socket disappeared or was replaced: serving it again so the kubelet "
                                "registers the plugin again",
                                extra={"driver": cfg.driver, "socket": str(cfg.registration_socket)})
                self._reg_server.stop(cfg.recreate_grace_s)
                self._reg_server = None
                self._serve_registration()
                done.append(str(cfg.registration_socket))
            self.recreated += len(done)
        return done

    def stop(self, grace: float = 2.0) -> None:
        """Stop serving and remove our own sockets (SIGTERM path), in at most about `grace` + 4 s per server
        whatever the handlers do. Safe to call twice."""
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join()
            self._supervisor = None
        if self.board is not None:
            self.board.close()  # ends health streams so the server can stop within the grace period
        with self._lock:
            for server, sock, ident in ((self._reg_server, self.config.registration_socket, self._reg_id),
                                        (self._dra_server, self.config.dra_socket, self._dra_id)):
                present = socket_identity(sock)
                if server is not None:
                    server.stop(grace)  # gRPC unlinks the path itself (whoever's socket is there: see unixsock)
                if present is not None and present == ident:
                    remove_own_socket(sock, ident)
            self._reg_server = self._dra_server = None
        log.info("DRA plugin stopped", extra={"driver": self.config.driver})
