"""Watch streams: the initial state (when asked), then every change after a resourceVersion, then bookmarks.

Semantics follow the real server:
* `resourceVersion` unset or "0": synthetic ADDED events for every matching object, then changes from now on.
* `resourceVersion=X`: every change with version > X, none lost, none repeated. When X is older than the retained
  history, the stream (HTTP 200) carries one ERROR event with a `Status` 410 Expired "too old resource version:
  X (Y)" and ends: the client must relist. A watcher that falls that far behind mid-stream gets the same.
* With a label or field selector an object that starts matching arrives as ADDED, one that stops matching as
  DELETED (the cacher's behaviour), so a filtered view never goes stale.
* `allowWatchBookmarks`: a BOOKMARK carrying the newest version every `bookmark_interval` seconds;
  `sendInitialEvents=true` ends the initial ADDED burst with a bookmark annotated `k8s.io/initial-events-end`.
* `timeoutSeconds`: the stream ends cleanly after that long.
The stream thread waits on the store's condition without holding the lock while writing to the socket.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .conversion import from_storage
from .registry import ResourceType
from .rest import Rest, check_list_options, parse_resource_version, query_flag
from .selectors import FieldRequirement, Requirement, fields_match, labels_match, parse_field_selector, parse_label_selector
from .status import bad_request, expired, too_large_resource_version
from .store import Store

Obj = dict[str, Any]


@dataclass(frozen=True)
class WatchSpec:
    rt: ResourceType
    namespace: str | None
    labels: tuple[Requirement, ...]
    fields: tuple[FieldRequirement, ...]
    resource_version: str | None
    bookmarks: bool
    send_initial: bool
    timeout: float | None

    @classmethod
    def parse(cls, rt: ResourceType, namespace: str | None, query: dict[str, str]) -> WatchSpec:
        """Raises BadRequest before any byte of the stream is sent."""
        rv = query.get("resourceVersion") or None
        check_list_options(rv or "", query.get("resourceVersionMatch") or "", "", query, watch=True)
        if rv is not None and rv != "0":
            parse_resource_version(rv, "watch")
        timeout = None
        if query.get("timeoutSeconds"):
            try:
                timeout = float(query["timeoutSeconds"])
            except ValueError:
                raise bad_request(f"invalid timeoutSeconds: {query['timeoutSeconds']!r}") from None
        return cls(
            rt,
            namespace if rt.namespaced and namespace else None,
            parse_label_selector(query.get("labelSelector")),
            parse_field_selector(query.get("fieldSelector"), rt.allows_field, rt.unsupported_field),
            rv,
            query_flag(query, "allowWatchBookmarks"),
            query_flag(query, "sendInitialEvents"),
            timeout,
        )

    def check_reachable(self, store: Store) -> None:
        """A watch from a version the server has not reached is refused before the stream starts (504, like the
        watch cache after its wait for freshness runs out; this store is never behind, so it answers at once)."""
        if self.resource_version in (None, "0"):
            return
        requested = int(self.resource_version or 0)
        with store.lock:
            if requested > store.resource_version:
                raise too_large_resource_version(requested, store.resource_version)

    def matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and (obj.get("metadata") or {}).get("namespace") != self.namespace:
            return False
        return labels_match(self.labels, obj) and fields_match(self.fields, obj)


def _gone(requested: int, compacted: int) -> Obj:
    """The watch cache's answer: "too old resource version: <requested> (<oldest version still resumable>)"."""
    return {"type": "ERROR", "object": expired(f"too old resource version: {requested} ({compacted})").status()}


def stream(
    rest: Rest,
    spec: WatchSpec,
    write: Callable[[Obj], None],
    stopped: Callable[[], bool],
    bookmark_interval: float,
) -> None:
    """Write events until timeout, stop, or a write fails (the client went away: `write` raises OSError)."""
    store, rt = rest.store, spec.rt
    deadline = time.monotonic() + spec.timeout if spec.timeout is not None else None
    initial: list[Obj] = []
    with store.lock:
        if spec.resource_version in (None, "0") or spec.send_initial:
            initial = [o for o in store.scan(rt.storage_key, spec.namespace) if spec.matches(o)]
            cursor = store.resource_version
        else:
            cursor = int(spec.resource_version or 0)
            if cursor < store.compacted_rv:
                write(_gone(cursor, store.compacted_rv))
                return
    for obj in initial:
        write({"type": "ADDED", "object": from_storage(rt, obj)})
    if spec.send_initial and spec.bookmarks:
        write(_bookmark(rt, cursor, initial_end=True))
    last_bookmark = time.monotonic()
    while not stopped():
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return
        with store.lock:
            if store.closed:
                return
            events = store.events_after(cursor)
            if events is None:
                write(_gone(cursor, store.compacted_rv))
                return
            if not events:
                waits = [0.5]
                if deadline is not None:
                    waits.append(deadline - now)
                if spec.bookmarks:
                    waits.append(last_bookmark + bookmark_interval - now)
                store.changed.wait(max(0.0, min(waits)))
                events = store.events_after(cursor) or []
        for ev in events:
            cursor = ev.rv
            if ev.storage_key != rt.storage_key:
                continue
            now_match = spec.matches(ev.obj) if ev.type != "DELETED" else False
            was_match = spec.matches(ev.old)
            if ev.type == "DELETED":
                if was_match:
                    write({"type": "DELETED", "object": from_storage(rt, ev.obj)})
            elif now_match and was_match:
                write({"type": "MODIFIED", "object": from_storage(rt, ev.obj)})
            elif now_match:
                write({"type": "ADDED", "object": from_storage(rt, ev.obj)})
            elif was_match:
                write({"type": "DELETED", "object": from_storage(rt, ev.obj)})
        if spec.bookmarks and time.monotonic() - last_bookmark >= bookmark_interval:
            write(_bookmark(rt, cursor))
            last_bookmark = time.monotonic()


def _bookmark(rt: ResourceType, rv: int, initial_end: bool = False) -> Obj:
    meta: Obj = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.group_version, "metadata": meta}}


__all__ = ["WatchSpec", "stream"]
