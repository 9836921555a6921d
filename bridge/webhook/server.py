"""The HTTPS shell: `/mutate` (AdmissionReview v1), `/healthz`, `/readyz`, `/metrics`.

Stack: stdlib `ThreadingHTTPServer` + `ssl`, one thread per keep-alive connection. Measured with
`bench/webhook_bench.py --asyncio-echo` on 2 shared cores (client on the same cores): the same echo on asyncio
streams was within noise at 1 and 16 connections (~2.5-3k req/s) but 2.2x the throughput and ~4x lower p99 at 64
connections, where 64 threads contend for the GIL. The API server keeps few connections per replica, so the
threaded stack was kept for now (simpler blocking side effects through `bridge.kube`); moving the shell to asyncio
(pure review inline, side effects in an executor) is the known next step if bursts of >16 concurrent reviews per
replica matter.

Guarantees:
* the TLS handshake runs in the connection's thread, never in the accept loop, with the socket timeout applied,
  so a slow or silent client cannot stall other clients; the certificate comes from `ReloadingContext` at accept;
* a body must have a Content-Length no larger than `max_body` (413 with a message, connection closed, body never
  read); chunked or missing length is refused (411); a read that stalls past `timeout` closes the connection;
* every error answer has a plain-text or JSON message; the mutate callable never raises (it is `review`'s
  contract), and if it does anyway the client gets a 500 with a message and the server keeps serving;
* responses are written with one `sendall` and TCP_NODELAY (two small writes + delayed ACK would add 40 ms).
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from bridge.webhook.metrics import WebhookMetrics
from bridge.webhook.tls import ReloadingContext

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024  # the API server's own request limit is 3 MiB; a pod review is far smaller
Mutate = Callable[[bytes], tuple[int, bytes]]


def _status_json(code: int, message: str) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                       "message": message}).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "dra-bridge-webhook"
    sys_version = ""
    error_content_type = "text/plain; charset=utf-8"
    error_message_format = "%(code)d %(message)s: %(explain)s\n"
    server: _TlsServer

    def setup(self) -> None:
        self.timeout = self.server.io_timeout
        super().setup()
        conn = self.connection
        if isinstance(conn, ssl.SSLSocket):
            conn.do_handshake()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        log.debug("http: " + format, *args)

    def _reply(self, code: int, body: bytes, content_type: str = "application/json", *, close: bool = False) -> None:
        head = [f"HTTP/1.1 {code} {HTTPStatus(code).phrase}", f"Content-Type: {content_type}",
                f"Content-Length: {len(body)}"]
        if close:
            head.append("Connection: close")
            self.close_connection = True
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        path = self.path.split("?", 1)[0]
        self.server.metrics.http.labels(path if path in _KNOWN else "other", str(code)).inc()

    def _text(self, code: int, message: str, *, close: bool = False) -> None:
        self._reply(code, (message + "\n").encode(), "text/plain; charset=utf-8", close=close)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._text(200, "ok")
        elif path == "/readyz":
            ready, why = self.server.ready()
            self._text(200 if ready else 503, "ok" if ready else f"not ready: {why}")
        elif path == "/metrics":
            self._reply(200, generate_latest(self.server.metrics.registry), CONTENT_TYPE_LATEST)
        elif path in self.server.mutate_paths:
            self._text(405, f"{path} accepts POST with an AdmissionReview body")
        else:
            self._text(404, f"no such endpoint {path[:100]!r}; try /mutate, /healthz, /readyz, /metrics")

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        handler = self.server.mutate_paths.get(path)
        if handler is None:
            self._discard_body_or_close()
            self._text(404 if path not in _KNOWN else 405, f"POST {path[:100]!r} is not served; POST to /mutate")
            return
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self._text(411, "chunked request bodies are not accepted; send Content-Length", close=True)
            return
        raw_length = self.headers.get("Content-Length")
        if raw_length is None:
            self._text(411, "Content-Length is required", close=True)
            return
        try:
            length = int(raw_length)
            if length < 0:
                raise ValueError
        except ValueError:
            self._text(400, f"invalid Content-Length {raw_length[:40]!r}", close=True)
            return
        if length > self.server.max_body:
            self._text(413, f"request body of {length} bytes exceeds the {self.server.max_body}-byte limit",
                       close=True)
            return
        start = time.perf_counter()
        body = self.rfile.read(length)
        if len(body) != length:
            self.close_connection = True
            return
        try:
            code, out = handler(body)
        except Exception as err:  # the handler's contract is never to raise; this keeps the server alive anyway
            log.exception("mutate handler raised")
            code, out = 500, _status_json(500, f"internal error: {type(err).__name__}")
        self._reply(code, out)
        self.server.metrics.latency.observe(time.perf_counter() - start)

    def _discard_body_or_close(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if 0 <= length <= 64 * 1024:
            self.rfile.read(length)
        else:
            self.close_connection = True

    def _not_allowed(self) -> None:
        self._discard_body_or_close()
        self._text(405, f"method {self.command} is not allowed", close=self.close_connection)

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _not_allowed  # noqa: N815


_KNOWN = frozenset({"/mutate", "/echo", "/healthz", "/readyz", "/metrics"})


class _TlsServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, addr: tuple[str, int], tls: ReloadingContext, mutate_paths: dict[str, Mutate],
                 metrics: WebhookMetrics, ready: Callable[[], tuple[bool, str]], max_body: int, io_timeout: float):
        self.tls = tls
        self.mutate_paths = mutate_paths
        self.metrics = metrics
        self.ready = ready
        self.max_body = max_body
        self.io_timeout = io_timeout
        super().__init__(addr, _Handler)

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = self.socket.accept()
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return self.tls.current().wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr
        except Exception:
            sock.close()
            raise

    def handle_error(self, request: Any, client_address: Any) -> None:
        # handshake failures, resets and timeouts of one client: that client's problem, not a server failure
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class WebhookServer:
    """HTTPS server for the webhook. `mutate_paths` maps POST paths to handlers (`/mutate` in production; the
    bench adds `/echo`)."""

    def __init__(
        self,
        mutate_paths: dict[str, Mutate],
        tls: ReloadingContext,
        *,
        host: str = "0.0.0.0",
        port: int = 8443,
        metrics: WebhookMetrics | None = None,
        ready: Callable[[], tuple[bool, str]] = lambda: (True, ""),
        max_body: int = MAX_BODY,
        io_timeout: float = 30.0,
    ) -> None:
        self.metrics = metrics or WebhookMetrics()
        self._server = _TlsServer((host, port), tls, dict(mutate_paths), self.metrics, ready, max_body, io_timeout)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="webhook-https", daemon=True)
        self._thread.start()
        return self._thread

    def serve_forever(self) -> None:
        self._server.serve_forever(poll_interval=0.2)

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> WebhookServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
