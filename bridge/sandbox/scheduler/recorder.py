"""kube-scheduler's Events: written through the events API (events.k8s.io/v1), aggregated into series.

Written from k8s.io/client-go tools/events (event_recorder.go `makeEvent`, event_broadcaster.go `recordToSink`),
which kube-scheduler uses (pkg/scheduler/scheduler.go: `events.NewEventBroadcasterAdapter`):
* an Event is named `<regarding name>.<event time in hex nanoseconds>`, lives in the regarding object's namespace,
  carries `eventTime` (RFC 3339 with microseconds), `reportingController` (the scheduler name),
  `reportingInstance` (`<scheduler name>-<hostname>`), `action`, `reason`, `type`, `note`, `regarding` and, when
  given, `related` (a preemption's Event names the preemptor there);
* an isomorphic event (same regarding object, reason, action, type, note and reporter) within 6 minutes becomes a
  series: the second occurrence updates the stored Event with `series: {count: 2, lastObservedTime}`; further
  occurrences only count in memory (the real broadcaster writes them every 30 minutes, which no test waits for).
Events are best effort: a failure to write one is logged, never raised (as the broadcaster does).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from bridge.kube import KubeAPI, KubeError, Resource

log = logging.getLogger("bridge.sandbox.scheduler")
Obj = dict[str, Any]
EVENTS_V1 = Resource("events.k8s.io", "v1", "events", "Event", True)
SERIES_WINDOW = 6 * 60.0  # seconds: isomorphic events closer than this become a series
NOTE_MAX = 1024  # the events API refuses longer notes


def micro_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int
    last: float


class EventRecorder:
    def __init__(self, api: KubeAPI, controller: str, *, host: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.controller = controller
        self.instance = f"{controller}-{host or socket.gethostname()}"
        self.clock = clock
        self._seen: dict[tuple[str, ...], _Seen] = {}
        self._lock = threading.Lock()
        self.written = 0

    def event(self, regarding: Obj, type_: Literal["Normal", "Warning"], reason: str, action: str, note: str, *,
              related: Obj | None = None) -> None:
        meta = regarding.get("metadata") or {}
        ns = str(meta.get("namespace") or "default")
        if len(note) > NOTE_MAX:
            note = note[: NOTE_MAX - 3] + "..."
        related_uid = str(((related or {}).get("metadata") or {}).get("uid"))
        key = (str(meta.get("uid")), reason, action, type_, note, related_uid)
        now = self.clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen.last < SERIES_WINDOW:
                seen.count += 1
                seen.last = now
                if seen.count != 2:
                    return
                patch = {"series": {"count": 2, "lastObservedTime": micro_time(now)}}
                name, namespace = seen.name, seen.namespace
            else:
                patch = None
                name = f"{meta.get('name')}.{int(now * 1e9):x}"
                namespace = ns
                self._seen[key] = _Seen(name, ns, 1, now)
                self._prune(now)
        try:
            if patch is not None:
                self.api.patch(EVENTS_V1, name, patch, namespace)
            else:
                body = {
                    "apiVersion": "events.k8s.io/v1", "kind": "Event",
                    "metadata": {"name": name, "namespace": ns},
                    "eventTime": micro_time(now), "reportingController": self.controller,
                    "reportingInstance": self.instance, "action": action, "reason": reason, "type": type_,
                    "note": note, "regarding": _reference(regarding),
                }
                if related is not None:
                    body["related"] = _reference(related)
                self.api.create(EVENTS_V1, body, ns)
            self.written += 1
        except KubeError as err:
            log.warning("could not record event %s for %s/%s: %s", reason, ns, meta.get("name"), err.message)

    def _prune(self, now: float) -> None:
        if len(self._seen) > 4096:
            self._seen = {k: v for k, v in self._seen.items() if now - v.last < SERIES_WINDOW}


def _reference(obj: Obj) -> Obj:
    """reference.GetReference: the object's kind, name, namespace, uid and resourceVersion."""
    meta = obj.get("metadata") or {}
    ref = {"apiVersion": obj.get("apiVersion", "v1"), "kind": obj.get("kind", "Pod"),
           "namespace": str(meta.get("namespace") or "default"), "name": meta.get("name"), "uid": meta.get("uid"),
           "resourceVersion": meta.get("resourceVersion")}
    return {k: v for k, v in ref.items() if v}


__all__ = ["EVENTS_V1", "EventRecorder", "micro_time"]
