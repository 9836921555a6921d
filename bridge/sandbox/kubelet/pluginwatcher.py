"""The kubelet's plugin manager, simulated: watcher, desired/actual state of the world, reconciler, registration.

Written from kubernetes/kubernetes pkg/kubelet/pluginmanager/: `pluginwatcher/plugin_watcher.go`,
`reconciler/reconciler.go`, `cache/{desired,actual}_state_of_world.go` and
`operationexecutor/operation_generator.go`. What it reproduces:

* The watcher sees the directory through **inotify** (fsnotify in the kubelet), by name and event: a Create of a
  socket (also at start, for sockets already there, and for every socket below a newly created directory) adds
  the path to the *desired* state with a fresh timestamp (`AddOrUpdatePlugin`), a Remove deletes it. Names
  starting with "." and non-sockets are ignored; a move out of the directory (fsnotify Rename) is ignored too.
  So a plugin that restarts and re-creates its socket under the same name is seen even when the new socket
  reuses the old inode: the Create event carries a new timestamp.
* The reconciler (every `poll_interval`; the kubelet's loop sleeps 1 s) first unregisters plugins that are gone
  from the desired state or whose timestamp changed (a re-created socket), then registers every desired plugin
  whose timestamp the actual state does not have.
* Registration of one socket (operation_generator.go): dial (10 s), `GetInfo` with a **1 s** deadline, handler by
  `PluginInfo.type` (unknown type -> `NotifyRegistrationStatus(false)`), empty endpoint replaced by the socket
  path, the handler's validation and registration, then `NotifyRegistrationStatus(true)` with a **5 s** deadline.
  A failure is told to the plugin (`NotifyRegistrationStatus(false, reason)`) and retried with exponential
  backoff per socket (500 ms doubling, capped at 2 min 2 s: nestedpendingoperations/exponentialbackoff).
  Operations run in their own threads, one at a time per socket, like the kubelet's operation executor.

Where inotify is missing (non-Linux), a stat poll stands in, comparing (inode, ctime): it can miss a socket
re-created within one poll interval with the same inode and ctime, which inotify never misses; a warning says so.
Not modelled: the connection monitor of newer kubelets (pluginwatcher/monitor.go: GetInfo every 10 s, two
failures remove the plugin from the desired state).
"""

from __future__ import annotations

import itertools
import logging
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

import grpc

from bridge._proto.pluginregistration.v1 import pluginregistration_pb2 as pb
from bridge._proto.pluginregistration.v1 import pluginregistration_pb2_grpc as pb_grpc
from bridge.sandbox.kubelet.inotify import FileEvent, Inotify, InotifyUnavailable
from bridge.sandbox.threads import Worker

log = logging.getLogger(__name__)

DIAL_TIMEOUT_S = 10.0
GET_INFO_TIMEOUT_S = 1.0
NOTIFY_TIMEOUT_S = 5.0
BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 122.0


class PluginRejected(Exception):
    """Raised by a handler's `validate_plugin`/`register_plugin`; the message goes to the plugin."""


class PluginHandler(Protocol):
    def validate_plugin(self, name: str, endpoint: str, versions: list[str]) -> None: ...

    def register_plugin(self, name: str, endpoint: str, versions: list[str]) -> None: ...

    def deregister_plugin(self, name: str, endpoint: str) -> None: ...


@dataclass(frozen=True)
class RegisteredPlugin:
    socket: str
    type: str
    name: str
    endpoint: str
    versions: tuple[str, ...]
    timestamp: int  # the desired-state timestamp this registration answered


@dataclass
class _Backoff:
    next_at: float = 0.0
    delay: float = BACKOFF_INITIAL_S
    failures: int = 0
    last_error: str = ""


@dataclass
class _World:
    desired: dict[str, int] = field(default_factory=dict)  # socket -> timestamp of its latest Create
    actual: dict[str, RegisteredPlugin] = field(default_factory=dict)
    backoff: dict[str, _Backoff] = field(default_factory=dict)
    in_flight: set[str] = field(default_factory=set)


