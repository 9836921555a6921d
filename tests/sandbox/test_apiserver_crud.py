"""CRUD semantics of the API emulator, observed through the official kubernetes client only."""

from __future__ import annotations

import json

import kubernetes
import pytest
from kubernetes.client import ApiException

from .conftest import client_for, pod, wait_for


def status_of(err: ApiException) -> dict:
    return json.loads(err.body)


def test_create_sets_server_owned_metadata_and_get_returns_the_object(core):
    created = core.create_namespaced_pod("default", pod("web"))
    assert created.metadata.uid and created.metadata.creation_timestamp is not None
    assert int(created.metadata.resource_version) > 0
    assert created.metadata.generation == 1
    assert created.status.phase == "Pending"
    fetched = core.read_namespaced_pod("web", "default")
    assert fetched.metadata.uid == created.metadata.uid
    assert fetched.metadata.resource_version == created.metadata.resource_version


def test_resource_version_increases_monotonically_across_resources(core):
    rvs = []
    for i in range(3):
        rvs.append(int(core.create_namespaced_config_map("default", {"metadata": {"name": f"cm{i}"}}).metadata.resource_version))
        rvs.append(int(core.create_namespaced_pod("default", pod(f"p{i}")).metadata.resource_version))
    assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs)


def test_create_existing_name_is_409_already_exists(core):
    core.create_namespaced_pod("default", pod("dup"))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", pod("dup"))
    assert err.value.status == 409
    body = status_of(err.value)
    assert body["reason"] == "AlreadyExists"
    assert body["message"] == 'pods "dup" already exists'
    assert body["details"] == {"name": "dup", "kind": "pods"}


def test_generate_name_creates_unique_names(core):
    body = pod("ignored")
    del body["metadata"]["name"]
    body["metadata"]["generateName"] = "worker-"
    names = {core.create_namespaced_pod("default", body).metadata.name for _ in range(5)}
    assert len(names) == 5
    assert all(n.startswith("worker-") and len(n) == len("worker-") + 5 for n in names)


def test_get_missing_is_404_with_the_real_message(core, dra):
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("nope", "default")
    assert err.value.status == 404
    assert status_of(err.value)["message"] == 'pods "nope" not found'
    with pytest.raises(ApiException) as err:
        dra.read_resource_slice("nope")
    assert status_of(err.value)["message"] == 'resourceslices.resource.k8s.io "nope" not found'


def test_create_in_missing_namespace_is_404_namespace_not_found(core):
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("ghost", pod("p", "ghost"))
    assert err.value.status == 404
    assert status_of(err.value)["message"] == 'namespaces "ghost" not found'


def test_namespaces_get_the_metadata_name_label_and_default_namespaces_exist(core):
    names = {ns.metadata.name for ns in core.list_namespace().items}
    assert {"default", "kube-system"} <= names
    ns = core.create_namespace({"metadata": {"name": "team-a", "labels": {"dra-bridge.io/mode": "dra"}}})
    assert ns.metadata.labels == {"dra-bridge.io/mode": "dra", "kubernetes.io/metadata.name": "team-a"}
    assert ns.status.phase == "Active"


def test_update_with_stale_resource_version_is_409_conflict(core):
    first = core.create_namespaced_pod("default", pod("p"))
    core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"x": "1"}}})
    first.metadata.labels = {"y": "2"}
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_pod("p", "default", first)
    assert err.value.status == 409
    body = status_of(err.value)
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on pods "p": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    current = core.read_namespaced_pod("p", "default")
    current.metadata.labels = {"y": "2"}
    updated = core.replace_namespaced_pod("p", "default", current)
    assert updated.metadata.labels == {"y": "2"}
    assert int(updated.metadata.resource_version) > int(current.metadata.resource_version)


def test_patch_formats_merge_json_and_strategic(core):
    core.create_namespaced_config_map("default", {"metadata": {"name": "cfg"}, "data": {"a": "1", "b": "2"}})
    # strategic merge (the client's default for dict bodies)
    cm = core.patch_namespaced_config_map("cfg", "default", {"data": {"b": None, "c": "3"}})
    assert cm.data == {"a": "1", "c": "3"}
    # JSON patch (a list body)
    cm = core.patch_namespaced_config_map("cfg", "default", [{"op": "replace", "path": "/data/a", "value": "9"}])
    assert cm.data == {"a": "9", "c": "3"}
    # JSON merge patch
    cm = core.patch_namespaced_config_map(
        "cfg", "default", {"data": {"c": None, "d": "4"}}, _content_type="application/merge-patch+json"
    )
    assert cm.data == {"a": "9", "d": "4"}


