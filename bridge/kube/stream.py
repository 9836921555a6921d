"""One watch response as an iterator of `WatchEvent`s, closable from another thread.

The API server sends one JSON object per line (`{"type": ..., "object": ...}`) on a long-lived chunked response.
Lines are split here from raw `read1` chunks, so an event is yielded as soon as its line is complete (no
read-ahead that would hold events back). An `ERROR` event carries a `Status`: 410 becomes `Gone` (the caller must
relist), anything else is mapped like any other failure. A connection that drops mid-line is `Unavailable` (the
half event is discarded, never guessed at); a clean end of stream (server-side `timeoutSeconds`) just stops the
iteration: the caller resumes from the last resourceVersion it saw.

`close()` may be called from any thread: it shuts the socket's read side, so a reader blocked in `read1` returns at
once and the iteration ends quietly. That is how `Informer` stops promptly.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import urllib3.exceptions

from bridge.kube.api import WatchEvent
from bridge.kube.errors import Unavailable
from bridge.kube.translate import error_from_status, error_from_transport

log = logging.getLogger(__name__)

_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})
_READ_SIZE = 64 * 1024


class WatchStream:
    def __init__(self, resp: Any, *, resource: str) -> None:
        self._resp = resp  # urllib3.HTTPResponse, opened with preload_content=False
        self._resource = resource
        self._buf = bytearray()
        self._closed = threading.Event()
        self._finished = False
        self._reading = False
        self._lock = threading.Lock()

    def __iter__(self) -> WatchStream:
        return self

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def __next__(self) -> WatchEvent:
        while True:
            line = self._readline()
            if line is None:
                self._finish()
                raise StopIteration
            if not line.strip():
                continue
            try:
                ev = json.loads(line)
                typ, obj = ev["type"], ev.get("object") or {}
            except (ValueError, KeyError, TypeError) as err:
                self._finish()
                raise Unavailable(f"watch {self._resource}: malformed event line {line[:120]!r}") from err
            if typ == "ERROR":
                self._finish()
                code = obj.get("code") if isinstance(obj, dict) else None
                raise error_from_status(
                    int(code) if isinstance(code, int) else 500, json.dumps(obj), verb="watch", resource=self._resource
                )
            if typ not in _EVENT_TYPES:
                log.warning("watch %s: ignoring unknown event type %r", self._resource, typ)
                continue
            return WatchEvent(typ, obj)

    def _readline(self) -> bytes | None:
        while True:
            i = self._buf.find(b"\n")
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[: i + 1]
                return line
            if self._closed.is_set():
                return None
            self._reading = True
            try:
                chunk = self._resp.read1(_READ_SIZE)
            except (urllib3.exceptions.HTTPError, OSError, ValueError, AttributeError) as err:
                # ValueError/AttributeError: http.client after the socket was shut down under it by close().
                if self._closed.is_set():
                    return None
                self._finish()
                raise error_from_transport(err, verb="watch", resource=self._resource) from err
            finally:
                self._reading = False
            if not chunk:
                if self._buf.strip() and not self._closed.is_set():
                    self._finish()
                    raise Unavailable(f"watch {self._resource}: connection closed in the middle of an event")
                return None
            self._buf += chunk

    def close(self) -> None:
        """End the stream now; safe from any thread, idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self._resp.shutdown()  # wakes a reader blocked in recv()
        except Exception:  # noqa: BLE001 - already released, or a urllib3 without shutdown support
            log.debug("watch %s: socket shutdown not possible", self._resource, exc_info=True)
        if not self._reading:
            self._finish()  # nobody is blocked in read1: release the connection here

    def _finish(self) -> None:
        with self._lock:
            if self._finished:
                return
            self._finished = True
            self._closed.set()
            try:
                self._resp.close()
                self._resp.release_conn()
            except Exception:  # noqa: BLE001 - closing a broken connection may fail; nothing to save
                log.debug("watch %s: close failed", self._resource, exc_info=True)


__all__ = ["WatchStream"]
