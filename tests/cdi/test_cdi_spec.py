"""Per-claim and device-plugin CDI specs: structure, names, and the lowest cdiVersion that covers them."""

from __future__ import annotations

import pytest

from bridge.cdi import (
    CdiNameError,
    build_claim_spec,
    build_device_plugin_spec,
    claim_kind,
    device_plugin_cdi_ids,
    minimum_cdi_version,
    parse_qualified_name,
    qualified_name,
)
from bridge.cdi.names import validate_class, validate_device_name, validate_vendor
from bridge.inventory import devices_from_spec

GPUS = devices_from_spec("8xH100-80GB", "node-1")
UID = "a3f1c2d4-5b6e-4f70-8a9b-0c1d2e3f4a5b"


def test_a_claim_spec_without_a_driver_inventory_gives_each_gpu_its_node_and_the_claim_the_control_nodes() -> None:
    built = build_claim_spec(UID, [GPUS[3], GPUS[5]])
    doc = built.document
    assert doc["kind"] == "k8s.gpu.dra-bridge.io/claim"
    assert [d["name"] for d in doc["devices"]] == [f"{UID}-gpu-3", f"{UID}-gpu-5"]
    assert doc["devices"][0]["containerEdits"] == {"deviceNodes": [{"path": "/dev/nvidia3"}]}
    assert doc["devices"][1]["containerEdits"] == {"deviceNodes": [{"path": "/dev/nvidia5"}]}
    assert doc["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}, {"path": "/dev/nvidia-uvm-tools"},
        {"path": "/dev/nvidia-modeset"}]
    # void, not the UUIDs: a default NVIDIA runtime must not inject a second set of devices
    assert doc["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert "mounts" not in doc["containerEdits"] and "hooks" not in doc["containerEdits"]
    assert built.cdi_ids == {GPUS[3].uuid: f"k8s.gpu.dra-bridge.io/claim={UID}-gpu-3",
                             GPUS[5].uuid: f"k8s.gpu.dra-bridge.io/claim={UID}-gpu-5"}
    for cdi_id in built.cdi_ids.values():
        parse_qualified_name(cdi_id)  # every ID is a valid fully qualified CDI name


def test_claim_specs_of_different_claims_never_share_a_device_name() -> None:
    a = build_claim_spec("11111111-0000-0000-0000-000000000000", [GPUS[0]])
    b = build_claim_spec("22222222-0000-0000-0000-000000000000", [GPUS[0]])
    assert not set(a.cdi_ids.values()) & set(b.cdi_ids.values())


def test_claim_spec_version_is_the_lowest_that_covers_its_names() -> None:
    assert build_claim_spec("b3f1c2d4-aaaa", [GPUS[0]]).document["cdiVersion"] == "0.3.0"
    assert build_claim_spec("3bf1c2d4-aaaa", [GPUS[0]]).document["cdiVersion"] == "0.5.0"  # leading digit


def test_the_claim_kind_follows_the_driver_name() -> None:
    assert claim_kind("gpu.example.com") == "k8s.gpu.example.com/claim"
    built = build_claim_spec(UID, [GPUS[0]], kind=claim_kind("gpu.example.com"))
    assert built.document["kind"] == "k8s.gpu.example.com/claim"


@pytest.mark.parametrize(("uid", "gpus", "needle"), [
    ("", [GPUS[0]], "claim UID"),
    (UID, [], "at least one device"),
    (UID, [GPUS[1], GPUS[1]], "appears twice"),
    ("bad/uid", [GPUS[0]], "invalid CDI device name"),
])
def test_bad_claim_specs_are_refused(uid: str, gpus: list, needle: str) -> None:
    with pytest.raises(CdiNameError, match=needle):
        build_claim_spec(uid, gpus)


def test_device_plugin_spec_names_every_gpu_by_uuid_and_index_plus_all_under_our_own_vendor() -> None:
    doc = build_device_plugin_spec(GPUS[:2]).document
    assert doc["kind"] == "k8s.device-plugin.dra-bridge.io/gpu"  # never nvidia.com/gpu: the toolkit's kind
    names = [d["name"] for d in doc["devices"]]
    assert names == [GPUS[0].uuid, "0", GPUS[1].uuid, "1", "all"]
    assert doc["devices"][-1]["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidia1"}]
    assert doc["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert doc["cdiVersion"] == "0.5.0"  # "0" starts with a digit
    assert build_device_plugin_spec(GPUS[:2], names="uuid").document["cdiVersion"] == "0.3.0"


def test_device_plugin_cdi_ids_follow_the_strategy() -> None:
    kind = "k8s.device-plugin.dra-bridge.io/gpu"
    assert device_plugin_cdi_ids([GPUS[2].uuid], GPUS) == [f"{kind}={GPUS[2].uuid}"]
    assert device_plugin_cdi_ids([GPUS[2].uuid], GPUS, strategy="index") == [f"{kind}=2"]
    with pytest.raises(CdiNameError, match="unknown device 'GPU-nope'"):
        device_plugin_cdi_ids(["GPU-nope"], GPUS)


# -- minimum version rules -------------------------------------------------------------------------------------

BASE = {"cdiVersion": "x", "kind": "vendor.com/gpu", "devices": [{"name": "gpu0", "containerEdits": {}}]}


def _with(**changes: object) -> dict:
    doc = {**BASE, "devices": [dict(BASE["devices"][0])]}  # type: ignore[index]
    for key, value in changes.items():
        if key.startswith("dev_"):
            doc["devices"][0][key[4:]] = value
        else:
            doc[key] = value
    return doc


@pytest.mark.parametrize(("doc", "version"), [
    (BASE, "0.3.0"),
    (_with(containerEdits={"mounts": [{"hostPath": "/a", "containerPath": "/a", "type": "bind"}]}), "0.4.0"),
    (_with(containerEdits={"mounts": [{"hostPath": "/a", "containerPath": "/a"}]}), "0.3.0"),
    (_with(dev_name="0"), "0.5.0"),
    (_with(containerEdits={"deviceNodes": [{"path": "/dev/x", "hostPath": "/dev/y"}]}), "0.5.0"),
    (_with(dev_containerEdits={"deviceNodes": [{"path": "/dev/x", "hostPath": "/dev/y"}]}), "0.5.0"),
    (_with(annotations={"a": "b"}), "0.6.0"),
    (_with(dev_annotations={"a": "b"}), "0.6.0"),
    (_with(kind="vendor.com/gpu.mig"), "0.6.0"),
    (_with(kind="vendor.com/gpu", annotations={}), "0.3.0"),
    (_with(containerEdits={"additionalGids": [44]}), "0.7.0"),
    (_with(dev_containerEdits={"intelRdt": {"closID": "x"}}), "0.7.0"),
    (_with(containerEdits={"netDevices": [{"hostInterfaceName": "eth1", "name": "net1"}]}), "1.1.0"),
    (_with(dev_containerEdits={"intelRdt": {"enableMonitoring": True}}), "1.1.0"),
    (_with(dev_name="0", annotations={"a": "b"}, containerEdits={"additionalGids": [1]}), "0.7.0"),
])
def test_minimum_cdi_version_rules(doc: dict, version: str) -> None:
    assert minimum_cdi_version(doc) == version


# -- names -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("vendor", ["nvidia.com", "k8s.gpu.dra-bridge.io", "a", "x_y"])
def test_valid_vendors(vendor: str) -> None:
    assert validate_vendor(vendor) == vendor


@pytest.mark.parametrize("vendor", ["", "1vendor", "vendor-", "ven dor", "vendor/x", "-a"])
def test_invalid_vendors_are_rejected(vendor: str) -> None:
    with pytest.raises(CdiNameError, match="invalid CDI vendor"):
        validate_vendor(vendor)


@pytest.mark.parametrize("name", ["", "-gpu", "gpu-", "gpu 0", "gpu/0", "gpü", "a=b"])
def test_invalid_device_names_are_rejected(name: str) -> None:
    with pytest.raises(CdiNameError, match="invalid CDI device name"):
        validate_device_name(name)


def test_device_names_may_contain_colons_and_start_with_digits() -> None:
    assert validate_device_name("0") == "0"
    assert validate_device_name("gpu:0.mig-1g_10gb") == "gpu:0.mig-1g_10gb"


def test_class_length_is_limited() -> None:
    validate_class("c" * 63)
    with pytest.raises(CdiNameError):
        validate_class("c" * 64)


@pytest.mark.parametrize("bad", ["nvidia.com", "nvidia.com/gpu/x", "/gpu", "nvidia.com/"])
def test_qualified_names_need_a_vendor_and_a_class(bad: str) -> None:
    with pytest.raises(CdiNameError):
        qualified_name(bad, "0")


def test_parse_qualified_name_round_trips() -> None:
    assert parse_qualified_name("nvidia.com/gpu=all") == ("nvidia.com", "gpu", "all")
    with pytest.raises(CdiNameError, match="expected"):
        parse_qualified_name("nvidia.com/gpu")
