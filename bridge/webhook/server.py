"""The HTTPS shell: `/mutate` (AdmissionReview v1), `/healthz`, `/readyz`, `/metrics`, on asyncio streams.

Why asyncio (measured with `bench/webhook_bench.py`, wrk as the client, 2 shared cores): one event-loop thread
serves every keep-alive connection, so concurrency costs no threads and no GIL hand-offs between them. The previous
stdlib `ThreadingHTTPServer` (one thread per connection) spent its extra CPU on 16-64 threads contending for the
GIL; its p99 at 64 connections was several times the loop's. Numbers are in the bench's docstring / the report.

Handlers are plain `body -> (status, body)` callables. A path listed in `inline` runs on the loop thread: for a
CPU-only handler (the pure review, ~0.3 ms) a thread hop costs more than it saves. Every other path runs in a small
thread pool (`run_in_executor`), so a handler that does blocking API I/O (a namespace GET on a cache miss, a
template create) never stalls the loop, other connections or `/healthz`. Declaring a handler inline is a promise
that it never blocks.

Guarantees:
* TLS 1.2+; the certificate is chosen per accepted connection from `ReloadingContext.current()`, so a rotated
  cert/key pair is used by the next handshake while established connections keep theirs; the handshake runs in
  the connection's own task with `io_timeout`, so a silent or slow client never stalls others;
* every read (request head, keep-alive idle wait, body) and every flush is bounded by `io_timeout`; past it the
  connection is closed;
* a body must have a Content-Length no larger than `max_body` (413 with a message, connection closed, body never
  read); chunked or missing length is refused (411); a malformed request line, header or length is 400 and a head
  larger than `HEAD_LIMIT` is 431, each with a plain-text message and the connection closed;
* a handler that raises (against its contract) yields a 500 with a message and the server keeps serving;
* each response is one TLS write (head and body together); asyncio sets TCP_NODELAY on every connection;
* `shutdown()` stops accepting, aborts open connections, stops the loop and joins the loop thread and the pool:
  no thread outlives the server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from bridge.webhook.metrics import WebhookMetrics
from bridge.webhook.tls import ReloadingContext

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024  # the API server's own request limit is 3 MiB; a pod review is far smaller
HEAD_LIMIT = 64 * 1024  # request line + headers
DISCARD_LIMIT = 64 * 1024  # a body on a refused request is read and dropped up to this size, else the conn closes
LINGER_BYTES = 8 * 1024 * 1024  # after an error answer, read and drop up to this much of a body still arriving...
LINGER_SECONDS = 2.0  # ...for at most this long, so the client can finish sending and read the answer
Mutate = Callable[[bytes], tuple[int, bytes]]
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
        mutate_paths: dict[str, Mutate],
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
    ) -> None:
        self.metrics = metrics or WebhookMetrics()
        self._handlers = dict(mutate_paths)
        self._inline = frozenset(inline)
        unknown = self._inline - self._handlers.keys()
        if unknown:
            raise ValueError(f"inline paths without a handler: {sorted(unknown)}")
        self._known = _SERVICE_PATHS | self._handlers.keys()
        self._tls = tls
        self._ready = ready
        self._max_body = max_body
        self._timeout = io_timeout
        self._workers = workers
        try:
            self._sock = socket.create_server((host, port), backlog=256)
        except OSError as err:
            raise OSError(err.errno, f"webhook cannot listen on {host}:{port}: {err.strerror}") from err
        self._sock.setblocking(False)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    # --- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.serve_forever, name="webhook-https", daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("webhook event loop did not start")
        return self._thread

    def serve_forever(self) -> None:
        pool = ThreadPoolExecutor(self._workers, thread_name_prefix="webhook-handler")
        try:
            asyncio.run(self._serve(pool))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            self._sock.close()
            self._done.set()

    def shutdown(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not self._done.is_set():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop closed in between
                pass
            self._done.wait(10)
        elif not self._started.is_set():
            self._sock.close()
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> WebhookServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    async def _serve(self, pool: ThreadPoolExecutor) -> None:
        loop = asyncio.get_running_loop()
        self._loop, self._stop = loop, asyncio.Event()
        conns: set[asyncio.Task[None]] = set()
        accept = asyncio.create_task(self._accept(loop, pool, conns))
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            accept.cancel()
            for task in list(conns):
                task.cancel()
            await asyncio.gather(accept, *conns, return_exceptions=True)

    async def _accept(self, loop: asyncio.AbstractEventLoop, pool: ThreadPoolExecutor,
                      conns: set[asyncio.Task[None]]) -> None:
        while True:
            try:
                sock, _addr = await loop.sock_accept(self._sock)
            except OSError as err:  # EMFILE and friends: back off instead of spinning
                log.warning("accept failed: %s", err)
                await asyncio.sleep(0.1)
                continue
            task = asyncio.create_task(self._connection(loop, pool, sock))
            conns.add(task)
            task.add_done_callback(conns.discard)

    # --- one connection --------------------------------------------------------------------------------------

    async def _connection(self, loop: asyncio.AbstractEventLoop, pool: ThreadPoolExecutor,
                          sock: socket.socket) -> None:
        peer = sock.getpeername()
        reader = asyncio.StreamReader(limit=HEAD_LIMIT, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol, sock, ssl=self._tls.current(), ssl_handshake_timeout=self._timeout,
                ssl_shutdown_timeout=min(self._timeout, 5.0))
        except (OSError, asyncio.TimeoutError) as err:  # plain HTTP, bad ClientHello, silent client, reset
            log.debug("TLS handshake with %s failed: %s", peer, err)
            sock.close()
            return
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        try:
            while await self._exchange(reader, writer, pool):
                pass
        except _Reject as rej:
            self._write(writer, rej.code, (rej.message + "\n").encode(), _TEXT, "other", close=True)
            await _linger(reader, rej.linger)
        except (OSError, EOFError, asyncio.TimeoutError, asyncio.IncompleteReadError) as err:
            log.debug("connection from %s ended: %r", peer, err)
        except asyncio.CancelledError:  # server shutdown
            transport.abort()
            raise
        transport.close()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        pool: ThreadPoolExecutor) -> bool:
        """Read one request and answer it; False when the connection should close."""
        try:
            async with asyncio.timeout(self._timeout):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as err:
            if err.partial.strip():
                raise _Reject(400, "incomplete request head") from None
            return False  # the client closed an idle keep-alive connection
        except asyncio.LimitOverrunError:
            raise _Reject(431, f"request head exceeds {HEAD_LIMIT} bytes") from None
        method, target, version, headers = _parse_head(head)
        path = target.split("?", 1)[0]
        label = path if path in self._known else "other"
        keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        if method == "POST" and path in self._handlers:
            body = await self._read_body(reader, writer, headers)
            start = time.perf_counter()
            handler = self._handlers[path]
            try:
                if path in self._inline:
                    code, out = handler(body)
                else:
                    code, out = await asyncio.get_running_loop().run_in_executor(pool, handler, body)
            except Exception as err:  # the handler's contract is never to raise; this keeps the server alive anyway
                log.exception("handler for %s raised", path)
                code, out = 500, _status_json(500, f"internal error: {type(err).__name__}")
            self._write(writer, code, out, "application/json", label, close=not keep)
            self.metrics.latency.observe(time.perf_counter() - start)
        else:
            await self._discard_body(reader, headers)
            code, text, ctype = self._answer(method, path)
            self._write(writer, code, text, ctype, label, close=not keep)
        if writer.transport.get_write_buffer_size() > 0:
            async with asyncio.timeout(self._timeout):
                await writer.drain()
        return keep

    def _answer(self, method: str, path: str) -> tuple[int, bytes, str]:
        if method != "GET":
            if path in self._handlers:
                return 405, f"method {method} is not allowed; POST an AdmissionReview to {path}\n".encode(), _TEXT
            if path in self._known:
                return 405, f"method {method} is not allowed on {path}; use GET\n".encode(), _TEXT
            return 404, f"{method} {path[:100]!r} is not served; POST to /mutate\n".encode(), _TEXT
        if path == "/healthz":
            return 200, b"ok\n", _TEXT
        if path == "/readyz":
            ready, why = self._ready()
            return (200, b"ok\n", _TEXT) if ready else (503, f"not ready: {why}\n".encode(), _TEXT)
        if path == "/metrics":
            return 200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST
        if path in self._handlers:
            return 405, f"{path} accepts POST with an AdmissionReview body\n".encode(), _TEXT
        return 404, f"no such endpoint {path[:100]!r}; try /mutate, /healthz, /readyz, /metrics\n".encode(), _TEXT

    async def _read_body(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         headers: dict[str, str]) -> bytes:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise _Reject(411, "chunked request bodies are not accepted; send Content-Length")
        raw = headers.get("content-length")
        if raw is None:
            raise _Reject(411, "Content-Length is required")
        length = _parse_length(raw)
        if length > self._max_body:
            raise _Reject(413, f"request body of {length} bytes exceeds the {self._max_body}-byte limit",
                          linger=min(length, LINGER_BYTES))
        if headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        async with asyncio.timeout(self._timeout):
            return await reader.readexactly(length)

    async def _discard_body(self, reader: asyncio.StreamReader, headers: dict[str, str]) -> None:
        if "transfer-encoding" in headers:
            raise _Reject(411, "request bodies must have a Content-Length")
        length = _parse_length(headers.get("content-length", "0"))
        if length > DISCARD_LIMIT:
            raise _Reject(413, f"request body of {length} bytes is not accepted here", linger=min(length, LINGER_BYTES))
        if length:
            async with asyncio.timeout(self._timeout):
                await reader.readexactly(length)

    def _write(self, writer: asyncio.StreamWriter, code: int, body: bytes, content_type: str, label: str, *,
               close: bool) -> None:
        head = (f"HTTP/1.1 {code} {HTTPStatus(code).phrase}\r\nServer: dra-bridge-webhook\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                + ("Connection: close\r\n\r\n" if close else "\r\n"))
        writer.write(head.encode("latin-1") + body)
        self.metrics.http.labels(label, str(code)).inc()


async def _linger(reader: asyncio.StreamReader, budget: int) -> None:
    """Lingering close: a TLS connection closed while the peer is still sending is reset, and the peer may then
    never read the error answer; so drop (never buffer) what still arrives, within a byte and time budget."""
    try:
        async with asyncio.timeout(LINGER_SECONDS):
            while budget > 0:
                chunk = await reader.read(min(65536, budget))
                if not chunk:
                    return
                budget -= len(chunk)
    except (OSError, asyncio.TimeoutError):
        return


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
