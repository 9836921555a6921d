"""The daemon's HTTP endpoint: `/healthz` (alive), `/readyz` (ready), `/metrics` (Prometheus text format).

Health is computed on request by named check functions (`None` = ok, a string = what is wrong), so each half of
the daemon contributes its own: the device plugin's liveness dials its own socket exactly as the kubelet would
(alive means "the kubelet could talk to me", not "the process exists"); its readiness is "registered". The DRA
half adds its checks the same way. Responses are plain text listing each check; 200 when all pass, else 503.

The endpoint is for the kubelet's probes and a metrics scraper, nothing else, and must stay up whatever else
connects (the node daemon's and the controller's servers share this code):

* `bridge node` and `bridge controller` listen on `127.0.0.1:8080` unless told otherwise: nothing off the machine
  reaches it; the chart passes `:<port>` explicitly, because the kubelet's probes and Prometheus come in on the
  pod's IP;
* at most `max_connections` (64) connections are open at once, each served by its own thread. When a new one
  arrives at the cap, the connection that has waited longest WITHOUT sending a complete request head is closed to
  make room (`dra_bridge_http_connections_evicted_total`): a probe sends its request at once, so clients that
  connect and send nothing, or half a request, can never lock the probes out; only when every open connection is
  being answered is the new one answered `503` at once, unread (`dra_bridge_http_connections_refused_total`);
* a connection gets `io_timeout_s` (10 s) for everything, reading the request and writing the answer: each socket
  operation times out after that, and a connection still open at its deadline is shut down by the server's loop
  (so a client trickling a byte at a time cannot keep a thread either). 300 half-sent requests therefore hold at
  most 64 threads, for at most 10 s each, and `/healthz` keeps answering meanwhile (tests/node/test_http.py).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

log = logging.getLogger("bridge.node.http")

Check = Callable[[], str | None]

MAX_CONNECTIONS = 64
IO_TIMEOUT_S = 10.0
_BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
         b"too many connections\n")


class AddressError(ValueError):
    """An --http-address value that is not `host:port`, `:port` or `off`."""


def parse_address(value: str) -> tuple[str, int] | None:
    """`:8080` -> ("0.0.0.0", 8080) (every interface); `127.0.0.1:0` -> ephemeral port; `[::1]:8080` -> IPv6;
    `off` -> None (no HTTP endpoint)."""
    text = value.strip()
    if text.lower() == "off":
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise AddressError(f"invalid HTTP address {value!r}: use HOST:PORT, :PORT or 'off'")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def run_checks(checks: Mapping[str, Check]) -> tuple[bool, str]:
    lines, ok = [], True
    for name, check in checks.items():
        try:
            problem = check()
        except Exception as err:  # a failing check is a failed check, never a crashed endpoint
            problem = f"check raised {type(err).__name__}: {err}"
        ok = ok and problem is None
        lines.append(f"[{'+' if problem is None else '-'}] {name}" + ("" if problem is None else f": {problem}"))
    lines.append("ok" if ok else "failed")
    return ok, "\n".join(lines) + "\n"


class _BoundedServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with a connection cap and a whole-connection deadline (see the module docstring)."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # listen backlog: a burst of probes and scrapes is not refused by the kernel

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *, max_connections: int,
                 io_timeout_s: float, refused: Callable[[], None], evicted: Callable[[], None],
                 open_gauge: Callable[[int], None]) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.max_connections = max_connections
        self.io_timeout_s = io_timeout_s
        self._refused = refused
        self._evicted = evicted
        self._open_gauge = open_gauge
        # connection socket -> [deadline (monotonic), still reading its request head]; insertion order = age
        self._active: dict[Any, list[Any]] = {}
        self._active_lock = threading.Lock()
        super().__init__(address, handler)

    def request_read(self, request: Any) -> None:
        """The handler has the whole request head: this connection is no longer a candidate for eviction."""
        with self._active_lock:
            state = self._active.get(request)
            if state is not None:
                state[1] = False

    def process_request(self, request: Any, client_address: Any) -> None:
        victim = None
        with self._active_lock:
            if len(self._active) >= self.max_connections:
                victim = next((sock for sock, (_, reading) in self._active.items() if reading), None)
                if victim is not None:
                    del self._active[victim]
            full = len(self._active) >= self.max_connections
            if not full:
                self._active[request] = [time.monotonic() + self.io_timeout_s, True]
                self._open_gauge(len(self._active))
        if victim is not None:
            self._evicted()
            try:
                victim.shutdown(socket.SHUT_RDWR)  # its thread's blocked read returns at once and the thread ends
            except OSError:
                pass
        if full:
            self._refused()
            try:
                request.setblocking(False)
                request.send(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def _forget(self, request: Any) -> None:
        with self._active_lock:
            self._active.pop(request, None)
            self._open_gauge(len(self._active))

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away or was cut at its deadline: a debug line, not a traceback on stderr."""
        log.debug("health endpoint: connection from %s ended with an error", client_address, exc_info=True)

    def service_actions(self) -> None:
        """Called by serve_forever every poll interval: shut down connections past their deadline (their thread's
        blocked read or write then returns at once and the thread ends)."""
        now = time.monotonic()
        with self._active_lock:
            late = [sock for sock, (deadline, _) in self._active.items() if deadline < now]
        for sock in late:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class HealthServer:
    def __init__(self, address: tuple[str, int], registry: CollectorRegistry,
                 liveness: Mapping[str, Check], readiness: Mapping[str, Check], *,
                 max_connections: int = MAX_CONNECTIONS, io_timeout_s: float = IO_TIMEOUT_S) -> None:
        self._registry = registry
        self.liveness = dict(liveness)
        self.readiness = dict(readiness)
        self.refused = Counter("dra_bridge_http_connections_refused", "Connections to the health and metrics "
                               "endpoint answered 503 at once: the connection limit was reached and every open "
                               "connection was being answered", registry=registry)
        self.evicted = Counter("dra_bridge_http_connections_evicted", "Connections to the health and metrics "
                               "endpoint closed before they sent a complete request, to make room for a new one at "
                               "the connection limit", registry=registry)
        self.open = Gauge("dra_bridge_http_connections_open", "Connections to the health and metrics endpoint being "
                          "served now", registry=registry)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            timeout = io_timeout_s  # every socket operation (StreamRequestHandler.setup applies it)

            def parse_request(self) -> bool:
                ok = super().parse_request()  # the request line and headers have been read by now
                server = self.server
                if isinstance(server, _BoundedServer):
                    server.request_read(self.connection)
                return ok

            def do_GET(self) -> None:  # noqa: N802 (http.server naming)
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(outer._registry), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/livez"):
                    ok, body = run_checks(outer.liveness)
                    self._send(200 if ok else 503, body.encode(), "text/plain; charset=utf-8")
                elif path == "/readyz":
                    ok, body = run_checks({**outer.liveness, **outer.readiness})
                    self._send(200 if ok else 503, body.encode(), "text/plain; charset=utf-8")
                else:
                    self._send(404, b"not found: try /healthz, /readyz or /metrics\n", "text/plain")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("http: " + format, *args)

        try:
            self._httpd = _BoundedServer(address, Handler, max_connections=max_connections,
                                         io_timeout_s=io_timeout_s, refused=self.refused.inc,
                                         evicted=self.evicted.inc, open_gauge=self.open.set)
        except OSError as err:
            self._unregister()
            raise OSError(err.errno, f"cannot serve health and metrics on {address[0]}:{address[1]}: "
                                     f"{err.strerror or err}") from err
        self._thread: threading.Thread | None = None

    def _unregister(self) -> None:
        for metric in (self.refused, self.evicted, self.open):
            try:
                self._registry.unregister(metric)
            except KeyError:
                pass

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="node-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()
        self._unregister()
