"""Device-plugin lifecycle: serve on our socket, register, and do it again whenever the kubelet restarts.

Invariants:
* Our gRPC server is listening on `<kubelet-root>/device-plugins/<socket>` BEFORE we call Register (the kubelet
  dials us from inside its Register handler with a 10 s blocking dial).
* One supervisor thread per plugin polls for kubelet restarts (see `registration` for why polling) and retries
  failed registrations with capped exponential backoff. On a restart it stops the old gRPC server (ending every
  ListAndWatch stream and shutting its worker pool down, bounded: a stuck worker is abandoned, never waited on),
  starts a fresh one on a fresh socket, and re-registers.
  Nothing is created per restart that outlives the restart: no thread or fd leaks across many restarts.
* `stop()` ends streams, stops the server and removes our socket, but only if the file there is still the one we
  created (never another process's socket).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as pb
from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from bridge.deviceplugin.allocate import AllocationConfig
from bridge.deviceplugin.metrics import DevicePluginMetrics
from bridge.deviceplugin.registration import KUBELET_SOCKET, RegistrationError, register
from bridge.deviceplugin.servicer import DevicePluginServicer, options
from bridge.deviceplugin.state import DeviceTable
from bridge.logs import ContextLogger
from bridge.grpcserver import DEFAULT_MAX_STREAMS, DEFAULT_WORKERS, GrpcServer
from bridge.unixsock import (
    SocketIdentity,
    SocketPathError,
    check_socket_path,
    remove_own_socket,
    socket_identity,
    unix_target,
)

log = logging.getLogger("bridge.deviceplugin")

# Only the kubelet (root) dials the device-plugin socket.
SOCKET_MODE = 0o600


def default_socket_name(resource_name: str) -> str:
    """`nvidia.com/gpu` -> `dra-bridge-nvidia.com-gpu.sock`."""
    return "dra-bridge-" + re.sub(r"[^A-Za-z0-9._-]", "-", resource_name) + ".sock"


@dataclass(frozen=True)
class PluginConfig:
    kubelet_root: Path
    resource_name: str = "nvidia.com/gpu"
    socket_name: str | None = None
    poll_interval_s: float = 0.1
    # Longer than the kubelet's own 10 s blocking dial back to us inside its Register handler.
    register_timeout_s: float = 15.0
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 5.0
    workers: int = DEFAULT_WORKERS  # for unary calls; streams get their own on top
    max_streams: int = DEFAULT_MAX_STREAMS  # concurrent ListAndWatch streams (a kubelet opens one per registration)
    # Stop: in-flight calls get this long, then are cancelled; workers still busy after that are abandoned.
    stop_grace_s: float = 0.5

    @property
    def plugin_dir(self) -> Path:
        return self.kubelet_root / "device-plugins"

    @property
    def socket_path(self) -> Path:
        return self.plugin_dir / (self.socket_name or default_socket_name(self.resource_name))

    @property
    def kubelet_socket(self) -> Path:
        return self.plugin_dir / KUBELET_SOCKET


def probe_socket(path: str, timeout: float = 2.0) -> str | None:
    """Dial a device-plugin socket and call GetDevicePluginOptions; return None if it answers, else the problem."""
    if socket_identity(path) is None:
        return f"no socket at {path}"
    channel = grpc.insecure_channel(unix_target(path))
    try:
        pb_grpc.DevicePluginStub(channel).GetDevicePluginOptions(pb.Empty(), timeout=timeout)
    except grpc.RpcError as err:
        details = err.details() if isinstance(err, grpc.Call) else str(err)
        return f"device-plugin socket {path} does not answer: {details}"
    finally:
        channel.close()
    return None


class _Server:
    """One gRPC server generation on our socket, with its own servicer and worker pool (`GrpcServer`: streams capped
    and kept off the unary workers, stop bounded even with a stuck handler)."""

    def __init__(self, path: str, servicer: DevicePluginServicer, workers: int, grace_s: float) -> None:
        self.path = path
        self.servicer = servicer
        self._grace_s = grace_s
        self._grpc = GrpcServer("dp-grpc", workers=workers, max_streams=servicer.streams.limit)
        pb_grpc.add_DevicePluginServicer_to_server(servicer, self._grpc.server)
        try:
            self.identity: SocketIdentity | None = self._grpc.serve_unix(path, SOCKET_MODE)
        except SocketPathError as err:
            raise OSError(str(err)) from err

    def stop(self) -> None:
        self.servicer.stop()
        self._grpc.stop(self._grace_s)
        remove_own_socket(self.path, self.identity)


class DevicePlugin:
    def __init__(
        self, table: DeviceTable, allocation: AllocationConfig, metrics: DevicePluginMetrics, config: PluginConfig
    ) -> None:
        self.table = table
        self.allocation = allocation
        self.metrics = metrics
        self.config = config
        # Validate every socket path up front: a too-long path is a configuration error, reported at start.
        self.socket_path = check_socket_path(config.socket_path)
        self.kubelet_socket = check_socket_path(config.kubelet_socket)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._registered_against: SocketIdentity | None = None
        self._registered = threading.Event()
        self.registrations = 0
        self._last_error: str | None = None
        self._log = ContextLogger(log, {"resource": config.resource_name})

    # -- public -------------------------------------------------------------------------------------------------

    @property
    def registered(self) -> bool:
        return self._registered.is_set()

    def wait_registered(self, timeout: float) -> bool:
        return self._registered.wait(timeout)

    def probe(self, timeout: float = 2.0) -> str | None:
        """Liveness: the supervisor (which re-registers after kubelet restarts) is running, and our socket answers
        GetDevicePluginOptions when dialled like the kubelet dials it. None when both hold."""
        if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
            return "the device-plugin supervisor thread has died: kubelet restarts would go unnoticed"
        return probe_socket(self.socket_path, timeout)

    def readiness(self) -> str | None:
        if self.registered:
            return None
        last = self._last_error
        return f"not registered with the kubelet at {self.kubelet_socket}" + (f"; last attempt: {last}" if last else "")

    def start(self) -> None:
        """Serve on our socket, then start the supervisor, which registers (and re-registers) with the kubelet."""
        self.config.plugin_dir.mkdir(parents=True, exist_ok=True)
        self._start_server()
        self._thread = threading.Thread(target=self._supervise, name="dp-supervisor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._server is not None:
                self._server.stop()
                self._server = None
        self._registered.clear()
        self.metrics.registered.labels(self.config.resource_name).set(0)
        self._log.info("device plugin stopped", extra={"socket": self.socket_path})

    # -- internals ----------------------------------------------------------------------------------------------

    def _start_server(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.stop()
                self._server = None
            servicer = DevicePluginServicer(self.table, self.allocation, self.metrics,
                                            max_streams=self.config.max_streams)
            self._server = _Server(self.socket_path, servicer, self.config.workers, self.config.stop_grace_s)
        self._log.info("serving device plugin", extra={"socket": self.socket_path})

    def _supervise(self) -> None:
        backoff = self.config.backoff_initial_s
        next_attempt = 0.0
        waiting_logged = False
        while not self._stop.is_set():
            try:
                backoff, next_attempt, waiting_logged = self._supervise_once(backoff, next_attempt, waiting_logged)
            except Exception as err:  # never let one bad poll end re-registration for the life of the daemon
                self._last_error = f"{type(err).__name__}: {err}"
                self._log.exception("device-plugin supervisor error; retrying")
                next_attempt = time.monotonic() + backoff
                backoff = min(backoff * 2, self.config.backoff_max_s)
            self._stop.wait(self.config.poll_interval_s)

    def _supervise_once(self, backoff: float, next_attempt: float, waiting_logged: bool) -> tuple[float, float, bool]:
        """One poll: notice a kubelet restart or a lost socket, re-serve, (re-)register when due."""
        kubelet = socket_identity(self.kubelet_socket)
        own_present = socket_identity(self.socket_path) is not None
        registered = self._registered.is_set()
        # Registered against a kubelet.sock that is gone or was replaced: the kubelet restarted.
        stale = registered and kubelet != self._registered_against
        if stale or not own_present:
            if registered:
                why = "kubelet.sock re-created" if kubelet is not None and stale else (
                    "kubelet.sock removed" if stale else "our socket was deleted")
                self._log.info("kubelet restart detected (%s): re-serving and re-registering", why)
                self.metrics.kubelet_restarts.labels(self.config.resource_name).inc()
            else:
                self._log.info("our socket disappeared before registration: re-serving")
            self._set_unregistered()
            try:
                self._start_server()
            except Exception as err:
                self._last_error = f"cannot re-create {self.socket_path}: {err}"
                self._log.exception("cannot re-create the device-plugin socket; retrying")
                self._stop.wait(self.config.backoff_initial_s)
                return backoff, next_attempt, waiting_logged
            backoff, next_attempt = self.config.backoff_initial_s, 0.0
        if not self._registered.is_set():
            if kubelet is None:
                if not waiting_logged:
                    self._log.info("waiting for %s to appear", self.kubelet_socket)
                    waiting_logged = True
            elif time.monotonic() >= next_attempt:
                waiting_logged = False
                if self._try_register(kubelet):
                    backoff = self.config.backoff_initial_s
                else:
                    next_attempt = time.monotonic() + backoff
                    backoff = min(backoff * 2, self.config.backoff_max_s)
        return backoff, next_attempt, waiting_logged

    def _set_unregistered(self) -> None:
        self._registered.clear()
        self._registered_against = None
        self.metrics.registered.labels(self.config.resource_name).set(0)

    def _try_register(self, kubelet: SocketIdentity) -> bool:
        endpoint = os.path.basename(self.socket_path)
        try:
            register(self.kubelet_socket, endpoint, self.config.resource_name, options(),
                     self.config.register_timeout_s)
        except RegistrationError as err:
            self._last_error = str(err)
            self.metrics.registrations.labels(self.config.resource_name, "error").inc()
            self._log.warning("registration failed, will retry: %s", err)
            return False
        self._registered_against = kubelet
        self._last_error = None
        self.registrations += 1
        self._registered.set()
        self.metrics.registrations.labels(self.config.resource_name, "ok").inc()
        self.metrics.registered.labels(self.config.resource_name).set(1)
        self._log.info("registered with the kubelet", extra={"endpoint": endpoint, "count": self.registrations})
        return True
