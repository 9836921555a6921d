"""Discovery, /version, TLS kubeconfigs, preloading and injected faults, seen from the official client."""

from __future__ import annotations

import json
import threading
import time

import kubernetes
import pytest
import urllib3
from kubernetes import watch
from kubernetes.client import ApiException

from bridge.sandbox.apiserver import ApiServer, LoadError

from .conftest import client_for, pod, wait_for


def test_discovery_lists_the_configured_resource_versions(make_server, tmp_path):
    srv = make_server(version="1.36.0", resource_versions=("v1beta2", "v1beta1"))
    client = client_for(srv, tmp_path)
    groups = {g.name: g for g in kubernetes.client.ApisApi(client).get_api_versions().groups}
    dra = groups["resource.k8s.io"]
    assert [v.version for v in dra.versions] == ["v1beta2", "v1beta1"]
    assert dra.preferred_version.version == "v1beta2"
    resources = kubernetes.client.ResourceV1beta2Api(client).get_api_resources()
    assert {"resourceslices", "resourceclaims", "resourceclaims/status", "deviceclasses", "resourceclaimtemplates"} <= {r.name for r in resources.resources}
    with pytest.raises(ApiException) as err:
        kubernetes.client.ResourceV1Api(client).get_api_resources()
    assert err.value.status == 404
    info = kubernetes.client.VersionApi(client).get_code()
    assert (info.major, info.minor, info.git_version) == ("1", "36", "v1.36.0")
    core = kubernetes.client.CoreApi(client).get_api_versions()
    assert core.versions == ["v1"]
    assert "pods/status" in {r.name for r in kubernetes.client.CoreV1Api(client).get_api_resources().resources}
    client.close()


def test_tls_server_with_kubeconfig_trusting_its_certificate(make_server, tmp_path):
    srv = make_server(tls=True)
    assert srv.url.startswith("https://") and srv.ca_cert_path is not None
    client = client_for(srv, tmp_path)
    core = kubernetes.client.CoreV1Api(client)
    core.create_namespaced_pod("default", pod("secure"))
    assert core.read_namespaced_pod("secure", "default").metadata.name == "secure"
    events = [e["type"] for e in watch.Watch().stream(core.list_namespaced_pod, "default", timeout_seconds=1)]
    assert events == ["ADDED"]
    client.close()


def test_load_dir_reads_single_multi_document_and_list_files(make_server, tmp_path):
    (tmp_path / "objs").mkdir()
    (tmp_path / "objs" / "node.yaml").write_text("apiVersion: v1\nkind: Node\nmetadata:\n  name: gpu-1\n  labels: {nvidia.com/gpu.product: H100}\n")
    (tmp_path / "objs" / "multi.yaml").write_text(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: team-a, resourceVersion: '77'}\n"
        "spec: {containers: [{name: c, image: i}]}\nstatus: {phase: Running}\n"
    )
    (tmp_path / "objs" / "list.json").write_text(json.dumps({
        "apiVersion": "v1", "kind": "List",
        "items": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "other"}}],
    }))
    srv = make_server()
    assert srv.load_dir(tmp_path / "objs") == 4
    client = client_for(srv, tmp_path)
    core = kubernetes.client.CoreV1Api(client)
    assert core.read_node("gpu-1").metadata.labels["nvidia.com/gpu.product"] == "H100"
    loaded = core.read_namespaced_pod("p", "team-a")
    assert loaded.status.phase == "Running"  # snapshots keep their status
    assert core.read_namespaced_config_map("cm", "other").metadata.name == "cm"  # namespace created on demand
    client.close()


