"""Error translation: every server answer and transport failure becomes one `bridge.kube.errors` type, with the
server's reason, message and field causes preserved."""

from __future__ import annotations

import json

import pytest
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from bridge.kube import errors as E
from bridge.kube.translate import error_from_api_exception, error_from_transport, k8s_verb, parse_retry_after


def status_body(code: int, reason: str, message: str, **details: object) -> str:
    return json.dumps(
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
         "message": message, "details": details}
    )


def api_exc(status: int, body: str | None = None, headers: dict[str, str] | None = None) -> ApiException:
    exc = ApiException(status=status, reason="x", body=body)
    exc.headers = headers
    return exc


def test_not_found_keeps_the_server_message() -> None:
    err = error_from_api_exception(api_exc(404, status_body(404, "NotFound", 'pods "p" not found')), verb="get",
                                   resource="pods", name="p")
    assert type(err) is E.NotFound
    assert err.message == 'pods "p" not found' and err.status == 404 and err.reason == "NotFound"


def test_conflict_and_already_exists_are_distinguished_by_reason() -> None:
    stale = error_from_api_exception(api_exc(409, status_body(409, "Conflict", "the object has been modified")))
    exists = error_from_api_exception(api_exc(409, status_body(409, "AlreadyExists", 'pods "p" already exists')))
    assert type(stale) is E.Conflict
    assert type(exists) is E.AlreadyExists and isinstance(exists, E.Conflict) and not exists.maybe_ours


def test_forbidden_names_the_missing_rbac_rule() -> None:
    body = status_body(403, "Forbidden", 'pods is forbidden: User "system:serviceaccount:x:y" cannot list resource')
    err = error_from_api_exception(api_exc(403, body), verb="list", resource="pods")
    assert isinstance(err, E.Forbidden)
    assert (err.verb, err.resource) == ("list", "pods")
    assert err.rbac_hint == "missing RBAC: list pods"
    assert "cannot list" in err.message


def test_unauthorized_is_forbidden_too() -> None:
    err = error_from_api_exception(api_exc(401, status_body(401, "Unauthorized", "Unauthorized")), verb="get",
                                   resource="nodes")
    assert isinstance(err, E.Forbidden) and err.status == 401


def test_invalid_carries_each_field_cause() -> None:
    body = status_body(
        422, "Invalid", 'ResourceSlice.resource.k8s.io "s" is invalid: spec.devices: Too many: 129: must have at most 128 items',
        causes=[{"reason": "FieldValueTooMany", "message": "Too many: 129: must have at most 128 items",
                 "field": "spec.devices"},
                {"reason": "FieldValueInvalid", "message": "Invalid value: \"bad name!\"",
                 "field": "spec.devices[0].attributes[bad name!]"}],
    )
    err = error_from_api_exception(api_exc(422, body))
    assert isinstance(err, E.Invalid)
    assert [c.field for c in err.causes] == ["spec.devices", "spec.devices[0].attributes[bad name!]"]
    assert err.causes[0] == E.Cause("spec.devices", "Too many: 129: must have at most 128 items", "FieldValueTooMany")


def test_gone_and_bad_request() -> None:
    assert type(error_from_api_exception(api_exc(410, status_body(410, "Expired", "too old resource version")))) is E.Gone
    assert type(error_from_api_exception(api_exc(400, status_body(400, "BadRequest", "bad selector")))) is E.BadRequest


def test_429_honours_retry_after_and_was_not_acted_on() -> None:
    err = error_from_api_exception(api_exc(429, status_body(429, "TooManyRequests", "slow down"), {"Retry-After": "3"}))
    assert isinstance(err, E.Unavailable)
    assert err.retry_after == 3.0 and err.request_sent is False


def test_retry_after_from_status_details_when_no_header() -> None:
    err = error_from_api_exception(api_exc(503, status_body(503, "ServiceUnavailable", "x", retryAfterSeconds=2)))
    assert isinstance(err, E.Unavailable) and err.retry_after == 2.0 and err.request_sent is True


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_5xx_is_unavailable(status: int) -> None:
    assert isinstance(error_from_api_exception(api_exc(status, "<html>proxy error</html>")), E.Unavailable)


def test_non_status_body_still_gives_a_readable_message() -> None:
    err = error_from_api_exception(api_exc(404, "404 page not found"), verb="get", resource="widgets", name="w")
    assert isinstance(err, E.NotFound)
    assert "404 page not found" in err.message and "widgets" in err.message


def test_501_is_not_retryable() -> None:
    err = error_from_api_exception(api_exc(501, status_body(501, "NotImplemented", "no")))
    assert type(err) is E.KubeError


def test_connection_refused_was_not_sent() -> None:
    inner = urllib3.exceptions.NewConnectionError(None, "Failed to establish a new connection: [Errno 111] refused")  # type: ignore[arg-type]
    err = error_from_transport(urllib3.exceptions.MaxRetryError(None, "/api", inner), verb="list",  # type: ignore[arg-type]
                               resource="pods", url="https://127.0.0.1:1/api")
    assert isinstance(err, E.Unavailable) and err.request_sent is False
    assert "cannot connect" in err.message


def test_reset_mid_request_may_have_been_sent() -> None:
    err = error_from_transport(urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104)))
    assert isinstance(err, E.Unavailable) and err.request_sent is True


def test_tls_failure_is_not_retryable() -> None:
    err = error_from_transport(urllib3.exceptions.SSLError("certificate verify failed"), url="https://x")
    assert type(err) is E.KubeError and "TLS" in err.message


def test_parse_retry_after_accepts_seconds_and_http_dates() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == pytest.approx(10.0)
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None
    assert parse_retry_after("-3") == 0.0


@pytest.mark.parametrize(
    ("method", "named", "watch", "verb"),
    [("GET", True, False, "get"), ("GET", False, False, "list"), ("GET", False, True, "watch"),
     ("POST", False, False, "create"), ("PUT", True, False, "update"), ("PATCH", True, False, "patch"),
     ("DELETE", True, False, "delete"), ("DELETE", False, False, "deletecollection")],
)
def test_rbac_verbs(method: str, named: bool, watch: bool, verb: str) -> None:
    assert k8s_verb(method, named=named, watch=watch) == verb


@pytest.mark.parametrize("body", [
    # today's servers: the status cause (storage.NewTooLargeResourceVersionError)
    status_body(504, "Timeout", "Timeout: Too large resource version: 1200, current: 500",
                causes=[{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                retryAfterSeconds=1),
    # 1.17.0-1.18.5 servers: no cause type, only the cause message (client-go checks both)
    status_body(504, "Timeout", "Timeout: Too large resource version: 1200, current: 500",
                causes=[{"message": "Too large resource version"}]),
    # before 1.17: the text in the message
    status_body(504, "Timeout", "Too large resource version: 1200, current: 500"),
])
def test_too_large_resource_version_is_its_own_error_and_not_retried(body: str) -> None:
    err = error_from_api_exception(api_exc(504, body, {"Retry-After": "1"}), verb="watch", resource="pods")
    assert type(err) is E.TooLargeResourceVersion and not isinstance(err, E.Unavailable)
    assert "Too large resource version" in err.message and err.status == 504


def test_a_plain_504_stays_a_retryable_timeout() -> None:
    err = error_from_api_exception(api_exc(504, status_body(504, "Timeout", "the server was unable to return a "
                                                                             "response in the time allotted")))
    assert type(err) is E.Unavailable
