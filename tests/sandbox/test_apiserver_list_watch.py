"""Lists (selectors, pagination) and watches (events, resume, 410 Gone, bookmarks) through the official client."""

from __future__ import annotations

import json
import threading

import pytest
from kubernetes import watch
from kubernetes.client import ApiException

from .conftest import client_for, pod, resource_slice, wait_for


@pytest.fixture
def pods(core):
    specs = [
        ("a", {"app": "web", "tier": "front"}, "node-1"),
        ("b", {"app": "web", "tier": "back"}, "node-2"),
        ("c", {"app": "db"}, None),
        ("d", {}, "node-1"),
    ]
    for name, labels, node in specs:
        core.create_namespaced_pod("default", pod(name, labels=labels, node=node))
    return core


def names(items) -> list[str]:
    return sorted(i.metadata.name for i in items)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", ["a", "b"]),
        ("app==web", ["a", "b"]),
        ("app!=web", ["c", "d"]),
        ("app in (web,db)", ["a", "b", "c"]),
        ("app notin (web)", ["c", "d"]),
        ("tier", ["a", "b"]),
        ("!tier", ["c", "d"]),
        ("app=web,tier=back", ["b"]),
    ],
)
def test_label_selectors(pods, selector, expected):
    assert names(pods.list_namespaced_pod("default", label_selector=selector).items) == expected


def test_bad_label_selector_is_400(pods):
    with pytest.raises(ApiException) as err:
        pods.list_namespaced_pod("default", label_selector="app in web")
    assert err.value.status == 400


def test_field_selectors_on_pods(pods):
    assert names(pods.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-1").items) == ["a", "d"]
    assert names(pods.list_namespaced_pod("default", field_selector="spec.nodeName=").items) == ["c"]
    assert names(pods.list_namespaced_pod("default", field_selector="metadata.name!=a,status.phase=Pending").items) == ["b", "c", "d"]
    assert names(pods.list_pod_for_all_namespaces(field_selector="metadata.namespace=kube-system").items) == []


def test_unsupported_field_selector_is_400_like_the_real_server(pods):
    with pytest.raises(ApiException) as err:
        pods.list_namespaced_pod("default", field_selector="spec.priority=1")
    assert err.value.status == 400
    assert json.loads(err.value.body)["message"] == "field label not supported: spec.priority"


def test_field_selectors_on_resource_slices(dra):
    dra.create_resource_slice(resource_slice("s1", node="node-1"))
    dra.create_resource_slice(resource_slice("s2", node="node-2"))
    dra.create_resource_slice(resource_slice("s3", node="node-1", driver="other.example.com"))
    assert names(dra.list_resource_slice(field_selector="spec.nodeName=node-1").items) == ["s1", "s3"]
    assert names(dra.list_resource_slice(field_selector="spec.nodeName=node-1,spec.driver=gpu.bridge.dev").items) == ["s1"]
    assert names(dra.list_resource_slice(field_selector="metadata.name=s2").items) == ["s2"]
    assert names(dra.list_resource_slice(field_selector="spec.driver!=gpu.bridge.dev").items) == ["s3"]


def test_pagination_returns_every_object_once_in_order(core):
    for i in range(23):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"cm-{i:02d}"}})
    seen, token, pages = [], None, 0
    while True:
        page = core.list_namespaced_config_map("default", limit=5, _continue=token)
        seen += [i.metadata.name for i in page.items]
        pages += 1
        token = page.metadata._continue
        if not token:
            break
        # a write between pages does not disturb the remaining pages
        core.create_namespaced_config_map("default", {"metadata": {"name": f"aaa-{pages}"}})
    assert pages == 5
    assert seen == [f"cm-{i:02d}" for i in range(23)]


