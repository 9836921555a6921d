"""Where a real kube-apiserver's exact answers matter to clients: selector syntax errors, list snapshots and
resourceVersion semantics, watch edge cases, generation, DELETE answers, dry-run, discovery details.

Everything goes through the official `kubernetes` client; expected messages are the real server's texts
(apimachinery's label parser and field-selector conversions, ListOptions validation, the storage layer's errors).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import kubernetes
import pytest
from kubernetes import watch
from kubernetes.client import ApiException

from .conftest import client_for, pod, resource_slice

NAME_PART = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def status_of(err: ApiException) -> dict:
    return json.loads(err.body)


def cm(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}, "data": {"v": "1"}}


# -- selectors ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("app in web", "unable to parse requirement: found 'web' expected: '('"),
        ("app in (web", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("=a", "found '=', expected: !, identifier, or 'end of string'"),
        ("===", "found '==', expected: !, identifier, or 'end of string'"),
        ("a=b,", "found '', expected: identifier after ','"),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        ("!!", "unable to parse requirement: found '!', expected: identifier"),
        ("app:monolith", f'unable to parse requirement: <nil>: Invalid value: "app:monolith": {NAME_PART}'),
        ("a>x", "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer"),
    ],
)
def test_label_selector_syntax_errors_are_400_with_the_real_parser_message(core, selector, message):
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod("default", label_selector=selector)
    assert err.value.status == 400
    body = status_of(err.value)
    assert (body["reason"], body["message"]) == ("BadRequest", message)


def test_label_selector_edge_forms_select_like_the_real_server(core):
    core.create_namespaced_config_map("default", cm("a", tier="1"))
    core.create_namespaced_config_map("default", cm("b", tier="5"))
    core.create_namespaced_config_map("default", cm("c"))

    def names(sel: str) -> list[str]:
        return sorted(i.metadata.name for i in core.list_namespaced_config_map("default", label_selector=sel).items)

    assert names("tier>2") == ["b"]
    assert names("tier<2") == ["a"]
    assert names("tier in (1,5)") == ["a", "b"]
    assert names(" tier = 1 ") == ["a"]        # whitespace around tokens is fine
    assert names("tier notin (1)") == ["b", "c"]  # notin also matches objects without the label


def test_field_selector_errors_are_worded_per_kind_like_the_real_server(core, dra):
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map("default", field_selector="data.v=1")
    assert status_of(err.value)["message"] == '"data.v" is not a known field selector: only "metadata.name", "metadata.namespace"'
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod("default", field_selector="spec.priority=1")
    assert status_of(err.value)["message"] == "field label not supported: spec.priority"
    # ResourceSlices select on metadata.name, spec.nodeName and spec.driver only: not the pool, not a namespace.
    for label in ("spec.pool.name", "metadata.namespace"):
        with pytest.raises(ApiException) as err:
            dra.list_resource_slice(field_selector=f"{label}=x")
        assert err.value.status == 400
        assert status_of(err.value)["message"] == (
            f"field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: {label}"
        )
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod("default", field_selector="spec.nodeName=a=b")
    assert status_of(err.value)["message"] == "invalid field selector: unescaped character in value: 61"
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod("default", field_selector="spec.nodeName")
    assert status_of(err.value)["message"] == "invalid selector: 'spec.nodeName'; can't understand 'spec.nodeName'"


def test_field_selector_values_may_be_escaped_and_empty_terms_are_ignored(core):
    core.create_namespaced_pod("default", pod("p", node="n,1"))
    core.create_namespaced_pod("default", pod("q", node="n2"))
    got = core.list_namespaced_pod("default", field_selector="spec.nodeName=n\\,1,")
    assert [p.metadata.name for p in got.items] == ["p"]


# -- lists ---------------------------------------------------------------------------------------------------------


def test_a_partial_page_of_an_unfiltered_list_counts_the_remaining_items(core):
    for i in range(7):
        core.create_namespaced_config_map("default", cm(f"c{i}", team="a" if i % 2 else "b"))
    page = core.list_namespaced_config_map("default", limit=3)
    assert [i.metadata.name for i in page.items] == ["c0", "c1", "c2"]
    assert page.metadata.remaining_item_count == 4
    last = core.list_namespaced_config_map("default", limit=3, _continue=page.metadata._continue)
    last = core.list_namespaced_config_map("default", limit=3, _continue=last.metadata._continue)
    assert [i.metadata.name for i in last.items] == ["c6"]
    assert last.metadata.remaining_item_count is None and last.metadata._continue is None
    # with a selector the server cannot know how many remain: the field is left out
    filtered = core.list_namespaced_config_map("default", limit=1, label_selector="team=a")
    assert filtered.metadata._continue and filtered.metadata.remaining_item_count is None


def test_continued_pages_show_the_snapshot_of_the_first_page(core):
    for i in range(6):
        core.create_namespaced_config_map("default", cm(f"c{i}"))
    first = core.list_namespaced_config_map("default", limit=3)
    # between pages: change, delete and add objects that the next page covers
    core.patch_namespaced_config_map("c4", "default", {"data": {"v": "2"}})
    core.delete_namespaced_config_map("c5", "default")
    core.create_namespaced_config_map("default", cm("c9"))
    rest = core.list_namespaced_config_map("default", limit=10, _continue=first.metadata._continue)
    assert [(i.metadata.name, i.data["v"]) for i in rest.items] == [("c3", "1"), ("c4", "1"), ("c5", "1")]
    assert rest.metadata.resource_version == first.metadata.resource_version
    fresh = core.list_namespaced_config_map("default")
    assert [i.metadata.name for i in fresh.items][3:] == ["c3", "c4", "c9"]


def test_list_at_an_exact_resource_version_returns_the_past_state(core):
    core.create_namespaced_config_map("default", cm("old"))
    then = core.list_namespaced_config_map("default").metadata.resource_version
    core.patch_namespaced_config_map("old", "default", {"data": {"v": "2"}})
    core.create_namespaced_config_map("default", cm("new"))
    past = core.list_namespaced_config_map("default", resource_version=then, resource_version_match="Exact")
    assert [(i.metadata.name, i.data["v"]) for i in past.items] == [("old", "1")]
    assert past.metadata.resource_version == then
    # NotOlderThan (and the legacy form without a match) may answer newer data
    recent = core.list_namespaced_config_map("default", resource_version=then, resource_version_match="NotOlderThan")
    assert sorted(i.metadata.name for i in recent.items) == ["new", "old"]


def test_list_at_a_compacted_exact_version_is_410_expired(make_server, tmp_path):
    srv = make_server(history_limit=3)
    client = client_for(srv, tmp_path)
    core = kubernetes.client.CoreV1Api(client)
    then = core.list_namespaced_config_map("default").metadata.resource_version
    for i in range(5):
        core.create_namespaced_config_map("default", cm(f"c{i}"))
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map("default", resource_version=then, resource_version_match="Exact")
    assert err.value.status == 410
    body = status_of(err.value)
    assert (body["reason"], body["message"]) == ("Expired", "The resourceVersion for the provided list is too old.")
    client.close()


def test_a_version_the_server_has_not_reached_is_504_too_large(core):
    now = int(core.list_namespaced_config_map("default").metadata.resource_version)
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map("default", resource_version=str(now + 100))
    assert err.value.status == 504
    body = status_of(err.value)
    assert body["reason"] == "Timeout"
    assert body["message"] == f"Timeout: Too large resource version: {now + 100}, current: {now}"
    assert body["details"]["causes"] == [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]
    with pytest.raises(ApiException) as err:  # a watch is refused before any stream starts
        core.list_namespaced_config_map("default", watch=True, resource_version=str(now + 100),
                                        _preload_content=False, _request_timeout=10)
    assert err.value.status == 504 and status_of(err.value)["reason"] == "Timeout"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"resource_version_match": "Exact"},
         'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden '
         "unless resourceVersion is provided"),
        ({"resource_version": "0", "resource_version_match": "Exact"},
         'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is '
         'forbidden for resourceVersion "0"'),
        ({"resource_version": "1", "resource_version_match": "Newest"},
         'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Unsupported value: "Newest": supported '
         'values: "Exact", "NotOlderThan", ""'),
    ],
)
def test_invalid_list_options_are_422_on_the_list_options_kind(core, kwargs, message):
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map("default", **kwargs)
    assert err.value.status == 422
    body = status_of(err.value)
    assert body["message"] == message
    assert body["details"]["kind"] == "ListOptions" and body["details"]["group"] == "meta.k8s.io"
    assert body["details"]["causes"][0]["field"] == "resourceVersionMatch"


# -- watches -------------------------------------------------------------------------------------------------------


def test_a_watch_may_not_ask_for_a_version_match_without_initial_events(core):
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map("default", watch=True, resource_version_match="NotOlderThan",
                                        _preload_content=False)
    assert err.value.status == 422
    assert status_of(err.value)["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden '
        "for watch unless sendInitialEvents is provided"
    )


def test_the_410_names_the_oldest_version_a_watch_can_still_resume_from(make_server, tmp_path):
    srv = make_server(history_limit=4)
    client = client_for(srv, tmp_path)
    core = kubernetes.client.CoreV1Api(client)
    old = core.list_namespaced_config_map("default").metadata.resource_version
    for i in range(8):
        core.create_namespaced_config_map("default", cm(f"c{i}"))
    resp = core.list_namespaced_config_map("default", watch=True, resource_version=old, _preload_content=False)
    event = json.loads(resp.data.decode().splitlines()[0])
    assert event["type"] == "ERROR"
    prefix = f"too old resource version: {old} ("
    assert event["object"]["message"].startswith(prefix)
    oldest = event["object"]["message"][len(prefix):-1]
    # resuming from exactly that version works and replays what came after it
    got = [e["object"].metadata.name
           for e in watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version=oldest,
                                         timeout_seconds=1)]
    assert got and got[-1] == "c7"
    client.close()


def test_bookmarks_carry_only_the_resource_version(core):
    rv = core.list_namespaced_pod("default").metadata.resource_version
    resp = core.list_namespaced_pod("default", watch=True, allow_watch_bookmarks=True, resource_version=rv,
                                    timeout_seconds=1, _preload_content=False)
    bookmarks = [json.loads(line) for line in resp.data.decode().splitlines()]
    bookmarks = [b for b in bookmarks if b["type"] == "BOOKMARK"]
    assert bookmarks
    for b in bookmarks:
        assert b["object"] == {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": b["object"]["metadata"]["resourceVersion"]}}


def test_streaming_list_ends_its_initial_events_with_an_annotated_bookmark(core):
    core.create_namespaced_config_map("default", cm("x"))
    resp = core.list_namespaced_config_map("default", watch=True, send_initial_events=True, allow_watch_bookmarks=True,
                                           resource_version_match="NotOlderThan", timeout_seconds=1,
                                           _preload_content=False)
    events = [json.loads(line) for line in resp.data.decode().splitlines()]
    assert events[0]["type"] == "ADDED" and events[0]["object"]["metadata"]["name"] == "x"
    marker = events[1]
    assert marker["type"] == "BOOKMARK"
    assert marker["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


# -- writes --------------------------------------------------------------------------------------------------------


def test_generation_exists_only_where_the_real_strategy_keeps_it(core, dra):
    assert core.create_namespaced_config_map("default", cm("c")).metadata.generation is None
    assert core.create_node({"metadata": {"name": "n1"}}).metadata.generation is None
    created = dra.create_resource_slice(resource_slice("s"))
    assert created.metadata.generation == 1
    relabeled = dra.patch_resource_slice("s", {"metadata": {"labels": {"a": "b"}}})
    assert relabeled.metadata.generation == 1
    respec = dra.patch_resource_slice("s", {"spec": {"pool": {"generation": 2}}})
    assert respec.metadata.generation == 2
    assert core.create_namespaced_pod("default", pod("p")).metadata.generation == 1


def test_delete_answers_a_status_for_most_kinds_and_the_object_for_pods(core):
    made = core.create_namespaced_config_map("default", cm("c"))
    answer = json.loads(core.delete_namespaced_config_map("c", "default", _preload_content=False).data)
    assert answer == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                      "details": {"name": "c", "kind": "configmaps", "uid": made.metadata.uid}}
    core.create_namespaced_pod("default", pod("p"))
    assert json.loads(core.delete_namespaced_pod("p", "default", _preload_content=False).data)["kind"] == "Pod"
    # a deletion that waits for finalizers answers the object, with its deletionTimestamp
    body = cm("f")
    body["metadata"]["finalizers"] = ["bridge.dev/keep"]
    core.create_namespaced_config_map("default", body)
    raw = core.delete_namespaced_config_map("f", "default", _preload_content=False)
    obj = json.loads(raw.data)
    assert obj["kind"] == "ConfigMap" and obj["metadata"]["deletionTimestamp"]
    assert obj["metadata"]["deletionGracePeriodSeconds"] == 0


def test_dry_run_answers_carry_no_new_resource_version(core):
    created = core.create_namespaced_config_map("default", cm("d"), dry_run="All")
    assert created.metadata.uid and created.metadata.resource_version is None
    real = core.create_namespaced_config_map("default", cm("d"))
    patched = core.patch_namespaced_config_map("d", "default", {"data": {"v": "9"}}, dry_run="All")
    assert patched.data == {"v": "9"}
    assert patched.metadata.resource_version == real.metadata.resource_version
    after = core.list_namespaced_config_map("default")
    assert after.metadata.resource_version == real.metadata.resource_version  # nothing was written


# -- discovery -------------------------------------------------------------------------------------------------------


def test_the_newest_served_resource_version_is_preferred_whatever_the_configured_order(make_server, tmp_path):
    srv = make_server(resource_versions=("v1beta1", "v1"))
    client = client_for(srv, tmp_path)
    group = kubernetes.client.ApisApi(client).get_api_versions()
    dra = next(g for g in group.groups if g.name == "resource.k8s.io")
    assert dra.preferred_version.version == "v1"
    assert [v.version for v in dra.versions] == ["v1", "v1beta1"]
    client.close()


def test_resource_lists_carry_verbs_short_names_and_the_real_storage_version_hash(api_client, server):
    core = kubernetes.client.CoreV1Api(api_client).get_api_resources()
    by_name = {r.name: r for r in core.resources}
    assert by_name["pods"].storage_version_hash == "xPOwRZ+Yhw8="  # sha256("/v1/Pod")[:8], as the real server
    assert by_name["pods"].short_names == ["po"] and by_name["pods"].namespaced is True
    assert "deletecollection" not in by_name["namespaces"].verbs  # namespaces cannot be deleted as a collection
    assert by_name["pods/status"].verbs == ["get", "patch", "update"]
    assert by_name["pods/binding"].kind == "Binding" and by_name["pods/binding"].verbs == ["create"]
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(urllib.request.Request(f"{server.url}/api/v1/namespaces", method="DELETE"), timeout=10)
    assert err.value.code == 405 and json.loads(err.value.read())["reason"] == "MethodNotAllowed"


@pytest.mark.parametrize("rv", ["", "0"])
def test_a_watch_without_a_specific_version_starts_with_the_current_objects(core, rv):
    core.create_namespaced_config_map("default", cm("there"))
    kwargs = {"resource_version": rv} if rv else {}
    got = [(e["type"], e["object"].metadata.name)
           for e in watch.Watch().stream(core.list_namespaced_config_map, "default", timeout_seconds=1, **kwargs)]
    assert got == [("ADDED", "there")]