def test_load_rejects_unknown_kinds_and_invalid_objects_with_a_clear_error(make_server):
    srv = make_server()
    with pytest.raises(LoadError, match="Widget 'w'"):
        srv.load_objects([{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}])
    with pytest.raises(LoadError, match="must have at most 128 items"):
        srv.load_objects([{
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
            "spec": {"driver": "d.dev", "nodeName": "n", "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"d{i}"} for i in range(129)]},
        }])


def test_refused_connections_then_recovery_on_the_same_port(server, core):
    port = server.port
    server.faults.refuse_connections(1.0)
    with pytest.raises(urllib3.exceptions.MaxRetryError) as err:
        core.list_namespaced_pod("default", _request_timeout=2)
    assert isinstance(err.value.reason, urllib3.exceptions.NewConnectionError)
    assert "Connection refused" in str(err.value.reason)
    items = wait_for(lambda: _try_list(core), timeout=20)
    assert items == ["ok"] and server.port == port


def _try_list(core):
    try:
        return ["ok", *core.list_namespaced_pod("default", _request_timeout=2).items]
    except urllib3.exceptions.HTTPError:
        return None


def test_fail_answers_429_with_retry_after_then_recovers(server, core):
    server.faults.fail(1, status=429, retry_after=1, path_regex=r"/pods$")
    core.list_namespaced_config_map("default")  # other paths are unaffected
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", pod("p"))  # POSTs are never retried by the client
    assert err.value.status == 429
    assert err.value.headers["Retry-After"] == "1"
    body = json.loads(err.value.body)
    assert body["reason"] == "TooManyRequests" and body["details"]["retryAfterSeconds"] == 1
    assert core.create_namespaced_pod("default", pod("p")).metadata.name == "p"


def test_client_get_honours_retry_after_transparently(server, core):
    # urllib3 (under the official client) retries a GET answered 429 + Retry-After: the caller sees one result.
    server.faults.fail(1, status=429, retry_after=1, path_regex=r"/pods$")
    assert core.list_namespaced_pod("default").items == []
    core.create_namespaced_pod("default", pod("p"))  # the single fault was consumed by the GET


def test_fail_503_counts_down_and_clear_removes_rules(server, core):
    server.faults.fail(2, status=503)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            core.list_namespaced_pod("default")
        assert err.value.status == 503 and json.loads(err.value.body)["reason"] == "ServiceUnavailable"
    core.list_namespaced_pod("default")
    server.faults.fail(5, status=500)
    server.faults.clear()
    core.list_namespaced_pod("default")


def test_delay_slows_matching_requests(server, core):
    server.faults.delay(1.0, path_regex="configmaps")
    with pytest.raises(urllib3.exceptions.HTTPError) as err:  # read timeouts, after urllib3's own retries
        core.list_namespaced_config_map("default", _request_timeout=0.2)
    assert "timed out" in str(err.value)
    core.list_namespaced_pod("default", _request_timeout=5)  # other paths are not delayed
    server.faults.clear()
    core.list_namespaced_config_map("default", _request_timeout=5)


def test_drop_watches_cuts_open_streams_mid_stream(server, core):
    outcome: dict[str, object] = {}
    started = threading.Event()

    def consume() -> None:
        try:
            resp = core.list_namespaced_pod("default", watch=True, _preload_content=False, timeout_seconds=30)
            started.set()
            for _ in resp.stream(1024):
                pass
            outcome["ended"] = "clean"
        except Exception as err:  # the cut surfaces as a protocol error in urllib3
            outcome["ended"] = type(err).__name__

    t = threading.Thread(target=consume)
    t.start()
    wait_for(started.is_set)
    wait_for(lambda: server.faults.drop_watches() >= 1 or None)
    t.join(timeout=20)
    assert not t.is_alive()
    assert outcome["ended"] != "clean"


def test_drop_watches_also_cuts_a_watch_admitted_just_before_the_drop(server, core, monkeypatch):
    # The race: a watch request passes its fault check, then the drop runs before the stream is registered.
    real_check = server.faults.check

    def check_then_drop(path: str):
        answer = real_check(path)
        if path.endswith("/pods"):
            server.faults.drop_watches()
        return answer

    monkeypatch.setattr(server.faults, "check", check_then_drop)
    outcome: dict[str, object] = {}

    def consume() -> None:
        try:
            resp = core.list_namespaced_pod("default", watch=True, _preload_content=False, timeout_seconds=60)
            for _ in resp.stream(1024):
                pass
            outcome["ended"] = "clean"
        except Exception as err:
            outcome["ended"] = type(err).__name__

    t = threading.Thread(target=consume)
    t.start()
    t.join(timeout=20)
    assert not t.is_alive(), "the watch admitted before the drop kept streaming"
    assert outcome["ended"] != "clean"


def test_stop_closes_everything_and_leaks_no_threads(tmp_path):
    before = threading.active_count()
    srv = ApiServer(bookmark_interval=0.1).start()
    client = client_for(srv, tmp_path)
    core = kubernetes.client.CoreV1Api(client)
    watching = threading.Thread(
        target=lambda: [None for _ in _safe_watch(core)], daemon=True
    )
    watching.start()
    wait_for(lambda: srv._watches or None)
    srv.faults.refuse_connections(30)
    srv.stop()
    watching.join(timeout=20)
    client.close()
    wait_for(lambda: threading.active_count() <= before, timeout=20)


def _safe_watch(core):
    try:
        yield from watch.Watch().stream(core.list_namespaced_pod, "default", timeout_seconds=60, _request_timeout=60)
    except Exception:
        time.sleep(0)
        return