def test_watch_delivers_added_modified_deleted(core):
    events: list[tuple[str, str]] = []
    start_rv = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod("w"))
    core.patch_namespaced_pod("w", "default", {"metadata": {"labels": {"x": "1"}}})
    core.delete_namespaced_pod("w", "default")
    for ev in watch.Watch().stream(core.list_namespaced_pod, "default", resource_version=start_rv, timeout_seconds=1):
        events.append((ev["type"], ev["object"].metadata.name))
    # the delete is two events, as on kube-apiserver: the pod strategy's mark (grace 0), then the removal
    # (tests/real/test_differential.py::test_a_pod_deleted_at_once_is_seen_marked_then_deleted)
    assert events == [("ADDED", "w"), ("MODIFIED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


def test_watch_without_version_starts_with_current_state(core):
    core.create_namespaced_pod("default", pod("existing"))
    got = [(e["type"], e["object"].metadata.name) for e in watch.Watch().stream(core.list_namespaced_pod, "default", timeout_seconds=1)]
    assert got == [("ADDED", "existing")]


def test_watch_resumes_after_reconnect_without_loss_or_duplicates(core, server, tmp_path):
    received: list[tuple[str, str, str]] = []
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    for i in range(5):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
    # first connection: read three events, then disconnect
    w = watch.Watch()
    for ev in w.stream(core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=5):
        received.append((ev["type"], ev["object"].metadata.name, ev["object"].metadata.resource_version))
        if len(received) == 3:
            w.stop()
    for i in range(5, 8):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
    # reconnect from the last version seen, with a fresh client
    other = client_for(server, tmp_path)
    import kubernetes

    core2 = kubernetes.client.CoreV1Api(other)
    for ev in watch.Watch().stream(core2.list_namespaced_config_map, "default", resource_version=received[-1][2], timeout_seconds=1):
        received.append((ev["type"], ev["object"].metadata.name, ev["object"].metadata.resource_version))
    other.close()
    assert [n for _, n, _ in received] == [f"c{i}" for i in range(8)]
    assert len({rv for _, _, rv in received}) == 8


def test_watch_from_a_compacted_version_is_410_gone(make_server, tmp_path):
    srv = make_server(history_limit=5)
    import kubernetes

    client = client_for(srv, tmp_path)
    core = kubernetes.client.CoreV1Api(client)
    old = core.list_namespaced_config_map("default").metadata.resource_version
    for i in range(10):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
    with pytest.raises(ApiException) as err:
        for _ in watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version=old, timeout_seconds=2):
            pass
    assert err.value.status == 410
    assert "Expired: too old resource version" in err.value.reason
    # the raw stream carries the real server's ERROR event
    resp = core.list_namespaced_config_map("default", watch=True, resource_version=old, _preload_content=False)
    event = json.loads(resp.data.decode().splitlines()[0])
    assert event["type"] == "ERROR"
    assert event["object"]["kind"] == "Status" and event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
    # relist, then watch from the list's version works
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", {"metadata": {"name": "after"}})
    got = [e["object"].metadata.name for e in watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=1)]
    assert got == ["after"]
    client.close()


def test_watch_sends_bookmarks_when_allowed(core):
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_config_map("default", {"metadata": {"name": "elsewhere"}})
    types = []
    for ev in watch.Watch().stream(core.list_namespaced_pod, "default", resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=1):
        types.append((ev["type"], ev["raw_object"]["metadata"]["resourceVersion"]))
    bookmarks = [t for t in types if t[0] == "BOOKMARK"]
    assert bookmarks, types
    # the bookmark carries a version past the unrelated configmap write
    assert int(bookmarks[-1][1]) > int(rv)


def test_watch_with_selector_reports_objects_leaving_the_selection_as_deleted(core):
    core.create_namespaced_pod("default", pod("p", labels={"team": "a"}))
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"team": "b"}}})
    core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"team": "a"}}})
    got = [e["type"] for e in watch.Watch().stream(core.list_namespaced_pod, "default", label_selector="team=a", resource_version=rv, timeout_seconds=1)]
    assert got == ["DELETED", "ADDED"]


def test_watch_stream_is_live_while_other_requests_are_served(core):
    seen: list[str] = []
    opened, done = threading.Event(), threading.Event()

    def consume() -> None:
        for ev in watch.Watch().stream(core.list_namespaced_pod, "default", timeout_seconds=10):
            seen.append(ev["object"].metadata.name)
            opened.set()
            if ev["object"].metadata.name == "last":
                break
        done.set()

    # The first pod proves the watch is open (live, or one of the initial ADDED events of a watch opened after it,
    # which come in name order): only then are the others created, so they arrive on the open stream.
    core.create_namespaced_pod("default", pod("ready"))
    t = threading.Thread(target=consume)
    t.start()
    wait_for(opened.is_set)
    for name in ("one", "two", "last"):
        core.create_namespaced_pod("default", pod(name))
    wait_for(done.is_set)
    t.join()
    assert seen == ["ready", "one", "two", "last"]