class PluginWatcher:
    def __init__(
        self,
        registry_dir: str | os.PathLike[str],
        handlers: dict[str, PluginHandler],
        *,
        poll_interval: float = 0.1,
        backoff_max: float = BACKOFF_MAX_S,
        use_inotify: bool = True,
    ) -> None:
        self.registry_dir = os.path.abspath(os.fspath(registry_dir))
        self.handlers = dict(handlers)
        self.poll_interval = poll_interval
        self.backoff_max = backoff_max
        self.use_inotify = use_inotify
        self._world = _World()
        self._lock = threading.Lock()
        self._worker = Worker("plugin-watcher")
        self._stop = self._worker.stopping
        self._ops: set[threading.Thread] = set()
        self._inotify: Inotify | None = None
        self._polled: dict[str, tuple[int, int]] = {}  # fallback only: socket -> (inode, ctime_ns)
        self._ticks = itertools.count(1)

    # -- lifecycle --------------------------------------------------------------------------------------------------

    def start(self) -> None:
        os.makedirs(self.registry_dir, mode=0o755, exist_ok=True)
        self._stop.clear()
        self._world = _World()
        self._polled = {}
        self._inotify = None
        if self.use_inotify:
            try:
                self._inotify = Inotify()
            except InotifyUnavailable as err:
                log.warning("plugin watcher falls back to polling (a socket re-created within one poll with the "
                            "same inode is missed): %s", err)
        if self._inotify is not None:
            self._traverse(self.registry_dir)
        else:
            self._poll()
        self._worker.start(self._run)

    def stop(self) -> None:
        self._worker.stop()
        with self._lock:
            ops = list(self._ops)
        for op in ops:
            op.join(timeout=15)
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
        with self._lock:
            plugins = list(self._world.actual.values())
            self._world = _World()
        for plugin in plugins:
            self._deregister(plugin)

    # -- queries ----------------------------------------------------------------------------------------------------

    def registered(self) -> dict[str, RegisteredPlugin]:
        """Socket path -> plugin, for every plugin currently registered."""
        with self._lock:
            return dict(self._world.actual)

    def desired(self) -> dict[str, int]:
        """Socket path -> timestamp of its latest creation event (the desired state of the world)."""
        with self._lock:
            return dict(self._world.desired)

    def last_error(self, socket: str) -> str:
        with self._lock:
            b = self._world.backoff.get(os.path.abspath(socket))
            return b.last_error if b else ""

    # -- the watcher ------------------------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._inotify is not None:
                    for event in self._inotify.read(self.poll_interval):
                        self._handle(event)
                else:
                    self._stop.wait(self.poll_interval)
                    self._poll()
                self.reconcile_once()
            except Exception:  # a watcher bug must not kill the simulated kubelet silently
                log.exception("plugin watcher iteration failed")
                self._stop.wait(self.poll_interval)

    def _add_or_update(self, socket: str) -> None:
        with self._lock:
            self._world.desired[socket] = next(self._ticks)

    def _remove(self, socket: str) -> None:
        with self._lock:
            self._world.desired.pop(socket, None)

    def _handle(self, event: FileEvent) -> None:
        if event.overflow:
            log.error("plugin watcher: inotify queue overflow, events were lost")  # the kubelet only logs it too
            return
        if event.removed:
            self._remove(event.path)
            return
        if not event.created or os.path.basename(event.path).startswith("."):
            return
        try:
            st = os.lstat(event.path)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            self._traverse(event.path)
        elif stat.S_ISSOCK(st.st_mode):
            self._add_or_update(event.path)

    def _traverse(self, directory: str) -> None:
        """`traversePluginDir`: watch the directory and everything below it; existing sockets count as created."""
        assert self._inotify is not None
        try:
            self._inotify.add_watch(directory)
        except OSError as err:
            log.error("plugin watcher cannot watch %s: %s", directory, err)
            return
        for root, dirs, files in os.walk(directory):
            for d in dirs:
                try:
                    self._inotify.add_watch(os.path.join(root, d))
                except OSError as err:
                    log.error("plugin watcher cannot watch %s: %s", os.path.join(root, d), err)
            for name in files:
                self._handle(FileEvent(os.path.join(root, name), True, False, False))

    def _poll(self) -> None:
        found: dict[str, tuple[int, int]] = {}
        for root, _dirs, files in os.walk(self.registry_dir):
            for name in files:
                path = os.path.join(root, name)
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    continue
                if stat.S_ISSOCK(st.st_mode) and not name.startswith("."):
                    found[path] = (st.st_ino, st.st_ctime_ns)
        for path in set(self._polled) - set(found):
            self._remove(path)
        for path, ident in found.items():
            if self._polled.get(path) != ident:
                self._add_or_update(path)
        self._polled = found

    # -- the reconciler ---------------------------------------------------------------------------------------------

    def reconcile_once(self) -> None:
        """One reconciler pass: unregistrations first, then registrations whose backoff allows them."""
        with self._lock:
            w = self._world
            stale = [p for s, p in w.actual.items() if w.desired.get(s) != p.timestamp and s not in w.in_flight]
            for p in stale:
                del w.actual[p.socket]
            now = time.monotonic()
            todo = [(s, ts) for s, ts in w.desired.items()
                    if s not in w.actual and s not in w.in_flight and w.backoff.get(s, _Backoff()).next_at <= now]
            for s, _ts in todo:
                w.in_flight.add(s)
        for plugin in stale:
            self._deregister(plugin)
        for socket, ts in todo:
            if self._stop.is_set():
                with self._lock:
                    self._world.in_flight.discard(socket)
                continue
            op = threading.Thread(target=self._register, args=(socket, ts), name="plugin-register", daemon=True)
            with self._lock:
                self._ops.add(op)
            op.start()

    def _deregister(self, plugin: RegisteredPlugin) -> None:
        log.info("deregistering plugin", extra={"plugin": plugin.name, "socket": plugin.socket})
        handler = self.handlers.get(plugin.type)
        if handler is not None:
            try:
                handler.deregister_plugin(plugin.name, plugin.endpoint)
            except Exception:
                log.exception("deregistering plugin failed", extra={"plugin": plugin.name})

    def _register(self, socket: str, timestamp: int) -> None:
        channel = grpc.insecure_channel("unix://" + socket)
        try:
            try:
                plugin = self._register_over(channel, socket, timestamp)
            except _Failed as err:
                with self._lock:
                    b = self._world.backoff.setdefault(socket, _Backoff())
                    b.failures += 1
                    b.last_error = str(err)
                    b.next_at = time.monotonic() + b.delay
                    b.delay = min(b.delay * 2, self.backoff_max)
                log.warning("plugin registration failed", extra={"socket": socket, "error": str(err)})
                return
            finally:
                channel.close()
            with self._lock:
                self._world.backoff.pop(socket, None)
                self._world.actual[socket] = plugin
            log.info("plugin registered", extra={"plugin": plugin.name, "type": plugin.type, "socket": socket})
        finally:
            with self._lock:
                self._world.in_flight.discard(socket)
                self._ops.discard(threading.current_thread())

    def _register_over(self, channel: grpc.Channel, path: str, timestamp: int) -> RegisteredPlugin:
        try:
            grpc.channel_ready_future(channel).result(timeout=DIAL_TIMEOUT_S)
        except grpc.FutureTimeoutError as err:
            raise _Failed(f"dial {path}: not ready within {DIAL_TIMEOUT_S:.0f}s") from err
        stub = pb_grpc.RegistrationStub(channel)
        try:
            info = stub.GetInfo(pb.InfoRequest(), timeout=GET_INFO_TIMEOUT_S)
        except grpc.RpcError as err:
            raise _Failed(f"GetInfo failed: {err.code().name}: {err.details()}") from err
        handler = self.handlers.get(info.type)
        endpoint = info.endpoint or path
        versions = list(info.supported_versions)
        try:
            if handler is None:
                raise PluginRejected(f"no handler registered for plugin type: {info.type!r}")
            handler.validate_plugin(info.name, endpoint, versions)
            handler.register_plugin(info.name, endpoint, versions)
        except PluginRejected as err:
            self._notify(stub, False, str(err))
            raise _Failed(f"plugin {info.name!r} rejected: {err}") from err
        try:
            self._notify(stub, True, "")
        except grpc.RpcError as err:
            if handler is not None:
                handler.deregister_plugin(info.name, endpoint)
            raise _Failed(f"NotifyRegistrationStatus failed: {err.code().name}") from err
        return RegisteredPlugin(path, info.type, info.name, endpoint, tuple(versions), timestamp)

    @staticmethod
    def _notify(stub: pb_grpc.RegistrationStub, ok: bool, error: str) -> None:
        try:
            stub.NotifyRegistrationStatus(
                pb.RegistrationStatus(plugin_registered=ok, error=error), timeout=NOTIFY_TIMEOUT_S
            )
        except grpc.RpcError:
            if ok:
                raise
            log.warning("could not tell the plugin it was rejected", extra={"error": error})


class _Failed(Exception):
    pass
