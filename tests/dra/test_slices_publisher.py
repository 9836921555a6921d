"""The slice publisher against the API emulator: what an operator would see with `kubectl get resourceslices`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.dra.slicepublisher import SlicePublisher
from bridge.inventory.model import GpuDevice, HealthEvent
from bridge.inventory.simulated import devices_from_spec
from bridge.kube import NODES, KubeAPI, RetryPolicy, connect
from bridge.kube.errors import Invalid
from bridge.sandbox.apiserver import ApiServer
from tests.polling import wait_until as wait_for

NODE = "node-a"
DRIVER = "gpu.dra-bridge.io"
FAST = RetryPolicy(initial_backoff=0.05, factor=2.0, max_backoff=0.5, deadline=2.0)


def add_node(api: KubeAPI, name: str) -> dict:
    return api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})


def connect_to(srv: ApiServer, path: Path, retry: RetryPolicy = FAST) -> KubeAPI:
    srv.write_kubeconfig(path)
    return connect(path, retry=retry, timeout=5.0)


@pytest.fixture
def server() -> Iterator[ApiServer]:
    # 1.36: DRADeviceTaints is on (beta), so the server keeps device taints; a 1.34 server drops them.
    with ApiServer(version="1.36.2", resource_versions=("v1", "v1beta2", "v1beta1")) as srv:
        yield srv


@pytest.fixture
def api(server: ApiServer, tmp_path: Path) -> KubeAPI:
    client = connect_to(server, tmp_path / "kubeconfig")
    add_node(client, NODE)
    return client


def our_slices(api: KubeAPI, node: str = NODE, driver: str = DRIVER) -> list[dict]:
    rapi = api.resource_api()
    items = api.list(rapi.slices, field_selector=f"spec.nodeName={node},spec.driver={driver}")["items"]
    return sorted(items, key=lambda s: s["metadata"]["name"])


def device_names(slices: list[dict]) -> list[str]:
    return [d["name"] for s in slices for d in s["spec"]["devices"]]


def publisher(api: KubeAPI, devices: tuple[GpuDevice, ...], dra: tuple[GpuDevice, ...] | None = None,
              **kw: Any) -> SlicePublisher:
    kw.setdefault("backoff", RetryPolicy(initial_backoff=0.05, max_backoff=0.5))
    return SlicePublisher(api, devices, node_name=NODE, dra_devices=[d.uuid for d in (devices if dra is None else dra)],
                          **kw)


@pytest.mark.parametrize("count", [1, 8, 129, 200])
def test_published_pool_passes_the_servers_validation_and_is_complete(api, count):
    devices = devices_from_spec(f"{count}xH100-80GB", NODE)
    result = publisher(api, devices, watch=False).reconcile_once()
    slices = our_slices(api)
    assert result.changed and len(slices) == result.slices == (1 if count <= 128 else 2)
    assert sorted(device_names(slices), key=lambda n: int(n[4:])) == [f"gpu-{i}" for i in range(count)]
    node_uid = api.get(NODES, NODE)["metadata"]["uid"]
    for s in slices:
        assert s["spec"]["pool"]["resourceSliceCount"] == len(slices)
        assert s["spec"]["pool"]["generation"] == result.generation
        assert s["metadata"]["ownerReferences"][0]["uid"] == node_uid


def test_server_rejects_an_oversized_slice_which_is_why_we_split(api):
    # The emulator's validation is the real server's: one slice with 129 devices is refused.
    devices = devices_from_spec("129xH100-80GB", NODE)
    pub = publisher(api, devices, watch=False)
    (first, second) = pub.desired(generation=1)
    first["spec"]["devices"].extend(second["spec"]["devices"])
    with pytest.raises(Invalid):
        api.create(api.resource_api().slices, first)


def test_v1beta1_only_server_gets_the_nested_shape(tmp_path):
    with ApiServer(version="1.32.5", resource_versions=("v1beta1",)) as srv:
        api = connect_to(srv, tmp_path / "kc")
        add_node(api, NODE)
        devices = devices_from_spec("2xA100-40GB", NODE)
        publisher(api, devices, watch=False, taints="off").reconcile_once()
        (s,) = our_slices(api)
        assert s["apiVersion"] == "resource.k8s.io/v1beta1"
        assert s["spec"]["devices"][0]["basic"]["attributes"]["productName"]["string"] == devices[0].product_name


def test_nothing_is_written_when_nothing_changed(api):
    devices = devices_from_spec("200xH100-80GB", NODE)
    pub = publisher(api, devices, watch=False)
    pub.reconcile_once()
    before = {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in our_slices(api)}
    writes = pub.stats.writes

    again = pub.reconcile_once()
    pub.republish()
    fresh = publisher(api, devices, watch=False)  # a restarted daemon finds the same pool
    fresh_result = fresh.reconcile_once()

    assert not again.changed and not fresh_result.changed
    assert pub.stats.writes == writes and fresh.stats.writes == 0
    assert {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in our_slices(api)} == before


def test_a_change_bumps_the_generation_of_every_slice_in_the_pool(api):
    devices = devices_from_spec("200xH100-80GB", NODE)
    pub = publisher(api, devices, watch=False)
    first = pub.reconcile_once()
    pub.set_dra_devices([d.uuid for d in devices[:199]])  # gpu-199 goes back to the device plugin
    second = pub.reconcile_once()
    slices = our_slices(api)
    assert second.generation == first.generation + 1
    assert [s["spec"]["pool"]["generation"] for s in slices] == [second.generation] * 2
    assert "gpu-199" not in device_names(slices)
    assert len(device_names(slices)) == 199


def test_shrinking_below_128_devices_deletes_the_surplus_slice(api):
    devices = devices_from_spec("130xH100-80GB", NODE)
    pub = publisher(api, devices, watch=False)
    pub.reconcile_once()
    pub.set_dra_devices([d.uuid for d in devices[:2]])
    result = pub.reconcile_once()
    slices = our_slices(api)
    assert result.deleted == 1
    assert len(slices) == 1 and slices[0]["spec"]["pool"]["resourceSliceCount"] == 1
    assert device_names(slices) == ["gpu-0", "gpu-1"]


def test_static_split_publishes_only_the_dra_side(api):
    devices = devices_from_spec("8xH100-80GB", NODE)
    publisher(api, devices, dra=devices[:2], watch=False).reconcile_once()
    assert device_names(our_slices(api)) == ["gpu-0", "gpu-1"]


def test_split_of_zero_publishes_an_empty_pool(api):
    devices = devices_from_spec("8xH100-80GB", NODE)
    publisher(api, devices, dra=(), watch=False).reconcile_once()
    (s,) = our_slices(api)
    assert s["spec"]["devices"] == []


def test_unhealthy_device_is_tainted_then_untainted(api):
    devices = devices_from_spec("4xH100-80GB", NODE)
    pub = publisher(api, devices, watch=False)
    pub.reconcile_once()
    pub.set_health(HealthEvent(devices[2].uuid, healthy=False, reason="XID 79", xid=79))
    pub.reconcile_once()
    (s,) = our_slices(api)
    taints = {d["name"]: d.get("taints") for d in s["spec"]["devices"]}
    assert taints["gpu-2"][0]["key"] == "gpu.dra-bridge.io/unhealthy"
    assert taints["gpu-2"][0]["value"] == "xid-79"
    assert taints["gpu-2"][0]["effect"] == "NoSchedule"
    assert all(taints[n] is None for n in ("gpu-0", "gpu-1", "gpu-3"))

    pub.set_health(HealthEvent(devices[2].uuid, healthy=True, reason="recovered"))
    pub.reconcile_once()
    (s,) = our_slices(api)
    assert not any(d.get("taints") for d in s["spec"]["devices"])


def test_unhealthy_device_is_removed_when_taints_are_off(api):
    devices = devices_from_spec("4xH100-80GB", NODE)
    pub = publisher(api, devices, watch=False, taints="off")
    pub.set_health(HealthEvent(devices[2].uuid, healthy=False, reason="XID 79", xid=79))
    pub.reconcile_once()
    assert device_names(our_slices(api)) == ["gpu-0", "gpu-1", "gpu-3"]


def test_health_of_a_legacy_side_device_does_not_touch_the_slice(api):
    devices = devices_from_spec("4xH100-80GB", NODE)
    pub = publisher(api, devices, dra=devices[:2], watch=False)
    pub.reconcile_once()
    pub.set_health(HealthEvent(devices[3].uuid, healthy=False, reason="XID 79", xid=79))
    assert not pub.reconcile_once().changed


def test_republished_after_the_kubelet_wipes_the_nodes_slices(api):
    devices = devices_from_spec("8xH100-80GB", NODE)
    with publisher(api, devices) as pub:
        assert pub.wait_synced(30)
        wait_for(lambda: len(our_slices(api)) == 1, what="first publish")
        generation = our_slices(api)[0]["spec"]["pool"]["generation"]
        # what the kubelet does at start: DeleteCollection by node name
        api.delete_collection(api.resource_api().slices, field_selector=f"spec.nodeName={NODE}")
        restored = wait_for(lambda: our_slices(api), what="slices restored after the wipe")
        assert device_names(restored) == [f"gpu-{i}" for i in range(8)]
        assert restored[0]["spec"]["pool"]["generation"] > generation


def test_republish_restores_slices_even_without_the_watch(api):
    devices = devices_from_spec("2xH100-80GB", NODE)
    with publisher(api, devices, watch=False) as pub:
        assert pub.wait_synced(30)
        api.delete_collection(api.resource_api().slices, field_selector=f"spec.nodeName={NODE}")
        assert our_slices(api) == []
        pub.republish()
        assert pub.wait_synced(30)
        assert device_names(our_slices(api)) == ["gpu-0", "gpu-1"]


def test_someone_editing_our_slice_is_reverted(api):
    devices = devices_from_spec("2xH100-80GB", NODE)
    with publisher(api, devices) as pub:
        assert pub.wait_synced(30)
        (s,) = wait_for(lambda: our_slices(api), what="publish")
        s["spec"]["devices"] = s["spec"]["devices"][:1]
        api.update(api.resource_api().slices, s)
        wait_for(lambda: device_names(our_slices(api)) == ["gpu-0", "gpu-1"], what="edit reverted")


def test_our_own_writes_are_not_mistaken_for_someone_elses(api, caplog):
    """The watch sees our update's event, possibly before the writer remembered its resourceVersion: it waits for
    the writer instead of logging a restore (and reconciling again) after each of our own writes."""
    import logging

    caplog.set_level(logging.INFO, logger="bridge.dra.slicepublisher")
    devices = devices_from_spec("8xH100-80GB", NODE)
    with publisher(api, devices, debounce_s=0) as pub:
        for n in list(range(1, 9)) * 3:
            pub.set_dra_devices([d.uuid for d in devices[:n]])
            assert pub.wait_synced(30)
        assert pub.published_dra() == frozenset(d.uuid for d in devices)
        time.sleep(0.3)  # let the watch deliver the last events
    assert not [r for r in caplog.records if "by someone else" in r.getMessage()]
    assert pub.stats.restores == 0


def test_the_published_dra_set_is_confirmed_after_each_successful_write(api):
    devices = devices_from_spec("4xH100-80GB", NODE)
    confirmed: list[frozenset[str]] = []
    pub = publisher(api, devices, dra=devices[:2], watch=False, on_published=confirmed.append)
    assert pub.published_dra() is None
    pub.reconcile_once()
    pub.set_dra_devices([devices[0].uuid])
    pub.reconcile_once()
    pub.reconcile_once()  # nothing changed: no second confirmation of the same set
    assert confirmed == [frozenset(d.uuid for d in devices[:2]), frozenset({devices[0].uuid})]
    assert device_names(our_slices(api)) == ["gpu-0"]


def outage_survived(server: ApiServer, api: KubeAPI, seconds: float) -> None:
    devices = devices_from_spec("4xH100-80GB", NODE)
    with publisher(api, devices, backoff=RetryPolicy(initial_backoff=0.1, max_backoff=1.0)) as pub:
        assert pub.wait_synced(30)
        server.faults.refuse_connections(seconds)
        pub.set_health(HealthEvent(devices[1].uuid, healthy=False, reason="XID 48", xid=48))
        pub.set_dra_devices([d.uuid for d in devices[:3]])
        wait_for(lambda: pub.stats.failures > 0, timeout=30, what="a failed attempt during the outage")
        assert pub.wait_synced(seconds + 30)
        (s,) = our_slices(api)
        by_name = {d["name"]: d for d in s["spec"]["devices"]}
        assert sorted(by_name) == ["gpu-0", "gpu-1", "gpu-2"]
        assert by_name["gpu-1"]["taints"][0]["value"] == "xid-48"


def test_short_api_outage_is_survived_and_changes_made_during_it_are_published(server, api):
    outage_survived(server, api, 5)


@pytest.mark.slow
def test_thirty_second_api_outage_is_survived(server, api):
    outage_survived(server, api, 30)


def test_missing_node_is_reported_clearly_and_publishing_starts_once_it_exists(server, tmp_path):
    api = connect_to(server, tmp_path / "kc")
    devices = devices_from_spec("1xL4", "late-node")
    pub = SlicePublisher(api, devices, node_name="late-node", dra_devices=[devices[0].uuid],
                         backoff=RetryPolicy(initial_backoff=0.05, max_backoff=0.3))
    with pub:
        wait_for(lambda: pub.last_error is not None, what="an error about the missing Node")
        assert "Node 'late-node' does not exist" in str(pub.last_error)
        add_node(api, "late-node")
        wait_for(lambda: our_slices(api, node="late-node"), what="slices once the Node exists")


def test_cleanup_deletes_only_this_nodes_slices_of_our_driver(api):
    add_node(api, "node-b")
    devices_a = devices_from_spec("2xH100-80GB", NODE)
    devices_b = devices_from_spec("2xH100-80GB", "node-b")
    publisher(api, devices_a, watch=False).reconcile_once()
    SlicePublisher(api, devices_b, node_name="node-b", dra_devices=[d.uuid for d in devices_b],
                   watch=False).reconcile_once()
    other_driver = SlicePublisher(api, devices_a, node_name=NODE, driver="gpu.example.com",
                                  dra_devices=[d.uuid for d in devices_a], watch=False)
    other_driver.reconcile_once()

    with publisher(api, devices_a) as pub:
        assert pub.wait_synced(30)
        assert pub.cleanup() == 1
    assert our_slices(api) == []
    time.sleep(0.3)  # a stopped publisher must not restore anything
    assert our_slices(api) == []
    assert len(our_slices(api, node="node-b")) == 1
    assert len(our_slices(api, driver="gpu.example.com")) == 1


def test_bad_configuration_is_refused_before_anything_is_written(api):
    devices = devices_from_spec("1xL4", NODE)
    with pytest.raises(ValueError, match="taints must be one of"):
        SlicePublisher(api, devices, node_name=NODE, taints="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not in this node's inventory"):
        SlicePublisher(api, devices, node_name=NODE, dra_devices=["GPU-nope"])
    with pytest.raises(ValueError, match="invalid DRA driver name"):
        SlicePublisher(api, devices, node_name=NODE, driver="Bad_Driver")
    assert our_slices(api) == []


class TaintsDroppedKube:
    """The emulator behind a proxy that behaves like a server with the DRADeviceTaints gate off: `taints` in a
    written ResourceSlice are silently dropped (the real server's dropDisabledFields), everything else passes."""

    def __init__(self, inner: KubeAPI) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @staticmethod
    def _strip(obj: dict) -> dict:
        import copy

        obj = copy.deepcopy(obj)
        for dev in (obj.get("spec") or {}).get("devices") or []:
            dev.pop("taints", None)
            (dev.get("basic") or {}).pop("taints", None)
        return obj

    def create(self, res, obj, namespace=None, *, dry_run=False):
        if res.plural == "resourceslices":
            obj = self._strip(obj)
        return self.inner.create(res, obj, namespace, dry_run=dry_run)

    def update(self, res, obj, namespace=None, *, subresource=None):
        if res.plural == "resourceslices":
            obj = self._strip(obj)
        return self.inner.update(res, obj, namespace, subresource=subresource)


def test_auto_taints_fall_back_to_removal_when_the_server_drops_taints(api):
    devices = devices_from_spec("4xH100-80GB", NODE)
    pub = publisher(TaintsDroppedKube(api), devices, watch=False)  # type: ignore[arg-type]
    pub.reconcile_once()
    pub.set_health(HealthEvent(devices[0].uuid, healthy=False, reason="XID 79", xid=79))
    pub.reconcile_once()
    assert device_names(our_slices(api)) == ["gpu-1", "gpu-2", "gpu-3"]


def test_auto_taints_switch_to_removal_when_a_write_loses_them(api):
    # The probe said "kept" (forced here), but the server drops them on the real write: the publisher notices
    # and removes the device instead of leaving it offered untainted.
    devices = devices_from_spec("4xH100-80GB", NODE)
    pub = publisher(TaintsDroppedKube(api), devices, watch=False)  # type: ignore[arg-type]
    pub._taints_ok = True
    pub.set_health(HealthEvent(devices[0].uuid, healthy=False, reason="XID 79", xid=79))
    pub.reconcile_once()
    assert device_names(our_slices(api)) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]  # written without the taint...
    pub.reconcile_once()  # ...and the triggered follow-up removes it
    assert device_names(our_slices(api)) == ["gpu-1", "gpu-2", "gpu-3"]