def test_strategic_merge_merges_containers_by_name(core):
    body = pod("p")
    body["spec"]["containers"].append({"name": "side", "image": "old"})
    core.create_namespaced_pod("default", body)
    patched = core.patch_namespaced_pod("p", "default", {"spec": {"containers": [{"name": "side", "image": "new"}]}})
    assert [(c.name, c.image) for c in patched.spec.containers] == [("main", "busybox"), ("side", "new")]


def test_json_patch_test_failure_is_rejected_and_changes_nothing(core):
    core.create_namespaced_config_map("default", {"metadata": {"name": "cfg"}, "data": {"a": "1"}})
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("cfg", "default", [
            {"op": "test", "path": "/data/a", "value": "2"}, {"op": "replace", "path": "/data/a", "value": "3"},
        ])
    assert err.value.status == 422
    assert core.read_namespaced_config_map("cfg", "default").data == {"a": "1"}


def test_noop_update_keeps_resource_version(core):
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "cfg"}, "data": {"a": "1"}})
    same = core.patch_namespaced_config_map("cfg", "default", {"data": {"a": "1"}})
    assert same.metadata.resource_version == created.metadata.resource_version


def test_generation_bumps_on_spec_change_only(api_client):
    apps = kubernetes.client.AppsV1Api(api_client)
    ds = {
        "metadata": {"name": "plugin", "labels": {"app": "p"}},
        "spec": {
            "selector": {"matchLabels": {"app": "p"}},
            "template": {"metadata": {"labels": {"app": "p"}}, "spec": {"containers": [{"name": "c", "image": "a"}]}},
        },
    }
    created = apps.create_namespaced_daemon_set("default", ds)
    assert created.metadata.generation == 1
    relabeled = apps.patch_namespaced_daemon_set("plugin", "default", {"metadata": {"labels": {"x": "y"}}})
    assert relabeled.metadata.generation == 1
    changed = apps.patch_namespaced_daemon_set(
        "plugin", "default", {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "b"}]}}}}
    )
    assert changed.metadata.generation == 2


def test_status_subresource_is_separate_from_the_main_resource(core):
    core.create_namespaced_pod("default", pod("p"))
    # status through the main resource is ignored
    after_main = core.patch_namespaced_pod("p", "default", {"status": {"phase": "Running"}, "metadata": {"labels": {"a": "b"}}})
    assert after_main.status.phase == "Pending" and after_main.metadata.labels == {"a": "b"}
    # spec and labels through /status are ignored, status is taken
    after_status = core.patch_namespaced_pod_status(
        "p", "default", {"status": {"phase": "Running"}, "metadata": {"labels": {"c": "d"}}, "spec": {"activeDeadlineSeconds": 5}}
    )
    assert after_status.status.phase == "Running"
    assert after_status.metadata.labels == {"a": "b"}
    assert after_status.spec.active_deadline_seconds is None


def test_pod_spec_node_name_cannot_change_by_update(core):
    core.create_namespaced_pod("default", pod("p", node="node-a"))
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("p", "default", {"spec": {"nodeName": "node-b"}})
    assert err.value.status == 422
    assert "pod updates may not change fields" in status_of(err.value)["message"]


def test_binding_assigns_an_unscheduled_pod_to_a_node(core):
    core.create_namespaced_pod("default", pod("p"))
    core.create_namespaced_pod_binding("p", "default", {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "node-a"}}, _preload_content=False)
    assert core.read_namespaced_pod("p", "default").spec.node_name == "node-a"


