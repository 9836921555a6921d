"""A raw HTTP client for the differential test: the same request sent to the API emulator and to a real
kube-apiserver, the answer kept whole (status code, headers, body), so nothing a client library smooths over is lost.

    real = Backend.from_kubeconfig("real", plane.admin_kubeconfig)
    answer = real.call("POST", "/api/v1/namespaces", {"metadata": {"name": "x"}})
    answer.status, answer.body, answer.warnings
    events = real.watch("/api/v1/namespaces/x/configmaps", {"resourceVersion": rv}, until=lambda evs: len(evs) >= 3)
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import socket
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import yaml

Obj = dict[str, Any]
JSON = "application/json"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


@dataclass
class Answer:
    status: int
    headers: Mapping[str, str]
    warnings: list[str]
    body: Any  # the decoded JSON, or the text when it is not JSON

    @property
    def reason(self) -> str | None:
        return self.body.get("reason") if isinstance(self.body, dict) else None


def _warnings(values: list[str]) -> list[str]:
    """`299 - "text"` -> text (kube-apiserver escapes `"` and `\\` in the text)."""
    out = []
    for value in values:
        for text in re.findall(r'\d{3} \S+ "((?:[^"\\]|\\.)*)"', value):
            out.append(re.sub(r"\\(.)", r"\1", text))
    return out


@dataclass
class Backend:
    name: str
    host: str
    port: int
    context: ssl.SSLContext | None = None
    timeout: float = 30.0
    _keep: list[Any] = field(default_factory=list, repr=False)

    @classmethod
    def from_kubeconfig(cls, name: str, path: Path) -> Backend:
        """The kubeconfig's current cluster and user (a client certificate or a token, as the sandbox writes)."""
        config = yaml.safe_load(path.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        url = urlsplit(cluster["server"])
        backend = cls(name, url.hostname or "127.0.0.1", url.port or (443 if url.scheme == "https" else 80))
        if url.scheme == "https":
            ctx = ssl.create_default_context()
            if cluster.get("certificate-authority-data"):
                ctx.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
            if user.get("client-certificate-data"):
                files = []
                for key in ("client-certificate-data", "client-key-data"):
                    f = tempfile.NamedTemporaryFile(suffix=".pem")  # noqa: SIM115 - kept open for load_cert_chain
                    f.write(base64.b64decode(user[key]))
                    f.flush()
                    files.append(f)
                ctx.load_cert_chain(files[0].name, files[1].name)
                backend._keep.extend(files)
            backend.context = ctx
        if user.get("token"):
            backend._keep.append({"Authorization": f"Bearer {user['token']}"})
        return backend

    def _auth(self) -> dict[str, str]:
        return next((h for h in self._keep if isinstance(h, dict)), {})

    def _conn(self, timeout: float) -> http.client.HTTPConnection:
        if self.context is not None:
            return http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    @staticmethod
    def _path(path: str, query: Mapping[str, Any] | None) -> str:
        return path + ("?" + urlencode(query) if query else "")

    def call(self, method: str, path: str, body: Any = None, *, query: Mapping[str, Any] | None = None,
             content_type: str = JSON, accept: str = JSON) -> Answer:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Accept": accept, **self._auth()}
        if data is not None:
            headers["Content-Type"] = content_type
        conn = self._conn(self.timeout)
        try:
            conn.request(method, self._path(path, query), body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            warnings = _warnings(resp.headers.get_all("Warning") or [])
            hdrs = {k.lower(): v for k, v in resp.headers.items()}
        finally:
            conn.close()
        try:
            decoded: Any = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode(errors="replace")
        return Answer(resp.status, hdrs, warnings, decoded)

    def watch(self, path: str, query: Mapping[str, Any] | None = None, *,
              until: Callable[[list[Obj]], bool], timeout: float = 20.0,
              on_open: Callable[[], None] | None = None) -> tuple[int, list[Obj]]:
        """Open a watch, call `on_open` (to cause the events), read events until `until(events)` or `timeout`.
        Returns the HTTP status and the events (an error answer's Status as one pseudo-event)."""
        q = {"watch": "1", **(query or {})}
        conn = self._conn(timeout)
        events: list[Obj] = []
        try:
            conn.request("GET", self._path(path, q), headers={"Accept": JSON, **self._auth()})
            resp = conn.getresponse()
            if resp.status != 200:
                return resp.status, [{"type": "HTTP", "object": json.loads(resp.read() or b"null")}]
            if on_open is not None:
                on_open()
            deadline = time.monotonic() + timeout
            while not until(events) and time.monotonic() < deadline:
                try:
                    line = resp.readline()
                except (TimeoutError, socket.timeout):
                    break
                if not line:
                    break
                if line.strip():
                    events.append(json.loads(line))
            return 200, events
        finally:
            conn.close()