def test_readiness_reports_unpublished_slices_until_the_first_publish(server, api):
    devices = devices_from_spec("2xH100-80GB", NODE)
    pub = publisher(api, devices)
    (check,) = pub.readiness().values()
    assert check() == "ResourceSlices not published yet"
    with pub:
        assert pub.wait_synced(30)
        assert check() is None
        assert pub.liveness() == {}


def test_slices_are_republished_when_the_api_server_comes_back_from_an_older_backup(server, api):
    """A restore from a backup taken before the slices existed: they are gone and every resourceVersion went
    backwards. The publisher's watch must relist (not resume from its newer version for ever) and republish
    within seconds, long before its 300 s safety-net resync."""
    backup = server.store.resource_version  # the Node exists, our slices not yet
    devices = devices_from_spec("4xH100-80GB", NODE)
    with publisher(api, devices) as pub:
        assert pub.resync_interval_s >= 300
        assert pub.wait_synced(30)
        [first] = wait_for(lambda: s if len(s := our_slices(api)) == 1 else None, what="first publish")
        restored_at = time.monotonic()
        server.restore(backup)
        # The restore removed our slice (the backup predates it). The publisher may have put it back before a read
        # here could see it gone, so the slice waited for is a new object (another uid), never the one from before.
        republished = wait_for(lambda: [s for s in our_slices(api) if s["metadata"]["uid"] != first["metadata"]["uid"]],
                               timeout=60, what="slices republished after the restore")
        took = time.monotonic() - restored_at
        print(f"\nslices republished {took:.2f}s after the API server was restored to resourceVersion {backup}")
        assert took < 20
        assert device_names(republished) == [f"gpu-{i}" for i in range(4)]
