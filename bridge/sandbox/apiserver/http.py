"""The HTTP shell: parse a request, route it, call `Rest`, write JSON (or a chunked watch stream).

HTTP/1.1 with keep-alive, one thread per connection (watches block only their own thread). Paths follow the real
server: `/api/v1/...`, `/apis/<group>/<version>/...`, optional `namespaces/<ns>/`, `<plural>[/<name>[/<sub>]]`,
plus the legacy `/watch/` prefix. Every error leaves as a `Status` object with the real HTTP code.

What travels on the wire is decided per request in `encoding.Wire` (negotiation, protobuf, `Table`), OpenAPI comes
from `openapi.py` and `?fieldValidation` from `fieldvalidation.py`; this module only calls them.
"""

from __future__ import annotations

import json
import logging
import select
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from . import discovery, fieldvalidation
from .encoding import Wire, decode_body
from .openapi import V2_PROTOBUF
from .registry import ResourceType
from .rest import Result, query_flag
from .status import ApiError, bad_request, method_not_allowed, unknown_path
from .watch import WatchSpec, stream

if TYPE_CHECKING:
    from .server import ApiServer

log = logging.getLogger("bridge.sandbox.apiserver")
Obj = dict[str, Any]
_USER = {"username": "system:admin", "uid": "sandbox-admin", "groups": ["system:masters", "system:authenticated"]}


@dataclass(frozen=True)
class Route:
    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    watch_path: bool


