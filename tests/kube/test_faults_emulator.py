"""Resilience through injected faults on the emulator: the caller sees one clean result, nothing duplicated or
lost. Faults are real: refused TCP connections, real 429/503 answers with Retry-After, watch streams cut
mid-stream, a history too short to resume from (410 Gone)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from bridge.kube import (
    CONFIG_MAPS,
    Gone,
    Informer,
    RestKube,
    Retrier,
    RetryPolicy,
    Unavailable,
    WatchEvent,
    load_configuration,
)
from tests.polling import wait_until


def configmap(name: str, ns: str = "t", **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": dict(data)}


def test_list_rides_out_five_seconds_of_refused_connections(server: Any, api: RestKube) -> None:
    server.load_objects([configmap(f"cm-{i:04d}", ns="default") for i in range(1500)])
    refused = {"done": False}

    def on_page(count: int) -> None:
        if count >= 300 and not refused["done"]:
            refused["done"] = True
            server.faults.refuse_connections(5)

    listed = api.list(CONFIG_MAPS, "default", page_size=100, on_page=on_page)
    names = [i["metadata"]["name"] for i in listed["items"]]
    assert refused["done"]
    assert len(names) == len(set(names)) == 1500


def test_named_create_during_an_outage_lands_once(server: Any, api: RestKube, ns: str) -> None:
    server.faults.refuse_connections(3)
    created = api.create(CONFIG_MAPS, configmap("during-outage", v="1"))
    assert created["metadata"]["name"] == "during-outage"
    assert [i["metadata"]["name"] for i in api.list(CONFIG_MAPS, ns)["items"]] == ["during-outage"]


def recording_client(kubeconfig: Path, sleeps: list[float]) -> RestKube:
    cfg = load_configuration(kubeconfig).configuration
    cfg.retries = False
    return RestKube(ApiClient(cfg), retrier=Retrier(RetryPolicy(initial_backoff=0.05, deadline=20),
                                                   sleep=lambda s: (sleeps.append(s), time.sleep(s))[1]))


def test_429_retry_after_is_waited_out(server: Any, kubeconfig: Path) -> None:
    sleeps: list[float] = []
    with recording_client(kubeconfig, sleeps) as api:
        server.faults.fail(2, status=429, retry_after=1, path_regex=r"/configmaps$")
        assert api.list(CONFIG_MAPS, "default")["items"] == []
    assert sleeps == [1.0, 1.0]


def test_503_is_retried_with_backoff(server: Any, kubeconfig: Path) -> None:
    sleeps: list[float] = []
    with recording_client(kubeconfig, sleeps) as api:
        server.faults.fail(3, status=503, path_regex=r"/configmaps$")
        assert api.list(CONFIG_MAPS, "default")["items"] == []
    assert len(sleeps) == 3 and sleeps[0] < sleeps[2]


def test_generate_name_create_is_not_repeated_after_an_ambiguous_failure(server: Any, api: RestKube, ns: str) -> None:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "g-", "namespace": ns}}
    server.faults.fail(1, status=503, path_regex=r"/configmaps$")
    with pytest.raises(Unavailable, match="may already have acted"):
        api.create(CONFIG_MAPS, obj)
    server.faults.fail(1, status=429, retry_after=0, path_regex=r"/configmaps$")  # 429: certainly not acted on
    assert api.create(CONFIG_MAPS, obj)["metadata"]["name"].startswith("g-")
    assert len(api.list(CONFIG_MAPS, ns)["items"]) == 1


def test_raw_watch_from_a_compacted_version_is_gone(tmp_path: Path) -> None:
    from bridge.kube import connect
    from bridge.sandbox.apiserver import ApiServer

    with ApiServer(history_limit=3) as srv:
        srv.write_kubeconfig(tmp_path / "kc")
        with connect(tmp_path / "kc") as api:
            first = api.create(CONFIG_MAPS, configmap("a", ns="default"))
            for i in range(10):
                api.patch(CONFIG_MAPS, "a", {"data": {"i": str(i)}}, "default")
            with pytest.raises(Gone):
                for _ in api.watch(CONFIG_MAPS, "default", resource_version=first["metadata"]["resourceVersion"],
                                   timeout_seconds=5):
                    pass


class Recorder:
    def __init__(self) -> None:
        self.events: list[WatchEvent] = []
        self.lock = threading.Lock()

    def __call__(self, ev: WatchEvent) -> None:
        with self.lock:
            self.events.append(ev)

    def by_key(self) -> dict[str, list[tuple[str, str]]]:
        out: dict[str, list[tuple[str, str]]] = defaultdict(list)
        with self.lock:
            for ev in self.events:
                m = ev.object["metadata"]
                out[m["name"]].append((ev.type, "" if ev.type == "DELETED" else m["resourceVersion"]))
        return out


def test_watch_dropped_mid_stream_resumes_without_duplicates_or_losses(server: Any, api: RestKube, ns: str) -> None:
    rec = Recorder()
    stop = threading.Event()
    inf = Informer(api, CONFIG_MAPS, ns, on_event=rec, backoff=RetryPolicy(initial_backoff=0.05, max_backoff=0.5))
    thread = inf.start(stop)
    try:
        assert inf.wait_synced(20)
        expected: dict[str, list[tuple[str, str]]] = defaultdict(list)
        drops = 0
        for i in range(60):
            name = f"cm-{i % 12:02d}"
            if not expected[name] or expected[name][-1][0] == "DELETED":
                obj = api.create(CONFIG_MAPS, configmap(name, v=str(i)))
                expected[name].append(("ADDED", obj["metadata"]["resourceVersion"]))
            elif i % 5 == 0:
                api.delete(CONFIG_MAPS, name, ns)
                expected[name].append(("DELETED", ""))
            else:
                obj = api.patch(CONFIG_MAPS, name, {"data": {"v": str(i)}}, ns)
                expected[name].append(("MODIFIED", obj["metadata"]["resourceVersion"]))
            if i % 7 == 3:
                drops += server.faults.drop_watches()
        wait_until(lambda: rec.by_key() == expected, what="every write seen once")
        assert drops > 0 and inf.resumes > 0
        assert inf.relists == 0  # resumed from the last version each time, never needed a relist
        live = {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in api.list(CONFIG_MAPS, ns)["items"]}
        assert {k.split("/")[1]: v["metadata"]["resourceVersion"] for k, v in inf.snapshot().items()} == live
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


def test_informer_rides_out_five_seconds_of_refused_connections(server: Any, api: RestKube, ns: str) -> None:
    rec = Recorder()
    stop = threading.Event()
    inf = Informer(api, CONFIG_MAPS, ns, on_event=rec, backoff=RetryPolicy(initial_backoff=0.1, max_backoff=1.0))
    thread = inf.start(stop)
    try:
        assert inf.wait_synced(20)
        server.faults.refuse_connections(5)  # the open watch is cut and every reconnect is refused for 5 s
        # Changes land meanwhile (in-process, as other API clients would): the informer must get each one once.
        server.load_objects([configmap(f"during-{i}", ns=ns, v="1") for i in range(3)])
        wait_until(lambda: len(rec.events) == 3, timeout=30, what="the changes made during the outage")
        after = api.patch(CONFIG_MAPS, "during-0", {"data": {"v": "2"}}, ns)
        wait_until(lambda: len(rec.events) == 4, what="a change after the outage")
        assert [(e.type, e.object["metadata"]["name"]) for e in rec.events] == [
            ("ADDED", "during-0"), ("ADDED", "during-1"), ("ADDED", "during-2"), ("MODIFIED", "during-0")]
        assert rec.events[-1].object["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]
        assert inf.relists == 0 and inf.resumes > 0  # resumed from its last version, nothing replayed
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


def test_gone_relists_and_the_cache_matches_the_server(tmp_path: Path) -> None:
    from bridge.kube import connect
    from bridge.sandbox.apiserver import ApiServer

    with ApiServer(history_limit=5) as srv:
        srv.write_kubeconfig(tmp_path / "kc")
        with connect(tmp_path / "kc", retry=RetryPolicy(initial_backoff=0.05, max_backoff=0.2, deadline=1)) as api:
            for i in range(10):
                api.create(CONFIG_MAPS, configmap(f"cm-{i}", ns="default", v="0"))
            rec = Recorder()
            stop = threading.Event()
            # Cluster-wide watch: its path (/api/v1/configmaps) can be failed while writes to the namespace go on.
            inf = Informer(api, CONFIG_MAPS, on_event=rec, backoff=RetryPolicy(initial_backoff=0.05, max_backoff=0.3))
            thread = inf.start(stop)
            try:
                assert inf.wait_synced(20)
                srv.faults.fail(100000, status=503, path_regex=r"^/api/v1/configmaps$")
                srv.faults.drop_watches()
                for i in range(10):  # far more changes than the 5-event history holds
                    if i % 3 == 0:
                        api.delete(CONFIG_MAPS, f"cm-{i}", "default")
                    else:
                        api.patch(CONFIG_MAPS, f"cm-{i}", {"data": {"v": "1"}}, "default")
                for i in range(10, 13):
                    api.create(CONFIG_MAPS, configmap(f"cm-{i}", ns="default", v="new"))
                srv.faults.clear()
                wait_until(lambda: inf.relists >= 1, what="a relist after 410 Gone")
                live = {i["metadata"]["name"]: i["metadata"]["resourceVersion"]
                        for i in api.list(CONFIG_MAPS, "default")["items"]}
                wait_until(lambda: {k.split("/")[1]: v["metadata"]["resourceVersion"]
                                    for k, v in inf.snapshot().items()} == live, what="cache == server")
            finally:
                stop.set()
                thread.join(10)
            assert not thread.is_alive()
    # Replaying the events on an empty map gives exactly the server's state: nothing lost, nothing doubled.
    state: dict[str, str] = {}
    for ev in rec.events:
        name = ev.object["metadata"]["name"]
        if ev.type == "ADDED":
            assert name not in state, f"duplicate ADDED for {name}"
            state[name] = ev.object["metadata"]["resourceVersion"]
        elif ev.type == "MODIFIED":
            assert name in state
            state[name] = ev.object["metadata"]["resourceVersion"]
        else:
            assert state.pop(name, None) is not None, f"DELETED for unknown {name}"
    assert state == live


def test_informer_stops_promptly_while_the_watch_is_idle(api: RestKube, ns: str) -> None:
    stop = threading.Event()
    inf = Informer(api, CONFIG_MAPS, ns, watch_timeout=300)
    thread = inf.start(stop)
    assert inf.wait_synced(20)
    time.sleep(0.3)  # let it block in the watch read
    stop.set()
    thread.join(10)  # generous: the idle watch would otherwise last 300+ s
    assert not thread.is_alive()
