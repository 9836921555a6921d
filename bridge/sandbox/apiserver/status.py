"""`Status` errors exactly as the real kube-apiserver shapes them.

Every failure the emulator answers is an `ApiError` carrying the HTTP code, the `reason` the real server uses
(NotFound, AlreadyExists, Conflict, Invalid, Expired, ...), the message text in the real server's wording and the
`details` block. Clients (the official Python client, kubectl, `bridge.kube`) branch on `code` and `reason`, and
humans read `message`, so all three are kept faithful. Field errors render like apimachinery's `field.Error`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class FieldError:
    """One entry of `details.causes`: like apimachinery's field.Error (`path: Type: value: detail`)."""

    path: str
    type: str  # "Invalid value", "Required value", "Too many", "Too long", "Duplicate value", "Forbidden", ...
    value: Any = None
    detail: str = ""
    show_value: bool = True

    @property
    def reason(self) -> str:
        return _CAUSE_REASONS.get(self.type, "FieldValueInvalid")

    @property
    def body(self) -> str:
        """The message without the path, as in `details.causes[].message`."""
        parts = [self.type]
        if self.show_value and self.type not in ("Required value", "Forbidden", "Too long"):
            parts.append(render_value(self.value))
        if self.detail:
            parts.append(self.detail)
        return ": ".join(parts)

    def __str__(self) -> str:
        return f"{self.path}: {self.body}" if self.path else self.body


_CAUSE_REASONS = {
    "Invalid value": "FieldValueInvalid",
    "Required value": "FieldValueRequired",
    "Too many": "FieldValueTooMany",
    "Too long": "FieldValueTooLong",
    "Duplicate value": "FieldValueDuplicate",
    "Forbidden": "FieldValueForbidden",
    "Unsupported value": "FieldValueNotSupported",
    "Not found": "FieldValueNotFound",
}


def render_value(value: Any) -> str:
    """Go's `%q` for strings, plain numbers/bools, JSON for anything structured."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if value is None:
        return "null"
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass
class ApiError(Exception):
    code: int
    reason: str
    message: str
    details: Obj | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def status(self) -> Obj:
        out: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            out["details"] = self.details
        return out


def _details(name: str | None, group: str, kind: str, **extra: Any) -> Obj:
    d: Obj = {}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    if kind:
        d["kind"] = kind
    d.update(extra)
    return d


def qualified_resource(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{qualified_resource(plural, group)} "{name}" not found', _details(name, group, plural))


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{qualified_resource(plural, group)} "{name}" already exists', _details(name, group, plural)
    )


def conflict(plural: str, group: str, name: str, why: str | None = None) -> ApiError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified_resource(plural, group)} "{name}": {why}',
        _details(name, group, plural),
    )


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    qkind = f"{kind}.{group}" if group else kind
    rendered = [str(e) for e in errors]
    joined = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    causes = [{"reason": e.reason, "message": e.body, "field": e.path} for e in errors]
    return ApiError(422, "Invalid", f'{qkind} "{name}" is invalid: {joined}', _details(name, group, kind, causes=causes))


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden(plural: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        403, "Forbidden", f'{qualified_resource(plural, group)} "{name}" is forbidden: {why}', _details(name, group, plural)
    )


def method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


def unknown_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {content_type!r})")


def too_many_requests(retry_after: float | None) -> ApiError:
    headers = {"Retry-After": str(int(retry_after))} if retry_after is not None else {}
    details = {"retryAfterSeconds": int(retry_after)} if retry_after is not None else None
    return ApiError(429, "TooManyRequests", "the server has received too many requests and has asked us to try again later", details, headers)


def service_unavailable(retry_after: float | None) -> ApiError:
    headers = {"Retry-After": str(int(retry_after))} if retry_after is not None else {}
    return ApiError(503, "ServiceUnavailable", "the server is currently unable to handle the request", None, headers)


def too_large_resource_version(requested: int, current: int) -> ApiError:
    """A read at a resourceVersion the server has not reached (storage.NewTooLargeResourceVersionError)."""
    return ApiError(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {requested}, current: {current}",
        {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
         "retryAfterSeconds": 1},
        {"Retry-After": "1"},
    )


def invalid_list_options(errors: list[FieldError]) -> ApiError:
    """ListOptions validation failures: 422 on the meta.k8s.io ListOptions kind, as the real handler answers."""
    return invalid("ListOptions", "meta.k8s.io", "", errors)
