"""`RestKube` against the API emulator over real HTTP: the verbs, optimistic concurrency, selectors, status,
pagination, discovery and the error mapping, as a component of the bridge would see them."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from bridge.kube import (
    CONFIG_MAPS,
    EVENTS,
    NODES,
    PODS,
    AlreadyExists,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    RestKube,
    record_event,
    update_with_retry,
)


def configmap(name: str, ns: str = "t", labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}}, "data": dict(data)}


def pod(name: str, node: str, ns: str = "t", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}}


def test_create_get_list_update_patch_delete(api: RestKube, ns: str) -> None:
    created = api.create(CONFIG_MAPS, configmap("a", k="1"))
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    assert api.get(CONFIG_MAPS, "a", ns)["data"] == {"k": "1"}

    created["data"]["k"] = "2"
    updated = api.update(CONFIG_MAPS, created)
    assert updated["data"] == {"k": "2"}
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])

    assert api.patch(CONFIG_MAPS, "a", {"data": {"m": "x"}}, ns)["data"] == {"k": "2", "m": "x"}
    assert api.patch(CONFIG_MAPS, "a", [{"op": "remove", "path": "/data/k"}], ns, patch_type="json")["data"] == {"m": "x"}
    assert api.patch(CONFIG_MAPS, "a", {"metadata": {"labels": {"s": "y"}}}, ns,
                     patch_type="strategic")["metadata"]["labels"] == {"s": "y"}

    listed = api.list(CONFIG_MAPS, ns)
    assert listed["kind"] == "ConfigMapList" and listed["metadata"]["resourceVersion"]
    assert [(i["kind"], i["apiVersion"], i["metadata"]["name"]) for i in listed["items"]] == [("ConfigMap", "v1", "a")]

    api.delete(CONFIG_MAPS, "a", ns)
    with pytest.raises(NotFound):
        api.get(CONFIG_MAPS, "a", ns)
    with pytest.raises(NotFound):
        api.delete(CONFIG_MAPS, "a", ns)


def test_duplicate_create_is_already_exists(api: RestKube, ns: str) -> None:
    api.create(CONFIG_MAPS, configmap("dup"))
    with pytest.raises(AlreadyExists) as ei:
        api.create(CONFIG_MAPS, configmap("dup"))
    assert not ei.value.maybe_ours


def test_dry_run_create_stores_nothing(api: RestKube, ns: str) -> None:
    answer = api.create(CONFIG_MAPS, configmap("dry", k="v"), dry_run=True)
    assert answer["data"] == {"k": "v"}
    with pytest.raises(NotFound):
        api.get(CONFIG_MAPS, "dry", ns)


def test_generate_name(api: RestKube, ns: str) -> None:
    obj = configmap("")
    obj["metadata"] = {"generateName": "gen-", "namespace": ns}
    a, b = api.create(CONFIG_MAPS, obj), api.create(CONFIG_MAPS, obj)
    assert a["metadata"]["name"].startswith("gen-") and a["metadata"]["name"] != b["metadata"]["name"]


def test_stale_update_conflicts(api: RestKube, ns: str) -> None:
    first = api.create(CONFIG_MAPS, configmap("c", v="0"))
    api.patch(CONFIG_MAPS, "c", {"data": {"v": "1"}}, ns)
    first["data"]["v"] = "stale"
    with pytest.raises(Conflict) as ei:
        api.update(CONFIG_MAPS, first)
    assert ei.value.status == 409 and not isinstance(ei.value, AlreadyExists)
    assert api.get(CONFIG_MAPS, "c", ns)["data"] == {"v": "1"}


def test_update_with_retry_converges_under_concurrent_writers(api: RestKube, ns: str) -> None:
    api.create(CONFIG_MAPS, configmap("counter", n="0"))
    writers, increments = 4, 15

    def bump(obj: dict[str, Any]) -> dict[str, Any]:
        obj["data"]["n"] = str(int(obj["data"]["n"]) + 1)
        return obj

    def writer() -> None:
        for _ in range(increments):
            update_with_retry(api, CONFIG_MAPS, "counter", ns, bump, attempts=100)

    threads = [threading.Thread(target=writer) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert api.get(CONFIG_MAPS, "counter", ns)["data"]["n"] == str(writers * increments)


def test_update_with_retry_writes_nothing_when_nothing_changes(api: RestKube, ns: str) -> None:
    created = api.create(CONFIG_MAPS, configmap("still", v="1"))
    same = update_with_retry(api, CONFIG_MAPS, "still", ns, lambda o: o)
    none = update_with_retry(api, CONFIG_MAPS, "still", ns, lambda o: None)
    assert same["metadata"]["resourceVersion"] == none["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_label_and_field_selectors(api: RestKube, ns: str) -> None:
    api.create(PODS, pod("p1", "node-a", labels={"app": "x", "tier": "gpu"}))
    api.create(PODS, pod("p2", "node-b", labels={"app": "x"}))
    api.create(PODS, pod("p3", "node-a", labels={"app": "y"}))

    def names(**kw: Any) -> list[str]:
        return sorted(i["metadata"]["name"] for i in api.list(PODS, **kw)["items"])

    assert names(label_selector="app=x") == ["p1", "p2"]
    assert names(label_selector="app in (x,y),tier!=gpu") == ["p2", "p3"]
    assert names(field_selector="spec.nodeName=node-a") == ["p1", "p3"]
    assert names(field_selector="spec.nodeName=node-a", label_selector="app=x") == ["p1"]
    assert names(field_selector="metadata.name=p2", namespace=ns) == ["p2"]


def test_status_subresource(api: RestKube, ns: str) -> None:
    created = api.create(PODS, pod("s", "node-a"))
    created["status"] = {"phase": "Running"}
    after_main = api.update(PODS, created)  # the main resource ignores status changes
    assert after_main.get("status", {}).get("phase") != "Running"
    after_main["status"] = {"phase": "Running"}
    after_status = api.update(PODS, after_main, subresource="status")
    assert after_status["status"]["phase"] == "Running"
    patched = api.patch(PODS, "s", {"status": {"message": "hello"}}, ns, subresource="status")
    assert patched["status"]["message"] == "hello" and patched["status"]["phase"] == "Running"


def test_pagination_returns_every_item_once(server: Any, api: RestKube) -> None:
    server.load_objects([configmap(f"cm-{i:04d}", ns=f"p{i % 3}") for i in range(1234)])
    pages: list[int] = []
    listed = api.list(CONFIG_MAPS, page_size=100, on_page=pages.append)
    keys = [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in listed["items"]]
    assert len(keys) == len(set(keys)) == 1234
    assert len(pages) == 13 and pages[-1] == 1234
    assert len(api.list(CONFIG_MAPS, "p1", page_size=50)["items"]) == 411


def test_a_list_transform_sees_each_item_with_its_kind_and_replaces_it_page_by_page(server: Any,
                                                                                   api: RestKube) -> None:
    server.load_objects([configmap(f"cm-{i:04d}", ns="p0", big="x" * 100) for i in range(250)])
    seen: list[tuple[str, str]] = []
    pages: list[int] = []

    def cut(item: dict[str, Any]) -> dict[str, Any]:
        seen.append((item["apiVersion"], item["kind"]))
        return {"kind": item["kind"], "metadata": {"name": item["metadata"]["name"]}}

    def on_page(count: int) -> None:
        pages.append(len(seen))  # every item of the page was cut before the next page is read
        assert count == len(seen)

    listed = api.list(CONFIG_MAPS, "p0", page_size=100, on_page=on_page, transform=cut)
    assert pages == [100, 200, 250] and set(seen) == {("v1", "ConfigMap")}
    assert listed["items"][0] == {"kind": "ConfigMap", "metadata": {"name": "cm-0000"}}
    assert len(listed["items"]) == 250 and listed["metadata"]["resourceVersion"]


def test_a_list_sink_takes_every_item_page_by_page_and_the_answer_keeps_none(server: Any, api: RestKube) -> None:
    server.load_objects([configmap(f"cm-{i:04d}", ns="p0") for i in range(250)])
    sink = _Sink()
    pages: list[int] = []
    listed = api.list(CONFIG_MAPS, "p0", page_size=100, on_page=lambda count: pages.append(len(sink.items)),
                      transform=lambda item: {"kind": item["kind"], "name": item["metadata"]["name"]}, sink=sink)
    assert listed["items"] == [] and listed["metadata"]["resourceVersion"]
    assert pages == [100, 200, 250] and sink.restarts == 0
    assert sink.items[0] == {"kind": "ConfigMap", "name": "cm-0000"} and len(sink.items) == 250


class _Sink:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.restarts = 0

    def add(self, item: dict[str, Any]) -> None:
        self.items.append(item)

    def restart(self) -> None:
        self.items.clear()
        self.restarts += 1


@pytest.mark.parametrize("into", ["answer", "sink"])
def test_expired_continue_token_restarts_the_list_consistently(kubeconfig: Any, tmp_path: Any, into: str) -> None:
    """The list starts again from its first page; a sink is told, and forgets the items of the first try."""
    from bridge.kube import connect
    from bridge.sandbox.apiserver import ApiServer

    with ApiServer(history_limit=5) as srv:
        path = tmp_path / "kc-small-history"
        srv.write_kubeconfig(path)
        with connect(path) as api:
            srv.load_objects([configmap(f"cm-{i:03d}", ns="default") for i in range(300)])
            churned = {"done": False}

            def churn(count: int) -> None:
                if not churned["done"]:  # after the first page, push the list's snapshot out of history
                    churned["done"] = True
                    for i in range(20):
                        api.create(CONFIG_MAPS, configmap(f"late-{i:02d}", ns="default"))

            sink = _Sink() if into == "sink" else None
            listed = api.list(CONFIG_MAPS, "default", page_size=100, on_page=churn, sink=sink)
    names = [i["metadata"]["name"] for i in (listed["items"] if sink is None else sink.items)]
    assert sink is None or (sink.restarts == 1 and listed["items"] == [])
    assert len(names) == len(set(names)) == 320  # one consistent, complete snapshot taken after the churn


def test_discovery_and_resource_api_prefer_v1(api: RestKube) -> None:
    d = api.discovery()
    assert d.major == 1 and d.minor >= 34
    assert d.serves("v1", "pods") and d.serves("apps/v1", "daemonsets")
    assert d.serves("resource.k8s.io/v1", "resourceslices")
    assert d.resources["resource.k8s.io/v1"]["resourceslices"]["namespaced"] is False
    assert api.resource_api().version == "v1"


def test_resource_api_falls_back_to_v1beta1(tmp_path: Any) -> None:
    from bridge.kube import connect
    from bridge.sandbox.apiserver import ApiServer

    with ApiServer(resource_versions=("v1beta1",)) as srv:
        srv.write_kubeconfig(tmp_path / "kc")
        with connect(tmp_path / "kc") as api:
            rapi = api.resource_api()
            assert rapi.version == "v1beta1"
            assert not api.discovery().serves("resource.k8s.io/v1")
            cls = {"apiVersion": "resource.k8s.io/v1beta1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
                   "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}}
            assert api.create(rapi.device_classes, cls)["metadata"]["name"] == "gpu"


def slice_with(n: int, attr: str = "model") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "node-a-gpu"},
        "spec": {"driver": "gpu.example.com", "nodeName": "node-a",
                 "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}", "attributes": {attr: {"string": "x"}}} for i in range(n)]},
    }


def test_invalid_resourceslice_reports_field_causes(api: RestKube) -> None:
    slices = api.resource_api().slices
    with pytest.raises(Invalid) as ei:
        api.create(slices, slice_with(129))
    assert ei.value.status == 422
    assert any(c.field == "spec.devices" for c in ei.value.causes), ei.value.causes
    assert "128" in ei.value.message
    with pytest.raises(Invalid) as bad_attr:
        api.create(slices, slice_with(1, attr="bad name!"))
    assert any(c.field == "spec.devices[0].attributes" and "bad name!" in c.message
               for c in bad_attr.value.causes), bad_attr.value.causes
    assert api.create(slices, slice_with(128))["metadata"]["name"] == "node-a-gpu"


def test_forbidden_names_verb_and_resource(server: Any, api: RestKube) -> None:
    server.faults.fail(1, status=403, path_regex=r"^/api/v1/pods$")
    with pytest.raises(Forbidden) as ei:
        api.list(PODS)
    assert ei.value.rbac_hint == "missing RBAC: list pods"
    server.faults.fail(1, status=403, path_regex=r"resourceslices")
    with pytest.raises(Forbidden) as ei2:
        api.create(api.resource_api().slices, slice_with(1))
    assert ei2.value.rbac_hint == "missing RBAC: create resourceslices.resource.k8s.io"


def test_resource_api_is_cached(server: Any, api: RestKube) -> None:
    assert api.resource_api().version == "v1"
    server.faults.fail(1, status=403, path_regex=r"^/apis$")
    assert api.resource_api().version == "v1"  # no second discovery request
    server.faults.clear()


def test_record_event_for_a_node(api: RestKube) -> None:
    node = api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-1"}})
    ev = record_event(api, node, "DeviceRefused", "GPU-abc is on the dra side", "Warning", "bridge-node")
    assert ev["metadata"]["name"].startswith("gpu-node-1.")
    seen = [e for e in api.list(EVENTS, "default")["items"] if e["involvedObject"]["name"] == "gpu-node-1"]
    assert [(e["type"], e["reason"], e["involvedObject"]["kind"]) for e in seen] == [("Warning", "DeviceRefused", "Node")]
