"""`ApiServer`: the emulator's lifecycle (start, stop, faults on real sockets), kubeconfig and preloading.

The emulated Kubernetes minor decides what is served and enabled: `ApiServer(version="1.37.0")` takes
`profile_for("1.37")` (profiles.py: served resource.k8s.io versions, DRA feature gates); `resource_versions=` and
`feature_gates=` override it, like an administrator's `--runtime-config` / `--feature-gates`. The stand-in scheduler
and claim controller take the same profile (`srv.profile`).

Threads: one accept loop, one thread per client connection (tracked, so `stop()` can close and join every one of
them: no leaked threads), and a timer while connections are being refused. `stop()` closes the listener, cuts
every open connection, wakes every watch and joins all threads.
"""

from __future__ import annotations

import base64
import copy
import logging
import shutil
import socket
import socketserver
import ssl
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import replace
from http.server import HTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from bridge.atomicfile import atomic_write_bytes

from . import loader
from .admission import WebhookAdmitter
from .discovery import parse_version
from .faults import Faults
from .http import Handler, _Watch
from .openapi import OpenApiDocs
from .profiles import KubernetesProfile, profile_for
from .registry import default_registry
from .rest import Rest
from .status import ApiError
from .store import Store
from .tls import write_self_signed
from .tolerationseconds import DefaultTolerationSeconds
from .validation import SchemaValidator
from .webhookauth import load_admission_config

log = logging.getLogger("bridge.sandbox.apiserver")
Obj = dict[str, Any]
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# The PriorityClasses kube-apiserver creates at start (its post-start hook from pkg/registry/scheduling/rest; the
# objects of pkg/apis/scheduling/v1/helpers.go `systemPriorityClasses`, v1.37.2): pods of DaemonSets such as ours
# name system-node-critical, and the Priority admission refuses a pod naming a class that does not exist.
SYSTEM_PRIORITY_CLASSES: tuple[Obj, ...] = (
    {"metadata": {"name": "system-node-critical"}, "value": 2000001000,
     "description": "Used for system critical pods that must not be moved from their current node."},
    {"metadata": {"name": "system-cluster-critical"}, "value": 2000000000,
     "description": "Used for system critical pods that must run in the cluster, but can be moved to another node if "
                    "necessary."},
)


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


class _HTTPServer(HTTPServer):
    def __init__(self, app: ApiServer, address: tuple[str, int], handler: type[Handler]) -> None:
        self.app = app
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls getfqdn(), which can hang on machines without DNS.
        socketserver.TCPServer.server_bind(self)
        # str(): typeshed allows bytes for any address family; an AF_INET/AF_INET6 host is always a str.
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.app._serve_connection, args=(self, request, client_address), name="apiserver-conn", daemon=True
        )
        self.app._track_thread(thread)
        thread.start()


