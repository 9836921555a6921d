"""The webhook's namespace cache keeps of each Namespace what its policy reads: the name and the labels."""

from __future__ import annotations

from pathlib import Path

from bridge.kube import NAMESPACES, connect
from bridge.sandbox.apiserver import ApiServer
from bridge.webhook.effects import NamespaceCache, namespace_labels_only


def test_a_namespace_as_the_api_server_sends_it_keeps_its_name_uid_version_and_labels() -> None:
    ns = {"apiVersion": "v1", "kind": "Namespace",
          "metadata": {"name": "team-a", "uid": "u1", "resourceVersion": "7", "labels": {"dra-bridge.io/mode": "dra"},
                       "annotations": {"note": "x" * 1000}, "creationTimestamp": "2026-12-06T07:00:00Z",
                       "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:metadata": {"f:labels": {}}}}]},
          "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
    assert namespace_labels_only(ns) == {"metadata": {"name": "team-a", "uid": "u1", "resourceVersion": "7",
                                                      "labels": {"dra-bridge.io/mode": "dra"}}}
    assert namespace_labels_only({"metadata": None}) == {"metadata": None}, "an odd object is left as it is"


def test_the_cache_serves_labels_from_the_cut_namespaces(tmp_path: Path) -> None:
    import threading

    with ApiServer() as srv, connect(srv.write_kubeconfig(tmp_path / "kc")) as api:
        api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": "team-a", "labels": {"dra-bridge.io/mode": "shadow"}, "annotations": {"note": "x"}}})
        cache = NamespaceCache(api)
        stop = threading.Event()
        cache.start(stop)
        try:
            assert cache.wait_synced(10)
            labels = cache.peek("team-a")
            assert isinstance(labels, dict) and labels["dra-bridge.io/mode"] == "shadow"
        finally:
            stop.set()
