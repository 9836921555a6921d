"""The object store: one lock, one resourceVersion counter, one bounded event history.

Invariants
* Every write bumps the single store-wide `resourceVersion` by exactly one and appends exactly one event
  (ADDED/MODIFIED/DELETED) to the history, so a watcher resuming from version X receives every change after X
  exactly once, in order, across all resources (as etcd revisions do).
* Stored object dicts are never mutated after they are committed (copy-on-write): readers may serialise them
  outside the lock, and events keep the exact version that was committed.
* The history keeps the newest `history_limit` events; a watch from a version older than the oldest retained one
  is answered 410 Expired (the "compacted" case of the real server).
* `rewind(rv)` (a restore from a backup) is the one way versions go backwards: the undone events leave the history.
* Keys per resource are kept sorted (namespace, name), which is the order a real server lists in, so `limit` /
  `continue` pages are stable under concurrent writes.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    storage_key: str
    obj: Obj
    old: Obj | None


def object_key(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


class Store:
    def __init__(self, history_limit: int = 1000) -> None:
        if history_limit < 1:
            raise ValueError("history_limit must be at least 1")
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self._rv = 0
        self._objects: dict[str, dict[Key, Obj]] = {}
        self._keys: dict[str, list[Key]] = {}
        self._history: deque[Event] = deque(maxlen=history_limit)
        self._compacted_rv = 0
        # owner uid -> {(storage_key, key)} for garbage collection of dependents.
        self._dependents: dict[str, set[tuple[str, Key]]] = {}
        self.closed = False

    # -- reads (callers may hold the lock for read-modify-write sequences) --------------------------------------
    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def compacted_rv(self) -> int:
        return self._compacted_rv

    def get(self, storage_key: str, key: Key) -> Obj | None:
        return self._objects.get(storage_key, {}).get(key)

    def count(self, storage_key: str) -> int:
        return len(self._objects.get(storage_key, {}))

    def scan(self, storage_key: str, namespace: str | None = None, after: Key | None = None) -> Iterator[Obj]:
        """Objects in key order, optionally in one namespace and strictly after a key. Hold the lock while
        iterating (the key list may change between pages, never within a locked scan)."""
        keys = self._keys.get(storage_key)
        if not keys:
            return
        objects = self._objects[storage_key]
        if after is not None and (namespace is None or after >= (namespace, "")):
            i = bisect.bisect_right(keys, after)
        elif namespace is not None:
            i = bisect.bisect_left(keys, (namespace, ""))
        else:
            i = 0
        n = len(keys)
        while i < n:
            k = keys[i]
            if namespace is not None and k[0] != namespace:
                return
            yield objects[k]
            i += 1

    def count_after(self, storage_key: str, namespace: str | None, after: Key) -> int:
        """How many objects (in one namespace, or all) sort strictly after `after`."""
        keys = self._keys.get(storage_key) or []
        i = bisect.bisect_right(keys, after)
        end = bisect.bisect_left(keys, (namespace + "\x00", "")) if namespace is not None else len(keys)
        return max(0, end - i)

    def scan_at(self, storage_key: str, rv: int, namespace: str | None = None, after: Key | None = None) -> Iterator[Obj]:
        """Like `scan`, but the objects as they were at resourceVersion `rv` (a consistent snapshot, as an etcd
        read at a revision): the history after `rv` is undone on top of the current objects. The caller checks
        `rv >= compacted_rv` first and holds the lock."""
        overlay: dict[Key, Obj | None] = {}
        for ev in reversed(self._history):
            if ev.rv <= rv:
                break
            if ev.storage_key == storage_key:
                overlay[object_key(ev.obj if ev.old is None else ev.old)] = ev.old  # the oldest change wins
        if not overlay:
            yield from self.scan(storage_key, namespace, after)
            return
        state = {object_key(o): o for o in self.scan(storage_key, namespace, after)}
        for key, old in overlay.items():
            if (namespace is not None and key[0] != namespace) or (after is not None and key <= after):
                continue
            if old is None:
                state.pop(key, None)
            else:
                state[key] = old
        for key in sorted(state):
            yield state[key]

    def dependents(self, owner_uid: str) -> list[tuple[str, Key]]:
        return sorted(self._dependents.get(owner_uid, ()))

    # -- writes (caller holds the lock) --------------------------------------------------------------------------
    def next_rv(self) -> int:
        return self._rv + 1

    def put(self, storage_key: str, obj: Obj, event_type: str) -> Event:
        """Store `obj` (whose metadata.resourceVersion the caller set to `next_rv()`) and record the event."""
        key = object_key(obj)
        table = self._objects.setdefault(storage_key, {})
        old = table.get(key)
        if old is None:
            bisect.insort(self._keys.setdefault(storage_key, []), key)
        table[key] = obj
        self._index_owners(storage_key, key, old, obj)
        return self._record(event_type, storage_key, obj, old)

    def remove(self, storage_key: str, final: Obj) -> Event:
        """Delete the object; `final` is its last state carrying the deletion's resourceVersion."""
        key = object_key(final)
        table = self._objects.get(storage_key, {})
        old = table.pop(key, None)
        keys = self._keys.get(storage_key, [])
        i = bisect.bisect_left(keys, key)
        if i < len(keys) and keys[i] == key:
            keys.pop(i)
        self._index_owners(storage_key, key, old, None)
        return self._record("DELETED", storage_key, final, old)

    def _record(self, event_type: str, storage_key: str, obj: Obj, old: Obj | None) -> Event:
        self._rv += 1
        ev = Event(self._rv, event_type, storage_key, obj, old)
        if len(self._history) == self._history.maxlen:
            self._compacted_rv = self._history[0].rv
        self._history.append(ev)
        self.changed.notify_all()
        return ev

    def _index_owners(self, storage_key: str, key: Key, old: Obj | None, new: Obj | None) -> None:
        def uids(o: Obj | None) -> set[str]:
            refs = ((o or {}).get("metadata") or {}).get("ownerReferences") or []
            return {r["uid"] for r in refs if isinstance(r, dict) and r.get("uid")}

        before, after = uids(old), uids(new)
        for uid in before - after:
            deps = self._dependents.get(uid)
            if deps is not None:
                deps.discard((storage_key, key))
                if not deps:
                    del self._dependents[uid]
        for uid in after - before:
            self._dependents.setdefault(uid, set()).add((storage_key, key))

    # -- watch support --------------------------------------------------------------------------------------------
    def events_after(self, rv: int) -> list[Event] | None:
        """Events with resourceVersion > rv, oldest first; None when some of them were compacted away."""
        if rv < self._compacted_rv:
            return None
        out = []
        for ev in reversed(self._history):
            if ev.rv <= rv:
                break
            out.append(ev)
        out.reverse()
        return out

    def rewind(self, rv: int) -> None:
        """Go back to the state at resourceVersion `rv`, as an API server restored from an etcd backup taken then
        (etcd's `snapshot restore` brings back the revision of the snapshot): every change after `rv` is undone,
        the counter is back at `rv`, and the next write gets `rv + 1`, a version clients may already have seen.
        Needs `rv` inside the retained history (`compacted_rv <= rv <= resource_version`). Caller holds the lock."""
        if not self._compacted_rv <= rv <= self._rv:
            raise ValueError(f"cannot rewind to resourceVersion {rv}: the history holds "
                             f"{self._compacted_rv}..{self._rv}")
        while self._history and self._history[-1].rv > rv:
            ev = self._history.pop()
            key = object_key(ev.obj if ev.old is None else ev.old)
            table = self._objects.setdefault(ev.storage_key, {})
            current = table.get(key)
            keys = self._keys.setdefault(ev.storage_key, [])
            if ev.old is None:  # undo a create
                table.pop(key, None)
                i = bisect.bisect_left(keys, key)
                if i < len(keys) and keys[i] == key:
                    keys.pop(i)
            else:  # undo an update or a delete
                if current is None:
                    bisect.insort(keys, key)
                table[key] = ev.old
            self._index_owners(ev.storage_key, key, current, ev.old)
        self._rv = rv
        self.changed.notify_all()

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.changed.notify_all()