class _Watch:
    """An open watch stream: the socket to cut on `drop_watches`, and a flag the stream loop polls."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.dropped = threading.Event()

    def cut(self) -> None:
        self.dropped.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "bridge-sandbox-apiserver"
    app: ApiServer  # set on the subclass the server builds
    _drop_generation: int | None = None  # the server's drop generation when this request passed the fault check

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature from the base class
        log.debug("%s " + format, self.client_address[0], *args)

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT")

    def do_PATCH(self) -> None:  # noqa: N802
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    # -- plumbing -------------------------------------------------------------------------------------------------
    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, code: int, obj: Obj, headers: dict[str, str] | None = None, warnings: list[str] | None = None) -> None:
        wire: Wire | None = getattr(self, "_wire", None)
        if wire is not None:
            body, ctype = wire.encode(code, obj)
        else:
            body, ctype = json.dumps(obj, separators=(",", ":")).encode(), "application/json"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        for w in warnings or []:
            # k8s.io/apimachinery pkg/util/net/http.go NewWarningHeader: the text as a Go quoted string (strconv.Quote),
            # so `unknown field "x"` keeps its double quotes, escaped (kube-apiserver v1.37.2, observed by
            # tests/real/test_differential.py)
            self.send_header("Warning", "299 - " + json.dumps(w))
        self.end_headers()
        self.wfile.write(body)

    def _send_text(self, code: int, text: str) -> None:
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_bytes(self, code: int, body: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _dispatch(self, method: str) -> None:
        app = self.app
        self._wire: Wire | None = None
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        try:
            body = self._read_body()
            self._drop_generation = app.drop_generation()
            sleep, error = app.faults.check(url.path)
            if sleep:
                time.sleep(sleep)
            if error is not None:
                raise error
            self._handle(method, url.path, query, body)
        except ApiError as err:
            self._send(err.code, err.status(), err.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as err:  # a bug in the emulator: answer 500 like the real server, keep serving
            log.exception("internal error serving %s %s", method, self.path)
            self._wire = None  # the answer must not depend on the code that just failed
            self._send(500, ApiError(500, "InternalError", f"an error on the server ({err!r}) has prevented the request from succeeding").status())

    def _handle(self, method: str, path: str, query: dict[str, str], raw: bytes) -> None:
        app = self.app
        # Go's net/http decodes the path (%23 is "#") before kube-apiserver splits it into segments
        # (k8s.io/apiserver pkg/endpoints/request/requestinfo.go splits req.URL.Path)
        segs = [s for s in unquote(path).split("/") if s]
        if method == "GET" and segs[:1] == ["openapi"]:
            self._openapi(segs, query)
            return
        if method == "GET":
            doc = self._static(segs)
            if doc is not None:
                if isinstance(doc, str):
                    self._send_text(200, doc)
                else:
                    self._send(200, doc)
                return
        route = self._route(segs)
        rest, rt = app.rest, route.rt
        ns, name, sub = route.namespace, route.name, route.subresource
        wire = self._wire = Wire.negotiate(rt, self.headers.get("Accept"), query, app.openapi.describe)
        wire.check()
        if method == "GET":
            if route.watch_path or query_flag(query, "watch"):
                if name:
                    query = dict(query, fieldSelector=",".join(filter(None, [query.get("fieldSelector"), f"metadata.name={name}"])))
                spec = WatchSpec.parse(rt, ns, query)
                spec.check_reachable(app.store)
                self._watch(spec)
            elif name:
                self._send(200, rest.get(rt, ns, name))
            else:
                self._send(200, rest.list(rt, ns, query))
            return
        if method == "POST" and not name:
            if rt.namespaced and not ns:
                raise method_not_allowed()
            body = self._body(raw)
            warnings = self._field_warnings(rt, body, query, options="CreateOptions")
            self._result(rest.create(rt, ns, body, query, _USER), warnings)
        elif method == "POST" and sub == "binding":
            self._result(rest.bind(rt, ns, name or "", self._body(raw), query, _USER))
        elif method == "PUT" and name:
            body = self._body(raw)
            warnings = self._field_warnings(rt, body, query, options="UpdateOptions")
            self._result(rest.update(rt, ns, name, body, sub, query, _USER), warnings)
        elif method == "PATCH" and name:
            ctype = self.headers.get("Content-Type", "application/strategic-merge-patch+json")
            warnings = self._patch_field_warnings(rt, ctype, raw, query)
            self._result(rest.patch(rt, ns, name, ctype, raw, sub, query, _USER), warnings)
        elif method == "DELETE" and name and not sub:
            self._result(rest.delete(rt, ns, name, self._options(raw), query))
        elif method == "DELETE" and not name and "deletecollection" in rt.verbs:
            self._send(200, rest.delete_collection(rt, ns, self._options(raw), query))
        else:
            raise method_not_allowed()

    def _result(self, result: Result, extra_warnings: list[str] | None = None) -> None:
        self._send(result.code, result.obj, warnings=(extra_warnings or []) + result.warnings)

    # -- request bodies, field validation, OpenAPI --------------------------------------------------------------------
    def _body(self, raw: bytes) -> Any:
        return decode_body(raw, self.headers.get("Content-Type"), _json)

    def _options(self, raw: bytes) -> Obj:
        if not raw.strip():
            return {}
        opts = self._body(raw)
        if not isinstance(opts, dict):
            raise bad_request("DeleteOptions must be a JSON object")
        return {k: v for k, v in opts.items() if k not in ("apiVersion", "kind")} if "kind" in opts else opts

    def _field_warnings(self, rt: ResourceType, body: Any, query: dict[str, str], *, patch: str | None = None,
                        options: str) -> list[str]:
        docs = self.app.openapi
        return fieldvalidation.check(docs.definitions(), docs.definition_for(rt), rt.kind, rt.group_version, body,
                                     query, patch=patch, options=options)

    def _patch_field_warnings(self, rt: ResourceType, ctype: str, raw: bytes, query: dict[str, str]) -> list[str]:
        media = ctype.split(";")[0].strip().lower()
        if media == "application/json-patch+json":
            fieldvalidation.mode(query, "PatchOptions")
            return []
        try:
            body = _json(raw) if raw.strip() else {}
        except ApiError:
            return []  # the patch itself will answer the parse error
        apply = media == "application/apply-patch+yaml"
        if apply:
            return self._field_warnings(rt, body, query, options="PatchOptions")
        return self._field_warnings(rt, body, query, patch=media, options="PatchOptions")

    def _openapi(self, segs: list[str], query: dict[str, str]) -> None:
        docs = self.app.openapi
        accept = self.headers.get("Accept") or ""
        if segs == ["openapi", "v2"]:
            if V2_PROTOBUF in accept and "json" not in accept and "*/*" not in accept:
                raise ApiError(406, "NotAcceptable", "the API emulator serves /openapi/v2 as application/json only")
            self._send_bytes(200, docs.v2(), "application/json")
            return
        if segs == ["openapi", "v3"]:
            self._send_bytes(200, docs.v3_root(), "application/json")
            return
        if segs[:2] == ["openapi", "v3"]:
            found = docs.v3("/".join(segs[2:]))
            if found is None:
                raise unknown_path()
            body, digest = found
            headers = {"Etag": f'"{digest}"'}
            if query.get("hash") == digest:
                headers["Cache-Control"] = "public, immutable"
            self._send_bytes(200, body, "application/json", headers)
            return
        raise unknown_path()

    def _static(self, segs: list[str]) -> Obj | str | None:
        reg = self.app.registry
        if segs == ["version"]:
            return discovery.version_doc(self.app.version)
        if segs in (["healthz"], ["livez"], ["readyz"]):
            return "ok"
        if segs == ["api"]:
            return discovery.core_versions(f"{self.app.host}:{self.app.port}")
        if segs == ["apis"]:
            return discovery.group_list(reg)
        if len(segs) == 2 and segs[0] == "apis":
            doc = discovery.group_doc(reg, segs[1])
            if doc is None:
                raise unknown_path()
            return doc
        if (len(segs) == 2 and segs[0] == "api") or (len(segs) == 3 and segs[0] == "apis"):
            group, version = ("", segs[1]) if segs[0] == "api" else (segs[1], segs[2])
            doc = discovery.resource_list(reg, group, version)
            if doc is None:
                raise unknown_path()
            return doc
        return None

    def _route(self, segs: list[str]) -> Route:
        if len(segs) >= 3 and segs[0] == "api":
            group, version, rest = "", segs[1], segs[2:]
        elif len(segs) >= 4 and segs[0] == "apis":
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            raise unknown_path()
        watch_path = rest[0] == "watch"
        if watch_path:
            rest = rest[1:]
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise unknown_path()
        rt = self.app.registry.get(group, version, rest[0])
        if rt is None or (namespace is not None and not rt.namespaced):
            raise unknown_path()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in rt.subresources:
            raise unknown_path()
        if rt.namespaced and name and not namespace:
            raise unknown_path()
        return Route(rt, namespace, name, sub, watch_path)

    # -- watch ----------------------------------------------------------------------------------------------------
    def _watch(self, spec: WatchSpec) -> None:
        app = self.app
        wire: Wire | None = getattr(self, "_wire", None)
        choice = wire.watch_media() if wire is not None else None
        self.send_response(200)
        self.send_header("Content-Type", Wire.watch_content_type(choice) if choice is not None else "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        handle = _Watch(self.connection)
        app.register_watch(handle, self._drop_generation)
        try:
            def write(event: Obj) -> None:
                if handle.dropped.is_set():
                    raise ConnectionAbortedError("watch dropped by fault injection")
                if wire is not None and choice is not None:
                    data = wire.watch_event(choice, event)
                else:
                    data = json.dumps(event, separators=(",", ":")).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def stopped() -> bool:
                return app.stopping.is_set() or handle.dropped.is_set() or _peer_closed(self.connection)

            stream(app.rest, spec, write, stopped, app.bookmark_interval)
            if handle.dropped.is_set() or app.stopping.is_set():
                self.close_connection = True
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True
        finally:
            app.unregister_watch(handle)


def _peer_closed(sock: socket.socket) -> bool:
    """True when the client hung up (readable with nothing to read). Plain TCP only; TLS peers are noticed on the
    next write."""
    if hasattr(sock, "pending"):
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def _json(raw: bytes) -> Any:
    if not raw:
        raise bad_request("the request body is empty")
    try:
        return json.loads(raw)
    except ValueError:
        try:
            import yaml

            return yaml.safe_load(raw)
        except Exception as err:
            raise bad_request(f"the body of the request is not valid JSON or YAML: {err}") from err

