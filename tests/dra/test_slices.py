"""The desired ResourceSlices, computed without any server: contents, shapes per version, splitting, health."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from bridge.dra.slices import (
    NodeRef,
    SliceError,
    SliceInputs,
    comparable,
    desired_slices,
    pool_unchanged,
    quantity_bytes,
    semver,
    slice_name,
    taint_value,
)
from bridge.inventory.model import DeviceID, GpuDevice
from bridge.kvalues.quantity import parse_quantity
from bridge.inventory.simulated import devices_from_spec

NODE = NodeRef("gpu-node-1", "3f1c2d4e-0000-4000-8000-000000000001")


def inputs(devices: tuple[GpuDevice, ...], **kw: object) -> SliceInputs:
    return SliceInputs(node=NODE, dra_devices=devices, **kw)  # type: ignore[arg-type]


def all_devices(slices: list[dict]) -> list[dict]:
    return [d for s in slices for d in s["spec"]["devices"]]


@pytest.mark.parametrize(("count", "expected_sizes"), [(1, [1]), (8, [8]), (128, [128]), (129, [128, 1]),
                                                       (200, [128, 72]), (256, [128, 128]), (257, [128, 128, 1])])
def test_pool_is_split_at_128_devices_with_count_and_generation_in_every_slice(count, expected_sizes):
    devices = devices_from_spec(f"{count}xH100-80GB", NODE.name)
    slices = desired_slices(inputs(devices, generation=7))

    assert [len(s["spec"]["devices"]) for s in slices] == expected_sizes
    for s in slices:
        assert s["spec"]["pool"] == {"name": NODE.name, "generation": 7, "resourceSliceCount": len(expected_sizes)}
        assert s["spec"]["nodeName"] == NODE.name
        assert s["spec"]["driver"] == "gpu.dra-bridge.io"
    names = [d["name"] for d in all_devices(slices)]
    assert names == [f"gpu-{i}" for i in range(count)]
    assert len({s["metadata"]["name"] for s in slices}) == len(slices)


def test_slices_are_owned_by_the_node_and_named_deterministically():
    slices = desired_slices(inputs(devices_from_spec("2xA100-40GB", NODE.name)))
    assert slices[0]["metadata"] == {
        "name": "gpu-node-1-gpu.dra-bridge.io-0",
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": NODE.name, "uid": NODE.uid,
                             "controller": True}],
    }
    assert desired_slices(inputs(devices_from_spec("2xA100-40GB", NODE.name))) == slices


def test_v1_device_carries_the_contract_attributes_and_memory_capacity():
    dev = devices_from_spec("1xH100-80GB", NODE.name)[0]
    (s,) = desired_slices(inputs((dev,)))
    assert s["apiVersion"] == "resource.k8s.io/v1"
    (entry,) = s["spec"]["devices"]
    assert "basic" not in entry
    assert entry["attributes"] == {
        "uuid": {"string": dev.uuid},
        "productName": {"string": dev.product_name},
        "architecture": {"string": "Hopper"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "550.54.15"},
        "index": {"int": 0},
        "minor": {"int": 0},
        "pciBusID": {"string": dev.pci_bus_id},
        "numaNode": {"int": 0},
        "migCapable": {"bool": True},
    }
    assert parse_quantity(entry["capacity"]["memory"]["value"]) == dev.memory_bytes


def test_v1beta2_uses_the_flat_shape_and_v1beta1_nests_under_basic():
    dev = devices_from_spec("1xL4", NODE.name)[0]
    flat = desired_slices(inputs((dev,), version="v1beta2"))[0]
    nested = desired_slices(inputs((dev,), version="v1beta1"))[0]
    assert flat["apiVersion"] == "resource.k8s.io/v1beta2"
    assert nested["apiVersion"] == "resource.k8s.io/v1beta1"
    flat_dev = flat["spec"]["devices"][0]
    nested_dev = nested["spec"]["devices"][0]
    assert set(nested_dev) == {"name", "basic"}
    assert nested_dev["basic"]["attributes"] == flat_dev["attributes"]
    assert nested_dev["basic"]["capacity"] == flat_dev["capacity"]


def test_unknown_numa_node_is_omitted_and_odd_versions_are_normalized():
    dev = replace(devices_from_spec("1xA100-40GB", NODE.name)[0], numa_node=None, driver_version="535.104.05",
                  compute_capability="8.0")
    attrs = desired_slices(inputs((dev,)))[0]["spec"]["devices"][0]["attributes"]
    assert "numaNode" not in attrs
    assert attrs["driverVersion"] == {"version": "535.104.5"}
    assert attrs["cudaComputeCapability"] == {"version": "8.0.0"}


def test_a_driver_version_that_is_not_numeric_is_left_out_instead_of_breaking_the_slice():
    dev = replace(devices_from_spec("1xA100-40GB", NODE.name)[0], driver_version="unknown")
    attrs = desired_slices(inputs((dev,)))[0]["spec"]["devices"][0]["attributes"]
    assert "driverVersion" not in attrs


@pytest.mark.parametrize(("raw", "want"), [("9.0", "9.0.0"), ("550.54.15", "550.54.15"), ("535.104", "535.104.0"),
                                           ("12", "12.0.0"), ("535.104.05", "535.104.5"), ("v1.2.3", "1.2.3"),
                                           ("abc", None), ("", None), ("1.2.3.4", None)])
def test_semver_normalization(raw, want):
    assert semver(raw) == want


def test_a_version_with_a_number_of_more_than_18_digits_is_left_out_as_kube_apiserver_138_refuses_it():
    assert semver("123456789012345678.0.1") == "123456789012345678.0.1"
    assert semver("1234567890123456789.0.0") is None
    assert semver("535.0000000000000000000104") == "535.104.0"  # leading zeros are dropped before counting
    dev = replace(devices_from_spec("1xA100-40GB", NODE.name)[0], driver_version="1.2.99999999999999999999")
    attrs = desired_slices(inputs((dev,)))[0]["spec"]["devices"][0]["attributes"]
    assert "driverVersion" not in attrs


@pytest.mark.parametrize(("n", "want"), [(80 * 2**30, "80Gi"), (81559 * 2**20, "81559Mi"), (1000, "1000"),
                                         (0, "0"), (3 * 2**40, "3Ti")])
def test_memory_is_written_as_a_canonical_quantity(n, want):
    assert quantity_bytes(n) == want
    assert parse_quantity(want) == n


def test_quantities_compare_by_value_as_the_server_may_rewrite_them():
    assert parse_quantity("1k") == parse_quantity("1000") == 1000
    assert parse_quantity("1Gi") == parse_quantity("1073741824")
    assert parse_quantity("1e3") == 1000


def test_only_dra_side_devices_are_published():
    devices = devices_from_spec("8xH100-80GB", NODE.name)
    dra_side = (devices[5], devices[2])
    slices = desired_slices(inputs(dra_side))
    published = [d["name"] for d in all_devices(slices)]
    assert published == ["gpu-2", "gpu-5"]
    uuids = {d["attributes"]["uuid"]["string"] for d in all_devices(slices)}
    assert uuids == {devices[2].uuid, devices[5].uuid}


def test_no_dra_devices_still_publishes_one_empty_slice_so_the_pool_exists():
    slices = desired_slices(inputs(()))
    assert len(slices) == 1
    assert slices[0]["spec"]["devices"] == []
    assert slices[0]["spec"]["pool"]["resourceSliceCount"] == 1


def test_unhealthy_device_gets_a_noschedule_taint_when_taints_are_supported():
    devices = devices_from_spec("4xH100-80GB", NODE.name)
    bad = devices[1].uuid
    slices = desired_slices(inputs(devices, unhealthy={bad: "XID 79 (GPU has fallen off the bus)"}, taints=True))
    by_name = {d["name"]: d for d in all_devices(slices)}
    assert set(by_name) == {"gpu-0", "gpu-1", "gpu-2", "gpu-3"}
    assert by_name["gpu-1"]["taints"] == [
        {"key": "gpu.dra-bridge.io/unhealthy", "value": "XID-79-GPU-has-fallen-off-the-bus", "effect": "NoSchedule"}]
    assert all("taints" not in by_name[n] for n in ("gpu-0", "gpu-2", "gpu-3"))


def test_unhealthy_device_taint_sits_under_basic_in_v1beta1():
    devices = devices_from_spec("2xH100-80GB", NODE.name)
    slices = desired_slices(inputs(devices, unhealthy={devices[0].uuid: "xid-48"}, version="v1beta1"))
    assert slices[0]["spec"]["devices"][0]["basic"]["taints"][0]["value"] == "xid-48"


def test_unhealthy_device_is_removed_when_the_server_has_no_device_taints():
    devices = devices_from_spec("4xH100-80GB", NODE.name)
    slices = desired_slices(inputs(devices, unhealthy={devices[1].uuid: "xid 79"}, taints=False))
    assert [d["name"] for d in all_devices(slices)] == ["gpu-0", "gpu-2", "gpu-3"]
    assert not any("taints" in d for d in all_devices(slices))


def test_a_slice_with_a_tainted_device_holds_at_most_64_devices():
    devices = devices_from_spec("200xH100-80GB", NODE.name)
    slices = desired_slices(inputs(devices, unhealthy={devices[150].uuid: "xid-79"}))
    sizes = [len(s["spec"]["devices"]) for s in slices]
    assert sum(sizes) == 200
    for s in slices:
        tainted = any("taints" in d for d in s["spec"]["devices"])
        assert len(s["spec"]["devices"]) <= (64 if tainted else 128)
    assert sizes == [128, 64, 8]
    assert all(s["spec"]["pool"]["resourceSliceCount"] == 3 for s in slices)


@pytest.mark.parametrize("reason", ["", "!!!", "a" * 200, "XID 13 (Graphics Engine Exception) on GPU-1234 / 0000:18"])
def test_taint_values_are_always_valid_label_values(reason):
    import re

    value = taint_value(reason)
    assert len(value) <= 63
    assert re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", value)


def test_slice_names_stay_valid_dns_subdomains_for_very_long_node_names():
    node = ("n" * 60 + ".") * 4 + "x"
    assert len(node) <= 253
    name = slice_name(node, "gpu.dra-bridge.io", 3)
    assert len(name) <= 253
    assert name.endswith("-gpu.dra-bridge.io-3")
    assert slice_name(node, "gpu.dra-bridge.io", 3) == name
    assert slice_name(node[:-1] + "y", "gpu.dra-bridge.io", 3) != name


def test_each_device_stays_within_32_attributes_and_capacities():
    for s in desired_slices(inputs(devices_from_spec("4xH100-80GB", NODE.name))):
        for d in s["spec"]["devices"]:
            assert len(d["attributes"]) + len(d["capacity"]) <= 32


@pytest.mark.parametrize(("field", "value", "message"), [
    ("driver", "GPU_Driver", "invalid DRA driver name"),
    ("driver", "x" * 64, "invalid DRA driver name"),
    ("version", "v1alpha3", "unsupported resource.k8s.io version"),
    ("generation", -1, "generation"),
])
def test_bad_inputs_are_refused_with_a_clear_message(field, value, message):
    with pytest.raises(SliceError, match=message):
        desired_slices(replace(inputs(devices_from_spec("1xL4", NODE.name)), **{field: value}))


def test_bad_node_name_is_refused():
    with pytest.raises(SliceError, match="invalid node name"):
        desired_slices(SliceInputs(node=NodeRef("Node_1", "u"), dra_devices=()))


def test_duplicate_indexes_are_refused():
    dev = devices_from_spec("1xL4", NODE.name)[0]
    twin = replace(dev, uuid=DeviceID("GPU-other"))
    with pytest.raises(SliceError, match="share index 0"):
        desired_slices(inputs((dev, twin)))


def test_pool_unchanged_ignores_server_additions_but_sees_real_differences():
    devices = devices_from_spec("3xH100-80GB", NODE.name)
    desired = desired_slices(inputs(devices, unhealthy={devices[0].uuid: "xid-79"}, generation=4))
    echoed = json.loads(json.dumps(desired))
    for s in echoed:
        s["metadata"].update(resourceVersion="12", uid="abc", creationTimestamp="2025-01-01T00:00:00Z")
        for d in s["spec"]["devices"]:
            for t in d.get("taints", []):
                t["timeAdded"] = "2025-01-01T00:00:00Z"
            d["capacity"]["memory"]["value"] = str(parse_quantity(d["capacity"]["memory"]["value"]))
    assert pool_unchanged(desired, echoed)

    healed = desired_slices(inputs(devices, generation=4))
    assert not pool_unchanged(healed, echoed)
    assert comparable(healed[0]) != comparable(echoed[0])


def test_pool_with_mixed_generations_counts_as_changed():
    devices = devices_from_spec("200xH100-80GB", NODE.name)
    desired = desired_slices(inputs(devices, generation=2))
    existing = json.loads(json.dumps(desired))
    existing[1]["spec"]["pool"]["generation"] = 1
    assert not pool_unchanged(desired, existing)
    assert not pool_unchanged(desired, existing[:1])
