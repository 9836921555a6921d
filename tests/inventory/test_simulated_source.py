"""Simulated GPUs: specs, deterministic identity, topology, the --devices option and injected health faults."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from bridge.inventory import InventoryError, SimulatedSource, parse_devices_option
from bridge.inventory.catalog import DGX1_HYBRID_CUBE_MESH, lookup, model_names
from bridge.inventory.simulated import devices_from_spec, parse_spec

UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def test_an_h100_spec_describes_eight_real_h100s() -> None:
    devs = devices_from_spec("8xH100-80GB", "node-a")
    assert len(devs) == 8
    d = devs[0]
    assert d.product_name == "NVIDIA H100 80GB HBM3"
    assert d.memory_bytes == 81559 * 1024 * 1024
    assert (d.compute_capability, d.architecture) == ("9.0", "Hopper")
    assert d.mig_capable and not d.mig_enabled
    assert [x.index for x in devs] == [x.minor for x in devs] == list(range(8))
    assert devs[3].device_node == "/dev/nvidia3"


@pytest.mark.parametrize(("name", "cc", "arch"), [
    ("A100-40GB", "8.0", "Ampere"), ("A100-80GB", "8.0", "Ampere"), ("H200-141GB", "9.0", "Hopper"),
    ("L4", "8.9", "Ada Lovelace"), ("L40S", "8.9", "Ada Lovelace"), ("T4", "7.5", "Turing"),
    ("B200", "10.0", "Blackwell"), ("V100-32GB", "7.0", "Volta"),
])
def test_catalog_models_carry_their_real_compute_capability_and_architecture(name: str, cc: str, arch: str) -> None:
    model = lookup(name)
    assert model is not None
    assert (model.compute_capability, model.architecture) == (cc, arch)


def test_uuids_are_nvidia_formatted_deterministic_and_distinct_per_node() -> None:
    a1 = devices_from_spec("4xA100-40GB", "node-a")
    a2 = devices_from_spec("4xA100-40GB", "node-a")
    b = devices_from_spec("4xA100-40GB", "node-b")
    assert [d.uuid for d in a1] == [d.uuid for d in a2]
    assert all(UUID_RE.match(d.uuid) for d in a1)
    assert len({d.uuid for d in a1} | {d.uuid for d in b}) == 8


def test_mixed_spec_keeps_order_and_only_sxm_parts_get_nvlink() -> None:
    devs = devices_from_spec("4xA100-40GB,2xL4", "n")
    assert [d.product_name for d in devs] == ["NVIDIA A100-SXM4-40GB"] * 4 + ["NVIDIA L4"] * 2
    assert devs[0].nvlink_links_to(devs[3].uuid) == 12
    assert devs[4].nvlink_peers == devs[5].nvlink_peers == ()
    assert devs[0].nvlink_links_to(devs[4].uuid) == 0


def test_numa_first_half_on_node_zero_second_half_on_node_one() -> None:
    assert [d.numa_node for d in devices_from_spec("8xH100-80GB", "n")] == [0] * 4 + [1] * 4
    assert [d.numa_node for d in devices_from_spec("L4", "n")] == [0]


def test_pci_bus_ids_are_unique_and_look_like_a_dgx() -> None:
    devs = devices_from_spec("16xH100-80GB", "n")
    assert devs[0].pci_bus_id == "0000:18:00.0"
    assert devs[8].pci_bus_id == "0001:18:00.0"
    assert len({d.pci_bus_id for d in devs}) == 16


def test_nvswitch_boards_are_groups_of_eight_fully_connected() -> None:
    devs = devices_from_spec("16xH100-80GB", "n")
    assert len(devs[0].nvlink_peers) == 7
    assert all(n == 18 for _, n in devs[0].nvlink_peers)
    assert devs[0].nvlink_links_to(devs[8].uuid) == 0


def test_v100_boards_use_the_dgx1_hybrid_cube_mesh() -> None:
    devs = devices_from_spec("8xV100-32GB", "n")
    for d in devs:
        assert sum(n for _, n in d.nvlink_peers) == 6  # every V100 SXM2 has six links
        assert len(d.nvlink_peers) == 4
    assert devs[0].nvlink_links_to(devs[3].uuid) == 2
    assert devs[0].nvlink_links_to(devs[1].uuid) == 1
    assert devs[0].nvlink_links_to(devs[5].uuid) == 0
    assert len(DGX1_HYBRID_CUBE_MESH) == 16


def test_nvlink_peers_are_symmetric() -> None:
    for spec in ("8xV100-32GB", "8xB200", "3xA100-80GB,1xT4"):
        devs = devices_from_spec(spec, "n")
        by_uuid = {d.uuid: d for d in devs}
        for d in devs:
            for peer, n in d.nvlink_peers:
                assert by_uuid[peer].nvlink_links_to(d.uuid) == n


@pytest.mark.parametrize(("spec", "needle"), [
    ("", "empty"),
    ("8xH999", "unknown GPU model 'H999'"),
    ("0xL4", "at least 1"),
    ("8 by H100", "invalid simulated device spec item"),
    ("2000xT4", "at most 1024"),
])
def test_bad_specs_say_what_is_wrong_and_show_a_valid_example(spec: str, needle: str) -> None:
    with pytest.raises(InventoryError) as err:
        parse_spec(spec)
    assert needle in str(err.value)
    if spec not in ("0xL4", "2000xT4"):
        assert "8xH100-80GB" in str(err.value)


def test_unknown_model_error_lists_the_known_models() -> None:
    with pytest.raises(InventoryError) as err:
        parse_spec("2xRTX9090")
    for name in model_names():
        assert name in str(err.value)


def test_spec_model_names_are_case_insensitive_and_count_defaults_to_one() -> None:
    assert [m.key for m in parse_spec("2xh100-80gb, L4")] == ["H100-80GB", "H100-80GB", "L4"]


def test_devices_option_builds_a_simulated_source_from_a_spec() -> None:
    src = parse_devices_option("simulated:2xL4", "node-x")
    assert src.name == "simulated:2xL4"
    assert [d.product_name for d in src.devices()] == ["NVIDIA L4", "NVIDIA L4"]


def test_devices_option_reads_a_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text("gpus:\n  - model: T4\n    count: 2\n")
    src = parse_devices_option(f"simulated:{path}", "node-x")
    assert [d.product_name for d in src.devices()] == ["Tesla T4", "Tesla T4"]


@pytest.mark.parametrize("value", ["gpu", "simulated", "simulated:", "nvml:0", "fake:8xH100-80GB"])
def test_devices_option_rejects_unknown_forms_with_examples(value: str) -> None:
    with pytest.raises(InventoryError) as err:
        parse_devices_option(value, "n")
    assert "simulated:" in str(err.value)


def test_simulated_source_needs_a_node_name() -> None:
    with pytest.raises(InventoryError, match="node name"):
        parse_devices_option("simulated:1xL4", "")


# -- health ---------------------------------------------------------------------------------------------------

def _drain(src: SimulatedSource, count: int) -> list:
    stop = threading.Event()
    out = []
    for ev in src.health_events(stop):
        out.append(ev)
        if len(out) == count:
            stop.set()
    return out


def test_a_critical_xid_marks_the_device_unhealthy_with_the_xid_in_the_event() -> None:
    src = SimulatedSource.from_spec("2xH100-80GB", "n")
    uuid = src.devices()[1].uuid
    assert src.inject_xid(uuid, 79) is True
    (ev,) = _drain(src, 1)
    assert (ev.uuid, ev.healthy, ev.xid) == (uuid, False, 79)
    assert "XID 79" in ev.reason and "fallen off the bus" in ev.reason
    assert not src.is_healthy(uuid)
    assert src.is_healthy(src.devices()[0].uuid)


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 68, 109])
def test_nvidias_default_ignored_xids_are_logged_but_never_make_a_device_unhealthy(
        xid: int, caplog: pytest.LogCaptureFixture) -> None:
    src = SimulatedSource.from_spec("1xH100-80GB", "n")
    uuid = src.devices()[0].uuid
    with caplog.at_level("INFO"):
        assert src.inject_xid(uuid, xid) is False
    assert src.is_healthy(uuid)
    assert f"XID {xid}" in caplog.text
    src.set_unhealthy(uuid, "marker")  # the only event queued must be this one
    (ev,) = _drain(src, 1)
    assert ev.reason == "marker"


def test_operator_additions_extend_the_ignore_list() -> None:
    src = SimulatedSource.from_spec("1xL4", "n", additional_ignored_xids=[94])
    uuid = src.devices()[0].uuid
    assert src.inject_xid(uuid, 94) is False
    assert src.is_healthy(uuid)
    assert 13 in src.ignored_xids and 94 in src.ignored_xids


def test_set_healthy_brings_a_device_back() -> None:
    src = SimulatedSource.from_spec("1xL4", "n")
    uuid = src.devices()[0].uuid
    src.inject_xid(uuid, 48)
    src.set_healthy(uuid)
    events = _drain(src, 2)
    assert [e.healthy for e in events] == [False, True]
    assert src.is_healthy(uuid)


def test_faults_on_unknown_devices_are_refused() -> None:
    src = SimulatedSource.from_spec("1xL4", "n")
    with pytest.raises(InventoryError, match="unknown device 'GPU-nope'"):
        src.inject_xid("GPU-nope", 79)


def test_health_events_returns_promptly_once_stop_is_set() -> None:
    src = SimulatedSource.from_spec("1xL4", "n")
    stop = threading.Event()
    done = threading.Event()

    def consume() -> None:
        for _ in src.health_events(stop):
            pass
        done.set()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    stop.set()
    assert done.wait(10), "health_events did not return after stop was set"
