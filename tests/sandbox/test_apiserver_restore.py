"""An API server that comes back different: `ApiServer.restore(rv)` is a restart from an etcd backup taken at `rv`.

What clients see (kubernetes.io "Operating etcd clusters for Kubernetes", restoring an etcd cluster): the objects as
they were at the backup, resourceVersions lower than ones they already saw (and reused by the next writes), and a
watch resumed from a newer version refused with 504 "Too large resource version"."""

from __future__ import annotations

import kubernetes
import pytest
from kubernetes.client import ApiException

from .conftest import client_for
from .test_apiserver_faithfulness import cm, status_of


def test_restore_brings_back_the_objects_and_versions_of_the_backup(server, tmp_path):
    client = client_for(server, tmp_path)
    core = kubernetes.client.CoreV1Api(client)
    core.create_namespaced_config_map("default", cm("kept"))
    backup = int(core.list_namespaced_config_map("default").metadata.resource_version)
    core.patch_namespaced_config_map("kept", "default", {"data": {"v": "2"}})
    core.create_namespaced_config_map("default", cm("after-backup"))
    core.delete_namespaced_config_map("kept", "default")
    seen = int(core.list_namespaced_config_map("default").metadata.resource_version)

    assert server.restore(backup) == backup
    client.close()
    client = client_for(server, tmp_path)  # a restart: every connection was cut
    core = kubernetes.client.CoreV1Api(client)
    listed = core.list_namespaced_config_map("default")
    assert int(listed.metadata.resource_version) == backup < seen
    assert [(c.metadata.name, c.data) for c in listed.items] == [("kept", {"v": "1"})]
    created = core.create_namespaced_config_map("default", cm("fresh"))
    assert int(created.metadata.resource_version) == backup + 1  # a version clients have already seen
    client.close()


def test_after_a_restore_a_watch_from_a_newer_version_is_refused_as_too_large(server, tmp_path):
    client = client_for(server, tmp_path)
    core = kubernetes.client.CoreV1Api(client)
    backup = int(core.list_namespaced_config_map("default").metadata.resource_version)
    for i in range(3):
        core.create_namespaced_config_map("default", cm(f"c{i}"))
    seen = core.list_namespaced_config_map("default").metadata.resource_version
    server.restore(backup)
    client.close()
    core = kubernetes.client.CoreV1Api(client_for(server, tmp_path))
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map("default", watch=True, resource_version=seen, _preload_content=False,
                                        _request_timeout=10)
    assert err.value.status == 504
    assert status_of(err.value)["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


def test_restore_outside_the_retained_history_is_refused(make_server, tmp_path):
    srv = make_server(history_limit=2)
    rv = srv.store.resource_version
    with pytest.raises(ValueError, match="cannot rewind"):
        srv.restore(rv + 1)
    for i in range(3):
        srv.load_objects([dict(cm(f"c{i}"), apiVersion="v1", kind="ConfigMap")])
    with pytest.raises(ValueError, match="cannot rewind"):
        srv.restore(rv)
    assert srv.store.resource_version == rv + 3  # nothing was undone, and the server still serves
    core = kubernetes.client.CoreV1Api(client_for(srv, tmp_path))
    assert len(core.list_namespaced_config_map("default").items) == 3
