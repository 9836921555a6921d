"""NVLink islands and topology groups: what the node daemon publishes and both its device choice and
`bridge controller` group GPUs by."""

from __future__ import annotations

import random

from bridge.inventory import DeviceID, devices_from_spec
from bridge.inventory.model import GpuDevice, nvlink_islands, topology_group, topology_groups
from bridge.inventory.nvml import NvmlSource
from bridge.inventory.simulated_yaml import devices_from_document
from fake_pynvml import FakeGpu, FakeNvml, hgx_h100


def islands_by_index(devices: tuple[GpuDevice, ...]) -> dict[int, int]:
    islands = nvlink_islands(devices)
    return {g.index: islands[g.uuid] for g in devices if g.uuid in islands}


def test_an_hgx_board_is_one_island_and_two_boards_are_two() -> None:
    assert islands_by_index(devices_from_spec("8xH100-80GB", "n")) == {i: 0 for i in range(8)}
    assert islands_by_index(devices_from_spec("16xH100-80GB", "n")) == {i: i // 8 for i in range(16)}


def test_the_dgx1_hybrid_cube_mesh_is_one_island_though_some_pairs_have_no_link() -> None:
    devs = devices_from_spec("8xV100-32GB", "n")
    assert devs[0].nvlink_links_to(devs[5].uuid) == 0
    assert islands_by_index(devs) == {i: 0 for i in range(8)}


def test_gpus_without_an_nvlink_peer_are_in_no_island_and_group_by_numa() -> None:
    devs = devices_from_spec("4xA100-40GB,2xL4", "n")
    assert islands_by_index(devs) == {0: 0, 1: 0, 2: 0, 3: 0}
    assert [topology_groups(devs)[g.uuid] for g in devs] == ["nvlink-0"] * 4 + ["numa-1", "numa-1"]


def test_islands_are_numbered_by_their_lowest_index_whatever_the_order_given() -> None:
    doc = {"nvlink": "none", "gpus": [
        {"model": "H100-80GB", "nvlinkPeers": {5: 4}},  # 0 -- 5
        {"model": "H100-80GB"},                         # 1: alone
        {"model": "H100-80GB", "nvlinkPeers": {3: 4}},  # 2 -- 3 -- 4 (listed at one end only: made symmetric)
        {"model": "H100-80GB", "nvlinkPeers": {4: 2}},
        {"model": "H100-80GB"},
        {"model": "H100-80GB"},
    ]}
    devs = devices_from_document(doc, "n")
    expected = {0: 0, 5: 0, 2: 1, 3: 1, 4: 1}
    assert islands_by_index(devs) == expected
    shuffled = list(devs)
    random.Random(7).shuffle(shuffled)
    assert islands_by_index(tuple(shuffled)) == expected


def test_a_link_listed_at_one_end_counts_and_peers_outside_the_inventory_do_not() -> None:
    base = devices_from_spec("3xL4", "n")
    a, b, c = base
    one_sided = (GpuDevice(**{**a.__dict__, "nvlink_peers": ((b.uuid, 2), (DeviceID("GPU-elsewhere"), 4))}), b,
                 GpuDevice(**{**c.__dict__, "nvlink_peers": ((DeviceID("GPU-elsewhere"), 4),)}))
    assert islands_by_index(one_sided) == {0: 0, 1: 0}


def test_nvml_discovered_boards_give_the_same_islands() -> None:
    assert islands_by_index(NvmlSource(nvml_module=FakeNvml(hgx_h100())).devices()) == {i: 0 for i in range(8)}
    a = FakeGpu(uuid="GPU-a", bus_id="00000000:18:00.0", links=[("00000000:2A:00.0", 0)] * 2)
    b = FakeGpu(uuid="GPU-b", bus_id="00000000:2A:00.0", minor=1, links=[("00000000:18:00.0", 0)] * 2)
    c = FakeGpu(uuid="GPU-c", bus_id="00000000:3A:00.0", minor=2)
    assert islands_by_index(NvmlSource(nvml_module=FakeNvml([a, b, c])).devices()) == {0: 0, 1: 0}


def test_the_group_is_the_island_else_the_numa_node_else_unknown() -> None:
    assert topology_group(2, 1) == "nvlink-2"
    assert topology_group(None, 1) == "numa-1"
    assert topology_group(None, None) == ""
