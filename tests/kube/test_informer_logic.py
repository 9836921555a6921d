"""Informer bookkeeping against a scripted API (the same behaviour against the emulator is in
test_watch_emulator.py): resume from the last version, drop replays, relist on Gone and report the difference."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from bridge.kube import PODS, Gone, Informer, RetryPolicy, TooLargeResourceVersion, Unavailable, WatchEvent
from tests.kube.idlestream import BlockingStream

FAST = RetryPolicy(initial_backoff=0.01, max_backoff=0.02, jitter=0)


def pod(name: str, rv: int, uid: str | None = None, ns: str = "ns") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": str(rv), "uid": uid or f"uid-{name}"}}



class ScriptedAPI:
    """`lists`: successive list answers; `watches`: successive watch answers (events, with exceptions raised in
    place). When the script runs out, the watch blocks until closed."""

    def __init__(self, lists: list[list[dict[str, Any]] | tuple[str, list[dict[str, Any]]]], watches: list[list[Any]]):
        self.lists = lists
        self.watches = watches
        self.watch_calls: list[str | None] = []
        self.list_calls = 0
        self.idle = threading.Event()

    def list(self, res: Any, namespace: Any = None, **kw: Any) -> dict[str, Any]:
        entry = self.lists[min(self.list_calls, len(self.lists) - 1)]
        self.list_calls += 1
        rv, items = entry if isinstance(entry, tuple) else ("10", entry)
        return {"metadata": {"resourceVersion": rv}, "items": items}

    def watch(self, res: Any, namespace: Any = None, *, resource_version: str | None = None, **kw: Any) -> Any:
        self.watch_calls.append(resource_version)
        if not self.watches:
            self.idle.set()
            return BlockingStream()
        script = self.watches.pop(0)

        def gen() -> Iterator[WatchEvent]:
            for item in script:
                if isinstance(item, BaseException):
                    raise item
                yield item

        return gen()


def collect(api: ScriptedAPI) -> tuple[list[tuple[str, str, str]], Informer]:
    stop = threading.Event()
    inf = Informer(api, PODS, backoff=FAST)  # type: ignore[arg-type]
    seen: list[tuple[str, str, str]] = []

    def run() -> None:
        for ev in inf.events(stop):
            seen.append((ev.type, ev.object["metadata"]["name"], ev.object["metadata"]["resourceVersion"]))

    t = threading.Thread(target=run)
    t.start()
    assert api.idle.wait(10), "the informer never reached the idle watch"
    stop.set()
    t.join(10)
    assert not t.is_alive(), "the informer did not stop"
    return seen, inf


def test_initial_list_then_watch_from_the_list_version() -> None:
    api = ScriptedAPI([("10", [pod("a", 5)])], [[WatchEvent("ADDED", pod("b", 11))]])
    seen, inf = collect(api)
    assert seen == [("ADDED", "a", "5"), ("ADDED", "b", "11")]
    assert api.watch_calls[0] == "10" and api.watch_calls[1] == "11"
    assert set(inf.store) == {"ns/a", "ns/b"} and inf.resource_version == "11"


def test_dropped_stream_resumes_from_the_last_version_without_replays() -> None:
    api = ScriptedAPI(
        [("10", [pod("a", 5)])],
        [
            [WatchEvent("MODIFIED", pod("a", 11)), Unavailable("connection reset")],
            # the server replays 11 (a buggy proxy) before sending new changes: the replay is dropped
            [WatchEvent("MODIFIED", pod("a", 11)), WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "15"}})],
            [WatchEvent("DELETED", pod("a", 16)), WatchEvent("DELETED", pod("a", 16))],
        ],
    )
    seen, inf = collect(api)
    assert seen == [("ADDED", "a", "5"), ("MODIFIED", "a", "11"), ("DELETED", "a", "16")]
    assert api.watch_calls[:4] == ["10", "11", "15", "16"]
    assert inf.store == {} and api.list_calls == 1 and inf.resumes >= 2


def test_gone_relists_and_reports_only_the_difference() -> None:
    before = [pod("same", 5), pod("changed", 6), pod("vanished", 7), pod("recreated", 8, uid="old")]
    after = [pod("same", 5), pod("changed", 20), pod("recreated", 21, uid="new"), pod("new", 22)]
    api = ScriptedAPI([("10", before), ("30", after)], [[Gone("too old resource version")]])
    seen, inf = collect(api)
    assert seen[:4] == [("ADDED", n, rv) for n, rv in (("same", "5"), ("changed", "6"), ("vanished", "7"), ("recreated", "8"))]
    assert sorted(seen[4:]) == sorted([
        ("MODIFIED", "changed", "20"), ("DELETED", "recreated", "8"), ("ADDED", "recreated", "21"),
        ("ADDED", "new", "22"), ("DELETED", "vanished", "7"),
    ])
    assert {k: v["metadata"]["resourceVersion"] for k, v in inf.store.items()} == {
        "ns/same": "5", "ns/changed": "20", "ns/recreated": "21", "ns/new": "22"}
    assert inf.relists == 1 and api.watch_calls[-1] == "30"


def test_a_server_behind_our_version_relists_instead_of_resuming_for_ever() -> None:
    """After a restore the server's versions went backwards: resuming from 30 is refused ("Too large resource
    version") however often it is tried, so the informer lists again, from the server's state, as on 410."""
    too_large = TooLargeResourceVersion("Timeout: Too large resource version: 30, current: 12", status=504)
    api = ScriptedAPI([("30", [pod("kept", 25), pod("made-after-backup", 28)]), ("12", [pod("kept", 9)])],
                      [[too_large]])
    seen, inf = collect(api)
    assert seen[2:] == [("MODIFIED", "kept", "9"), ("DELETED", "made-after-backup", "28")]
    assert inf.relists == 1 and api.list_calls == 2
    assert api.watch_calls == ["30", "12"]  # never asked again from 30
    assert inf.resource_version == "12" and set(inf.store) == {"ns/kept"}


