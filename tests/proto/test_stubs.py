"""The committed gRPC stubs speak the kubelet's exact wire contracts and match proto/."""

from __future__ import annotations

import filecmp
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf.descriptor import FieldDescriptor

ROOT = Path(__file__).resolve().parents[2]

MODULES = {
    "deviceplugin": "bridge._proto.deviceplugin.v1beta1.deviceplugin_pb2",
    "dra_v1": "bridge._proto.dra.v1.dra_pb2",
    "dra_v1beta1": "bridge._proto.dra.v1beta1.dra_pb2",
    "health_v1alpha1": "bridge._proto.drahealth.v1alpha1.drahealth_pb2",
    "health_v1": "bridge._proto.drahealth.v1.drahealth_pb2",
    "registration": "bridge._proto.pluginregistration.v1.pluginregistration_pb2",
    "podresources": "bridge._proto.podresources.v1.podresources_pb2",
}

# Every (wire path, server-streaming?) the kubelet and the bridge use, from the k8s.io/kubelet pkg/apis protos.
WIRE_PATHS = [
    ("/v1beta1.Registration/Register", False),
    ("/v1beta1.DevicePlugin/GetDevicePluginOptions", False),
    ("/v1beta1.DevicePlugin/ListAndWatch", True),
    ("/v1beta1.DevicePlugin/GetPreferredAllocation", False),
    ("/v1beta1.DevicePlugin/Allocate", False),
    ("/v1beta1.DevicePlugin/PreStartContainer", False),
    ("/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources", False),
    ("/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources", False),
    ("/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources", False),
    ("/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources", False),
    ("/v1alpha1.DRAResourceHealth/NodeWatchResources", True),
    ("/v1.DRAResourceHealth/NodeWatchResources", True),
    ("/pluginregistration.Registration/GetInfo", False),
    ("/pluginregistration.Registration/NotifyRegistrationStatus", False),
    ("/v1.PodResourcesLister/List", False),
    ("/v1.PodResourcesLister/GetAllocatableResources", False),
    ("/v1.PodResourcesLister/Get", False),
]


def _all_methods() -> dict[str, bool]:
    found: dict[str, bool] = {}
    for module_name in MODULES.values():
        module = importlib.import_module(module_name)
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                found[f"/{service.full_name}/{method.name}"] = method.server_streaming
                assert not method.client_streaming, "no kubelet API uses client streaming"
    return found


@pytest.mark.parametrize(("path", "streaming"), WIRE_PATHS)
def test_every_kubelet_wire_path_exists_with_its_streaming_mode(path: str, streaming: bool) -> None:
    methods = _all_methods()
    assert path in methods, f"{path} missing from the generated descriptors"
    assert methods[path] is streaming


def test_no_method_exists_that_the_contracts_do_not_name() -> None:
    assert set(_all_methods()) == {p for p, _ in WIRE_PATHS}


def _field(module_key: str, message: str, name: str) -> FieldDescriptor:
    module = importlib.import_module(MODULES[module_key])
    return module.DESCRIPTOR.message_types_by_name[message].fields_by_name[name]


@pytest.mark.parametrize(
    ("module_key", "message", "field", "number", "label_repeated"),
    [
        ("deviceplugin", "Device", "ID", 1, False),
        ("deviceplugin", "NUMANode", "ID", 1, False),
        ("deviceplugin", "ContainerAllocateRequest", "devices_ids", 1, True),
        ("deviceplugin", "PreStartContainerRequest", "devices_ids", 1, True),
        ("deviceplugin", "ContainerPreferredAllocationRequest", "available_deviceIDs", 1, True),
        ("deviceplugin", "ContainerPreferredAllocationRequest", "must_include_deviceIDs", 2, True),
        ("deviceplugin", "ContainerPreferredAllocationRequest", "allocation_size", 3, False),
        ("deviceplugin", "ContainerPreferredAllocationResponse", "deviceIDs", 1, True),
        ("deviceplugin", "ContainerAllocateResponse", "cdi_devices", 5, True),
        ("deviceplugin", "RegisterRequest", "options", 4, False),
        ("dra_v1", "Device", "cdi_device_ids", 4, True),
        ("dra_v1", "Claim", "name", 3, False),
        ("health_v1alpha1", "DeviceHealth", "health_check_timeout_seconds", 4, False),
        ("health_v1alpha1", "DeviceHealth", "message", 5, False),
        ("registration", "PluginInfo", "supported_versions", 4, True),
        ("podresources", "ContainerResources", "dynamic_resources", 5, True),
        ("podresources", "ClaimResource", "device_name", 4, False),
    ],
)
def test_field_names_and_numbers_match_upstream(
    module_key: str, message: str, field: str, number: int, label_repeated: bool
) -> None:
    descriptor = _field(module_key, message, field)
    assert descriptor.number == number
    assert descriptor.is_repeated is label_repeated


def test_share_id_is_an_optional_field_5_in_dra_v1_and_absent_in_v1beta1() -> None:
    share_id = _field("dra_v1", "Device", "share_id")
    assert share_id.number == 5 and share_id.has_presence
    v1beta1 = importlib.import_module(MODULES["dra_v1beta1"])
    assert "share_id" not in v1beta1.DESCRIPTOR.message_types_by_name["Device"].fields_by_name


def test_maps_are_keyed_by_claim_uid_strings() -> None:
    for key in ("dra_v1", "dra_v1beta1"):
        for message in ("NodePrepareResourcesResponse", "NodeUnprepareResourcesResponse"):
            claims = _field(key, message, "claims")
            assert claims.message_type.GetOptions().map_entry
            assert claims.message_type.fields_by_name["key"].type == FieldDescriptor.TYPE_STRING


def test_podresources_keeps_the_removed_class_name_number_reserved() -> None:
    module = importlib.import_module(MODULES["podresources"])
    dynamic = module.DESCRIPTOR.message_types_by_name["DynamicResource"]
    assert 1 not in dynamic.fields_by_number


def test_health_enum_values_live_in_package_scope() -> None:
    module = importlib.import_module(MODULES["health_v1alpha1"])
    assert (module.UNKNOWN, module.HEALTHY, module.UNHEALTHY) == (0, 1, 2)


def test_committed_stubs_match_a_fresh_regeneration(tmp_path: Path) -> None:
    out = tmp_path / "_proto"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    committed = ROOT / "bridge" / "_proto"
    generated = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    existing = sorted(p.relative_to(committed) for p in committed.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert generated == existing, "file set differs: run scripts/gen_protos.py"
    drifted = [str(p) for p in generated if not filecmp.cmp(out / p, committed / p, shallow=False)]
    assert not drifted, f"stubs drifted from proto/ (run scripts/gen_protos.py): {drifted}"
