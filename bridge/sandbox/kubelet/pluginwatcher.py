"""The kubelet's plugin watcher, simulated: discovers registration sockets in `plugins_registry` and registers them.

What it reproduces (kubernetes/kubernetes pkg/kubelet/pluginmanager: pluginwatcher, operationexecutor):
* sockets already present at start count like newly created ones; sub-directories are walked; names starting
  with "." and non-sockets are ignored;
* per socket: dial (10 s), `GetInfo` with the kubelet's **1 s** deadline, handler chosen by `PluginInfo.type`
  (unknown type -> `NotifyRegistrationStatus(false)`), empty endpoint replaced by the socket path, the handler's
  validation and registration, then `NotifyRegistrationStatus(true)` with a **5 s** deadline; any failure is
  reported with `NotifyRegistrationStatus(false, reason)` and retried from scratch with exponential backoff
  (0.5 s doubling, capped at 2 min as in the kubelet);
* a socket that disappears (or is replaced by a new file at the same path: a plugin restart) deregisters the
  plugin.

The watcher polls the directory (every `poll_interval`, 0.1 s by default) instead of using inotify: it sees the
same create/remove transitions, and works on any filesystem. It owns no protocol knowledge beyond
pluginregistration; type-specific work is the handler's (`PluginHandler`, e.g. `DraManager`).
"""

from __future__ import annotations

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

log = logging.getLogger(__name__)

DIAL_TIMEOUT_S = 10.0
GET_INFO_TIMEOUT_S = 1.0
NOTIFY_TIMEOUT_S = 5.0
BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 120.0


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
    inode: int


@dataclass
class _Attempt:
    inode: int
    next_at: float = 0.0
    backoff: float = BACKOFF_INITIAL_S
    failures: int = 0
    last_error: str = ""


@dataclass
class WatcherState:
    registered: dict[str, RegisteredPlugin] = field(default_factory=dict)
    pending: dict[str, _Attempt] = field(default_factory=dict)


class PluginWatcher:
    def __init__(
        self,
        registry_dir: str | os.PathLike[str],
        handlers: dict[str, PluginHandler],
        *,
        poll_interval: float = 0.1,
        backoff_max: float = BACKOFF_MAX_S,
    ) -> None:
        self.registry_dir = os.path.abspath(os.fspath(registry_dir))
        self.handlers = dict(handlers)
        self.poll_interval = poll_interval
        self.backoff_max = backoff_max
        self._state = WatcherState()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------------------------

    def start(self) -> None:
        os.makedirs(self.registry_dir, mode=0o755, exist_ok=True)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="plugin-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
            self._thread = None
        with self._lock:
            plugins = list(self._state.registered.values())
            self._state = WatcherState()
        for plugin in plugins:
            self._deregister(plugin)

    # -- queries ----------------------------------------------------------------------------------------------------

    def registered(self) -> dict[str, RegisteredPlugin]:
        """Socket path -> plugin, for every plugin currently registered."""
        with self._lock:
            return dict(self._state.registered)

    def last_error(self, socket: str) -> str:
        with self._lock:
            attempt = self._state.pending.get(os.path.abspath(socket))
            return attempt.last_error if attempt else ""

    # -- the loop ---------------------------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync_once()
            except Exception:  # a watcher bug must not kill the simulated kubelet silently
                log.exception("plugin watcher iteration failed")
            self._stop.wait(self.poll_interval)

    def _scan(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for root, dirs, files in os.walk(self.registry_dir):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in files:
                if name.startswith("."):
                    continue
                path = os.path.join(root, name)
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    continue
                if stat.S_ISSOCK(st.st_mode):
                    found[path] = st.st_ino
        return found

    def sync_once(self) -> None:
        """One reconcile pass: deregister vanished sockets, register new ones whose backoff has expired."""
        found = self._scan()
        with self._lock:
            gone = [p for p, reg in self._state.registered.items() if found.get(p) != reg.inode]
            removed = [self._state.registered.pop(p) for p in gone]
            for p in [p for p, a in self._state.pending.items() if found.get(p) != a.inode]:
                del self._state.pending[p]
            todo = []
            now = time.monotonic()
            for path, inode in found.items():
                if path in self._state.registered:
                    continue
                attempt = self._state.pending.setdefault(path, _Attempt(inode))
                if attempt.next_at <= now:
                    todo.append((path, attempt))
        for plugin in removed:
            self._deregister(plugin)
        for path, attempt in todo:
            if self._stop.is_set():
                return
            self._register(path, attempt)

    def _deregister(self, plugin: RegisteredPlugin) -> None:
        log.info("plugin socket gone: deregistering", extra={"plugin": plugin.name, "socket": plugin.socket})
        handler = self.handlers.get(plugin.type)
        if handler is not None:
            try:
                handler.deregister_plugin(plugin.name, plugin.endpoint)
            except Exception:
                log.exception("deregistering plugin failed", extra={"plugin": plugin.name})

    def _register(self, path: str, attempt: _Attempt) -> None:
        channel = grpc.insecure_channel("unix://" + path)
        try:
            plugin = self._register_over(channel, path, attempt.inode)
        except _Failed as err:
            attempt.failures += 1
            attempt.last_error = str(err)
            attempt.next_at = time.monotonic() + attempt.backoff
            attempt.backoff = min(attempt.backoff * 2, self.backoff_max)
            log.warning("plugin registration failed", extra={"socket": path, "error": str(err)})
            return
        finally:
            channel.close()
        with self._lock:
            self._state.pending.pop(path, None)
            self._state.registered[path] = plugin
        log.info("plugin registered", extra={"plugin": plugin.name, "type": plugin.type, "socket": path})

    def _register_over(self, channel: grpc.Channel, path: str, inode: int) -> RegisteredPlugin:
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
        return RegisteredPlugin(path, info.type, info.name, endpoint, tuple(versions), inode)

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