def test_a_failing_callback_does_not_stop_the_informer() -> None:
    api = ScriptedAPI([("10", [pod("a", 5), pod("b", 6)])], [])
    calls: list[str] = []

    def on_event(ev: WatchEvent) -> None:
        calls.append(ev.object["metadata"]["name"])
        raise RuntimeError("boom")

    stop = threading.Event()
    inf = Informer(api, PODS, on_event=on_event, backoff=FAST)  # type: ignore[arg-type]
    t = inf.start(stop)
    assert api.idle.wait(10)
    stop.set()
    t.join(10)
    assert calls == ["a", "b"] and not t.is_alive()


def test_synced_only_once_the_first_lists_events_reached_the_caller() -> None:
    api = ScriptedAPI([[pod("a", 1), pod("b", 2)]], [])
    inf = Informer(api, PODS, backoff=FAST)  # type: ignore[arg-type]
    stop = threading.Event()
    events = inf.events(stop)
    first = next(events)
    assert first.object["metadata"]["name"] == "a" and not inf.synced.is_set() and not inf.healthy
    next(events)
    assert not inf.synced.is_set()  # the caller is still handling "b"
    t = threading.Thread(target=lambda: next(events, None))
    t.start()
    assert api.idle.wait(10) and inf.synced.is_set() and inf.healthy
    stop.set()
    t.join(10)


def test_after_a_failed_watch_an_informer_that_relists_is_healthy_only_with_what_the_outage_changed() -> None:
    """A resumed watch replays what it missed with nothing marking the end of the replay; with
    `relist_after_failure` the informer lists again and reports healthy once the list's difference was handled."""
    api = ScriptedAPI([("10", [pod("a", 5)]), ("20", [pod("a", 5), pod("made-in-the-outage", 15)])],
                      [[Unavailable("connection reset")]])
    stop = threading.Event()
    inf = Informer(api, PODS, backoff=FAST, relist_after_failure=True)  # type: ignore[arg-type]
    events = inf.events(stop)
    assert next(events).object["metadata"]["name"] == "a"
    missed = next(events)  # the failure, the backoff and the second list happen inside this call
    assert (missed.type, missed.object["metadata"]["name"]) == ("ADDED", "made-in-the-outage")
    assert not inf.healthy, "healthy before the caller handled what the outage changed"
    t = threading.Thread(target=lambda: next(events, None))
    t.start()
    assert api.idle.wait(10) and inf.healthy
    assert api.list_calls == 2 and api.watch_calls == ["10", "20"] and inf.relists == 1
    assert isinstance(inf.last_error, Unavailable)
    stop.set()
    t.join(10)


def test_an_informer_that_relists_after_failures_still_resumes_a_watch_the_server_ended() -> None:
    api = ScriptedAPI([("10", [pod("a", 5)])], [[WatchEvent("MODIFIED", pod("a", 11))]])
    inf = Informer(api, PODS, backoff=FAST, relist_after_failure=True)  # type: ignore[arg-type]
    seen: list[str] = []
    stop = threading.Event()
    t = threading.Thread(target=lambda: seen.extend(e.type for e in inf.events(stop)))
    t.start()
    assert api.idle.wait(10)
    stop.set()
    t.join(10)
    assert seen == ["ADDED", "MODIFIED"] and api.list_calls == 1 and api.watch_calls == ["10", "11"]
