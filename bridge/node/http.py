"""The daemon's HTTP endpoint: `/healthz` (alive), `/readyz` (ready), `/metrics` (Prometheus text format).

Health is computed on request by named check functions (`None` = ok, a string = what is wrong), so each half of
the daemon contributes its own: the device plugin's liveness dials its own socket exactly as the kubelet would
(alive means "the kubelet could talk to me", not "the process exists"); its readiness is "registered". The DRA
half adds its checks the same way. Responses are plain text listing each check; 200 when all pass, else 503.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger("bridge.node.http")

Check = Callable[[], str | None]


class AddressError(ValueError):
    """An --http-address value that is not `host:port`, `:port` or `off`."""


def parse_address(value: str) -> tuple[str, int] | None:
    """`:8080` -> ("0.0.0.0", 8080); `127.0.0.1:0` -> ephemeral port; `off` -> None (no HTTP endpoint)."""
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


class HealthServer:
    def __init__(self, address: tuple[str, int], registry: CollectorRegistry,
                 liveness: Mapping[str, Check], readiness: Mapping[str, Check]) -> None:
        self._registry = registry
        self.liveness = dict(liveness)
        self.readiness = dict(readiness)
        outer = self

        class Handler(BaseHTTPRequestHandler):
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
            self._httpd = ThreadingHTTPServer(address, Handler)
        except OSError as err:
            raise OSError(err.errno, f"cannot serve health and metrics on {address[0]}:{address[1]}: "
                                     f"{err.strerror or err}") from err
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

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
