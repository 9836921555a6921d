"""A resilient watcher (`Informer`): list once, then watch forever, keeping an in-memory copy of the objects.

Contract for the caller: every change of server state is reported exactly once, in order per object, and the
`store` always equals the server's state as of `resource_version`.

How it holds:
* Start: list (paginated, one snapshot) -> every object is ADDED, `resource_version` = the list's version; `synced`
  is set once those events reached the caller.
* Watch from `resource_version`. Each event moves `resource_version` forward; BOOKMARK events only move it (they
  are not passed on). A stream that ends (server timeout) or breaks (connection reset, refused reconnect) is
  reopened from the last version seen, after a backoff when it failed, so nothing between is lost and nothing is
  replayed.
* 410 Gone (the version fell out of the server's history), or "Too large resource version" (the server has not
  reached our version: it was restored from a backup or replaced by a fresh one, so its versions went backwards,
  or it lags behind its peers) -> list again, from the server's newest state, and report the *difference* with the
  store (client-go's reflector relists on both: isExpiredError / isTooLargeResourceVersionError in
  kubernetes/kubernetes staging/src/k8s.io/client-go/tools/cache/reflector.go; resuming from our version would
  fail for ever after a restore, and a server that later passes it would skip every change in between): ADDED for new objects, MODIFIED for changed ones (resourceVersion differs), DELETED for vanished ones,
  DELETED+ADDED when a name was recreated with a new uid. Intermediate versions that happened while disconnected
  are coalesced into one change, as with any Kubernetes informer.
* Duplicates are dropped: an event whose object has the resourceVersion already stored, or a DELETED for an
  unknown object. ADDED/MODIFIED are normalised against the store (MODIFIED for an object it already holds).
* `stop` ends it promptly: a helper thread closes the open stream, which wakes the blocked read. (A list that is
  retrying through an outage finishes its current retry first, bounded by the client's retry deadline.)
* `transform` (as client-go's `SharedInformer.SetTransform`) replaces each object before it is stored and passed
  on, so a caller that needs a few fields of large objects (Nodes carry their images and conditions) keeps only
  those. It must keep `metadata.name`, `namespace`, `uid` and `resourceVersion`, which the store diffs on
  (`kept_metadata`). A list applies it page by page (`KubeAPI.list`), so the transient peak of a start-up list or a
  relist is one page of whole objects plus the list's cut ones, not the whole list of whole objects.
* `healthy` says whether the store is current now. After a failed watch a resumed one replays what it missed, but
  nothing marks the end of that replay (the API server's watch cache sends the events since our version, then the
  live ones, with no bookmark in between unless `sendInitialEvents` was asked for, which a resumed watch cannot
  ask), so a consumer reading `healthy` right after the reconnect would act on the store of before the outage.
  With `relist_after_failure` the informer lists again after a failed watch and is healthy once that list's
  difference reached the caller: the node daemon's informers (one node's pods, one Node, the DeviceClasses) set it,
  their lists are small; the controller's cluster-wide ones resume, as client-go's reflector does.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from bridge.kube.api import KubeAPI, Obj, Resource, WatchEvent
from bridge.kube.errors import Gone, KubeError, TooLargeResourceVersion
from bridge.kube.retry import RetryPolicy

log = logging.getLogger(__name__)


def object_key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


IDENTITY = ("name", "namespace", "uid", "resourceVersion")  # what a `transform` must keep of metadata


def kept_metadata(obj: Mapping[str, Any], *extra: str) -> Obj:
    """The metadata a `transform` keeps: the identity the store diffs on (`IDENTITY`) and the `extra` keys, where the
    object has them."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return {}
    return {k: meta[k] for k in IDENTITY + extra if k in meta}


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


