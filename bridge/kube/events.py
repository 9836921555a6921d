"""Kubernetes Events (core/v1) about the bridge's objects: what `kubectl describe` shows an operator.

The node daemon records a Warning when it refuses a device (ownership ledger), so a refusal is visible next to the
pod or node, not only in a log. Events are best effort by nature: callers on hot paths catch `KubeError`. The
object name is generated (`<involved>.` + random suffix) like the kubelet's, and an Event lives in the involved
object's namespace, or in "default" for cluster-scoped objects (where `kubectl describe node` looks).
"""

from __future__ import annotations

import datetime as dt
import socket
from typing import Literal

from bridge.kube.api import EVENTS, KubeAPI, Obj

# core/v1 accepts longer messages, but the events API and client-go's recorder cut at 1 KiB; so do we.
MAX_MESSAGE = 1024


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_event(
    involved: Obj,
    reason: str,
    message: str,
    *,
    type: Literal["Normal", "Warning"] = "Normal",  # noqa: A002 - the Event field's name
    component: str = "dra-bridge",
    host: str | None = None,
    action: str | None = None,
    now: str | None = None,
    field_path: str | None = None,
) -> Obj:
    """The Event object (pure: no I/O), for tests and for callers that batch. `field_path`: the part of the object
    the event is about (`spec.containers{name}`, as the kubelet's container events say)."""
    if type not in ("Normal", "Warning"):
        raise ValueError(f"event type must be Normal or Warning, not {type!r}")
    if not reason:
        raise ValueError("event reason is required (UpperCamelCase, e.g. DeviceRefused)")
    meta = involved.get("metadata") or {}
    kind, api_version, name = involved.get("kind"), involved.get("apiVersion"), meta.get("name")
    if not (kind and api_version and name):
        raise ValueError("the involved object needs apiVersion, kind and metadata.name")
    ns = meta.get("namespace") or "default"
    when = now or _now()
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    ref = {"apiVersion": api_version, "kind": kind, "name": name}
    for key in ("namespace", "uid", "resourceVersion"):
        if meta.get(key):
            ref[key] = meta[key]
    if field_path:
        ref["fieldPath"] = field_path
    host = host if host is not None else socket.gethostname()
    event: Obj = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": ns},
        "involvedObject": ref,
        "reason": reason,
        "message": message,
        "type": type,
        "count": 1,
        "firstTimestamp": when,
        "lastTimestamp": when,
        "source": {"component": component, "host": host},
        "reportingComponent": component,
        "reportingInstance": host,
    }
    if action:
        event["action"] = action
    return event


def record_event(
    api: KubeAPI,
    involved: Obj,
    reason: str,
    message: str,
    type: Literal["Normal", "Warning"] = "Normal",  # noqa: A002
    component: str = "dra-bridge",
    *,
    host: str | None = None,
    action: str | None = None,
    field_path: str | None = None,
) -> Obj:
    """Create the Event; returns it as stored. Raises `KubeError` (e.g. Forbidden without `create events`)."""
    event = build_event(involved, reason, message, type=type, component=component, host=host, action=action,
                        field_path=field_path)
    return api.create(EVENTS, event, event["metadata"]["namespace"])


__all__ = ["MAX_MESSAGE", "build_event", "record_event"]
