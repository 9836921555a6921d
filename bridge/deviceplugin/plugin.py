"""Device-plugin lifecycle: serve on our socket, register, and register again whenever the kubelet lets go of us.

Invariants:
* Our gRPC server is listening on `<kubelet-root>/device-plugins/<socket>` BEFORE we call Register (the kubelet
  dials us from inside its Register handler with a 10 s blocking dial).
* One supervisor thread per plugin polls (every `poll_interval_s`, see `registration` for why polling) for the
  three ways the kubelet can stop listening to us, and re-registers after each, re-sending the full device list
  (a new ListAndWatch stream starts with the whole table):
  1. the kubelet restarted (`kubelet.sock` removed or re-created) or our socket was deleted or replaced (a
     restarting kubelet deletes every socket in `device-plugins/`): stop the old gRPC server (ending every
     ListAndWatch stream, bounded: a stuck worker is abandoned, never waited on), serve a fresh one, register;
  2. **the kubelet dropped us while we kept serving**: the ListAndWatch stream it opened after our Register ended
     (or was refused, or never came within `stream_wait_s`). In kubelets 1.25-1.36 (pkg/kubelet/cm/devicemanager/
     plugin/v1beta1/handler.go, `runClient`) the end of ANY instance's stream disconnects the resource's *current*
     endpoint and marks all its devices unhealthy: after a second instance registered, the first one stopping cuts
     the kubelet off from the one still serving, until it registers again. From 1.37 only the instance whose stream
     ended is disconnected; the same detection then fires only when it is really us. Re-registering is always
     safe: the kubelet takes the newest registration as the endpoint, and re-reads the device list from it.
  3. a registration that failed: retried.
  Retries back off exponentially (`backoff_initial_s` doubling to `backoff_max_s`). A registration the kubelet
  drops again soon after (within `stable_after_s`) does not reset the backoff, so a kubelet that keeps dropping us
  is not answered by a tight register/drop loop; one that held for `stable_after_s` does.
  Nothing is created per re-registration that outlives it: no thread or fd leaks across many restarts.
* Streams are told apart by sequence (`StreamSlots.counts` / `since`), marked just BEFORE each Register: a stream
  opened after the mark answers that registration (the kubelet opens it right after Register returns, possibly
  before our call has returned); streams opened earlier (an old registration's, a debugging client's) do not
  count. A debugging client that opens a stream of its own AFTER the registration can hide the kubelet's stream
  ending until it closes; the kubelet-restart rule still holds.
* `stop()` ends streams, stops the server and removes our socket, but only if the file there is still the one we
  created (never another process's socket).
* A socket removed while it is being created (a restarting kubelet wipes `device-plugins/` between our bind and
  our chmod: `SocketVanished`) is served again at once with a fresh server, a few times; if the directory keeps
  being wiped, the supervisor serves again at its next poll. Neither `start()` nor the supervisor treats it as an
  error: it is what a kubelet restart looks like from here.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
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
    SocketVanished,
    check_socket_path,
    remove_own_socket,
    socket_identity,
    unix_target,
)

log = logging.getLogger("bridge.deviceplugin")

# The kubelet's refusal of a second endpoint on one socket path (manager.go PluginConnected, 1.37+).
ALREADY_CONNECTED = "device plugin already connected"
# Only the kubelet (root) dials the device-plugin socket.
SOCKET_MODE = 0o600
# Serving again at once after the socket vanished while being created (then the supervisor's next poll).
_SERVE_ATTEMPTS = 3


def default_socket_name(resource_name: str) -> str:
    """`nvidia.com/gpu` -> `dra-bridge-nvidia.com-gpu.sock`."""
    return "dra-bridge-" + re.sub(r"[^A-Za-z0-9._-]", "-", resource_name) + ".sock"


@dataclass(frozen=True)
class PluginConfig:
    kubelet_root: Path
    # Where the kubelet's device manager listens (kubelet.sock) and looks for plugin sockets and writes its
    # checkpoint. None: `<kubelet_root>/device-plugins`. The real kubelet's is compiled in (kubernetes
    # staging/src/k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/constants.go DevicePluginPath,
    # "/var/lib/kubelet/device-plugins/", used by pkg/kubelet/cm/devicemanager/manager.go NewManagerImpl): it does
    # not follow the kubelet's --root-dir, so `bridge node` always sets it (--device-plugin-dir).
    device_plugin_dir: Path | None = None
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
    # A registration whose ListAndWatch stream has not opened by then is taken as dropped (the kubelet opens it
    # right after Register returns).
    stream_wait_s: float = 10.0
    # A registration that held this long resets the re-registration backoff.
    stable_after_s: float = 10.0
    # After the kubelet dropped us, wait this long before registering again: through 1.36 the end of our OWN old
    # stream (closed by that very disconnect) disconnects whoever is current when the kubelet gets to it, so a
    # registration landing before that is cut off at once.
    reregister_delay_s: float = 0.5

    @property
    def plugin_dir(self) -> Path:
        return self.device_plugin_dir if self.device_plugin_dir is not None else self.kubelet_root / "device-plugins"

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
        except SocketVanished:
            raise  # the caller serves again (the server is already stopped)
        except SocketPathError as err:
            raise OSError(str(err)) from err

    def stop(self) -> None:
        self.servicer.stop()
        self._grpc.stop(self._grace_s)
        remove_own_socket(self.path, self.identity)


@dataclass
class _Retry:
    """Capped exponential backoff for (re-)registration."""

    initial: float
    cap: float
    backoff: float = 0.0
    next_attempt: float = 0.0

    def __post_init__(self) -> None:
        self.backoff = self.initial

    def due(self, now: float) -> bool:
        return now >= self.next_attempt

    def failed(self, now: float, at_least: float = 0.0) -> None:
        self.next_attempt = now + max(self.backoff, at_least)
        self.backoff = min(self.backoff * 2, self.cap)

    def reset(self) -> None:
        self.backoff = self.initial
        self.next_attempt = 0.0


@dataclass(frozen=True)
class _Registration:
    """What we registered against, and the stream counts just before the Register call."""

    kubelet: SocketIdentity
    servicer: DevicePluginServicer
    opened_before: int
    refused_before: int
    at: float  # monotonic time the Register call returned


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
        self._registration: _Registration | None = None
        self._registered = threading.Event()
        self._retry = _Retry(config.backoff_initial_s, config.backoff_max_s)
        self._stable = False  # the current registration has held for stable_after_s (backoff reset)
        self._waiting_logged = False
        self.registrations = 0
        self.disconnects = 0  # times the kubelet dropped us while we kept serving
        self.rotations = 0  # times we moved to a fresh socket because the kubelet held our path (_rotate_socket)
        # told the fresh socket's path before it is served (the node daemon records it in its instance lock)
        self.on_socket_moved: Callable[[str], None] | None = None
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
        try:
            self._start_server()
        except SocketVanished as err:  # the kubelet keeps wiping the directory: the supervisor serves again
            self._last_error = str(err)
            self._log.warning("%s; the supervisor serves again at its next poll", err)
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
                # Stopped BEFORE the new socket is bound: gRPC unlinks the path of a server it stops.
                self._server.stop()
                self._server = None
            for attempt in range(1, _SERVE_ATTEMPTS + 1):
                servicer = DevicePluginServicer(self.table, self.allocation, self.metrics,
                                                max_streams=self.config.max_streams)
                try:
                    self._server = _Server(self.socket_path, servicer, self.config.workers, self.config.stop_grace_s)
                    break
                except SocketVanished as err:
                    servicer.stop()
                    if attempt == _SERVE_ATTEMPTS:
                        raise
                    self._log.info("%s (attempt %d of %d)", err, attempt, _SERVE_ATTEMPTS)
                    time.sleep(0.05 * attempt)  # let the cleaner finish before binding again
        self._log.info("serving device plugin", extra={"socket": self.socket_path})

    def _supervise(self) -> None:
        while not self._stop.is_set():
            try:
                self._supervise_once()
            except Exception as err:  # never let one bad poll end re-registration for the life of the daemon
                self._last_error = f"{type(err).__name__}: {err}"
                self._log.exception("device-plugin supervisor error; retrying")
                self._retry.failed(time.monotonic())
            self._stop.wait(self.config.poll_interval_s)

    def _supervise_once(self) -> None:
        """One poll: notice a kubelet restart, a lost socket or a dropped registration; re-serve; (re-)register."""
        kubelet = socket_identity(self.kubelet_socket)
        server = self._server
        own_ok = server is not None and server.identity is not None and \
            socket_identity(self.socket_path) == server.identity
        reg = self._registration
        # Registered against a kubelet.sock that is gone or was replaced: the kubelet restarted.
        stale = reg is not None and kubelet != reg.kubelet
        if stale or not own_ok:
            if reg is not None:
                why = "kubelet.sock re-created" if kubelet is not None and stale else (
                    "kubelet.sock removed" if stale else "our socket was deleted or replaced")
                self._log.info("kubelet restart detected (%s): re-serving and re-registering", why)
                self.metrics.kubelet_restarts.labels(self.config.resource_name).inc()
            else:
                self._log.info("our socket disappeared before registration: re-serving")
            self._set_unregistered()
            try:
                self._start_server()
            except SocketVanished as err:  # still being wiped: serve again at the next poll, no backoff
                self._last_error = str(err)
                self._log.info("%s; serving again at the next poll", err)
                return
            except Exception as err:
                self._last_error = f"cannot re-create {self.socket_path}: {err}"
                self._log.exception("cannot re-create the device-plugin socket; retrying")
                self._stop.wait(self.config.backoff_initial_s)
                return
            self._retry.reset()
        elif reg is not None:
            self._check_stream(reg)
        if self._registration is None:
            if kubelet is None:
                if not self._waiting_logged:
                    self._log.info("waiting for %s to appear", self.kubelet_socket)
                    self._waiting_logged = True
            elif self._retry.due(time.monotonic()):
                self._waiting_logged = False
                if not self._try_register(kubelet):
                    self._retry.failed(time.monotonic())

    def _check_stream(self, reg: _Registration) -> None:
        """Registered and serving: has the kubelet dropped us? (Its stream for this registration ended, was refused,
        or never came.)"""
        now = time.monotonic()
        opened, still_open, refused = reg.servicer.streams.since(reg.opened_before, reg.refused_before)
        dropped: str | None = None
        if opened and not still_open:
            dropped = "the kubelet ended our ListAndWatch stream while we are serving"
        elif refused and not opened:
            dropped = "the kubelet's ListAndWatch stream was refused (every stream slot taken)"
        elif not opened and now - reg.at > self.config.stream_wait_s:
            dropped = f"the kubelet opened no ListAndWatch stream within {self.config.stream_wait_s:g}s of Register"
        if dropped is None:
            if not self._stable and now - reg.at >= self.config.stable_after_s:
                self._stable = True
                self._retry.reset()
            return
        self.disconnects += 1
        self.metrics.kubelet_disconnects.labels(self.config.resource_name).inc()
        self._set_unregistered()
        if self._stable:
            self._retry.reset()  # it held: re-register as soon as the kubelet is done disconnecting us
            self._retry.next_attempt = now + self.config.reregister_delay_s
        else:
            self._retry.failed(now, self.config.reregister_delay_s)  # dropped again soon after registering: back off
        self._log.warning("%s (on kubelets up to 1.36 an old instance of this plugin stopping disconnects the current "
                          "one): re-registering with the full device list", dropped,
                          extra={"count": self.disconnects})

    def _rotate_socket(self, why: str) -> None:
        """The kubelet (1.37+) still holds an endpoint on our socket path: a Register of ours that it completed
        after we gave up on it (our timeout), or one we repeated while it kept our stream. It refuses every new
        registration on that path ("device plugin already connected"), and the refusal also dropped its client of
        the path, so that endpoint is never disconnected either (kubernetes pkg/kubelet/cm/devicemanager manager.go
        PluginConnected and plugin/v1beta1/handler.go connectClient, v1.37.2 and v1.38.0-beta.0, whose comment tells
        plugins to restart their server on another socket). Retrying on the same path would fail for the life of
        the kubelet: serve on a fresh socket name and register that one."""
        base = self.config.socket_path
        self.rotations += 1
        self.metrics.socket_moves.labels(self.config.resource_name).inc()
        self.socket_path = check_socket_path(base.with_name(f"{base.stem}-r{self.rotations}{base.suffix}"))
        if self.on_socket_moved is not None:
            self.on_socket_moved(self.socket_path)
        self._log.warning("the kubelet holds our socket path and refuses it (%s): serving on %s and registering "
                          "that instead", why, os.path.basename(self.socket_path), extra={"count": self.rotations})
        self._start_server()
        self._retry.reset()

    def _set_unregistered(self) -> None:
        self._registered.clear()
        self._registration = None
        self._stable = False
        self.metrics.registered.labels(self.config.resource_name).set(0)

    def _try_register(self, kubelet: SocketIdentity) -> bool:
        endpoint = os.path.basename(self.socket_path)
        server = self._server
        if server is None:
            return False
        # Mark the stream counts BEFORE Register: the kubelet may open its stream before our call returns.
        opened_before, refused_before = server.servicer.streams.counts()
        try:
            register(self.kubelet_socket, endpoint, self.config.resource_name, options(),
                     self.config.register_timeout_s)
        except RegistrationError as err:
            self._last_error = str(err)
            self.metrics.registrations.labels(self.config.resource_name, "error").inc()
            if ALREADY_CONNECTED in str(err):
                self._rotate_socket(str(err))
                return True  # not a failure to back off from: register the new socket at the next poll
            self._log.warning("registration failed, will retry: %s", err)
            return False
        self._registration = _Registration(kubelet, server.servicer, opened_before, refused_before, time.monotonic())
        self._last_error = None
        self.registrations += 1
        self._registered.set()
        self.metrics.registrations.labels(self.config.resource_name, "ok").inc()
        self.metrics.registered.labels(self.config.resource_name).set(1)
        self._log.info("registered with the kubelet", extra={"endpoint": endpoint, "count": self.registrations})
        return True
