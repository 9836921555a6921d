"""Translate the official client's failures into `bridge.kube.errors`, once, at the boundary.

Two kinds of failure reach the layer:

* the server answered with a non-2xx status: the body is (almost always) a `Status` object, whose `reason`,
  `message` and `details.causes` are kept; the HTTP status picks the class;
* the request never completed: urllib3 raised (connection refused, reset, timeout, protocol error) or the client
  raised an `ApiException` with status 0 (TLS failure). Those become `Unavailable`, except TLS verification
  failures, which no retry can fix.

`Unavailable.request_sent` records whether the server may have acted on the request: False for a refused or
timed-out *connect* and for 429 (the server's flow control rejects before doing anything), True otherwise. The
retry loop uses it to decide whether a non-idempotent create may be repeated.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Mapping
from typing import Any

import urllib3.exceptions

from bridge.kube.errors import (
    AlreadyExists,
    BadRequest,
    Cause,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    TooLargeResourceVersion,
    Unavailable,
)

# Statuses a later attempt can cure. 501 (not implemented) and 505 are permanent.
_RETRYABLE_5XX = frozenset({500, 502, 503, 504})
TOO_LARGE_RV_CAUSE = "ResourceVersionTooLarge"
_TOO_LARGE_RV_TEXT = "Too large resource version"


def is_too_large_resource_version(status: int, message: str, details: dict[str, Any]) -> bool:
    """client-go's isTooLargeResourceVersionError (kubernetes/kubernetes
    staging/src/k8s.io/client-go/tools/cache/reflector.go): the status cause `ResourceVersionTooLarge`; for servers
    1.17.0-1.18.5, a Timeout whose cause message is "Too large resource version"; before 1.17, that text in the
    message."""
    causes = [c for c in details.get("causes") or [] if isinstance(c, dict)]
    if any(c.get("reason") == TOO_LARGE_RV_CAUSE for c in causes):
        return True
    if status != 504:
        return False
    return any(c.get("message") == _TOO_LARGE_RV_TEXT for c in causes) or _TOO_LARGE_RV_TEXT in message


def k8s_verb(method: str, *, named: bool, watch: bool = False) -> str:
    """The RBAC verb the API server checks for this request."""
    method = method.upper()
    if method == "GET":
        return "watch" if watch else ("get" if named else "list")
    if method == "DELETE":
        return "delete" if named else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Retry-After is either delta-seconds or an HTTP date; anything unparsable is ignored."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _status_body(body: bytes | str | None) -> dict[str, Any]:
    if not body:
        return {}
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    if not headers:
        return None
    value = headers.get(name)
    if value is None:  # plain dicts are case-sensitive; urllib3's HTTPHeaderDict is not
        lowered = name.lower()
        value = next((v for k, v in headers.items() if k.lower() == lowered), None)
    return value


def error_from_status(
    status: int,
    body: bytes | str | None,
    headers: Mapping[str, str] | None = None,
    *,
    verb: str = "",
    resource: str = "",
    name: str | None = None,
) -> KubeError:
    """The error for a non-2xx answer. `resource` is "pods" / "resourceslices.resource.k8s.io" / "pods/status"."""
    st = _status_body(body)
    reason = str(st.get("reason") or "")
    target = f"{resource} {name!r}" if name else resource
    fallback = f"{verb} {target}: HTTP {status}".strip()
    raw_text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    message = str(st.get("message") or "") or (f"{fallback}: {raw_text[:200]}" if raw_text else fallback)
    raw_details = st.get("details")
    details: dict[str, Any] = raw_details if isinstance(raw_details, dict) else {}
    kw: dict[str, Any] = {"status": status, "reason": reason or None}

    if status == 404:
        return NotFound(message, **kw)
    if status == 409:
        if reason == "AlreadyExists":
            return AlreadyExists(message, **kw)
        return Conflict(message, **kw)
    if status in (401, 403):
        return Forbidden(message, verb=verb, resource=resource, **kw)
    if status == 410:
        return Gone(message, **kw)
    if status == 422:
        causes = tuple(
            Cause(field=str(c.get("field", "")), message=str(c.get("message", "")), reason=str(c.get("reason", "")))
            for c in (details.get("causes") or [])
            if isinstance(c, dict)
        )
        return Invalid(message, causes=causes, **kw)
    if status == 400:
        return BadRequest(message, **kw)
    if is_too_large_resource_version(status, message, details):
        return TooLargeResourceVersion(message, **kw)
    if status == 429 or status in _RETRYABLE_5XX:
        retry_after = parse_retry_after(_header(headers, "Retry-After"))
        if retry_after is None and isinstance(details.get("retryAfterSeconds"), (int, float)):
            retry_after = float(details["retryAfterSeconds"])
        return Unavailable(message, retry_after=retry_after, request_sent=status != 429, **kw)
    return KubeError(message, **kw)


def error_from_api_exception(exc: Any, *, verb: str = "", resource: str = "", name: str | None = None) -> KubeError:
    """Map the client's `ApiException` (duck-typed: status, reason, body, headers)."""
    status = int(getattr(exc, "status", 0) or 0)
    if status == 0:
        text = str(getattr(exc, "reason", "") or exc)
        if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text.lower():
            return KubeError(f"TLS verification failed for {verb} {resource}: {text}")
        return Unavailable(f"{verb} {resource}: {text}", request_sent=True)
    return error_from_status(
        status, getattr(exc, "body", None), getattr(exc, "headers", None), verb=verb, resource=resource, name=name
    )


def error_from_transport(exc: BaseException, *, verb: str = "", resource: str = "", url: str = "") -> KubeError:
    """Map a urllib3 / socket failure. A connect that never succeeded means the server saw nothing."""
    inner: BaseException = exc
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        inner = exc.reason
    if isinstance(inner, urllib3.exceptions.SSLError):
        return KubeError(f"TLS failure talking to {url}: {inner}")
    not_sent = isinstance(
        inner,
        (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError, ConnectionRefusedError),
    ) or isinstance(getattr(inner, "__cause__", None), ConnectionRefusedError)
    kind = "cannot connect" if not_sent else type(inner).__name__
    return Unavailable(f"{verb} {resource}: {kind} ({url}): {inner}", request_sent=not not_sent)


__all__ = ["error_from_api_exception", "error_from_status", "error_from_transport", "k8s_verb", "parse_retry_after"]