class Informer:
    def __init__(
        self,
        api: KubeAPI,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        on_event: Callable[[WatchEvent], None] | None = None,
        backoff: RetryPolicy | None = None,
        watch_timeout: int = 300,
        page_size: int = 500,
        transform: Callable[[Obj], Obj] | None = None,
        relist_after_failure: bool = False,
    ) -> None:
        self.api = api
        self.relist_after_failure = relist_after_failure
        self.transform = transform
        self.res = res
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.on_event = on_event
        self.backoff = backoff or RetryPolicy(initial_backoff=0.2, factor=2.0, max_backoff=10.0)
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.store: dict[str, Obj] = {}
        self.resource_version = ""
        self.synced = threading.Event()
        # Counters (metrics, tests): how often the stream was resumed and how often a full relist was needed.
        self.resumes = 0
        self.relists = 0
        self.last_error: KubeError | None = None
        # False from a failed list/watch until the next one succeeds: whether `store` is current right now (a
        # consumer that must not act on stale state, such as the split waiting for the Node's allocatable, checks it).
        self.healthy = False
        self._lock = threading.Lock()
        self._stream: Any = None

    # ---- public ----------------------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Obj]:
        with self._lock:
            return dict(self.store)

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self.synced.wait(timeout)

    def run(self, stop: threading.Event) -> None:
        """Call `on_event` for each change until `stop` is set. A failing callback is logged, never fatal."""
        for ev in self.events(stop):
            if self.on_event is None:
                continue
            try:
                self.on_event(ev)
            except Exception:  # noqa: BLE001 - one bad callback must not stop the informer
                log.exception("informer %s: on_event failed for %s", self.res.plural, object_key(ev.object))

    def start(self, stop: threading.Event) -> threading.Thread:
        t = threading.Thread(target=self.run, args=(stop,), name=f"informer-{self.res.plural}", daemon=True)
        t.start()
        return t

    def events(self, stop: threading.Event) -> Iterator[WatchEvent]:
        """The changes, in the caller's thread, until `stop` is set."""
        done = threading.Event()
        closer = threading.Thread(target=self._close_on_stop, args=(stop, done), daemon=True)
        closer.start()
        failures = 0
        need_list = True
        try:
            while not stop.is_set():
                try:
                    if need_list:
                        changes = self._relist()
                        need_list = False
                        failures = 0
                        # Synced (and healthy again) once the list's changes reached the caller, as client-go's
                        # handler registrations report HasSynced: a consumer reading its own state built from the
                        # events (bridge.node.nodepods) must not see "every pod" when it has taken in half of them.
                        yield from changes
                        self.healthy = True
                        self.synced.set()
                        continue
                    timeout = int(self.watch_timeout * (1 + random.random()))  # spread reconnects, as client-go
                    stream = self.api.watch(
                        self.res,
                        self.namespace,
                        label_selector=self.label_selector,
                        field_selector=self.field_selector,
                        resource_version=self.resource_version,
                        timeout_seconds=timeout,
                    )
                    with self._lock:
                        self._stream = stream
                    if stop.is_set():
                        break
                    self.healthy = True
                    for ev in stream:
                        failures = 0
                        out = self._apply(ev)
                        if out is not None:
                            yield out
                    self.resumes += 1  # ended cleanly: reopen from the last version seen
                except (Gone, TooLargeResourceVersion) as err:
                    if need_list:  # the list itself was refused: back off like any failure, never spin
                        self.last_error = err
                        delay = self.backoff.backoff(failures)
                        failures += 1
                        log.warning("informer %s: list failed: %s; retrying in %.1fs", self.res.plural,
                                    err.message, delay)
                        stop.wait(delay)
                        continue
                    self.relists += 1
                    need_list = True
                    log.info("informer %s: %s (at resourceVersion %s); listing again", self.res.plural, err.message,
                             self.resource_version or "(list)")
                except KubeError as err:
                    if stop.is_set():
                        break
                    self.healthy = False
                    self.last_error = err
                    delay = self.backoff.backoff(failures)
                    failures += 1
                    if not need_list and self.relist_after_failure:
                        self.relists += 1  # healthy again only with the list's difference (module docstring)
                        need_list = True
                    elif not need_list:
                        self.resumes += 1
                    log.warning(
                        "informer %s: %s; retrying in %.1fs from resourceVersion %s",
                        self.res.plural,
                        err.message,
                        delay,
                        self.resource_version or "(list)",
                    )
                    stop.wait(delay)
                finally:
                    self._drop_stream()
        finally:
            done.set()
            self._drop_stream()

    # ---- internals -------------------------------------------------------------------------------------------

    def _close_on_stop(self, stop: threading.Event, done: threading.Event) -> None:
        while not done.is_set():
            if stop.wait(0.1):
                self._drop_stream()
                return

    def _drop_stream(self) -> None:
        with self._lock:
            stream, self._stream = self._stream, None
        close = getattr(stream, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 - a fake or generator stream may refuse; nothing more to do
                log.debug("informer %s: closing the stream failed", self.res.plural, exc_info=True)

    def _relist(self) -> list[WatchEvent]:
        lst = self.api.list(
            self.res,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            page_size=self.page_size,
            transform=self.transform,
        )
        items = lst.get("items") or []
        fresh = {object_key(o): o for o in items}
        out: list[WatchEvent] = []
        with self._lock:
            for key, obj in fresh.items():
                old = self.store.get(key)
                if old is None:
                    out.append(WatchEvent("ADDED", obj))
                elif _uid(old) and _uid(obj) and _uid(old) != _uid(obj):
                    out.append(WatchEvent("DELETED", old))
                    out.append(WatchEvent("ADDED", obj))
                elif _rv(old) != _rv(obj):
                    out.append(WatchEvent("MODIFIED", obj))
            out.extend(WatchEvent("DELETED", old) for key, old in self.store.items() if key not in fresh)
            self.store.clear()
            self.store.update(fresh)
            self.resource_version = str((lst.get("metadata") or {}).get("resourceVersion", ""))
        return out

    def _apply(self, ev: WatchEvent) -> WatchEvent | None:
        obj = ev.object if self.transform is None or ev.type == "BOOKMARK" else self.transform(ev.object)
        rv = _rv(obj)
        with self._lock:
            if rv:
                self.resource_version = rv
            if ev.type == "BOOKMARK":
                return None
            key = object_key(obj)
            old = self.store.get(key)
            if ev.type == "DELETED":
                if old is None:
                    return None
                del self.store[key]
                return WatchEvent("DELETED", obj)
            if old is not None and _rv(old) == rv:
                return None  # a replay of what we already have
            self.store[key] = obj
            return WatchEvent("ADDED" if old is None else "MODIFIED", obj)


def watch_forever(
    api: KubeAPI,
    res: Resource,
    on_event: Callable[[WatchEvent], None],
    stop: threading.Event,
    namespace: str | None = None,
    **kw: Any,
) -> Informer:
    """Run an `Informer` in the calling thread until `stop` is set; returns it (with its final store)."""
    inf = Informer(api, res, namespace, on_event=on_event, **kw)
    inf.run(stop)
    return inf


__all__ = ["IDENTITY", "Informer", "kept_metadata", "object_key", "watch_forever"]
