"""The HTTPS shell: `/mutate` (AdmissionReview v1), `/healthz`, `/readyz`, `/metrics`, on one asyncio event loop.

Design (stdlib only; measured with `bench/webhook_bench.py`, wrk as the client, on 2 shared cores): one event-loop
thread drives every connection through non-blocking `ssl.SSLSocket`s registered with `loop.add_reader`, so TLS
records are read, decrypted, encrypted and written inside OpenSSL by one C call each. Against the alternatives on
this machine: asyncio streams with `start_tls` (TLS in `asyncio.sslproto`, pure Python over memory BIOs) served a
bare echo at ~4-5k req/s; this loop ~14-22k; the stdlib `ThreadingHTTPServer` (a thread per connection, GIL
hand-offs across cores on every request) ~2.5k with its p99 collapsing at 64 connections. Per review the shell
now costs ~60 us, so the review itself dominates.

Handlers are plain `body -> (status, body)` callables. A path listed in `inline` runs on the loop thread: for a
CPU-only handler (the pure review, ~0.25 ms) a thread hop costs more than it saves. Every other path runs in a
small thread pool (`run_in_executor`), so a handler that does blocking API I/O (a namespace GET on a cache miss, a
template create) never stalls the loop, other connections or `/healthz`; while it runs, that connection reads
nothing more. Declaring a handler inline is a promise that it never blocks.

Guarantees:
* TLS 1.2+; the certificate is chosen per accepted connection from `ReloadingContext.current()`, so a rotated
  cert/key pair is used by the next handshake while established connections keep theirs; handshakes are
  non-blocking, so a silent or slow client never stalls others;
* a connection with no progress (handshake, request head, body, or a client not reading its answer) for
  `io_timeout` is closed by a sweeper (one timer for the server, not one per request);
* a body must have a Content-Length no larger than `max_body` (413 with a message, body never buffered); chunked
  or missing length is refused (411); a malformed request line, header or length is 400 and a head larger than
  `HEAD_LIMIT` is 431, each with a plain-text message and `Connection: close`. After such an answer the
  connection lingers (drops what still arrives, bounded in bytes and time) so the client can finish sending and
  read the answer instead of being reset mid-send;
* a handler that raises (against its contract) yields a 500 with a message and the server keeps serving;
* each response is one TLS write (head and body together) on a TCP_NODELAY socket;
* `shutdown()` stops accepting, closes open connections, stops the loop and joins the loop thread and the pool:
  no thread outlives the server;
* with `client_auth` (`--client-ca-file`), a POST to a handler path from a client whose certificate `ClientAuth`
  does not accept (none, or not one of the accepted names) is answered `403` with a Status naming why, before the
  body reaches a handler: no review, no template, no Event. `/healthz`, `/readyz` and `/metrics` stay open to
  probes, which carry no client certificate.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from http import HTTPStatus

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from bridge.webhook.metrics import WebhookMetrics
from bridge.webhook.tls import ClientAuth, ReloadingContext

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024  # the API server's own request limit is 3 MiB; a pod review is far smaller
HEAD_LIMIT = 64 * 1024  # request line + headers
DISCARD_LIMIT = 64 * 1024  # a body on a request not for a handler is dropped up to this size, else 413
LINGER_BYTES = 8 * 1024 * 1024  # after an error answer, drop up to this much of a body still arriving...
LINGER_SECONDS = 2.0  # ...for at most this long, so the client can finish sending and read the answer
RECV_SIZE = 256 * 1024
Reply = tuple[int, bytes]
Deferred = Callable[[], Reply]
# An inline handler may return a `Deferred` instead of a reply when it finds it needs blocking I/O (a cache miss):
# the server then runs that callable in the pool. A pooled handler's return value is always a reply.
Mutate = Callable[[bytes], Reply | Deferred]
_TEXT = "text/plain; charset=utf-8"
_SERVICE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


def _status_json(code: int, message: str) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                       "message": message}).encode()


class _Reject(Exception):
    """A request answered with an error and then the connection closed (framing can no longer be trusted)."""

    def __init__(self, code: int, message: str, linger: int = DISCARD_LIMIT) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.linger = linger  # bytes of a request body that may still be in flight


class WebhookServer:
    """HTTPS server for the webhook. `mutate_paths` maps POST paths to handlers (`/mutate` in production; the
    bench adds `/echo`); `inline` names the paths whose handlers never block and may run on the event loop.

    The listening socket is bound in the constructor (so `port` is known at once and a bind error is raised
    there); `start()` serves from a daemon thread, `serve_forever()` from the calling thread."""

    def __init__(
        self,
        mutate_paths: Mapping[str, Mutate],
        tls: ReloadingContext,
        *,
        host: str = "0.0.0.0",
        port: int = 8443,
        metrics: WebhookMetrics | None = None,
        ready: Callable[[], tuple[bool, str]] = lambda: (True, ""),
        max_body: int = MAX_BODY,
        io_timeout: float = 30.0,
        inline: Iterable[str] = (),
        workers: int = 8,
        client_auth: ClientAuth | None = None,
    ) -> None:
        self.metrics = metrics or WebhookMetrics()
        self.handlers = dict(mutate_paths)
        self.inline = frozenset(inline)
        unknown = self.inline - self.handlers.keys()
        if unknown:
            raise ValueError(f"inline paths without a handler: {sorted(unknown)}")
        self.known = _SERVICE_PATHS | self.handlers.keys()
        self.tls = tls
        self.client_auth = client_auth
        if client_auth is not None and tls.client_ca_file != client_auth.ca_file:
            raise ValueError("client_auth needs a TLS context that verifies client certificates against its CA")
        self.ready = ready
        self.max_body = max_body
        self.timeout = io_timeout
        self._workers = workers
        try:
            self._sock = socket.create_server((host, port), backlog=256)
        except OSError as err:
            raise OSError(err.errno, f"webhook cannot listen on {host}:{port}: {err.strerror}") from err
        self._sock.setblocking(False)
        self.loop = asyncio.new_event_loop()
        self.pool: ThreadPoolExecutor | None = None
        self.conns: set[_Conn] = set()
        self._sweeper: asyncio.TimerHandle | None = None
        self._serving = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    # --- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.serve_forever, name="webhook-https", daemon=True)
        self._thread.start()
        if not self._serving.wait(10):
            raise RuntimeError("webhook event loop did not start")
        return self._thread

    def serve_forever(self) -> None:
        self.pool = ThreadPoolExecutor(self._workers, thread_name_prefix="webhook-handler")
        try:
            self.loop.add_reader(self._sock.fileno(), self._accept)
            self._sweeper = self.loop.call_later(self._sweep_period(), self._sweep)
            self.loop.call_soon(self._serving.set)
            self.loop.run_forever()
        finally:
            self._close_all()
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.loop.close()
            self._sock.close()
            self._done.set()

    def shutdown(self) -> None:
        if self._serving.is_set() and not self._done.is_set():
            try:
                self.loop.call_soon_threadsafe(self.loop.stop)
            except RuntimeError:  # the loop closed in between
                pass
            self._done.wait(10)
        elif not self._serving.is_set():
            self._sock.close()
            self.loop.close()
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> WebhookServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _close_all(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        self.loop.remove_reader(self._sock.fileno())
        for conn in list(self.conns):
            conn.close(graceful=False)

    def _sweep_period(self) -> float:
        return max(0.05, min(1.0, self.timeout / 4))

    def _sweep(self) -> None:
        now = self.loop.time()
        for conn in list(self.conns):
            if not conn.busy and now > conn.deadline:
                log.debug("closing connection from %s: no progress for %.1f s", conn.peer, self.timeout)
                conn.close()
        self._sweeper = self.loop.call_later(self._sweep_period(), self._sweep)

    def _accept(self) -> None:
        for _ in range(64):
            try:
                raw, peer = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # EMFILE and friends: keep serving the connections we have
                log.warning("accept failed: %s", err)
                return
            try:
                raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                tls = self.tls.current().wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
                tls.setblocking(False)
            except OSError as err:
                log.debug("connection from %s dropped: %s", peer, err)
                raw.close()
                continue
            conn = _Conn(self, tls, peer)
            self.conns.add(conn)
            self.loop.add_reader(tls.fileno(), conn.on_readable)

    # --- requests --------------------------------------------------------------------------------------------

    def answer(self, method: str, path: str) -> tuple[int, bytes, str]:
        if method != "GET":
            if path in self.handlers:
                return 405, f"method {method} is not allowed; POST an AdmissionReview to {path}\n".encode(), _TEXT
            if path in self.known:
                return 405, f"method {method} is not allowed on {path}; use GET\n".encode(), _TEXT
            return 404, f"{method} {path[:100]!r} is not served; POST to /mutate\n".encode(), _TEXT
        if path == "/healthz":
            return 200, b"ok\n", _TEXT
        if path == "/readyz":
            ready, why = self.ready()
            return (200, b"ok\n", _TEXT) if ready else (503, f"not ready: {why}\n".encode(), _TEXT)
        if path == "/metrics":
            return 200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST
        if path in self.handlers:
            return 405, f"{path} accepts POST with an AdmissionReview body\n".encode(), _TEXT
        return 404, f"no such endpoint {path[:100]!r}; try /mutate, /healthz, /readyz, /metrics\n".encode(), _TEXT

    def call(self, path: str, handler: Callable[..., Reply | Deferred], *args: bytes) -> Reply | Deferred:
        try:
            return handler(*args)
        except Exception as err:  # the handler's contract is never to raise; this keeps the server alive anyway
            log.exception("handler for %s raised", path)
            return 500, _status_json(500, f"internal error: {type(err).__name__}")

    def response(self, code: int, body: bytes, content_type: str, label: str, close: bool) -> bytes:
        self.metrics.http.labels(label, str(code)).inc()
        head = (f"HTTP/1.1 {code} {HTTPStatus(code).phrase}\r\nServer: dra-bridge-webhook\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                + ("Connection: close\r\n\r\n" if close else "\r\n"))
        return head.encode("latin-1") + body


class _Conn:
    """One TLS connection: handshake, then requests parsed from `buf` and answered in order. At most one request
    is in a handler at a time; while its answer cannot be written (or a pooled handler runs), nothing more is read."""

    def __init__(self, server: WebhookServer, sock: ssl.SSLSocket, peer: object) -> None:
        self.server = server
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.loop = server.loop
        self.buf = bytearray()
        self.out = b""
        self.handshaking = True
        self.busy = False  # a pooled handler is running
        self.reading = True  # registered with add_reader
        self.close_after = False  # close once `out` is written
        self.linger = -1  # >= 0: dropping up to this many bytes before closing
        self.closed = False
        self.notified = False  # our close_notify is sent
        self.continued = False  # 100 Continue already sent for the current request
        self.denied: str | None = None  # why this client may not call handlers (client_auth), set at handshake
        self.deadline = self.loop.time() + server.timeout

    # --- I/O -------------------------------------------------------------------------------------------------

    def on_readable(self) -> None:
        if self.closed:
            return
        if self.handshaking:
            try:
                self.sock.do_handshake()
            except ssl.SSLWantReadError:
                return
            except ssl.SSLWantWriteError:
                self._want_write()
                return
            except (OSError, ValueError) as err:  # plain HTTP, TLS < 1.2, bad ClientHello, untrusted client cert
                log.debug("TLS handshake with %s failed: %s", self.peer, err)
                self.close(graceful=False)
                return
            self.handshaking = False
            if self.server.client_auth is not None:
                self.denied = self.server.client_auth.check(self.sock.getpeercert())
        eof = False
        while True:
            try:
                data = self.sock.recv(RECV_SIZE)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLWantWriteError:
                self._want_write()
                break
            except OSError as err:
                log.debug("connection from %s ended: %s", self.peer, err)
                self.close(graceful=False)
                return
            if not data:
                eof = True
                break
            if self.linger >= 0:
                self.linger -= len(data)
                if self.linger < 0:
                    self.close()
                    return
                continue
            self.buf += data
            self.deadline = self.loop.time() + self.server.timeout
        if self.linger < 0:
            self.process()
        if eof and not self.closed:
            if self.buf.strip() and not self.busy and not self.out:
                log.debug("connection from %s closed mid-request", self.peer)
            self.close(graceful=not self.out and not self.busy)

    def on_writable(self) -> None:
        if self.closed:
            return
        if self.handshaking:
            self.loop.remove_writer(self.fd)
            self.on_readable()
            return
        self.flush()

    def _want_write(self) -> None:
        self.loop.add_writer(self.fd, self.on_writable)

    def _pause(self) -> None:
        if self.reading:
            self.loop.remove_reader(self.fd)
            self.reading = False

    def _resume(self) -> None:
        if not self.reading and not self.closed:
            self.loop.add_reader(self.fd, self.on_readable)
            self.reading = True
            self.loop.call_soon(self.on_readable)  # data may sit decrypted in the TLS layer, invisible to epoll

    def send(self, data: bytes) -> None:
        self.out += data
        self.flush()

    def flush(self) -> None:
        while self.out:
            try:
                n = self.sock.send(self.out)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                self._pause()
                self._want_write()
                return
            except OSError as err:
                log.debug("connection from %s ended while writing: %s", self.peer, err)
                self.close(graceful=False)
                return
            self.out = self.out[n:]
        self.loop.remove_writer(self.fd)
        self.deadline = self.loop.time() + self.server.timeout
        if self.close_after:
            if self.linger >= 0:  # tell the client we are done, but keep reading so it is not reset mid-send
                self._close_notify()
                self.deadline = self.loop.time() + min(LINGER_SECONDS, self.server.timeout)
                self._resume()
            else:
                self.close()
        elif not self.busy:
            self._resume()

    def close(self, graceful: bool = True) -> None:
        if self.closed:
            return
        self.closed = True
        self.server.conns.discard(self)
        self.loop.remove_reader(self.fd)
        self.loop.remove_writer(self.fd)
        if graceful and not self.handshaking:
            self._close_notify()
        self.sock.close()

    def _close_notify(self) -> None:
        if not self.notified:
            self.notified = True
            try:
                self.sock.unwrap()  # sends close_notify; the peer's reply is not awaited (non-blocking)
            except (OSError, ValueError):
                pass

    # --- HTTP ------------------------------------------------------------------------------------------------

    def process(self) -> None:
        """Answer every complete request in `buf`, in order, until one must wait (pool, unwritten answer)."""
        while not (self.busy or self.out or self.closed or self.close_after):
            try:
                if not self._one():
                    return
            except _Reject as rej:
                self.buf.clear()
                self.close_after = True
                self.linger = rej.linger
                self.send(self.server.response(rej.code, (rej.message + "\n").encode(), _TEXT, "other", True))
                return

    def _one(self) -> bool:
        """Handle the request at the head of `buf`; False when it is not complete yet."""
        srv = self.server
        end = self.buf.find(b"\r\n\r\n", 0, HEAD_LIMIT + 4)
        if end < 0:
            if len(self.buf) > HEAD_LIMIT:
                raise _Reject(431, f"request head exceeds {HEAD_LIMIT} bytes")
            return False
        method, target, version, headers = _parse_head(bytes(self.buf[:end + 4]))
        path = target.split("?", 1)[0]
        label = path if path in srv.known else "other"
        keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        handler = srv.handlers.get(path) if method == "POST" else None
        length = self._length(headers, handler is not None)
        if len(self.buf) < end + 4 + length:
            if handler is not None and not self.continued and headers.get("expect", "").lower() == "100-continue":
                self.continued = True
                self.send(b"HTTP/1.1 100 Continue\r\n\r\n")
            return False
        body = bytes(self.buf[end + 4:end + 4 + length])
        del self.buf[:end + 4 + length]
        self.continued = False
        self.close_after = not keep
        if handler is None:
            code, text, ctype = srv.answer(method, path)
            self.send(srv.response(code, text, ctype, label, not keep))
        elif self.denied is not None:
            log.debug("refused %s from %s: %s", path, self.peer, self.denied)
            message = f"this webhook accepts AdmissionReviews only from the API server: {self.denied}"
            self.send(srv.response(403, _status_json(403, message), "application/json", label, not keep))
        else:
            start = time.perf_counter()
            if path in srv.inline:
                result = srv.call(path, handler, body)
                if not isinstance(result, tuple):
                    self._pooled(path, result, label, keep, start)
                    return True
                code, out = result
                self.send(srv.response(code, out, "application/json", label, not keep))
                srv.metrics.latency.observe(time.perf_counter() - start)
            else:
                self._pooled(path, functools.partial(handler, body), label, keep, start)
        return True

    def _pooled(self, path: str, job: Callable[[], Reply | Deferred], label: str, keep: bool, start: float) -> None:
        assert self.server.pool is not None
        self.busy = True
        self._pause()
        fut = self.server.pool.submit(self.server.call, path, job)
        fut.add_done_callback(lambda f: self.loop.call_soon_threadsafe(self._pooled_done, f, label, keep, start))

    def _pooled_done(self, fut: Future[Reply | Deferred], label: str, keep: bool, start: float) -> None:
        self.busy = False
        if self.closed:
            return
        result = fut.result()
        if isinstance(result, tuple):
            code, out = result
        else:
            log.error("pooled handler for %s returned %r instead of (status, body)", label, type(result).__name__)
            code, out = 500, _status_json(500, "internal error: handler returned no reply")
        self.send(self.server.response(code, out, "application/json", label, not keep))
        self.server.metrics.latency.observe(time.perf_counter() - start)
        if not self.closed and not self.out and not self.close_after:
            self.process()

    def _length(self, headers: dict[str, str], for_handler: bool) -> int:
        if for_handler:
            if "chunked" in headers.get("transfer-encoding", "").lower():
                raise _Reject(411, "chunked request bodies are not accepted; send Content-Length")
            raw = headers.get("content-length")
            if raw is None:
                raise _Reject(411, "Content-Length is required")
            length = _parse_length(raw)
            if length > self.server.max_body:
                raise _Reject(413, f"request body of {length} bytes exceeds the {self.server.max_body}-byte limit",
                              linger=min(length, LINGER_BYTES))
            return length
        if "transfer-encoding" in headers:
            raise _Reject(411, "request bodies must have a Content-Length")
        length = _parse_length(headers.get("content-length", "0"))
        if length > DISCARD_LIMIT:
            raise _Reject(413, f"request body of {length} bytes is not accepted here", linger=min(length, LINGER_BYTES))
        return length


def _parse_length(raw: str) -> int:
    if not raw.isdigit() or len(raw) > 18:
        raise _Reject(400, f"invalid Content-Length {raw[:40]!r}")
    return int(raw)


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    """Request line and headers (names lower-cased; repeated headers joined with ', ', except a repeated
    Content-Length, which must agree). Raises `_Reject(400)` on anything malformed."""
    lines = head[:-4].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[1].startswith("/") or \
            parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        raise _Reject(400, f"malformed request line {lines[0][:100]!r}; expected e.g. 'POST /mutate HTTP/1.1'")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or " " in name:
            raise _Reject(400, f"malformed header line {line[:100]!r}")
        key, value = name.lower(), value.strip()
        if key in headers:
            if key == "content-length" and headers[key] != value:
                raise _Reject(400, "conflicting Content-Length headers")
            if key != "content-length":
                value = headers[key] + ", " + value
        headers[key] = value
    return parts[0], parts[1], parts[2], headers
