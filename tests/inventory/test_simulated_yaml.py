"""Simulated devices from a YAML file: every field honoured, every mistake named."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.inventory import InventoryError
from bridge.inventory.simulated import devices_from_spec
from bridge.inventory.simulated_yaml import devices_from_document, load_yaml_devices

U0 = "GPU-8c5a8c24-6f27-4d5b-9c0d-3a0b8e5d1f00"
U1 = "GPU-8c5a8c24-6f27-4d5b-9c0d-3a0b8e5d1f01"


def test_model_and_count_match_the_equivalent_spec() -> None:
    doc = {"gpus": [{"model": "A100-80GB", "count": 4}, {"model": "L4", "count": 2}]}
    assert devices_from_document(doc, "n") == devices_from_spec("4xA100-80GB,2xL4", "n")


def test_every_field_of_a_hand_described_gpu_is_honoured(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(f"""
driverVersion: "560.35.03"
cudaVersion: "12.6"
gpus:
  - product: "NVIDIA H100 80GB HBM3"
    memory: 81559Mi
    computeCapability: "9.0"
    architecture: Hopper
    uuid: {U0}
    numa: 1
    pciBusID: "0000:9A:00.0"
    mig: {{capable: true, enabled: true}}
    nvlinkPeers: {{1: 18}}
  - model: H100-80GB
    uuid: {U1}
    numa: null
""")
    a, b = load_yaml_devices(path, "n")
    assert (a.uuid, a.product_name, a.memory_bytes) == (U0, "NVIDIA H100 80GB HBM3", 81559 * 1024 * 1024)
    assert (a.numa_node, a.pci_bus_id, a.mig_capable, a.mig_enabled) == (1, "0000:9a:00.0", True, True)
    assert (a.driver_version, a.cuda_version) == ("560.35.03", "12.6")
    assert a.nvlink_links_to(U1) == 18 and b.nvlink_links_to(U0) == 18  # made symmetric
    assert b.numa_node is None


def test_peers_can_be_named_by_uuid() -> None:
    doc = {"gpus": [{"model": "L4", "uuid": U0, "nvlinkPeers": {U1: 2}}, {"model": "L4", "uuid": U1}]}
    a, b = devices_from_document(doc, "n")
    assert b.nvlink_links_to(U0) == 2


def test_nvlink_none_turns_off_automatic_boards() -> None:
    devs = devices_from_document({"nvlink": "none", "gpus": [{"model": "H100-80GB", "count": 2}]}, "n")
    assert all(d.nvlink_peers == () for d in devs)


@pytest.mark.parametrize(("doc", "needle"), [
    ([], "non-empty 'gpus' list"),
    ({"gpus": []}, "non-empty 'gpus' list"),
    ({"gpus": [{"model": "L4"}], "extra": 1}, "unknown key(s) extra"),
    ({"gpus": [{"model": "L4", "colour": "red"}]}, "gpus[0]: unknown key(s) colour"),
    ({"gpus": [{"model": "H999"}]}, "unknown model 'H999'"),
    ({"gpus": [{"product": "X"}]}, "missing: memory, computeCapability, architecture"),
    ({"gpus": [{"model": "L4", "memory": "lots"}]}, "invalid memory 'lots'"),
    ({"gpus": [{"model": "L4", "computeCapability": 9}]}, "invalid computeCapability 9"),
    ({"gpus": [{"model": "L4", "uuid": "GPU-123"}]}, "invalid uuid 'GPU-123'"),
    ({"gpus": [{"model": "L4", "pciBusID": "18:00"}]}, "invalid pciBusID '18:00'"),
    ({"gpus": [{"model": "L4", "numa": -1}]}, "numa must be"),
    ({"gpus": [{"model": "L4", "mig": {"enabled": True}}]}, "not MIG-capable"),
    ({"gpus": [{"model": "L4", "count": 0}]}, "count must be a positive integer"),
    ({"gpus": [{"model": "L4", "count": 2, "uuid": U0}]}, "count > 1 cannot be combined"),
    ({"gpus": [{"model": "L4", "uuid": U0}, {"model": "L4", "uuid": U0}]}, "duplicate uuid"),
    ({"gpus": [{"model": "L4", "nvlinkPeers": {5: 1}}]}, "unknown GPU 5"),
    ({"gpus": [{"model": "L4", "nvlinkPeers": {0: 1}}]}, "its own NVLink peer"),
    ({"gpus": [{"model": "L4", "nvlinkPeers": {1: 1}}, {"model": "L4", "nvlinkPeers": {0: 2}}]},
     "different link counts"),
    ({"gpus": [{"model": "L4"}], "cudaVersion": 12.4}, "quote versions"),
    ({"gpus": [{"model": "L4"}], "nvlink": "maybe"}, "nvlink must be 'auto' or 'none'"),
])
def test_invalid_documents_are_rejected_with_the_reason(doc: object, needle: str) -> None:
    with pytest.raises(InventoryError) as err:
        devices_from_document(doc, "n", source="devs.yaml")
    assert needle in str(err.value)
    assert "devs.yaml" in str(err.value)


def test_unreadable_and_malformed_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="cannot read simulated device file"):
        load_yaml_devices(tmp_path / "missing.yaml", "n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: [model: L4\n")
    with pytest.raises(InventoryError, match="bad.yaml is not valid YAML"):
        load_yaml_devices(bad, "n")