def test_delete_with_finalizers_waits_until_they_are_removed(core):
    body = pod("p")
    body["metadata"]["finalizers"] = ["bridge.dev/cleanup"]
    core.create_namespaced_pod("default", body)
    core.delete_namespaced_pod("p", "default")
    terminating = core.read_namespaced_pod("p", "default")
    assert terminating.metadata.deletion_timestamp is not None
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("p", "default", {"metadata": {"finalizers": ["bridge.dev/cleanup", "new"]}})
    assert err.value.status == 422
    # strategic merge leaves a merge-list like finalizers untouched with []; null clears it, as on a real server
    core.patch_namespaced_pod("p", "default", {"metadata": {"finalizers": []}})
    assert core.read_namespaced_pod("p", "default").metadata.finalizers == ["bridge.dev/cleanup"]
    core.patch_namespaced_pod("p", "default", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("p", "default")
    assert err.value.status == 404


def test_a_pod_being_deleted_goes_only_with_a_shorter_grace_period(make_server, tmp_path):
    """k8s.io/apiserver pkg/registry/rest/delete.go `BeforeDelete`, as kube-apiserver v1.37.2 answered: once a pod
    has a deletionTimestamp, a plain DELETE (even of a pod that has since failed) changes nothing; a shorter
    gracePeriodSeconds moves the deadline; 0 with the pod's uid (the kubelet's final delete) removes it."""
    client = client_for(make_server(), tmp_path)
    core = kubernetes.client.CoreV1Api(client)
    uid = core.create_namespaced_pod("default", pod("p", node="node-a")).metadata.uid
    core.delete_namespaced_pod("p", "default")
    first = core.read_namespaced_pod("p", "default").metadata
    assert first.deletion_grace_period_seconds == 30
    core.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Failed"}})
    core.delete_namespaced_pod("p", "default")
    core.delete_namespaced_pod("p", "default", grace_period_seconds=60)
    still = core.read_namespaced_pod("p", "default").metadata
    assert (still.deletion_grace_period_seconds, still.deletion_timestamp) == (30, first.deletion_timestamp)
    core.delete_namespaced_pod("p", "default", grace_period_seconds=10)
    shorter = core.read_namespaced_pod("p", "default").metadata
    assert shorter.deletion_grace_period_seconds == 10 and shorter.deletion_timestamp < first.deletion_timestamp
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_pod("p", "default", body=kubernetes.client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=kubernetes.client.V1Preconditions(uid="another-pod")))
    assert err.value.status == 409
    core.delete_namespaced_pod("p", "default", body=kubernetes.client.V1DeleteOptions(
        grace_period_seconds=0, preconditions=kubernetes.client.V1Preconditions(uid=uid)))
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("p", "default")
    assert err.value.status == 404
    client.close()


def test_dry_run_validates_but_stores_nothing(core):
    created = core.create_namespaced_pod("default", pod("p"), dry_run="All")
    assert created.metadata.uid
    with pytest.raises(ApiException):
        core.read_namespaced_pod("p", "default")
    core.create_namespaced_pod("default", pod("p"))
    core.delete_namespaced_pod("p", "default", dry_run="All")
    assert core.read_namespaced_pod("p", "default").metadata.name == "p"
    patched = core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"a": "b"}}}, dry_run="All")
    assert patched.metadata.labels == {"a": "b"}
    assert not core.read_namespaced_pod("p", "default").metadata.labels


def test_delete_collection_honours_label_and_field_selectors(core):
    for i in range(4):
        core.create_namespaced_pod("default", pod(f"p{i}", labels={"tier": "gpu" if i % 2 else "cpu"}, node="n1" if i < 2 else "n2"))
    # Bound pods are deleted gracefully (terminating until their kubelet's final delete), so the selection shows as
    # the pods marked; with grace 0 they are removed at once.
    core.delete_collection_namespaced_pod("default", label_selector="tier=gpu", field_selector="spec.nodeName=n1")
    marked = {p.metadata.name for p in core.list_namespaced_pod("default").items if p.metadata.deletion_timestamp}
    assert marked == {"p1"}
    core.delete_collection_namespaced_pod("default", label_selector="tier=gpu", field_selector="spec.nodeName=n1",
                                          grace_period_seconds=0)
    assert sorted(p.metadata.name for p in core.list_namespaced_pod("default").items) == ["p0", "p2", "p3"]


def test_deleting_an_owner_garbage_collects_its_dependents(core, dra):
    owner = core.create_node({"metadata": {"name": "node-a"}})
    s = {
        "metadata": {"name": "slice-a", "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": owner.metadata.uid}]},
        "spec": {"driver": "gpu.bridge.dev", "nodeName": "node-a", "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1}},
    }
    dra.create_resource_slice(s)
    core.delete_node("node-a")
    assert dra.list_resource_slice().items == []


def test_deleting_a_namespace_deletes_its_contents(core):
    core.create_namespace({"metadata": {"name": "tmp"}})
    core.create_namespaced_pod("tmp", pod("p", "tmp"))
    core.delete_namespace("tmp")
    wait_for(lambda: "tmp" not in {n.metadata.name for n in core.list_namespace().items})
    assert core.list_namespaced_pod("tmp").items == []