class ApiServer:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        version: str = "1.34.2",
        resource_versions: Iterable[str] | None = None,
        tls: bool = False,
        validate: bool = True,
        history_limit: int = 1000,
        *,
        bookmark_interval: float = 1.0,
        webhooks: bool = True,
        default_namespaces: Iterable[str] = DEFAULT_NAMESPACES,
        feature_gates: dict[str, bool] | None = None,
        profile: KubernetesProfile | None = None,
        admission_config: str | Path | None = None,
        toleration_seconds: DefaultTolerationSeconds | None = None,
        node_taint: bool = True,
    ) -> None:
        parse_version(version)
        self.host, self.port, self.version, self.tls = host, port, version.lstrip("v"), tls
        base = profile or profile_for(self.version)
        if resource_versions is not None:
            base = replace(base, resource_versions=tuple(resource_versions))
        self.profile = base.with_gates(feature_gates)
        self.resource_versions = self.profile.resource_versions
        self.bookmark_interval = bookmark_interval
        self.registry = default_registry(self.resource_versions,
                                         slice_pool_selector=self.profile.slice_pool_field_selector)
        self.store = Store(history_limit)
        validator = SchemaValidator(self.version, self.profile) if validate else None
        # kube-apiserver --admission-control-config-file: read at start, a bad file refuses to start
        auth = load_admission_config(admission_config) if admission_config is not None else None
        self.admission = WebhookAdmitter(self.store, auth) if webhooks else None
        self.rest = Rest(
            self.store, self.registry, validator=validator, admitter=self.admission,
            profile=self.profile, toleration_seconds=toleration_seconds, node_taint=node_taint,
        )
        self.faults = Faults(self._refuse, self._drop_watches)
        self.openapi = OpenApiDocs(self.registry, self.version)
        self.stopping = threading.Event()
        self.ca_cert_path: Path | None = None
        self._tmp: Path | None = None
        self._ssl: ssl.SSLContext | None = None
        self._httpd: _HTTPServer | None = None
        self._accept_thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._conns: set[socket.socket] = set()
        self._watches: set[_Watch] = set()
        self._drops = 0  # how many times drop_watches ran (a watch admitted before a drop is cut on registering)
        self._timers: list[threading.Timer] = []
        self._handler = type("BoundHandler", (Handler,), {"app": self})
        self._default_namespaces = frozenset(default_namespaces)
        for ns in self._default_namespaces:
            self.rest.create(self.registry.get("", "v1", "namespaces"), None,  # type: ignore[arg-type]
                             {"metadata": {"name": ns}}, {}, {}, system=True)
        classes = self.registry.get("scheduling.k8s.io", "v1", "priorityclasses")
        assert classes is not None
        for pc in SYSTEM_PRIORITY_CLASSES:
            self.rest.create(classes, None, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                             **copy.deepcopy(pc)}, {}, {}, system=True)

    # -- lifecycle ---------------------------------------------------------------------------------------------------
    def start(self) -> ApiServer:
        if self._httpd is not None:
            raise RuntimeError("ApiServer already started")
        if self.tls:
            self._tmp = Path(tempfile.mkdtemp(prefix="bridge-apiserver-"))
            cert, key = write_self_signed(self._tmp, self.host)
            self.ca_cert_path = cert
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
            self._ssl = ctx
        self._listen()
        log.info("API emulator serving", extra={"url": self.url, "version": self.version})
        return self

    def _listen(self) -> None:
        self._httpd = _HTTPServer(self, (self.host, self.port), self._handler)
        self.port = self._httpd.server_address[1]
        self._accept_thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="apiserver-accept", daemon=True
        )
        self._accept_thread.start()

    def _close_listener(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            if self._accept_thread is not None:
                self._accept_thread.join()
            self._httpd.server_close()

    def _close_connections(self) -> None:
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self) -> None:
        self.stopping.set()
        self.store.close()
        with self._lock:
            timers, self._timers = self._timers, []
        for t in timers:
            t.cancel()
            if t.is_alive() and t is not threading.current_thread():
                t.join()
        self._close_listener()
        self._close_connections()
        with self._lock:
            threads = list(self._threads)
        for th in threads:
            th.join(timeout=10)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    # -- connections ------------------------------------------------------------------------------------------------
    def _track_thread(self, thread: threading.Thread) -> None:
        with self._lock:
            self._threads.add(thread)

    def _serve_connection(self, httpd: _HTTPServer, request: socket.socket, client_address: Any) -> None:
        conn = request
        try:
            # Headers and body leave in separate writes: without TCP_NODELAY, Nagle + delayed ACK cost ~40 ms
            # per keep-alive request.
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._ssl is not None:
                request.settimeout(10)
                conn = self._ssl.wrap_socket(request, server_side=True)
                conn.settimeout(None)
            with self._lock:
                self._conns.add(conn)
            if self.stopping.is_set():
                return
            self._handler(conn, client_address, httpd)
        except (OSError, ssl.SSLError):
            pass
        finally:
            with self._lock:
                self._conns.discard(conn)
                self._threads.discard(threading.current_thread())
            try:
                conn.close()
            except OSError:
                pass

    def drop_generation(self) -> int:
        """Taken by a request before its fault check (see `register_watch`)."""
        with self._lock:
            return self._drops

    def register_watch(self, handle: _Watch, generation: int | None = None) -> None:
        """Track an open watch. A watch whose request passed the fault check before a `drop_watches` (it had
        `generation`, an older `drop_generation()`) but was not registered yet is cut at once: a drop cuts every
        watch the server had accepted, as closing the real server's connections does."""
        with self._lock:
            self._watches.add(handle)
            missed = generation is not None and generation != self._drops
        if missed:
            handle.cut()

    def unregister_watch(self, handle: _Watch) -> None:
        with self._lock:
            self._watches.discard(handle)

    def _drop_watches(self) -> int:
        with self._lock:
            self._drops += 1
            watches = list(self._watches)
        for w in watches:
            w.cut()
        return len(watches)

    def _refuse(self, seconds: float) -> None:
        if self._httpd is None:
            raise RuntimeError("ApiServer is not started")
        with self._lock:
            self._timers = [t for t in self._timers if t.is_alive()]
        self._close_listener()
        self._httpd = None
        self._close_connections()
        timer = threading.Timer(seconds, self._reopen)
        timer.name = "apiserver-reopen"
        timer.daemon = True
        with self._lock:
            self._timers.append(timer)
        timer.start()

    def _reopen(self) -> None:
        if self.stopping.is_set() or self._httpd is not None:
            return
        self._listen()

    def restore(self, resource_version: int) -> int:
        """Come back as a server restored from an etcd backup taken at `resource_version` (an operator's disaster
        recovery, or a fresh control plane on an old snapshot): the listener and every connection are cut (a
        restart), every object is as it was then, and the next write reuses versions after it, which clients may
        already have seen. Clients that resume a watch from a newer version are refused with 504 "Too large
        resource version" (`WatchSpec.check_reachable`) and must relist. Returns the restored version.

        Why this matters: kubernetes.io "Operating etcd clusters for Kubernetes" (Restoring an etcd cluster) warns
        that components must be restarted or may act on stale data after a restore; client-go's reflector relists
        on "Too large resource version" (kubernetes/kubernetes staging/src/k8s.io/client-go/tools/cache/
        reflector.go, isTooLargeResourceVersionError) so informers recover without a restart."""
        if self._httpd is None:
            raise RuntimeError("ApiServer is not started")
        with self.store.lock:
            if not self.store.compacted_rv <= resource_version <= self.store.resource_version:
                raise ValueError(f"cannot rewind to resourceVersion {resource_version}: the history holds "
                                 f"{self.store.compacted_rv}..{self.store.resource_version}")
        self._close_listener()
        self._httpd = None
        self._close_connections()
        self._drop_watches()
        with self.store.lock:
            self.store.rewind(resource_version)
        self._listen()
        log.info("API emulator restored", extra={"url": self.url, "resourceVersion": resource_version})
        return resource_version

    # -- clients ----------------------------------------------------------------------------------------------------
    def write_kubeconfig(self, path: str | Path, context: str = "sandbox") -> Path:
        if self._httpd is None and not self.port:
            raise RuntimeError("start() the server before writing a kubeconfig (the port is not known yet)")
        cluster: Obj = {"server": self.url}
        if self.ca_cert_path is not None:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca_cert_path.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": cluster}],
            "users": [{"name": context, "user": {"token": "sandbox"}}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context, "namespace": "default"}}],
            "current-context": context,
        }
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        # atomically: whoever polls for the file (a test, `bridge demo`, a script) must never read it half-written
        atomic_write_bytes(out, yaml.safe_dump(config, sort_keys=False).encode(), mode=0o600)
        return out

    def load_objects(self, objects: Iterable[Obj], *, validate: bool = True) -> int:
        """Create objects as they are (status kept, server-owned metadata replaced, no admission webhooks); missing
        namespaces are created. Raises `loader.LoadError` naming the object on unknown kinds or invalid objects;
        returns how many were loaded. `validate=False` skips validation (bulk loads for benchmarks)."""
        docs = list(loader.flatten(objects))
        docs.sort(key=lambda d: 0 if d.get("kind") == "Namespace" else 1)
        ns_rt = self.registry.get("", "v1", "namespaces")
        assert ns_rt is not None
        count = 0
        for doc in docs:
            rt = self.registry.by_kind(doc["apiVersion"], doc["kind"])
            name = (doc.get("metadata") or {}).get("name", "?")
            if rt is None:
                raise loader.LoadError(f"{doc['kind']} {name!r}: {doc['apiVersion']} {doc['kind']} is not served")
            obj = dict(doc, metadata=dict(doc.get("metadata") or {}))
            ns = obj["metadata"].get("namespace") or ("default" if rt.namespaced else None)
            try:
                if rt is ns_rt and name in self._default_namespaces:
                    # A snapshot carries default/kube-system too: its labels replace the emulator's bare ones.
                    current = self.rest.get(ns_rt, None, name)
                    meta = dict(current["metadata"], labels={**current["metadata"].get("labels", {}),
                                                             **obj["metadata"].get("labels", {})},
                                annotations=obj["metadata"].get("annotations", {}))
                    self.rest.update(ns_rt, None, name, dict(current, metadata=meta), None, {}, {})
                    count += 1
                    continue
                if rt.plural == "priorityclasses" and name in {_name(pc) for pc in SYSTEM_PRIORITY_CLASSES}:
                    count += 1  # a snapshot of a real cluster carries them too: the same objects
                    continue
                if rt.namespaced and self.store.get("namespaces", ("", ns or "")) is None:
                    self.rest.create(ns_rt, None, {"metadata": {"name": ns}}, {}, {}, system=True)
                self.rest.create(rt, ns, obj, {}, {}, system=True, validate=validate)
            except ApiError as err:
                raise loader.LoadError(f"{doc['kind']} {name!r}: {err.message}") from err
            count += 1
        return count

    def load_dir(self, path: str | Path, *, validate: bool = True) -> int:
        return self.load_objects(loader.read_dir(Path(path)), validate=validate)
