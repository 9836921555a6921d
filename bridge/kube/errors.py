"""The API layer's error tree. HTTP/transport errors are translated once, here, with `raise ... from err`.

    KubeError
    ├── NotFound        404
    ├── Conflict        409 (stale resourceVersion on update)
    │   └── AlreadyExists   409 on create
    ├── Forbidden       403 (and 401): carries the verb and resource so callers can name the missing RBAC rule
    ├── Gone            410 (watch/list resourceVersion too old: relist)
    ├── Invalid         422: carries the field causes the server returned
    └── Unavailable     connection refused/reset, timeouts, 429, 5xx (retried with backoff by the layer)
"""

from __future__ import annotations

from dataclasses import dataclass


class KubeError(Exception):
    def __init__(self, message: str, *, status: int | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


class AlreadyExists(Conflict):
    pass


class Forbidden(KubeError):
    def __init__(self, message: str, *, verb: str = "", resource: str = "", **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.verb = verb
        self.resource = resource


class Gone(KubeError):
    pass


@dataclass(frozen=True)
class Cause:
    field: str
    message: str
    reason: str = ""


class Invalid(KubeError):
    def __init__(self, message: str, *, causes: tuple[Cause, ...] = (), **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.causes = causes


class Unavailable(KubeError):
    def __init__(self, message: str, *, retry_after: float | None = None, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.retry_after = retry_after


__all__ = ["AlreadyExists", "Cause", "Conflict", "Forbidden", "Gone", "Invalid", "KubeError", "NotFound", "Unavailable"]
