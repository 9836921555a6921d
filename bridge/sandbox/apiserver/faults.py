"""Fault injection for resilience tests: refused connections, slow requests, error answers, cut watch streams.

Rules are consulted once per incoming request, in the order they were added: every matching `delay` sleeps, the
first matching `fail` answers with a real `Status` error (and a `Retry-After` header when asked). Rules with a
`count` expire after that many matching requests. `refuse_connections` and `drop_watches` act on sockets through
callbacks the server installs, so what the client sees is a real ECONNREFUSED / a real mid-stream disconnect.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

from .status import ApiError, internal, service_unavailable, too_many_requests


@dataclass
class _Rule:
    kind: str  # "delay" | "fail"
    pattern: re.Pattern[str] | None
    remaining: int | None
    seconds: float = 0.0
    status: int = 503
    retry_after: float | None = None

    def matches(self, path: str) -> bool:
        return self.pattern is None or self.pattern.search(path) is not None


def error_for(status: int, retry_after: float | None) -> ApiError:
    if status == 429:
        return too_many_requests(retry_after)
    if status == 503:
        return service_unavailable(retry_after)
    if status == 500:
        err = internal("an error on the server (\"injected fault\") has prevented the request from succeeding")
    elif status == 504:
        err = ApiError(504, "Timeout", "the server was unable to return a response in the time allotted, but may still be processing the request")
    else:
        err = ApiError(status, "InternalError", f"injected fault (HTTP {status})")
    if retry_after is not None:
        err.headers["Retry-After"] = str(int(retry_after))
    return err


class Faults:
    def __init__(self, refuse: Callable[[float], None], drop_watches: Callable[[], int]) -> None:
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self._refuse = refuse
        self._drop_watches = drop_watches

    def refuse_connections(self, seconds: float) -> None:
        """Close the listening socket (and every open connection) now; reopen on the same port after `seconds`.
        Returns immediately."""
        if seconds <= 0:
            raise ValueError("seconds must be positive")
        self._refuse(seconds)

    def delay(self, seconds: float, path_regex: str | None = None, count: int | None = None) -> None:
        if seconds < 0:
            raise ValueError("seconds must not be negative")
        self._add(_Rule("delay", _compile(path_regex), count, seconds=seconds))

    def fail(self, count: int, status: int = 503, retry_after: float | None = None, path_regex: str | None = None) -> None:
        if count < 1:
            raise ValueError("count must be at least 1")
        if not 400 <= status <= 599:
            raise ValueError("status must be an HTTP error code (400-599)")
        self._add(_Rule("fail", _compile(path_regex), count, status=status, retry_after=retry_after))

    def drop_watches(self) -> int:
        """Cut every open watch stream mid-stream; returns how many were cut."""
        return self._drop_watches()

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def _add(self, rule: _Rule) -> None:
        with self._lock:
            self._rules.append(rule)

    def check(self, path: str) -> tuple[float, ApiError | None]:
        """(seconds to sleep, error to answer instead) for one request; consumes counts."""
        sleep, error = 0.0, None
        with self._lock:
            for rule in list(self._rules):
                if not rule.matches(path) or (rule.kind == "fail" and error is not None):
                    continue
                if rule.kind == "delay":
                    sleep += rule.seconds
                else:
                    error = error_for(rule.status, rule.retry_after)
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._rules.remove(rule)
        return sleep, error


def _compile(pattern: str | None) -> re.Pattern[str] | None:
    return re.compile(pattern) if pattern else None
