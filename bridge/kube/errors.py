"""The API layer's error tree. HTTP/transport errors are translated once, here, with `raise ... from err`.

    KubeError
    ├── NotFound        404
    ├── Conflict        409 (stale resourceVersion on update)
    │   └── AlreadyExists   409 on create
    ├── Forbidden       403 (and 401): carries the verb and resource so callers can name the missing RBAC rule
    ├── Gone            410 (watch/list resourceVersion too old: relist)
    ├── TooLargeResourceVersion  504 with cause ResourceVersionTooLarge (a version the server has not reached:
    │                   it was restored from a backup, replaced, or lags behind its peers: relist, as on 410)
    ├── Invalid         422: carries the field causes the server returned
    ├── BadRequest      400 (malformed body or patch, bad selector): a caller bug, never retried
    │   └── InvalidName     a name that cannot go into a request path (checked before any request is sent)
    ├── Unavailable     connection refused/reset, timeouts, 429, 5xx (retried with backoff by the layer)
    └── ConfigError     no usable kubeconfig / in-cluster configuration (says what was tried)

The mapping from the official client's `ApiException` and urllib3's transport errors lives in
`bridge/kube/translate.py`; nothing else in the project sees those types.
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
    """`maybe_ours` is True when the layer retried a create whose earlier attempt may have reached the server
    (connection reset, timeout, 5xx): the existing object may be the one this caller created."""

    def __init__(self, message: str, *, maybe_ours: bool = False, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.maybe_ours = maybe_ours


class Forbidden(KubeError):
    def __init__(self, message: str, *, verb: str = "", resource: str = "", **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.verb = verb
        self.resource = resource

    @property
    def rbac_hint(self) -> str:
        """"missing RBAC: list pods" — the rule an operator has to grant."""
        return f"missing RBAC: {self.verb} {self.resource}" if self.verb and self.resource else self.message

    @property
    def service_account_missing(self) -> bool:
        """A pod refused by the ServiceAccount admission plugin because its ServiceAccount does not exist (kubernetes
        plugin/pkg/admission/serviceaccount/admission.go: `pods "p" is forbidden: error looking up service account
        ns/default: serviceaccount "default" not found`). Not an RBAC problem: in a namespace created moments ago
        it means kube-controller-manager's serviceaccount controller has not created `default` yet (the plugin
        itself retries `default` for about a second before answering this), and it goes away on its own."""
        return "error looking up service account " in self.message


class Gone(KubeError):
    pass


class TooLargeResourceVersion(KubeError):
    """The server has not reached the resourceVersion asked for (storage.NewTooLargeResourceVersionError). Not
    retried as it is: after a restore the server's versions went backwards and may stay below ours for ever."""


@dataclass(frozen=True)
class Cause:
    field: str
    message: str
    reason: str = ""


class Invalid(KubeError):
    def __init__(self, message: str, *, causes: tuple[Cause, ...] = (), **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.causes = causes


class BadRequest(KubeError):
    pass


class InvalidName(BadRequest):
    """A namespace or object name refused before any request (bridge.kvalues.names): a path built from it would
    name another object (`kube-system#` is `kube-system` to a URL parser, `a/../b` is `b`)."""


class Unavailable(KubeError):
    """`request_sent` is False only when the server certainly did not act on the request (connection refused,
    connect timeout, 429): then even a non-idempotent create may be retried blindly."""

    def __init__(
        self, message: str, *, retry_after: float | None = None, request_sent: bool = True, **kw: object
    ) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.retry_after = retry_after
        self.request_sent = request_sent


class ConfigError(KubeError):
    pass


__all__ = [
    "AlreadyExists",
    "BadRequest",
    "InvalidName",
    "Cause",
    "ConfigError",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeError",
    "NotFound",
    "TooLargeResourceVersion",
    "Unavailable",
]
