"""The topology contract between the node daemon and `bridge controller`, through the real documents.

1. The controller reads the NVLink islands (and NUMA nodes) the daemon publishes in its split status
   (bridge/ledger/status.py writes, bridge/controller/nodestatus.py reads).
2. The island a target change counts on is the one whose GPUs the daemon moves: the daemon's status goes through
   the controller's adapter and core, the count it writes goes back through the daemon's ledger (bridge/ledger/
   choice.py picks the devices), and the devices that start moving are that island's.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

import pytest

from bridge.controller.decide import decide
from bridge.controller.model import FreeGroup, PendingPod, Policy
from bridge.controller.nodestatus import SPLIT_KEY, STATUS_KEY, decode_status, node_view
from bridge.inventory import devices_from_spec
from bridge.inventory.model import GpuDevice, nvlink_islands
from bridge.inventory.simulated_yaml import devices_from_document
from bridge.ledger import Facts, Holder, HolderKind, Ledger, Observations, Side, parse_split, reconcile, requested_split
from bridge.ledger.status import MAX_BYTES, build_status

POLICY = Policy(max_moves_per_minute=1000, cooldown_s=60)
# Two NVLink quads (gpu-0..3: island 0, gpu-4..7: island 1) on one NUMA node: only the islands tell them apart.
QUADS = devices_from_document({"nvlink": "none", "gpus": [
    {"model": "H100-80GB", "numa": 0, "nvlinkPeers": {j: 18 for j in range(4 * (i // 4), 4 * (i // 4) + 4) if j != i}}
    for i in range(8)]}, "gpu-node-1")


def published(devices: tuple[GpuDevice, ...], sides: str, held: Collection[int] = (),
              many_holders: int = 1) -> tuple[Ledger, Facts, dict[str, Any]]:
    """The Node as the daemon leaves it: `sides` one letter per GPU (L legacy, D DRA), `held` GPUs in use on their
    side; the Node's target is the DRA devices by name, converged, and the annotation is the daemon's document."""
    side_of = {"L": Side.LEGACY, "D": Side.DRA}
    led = Ledger(devices, {g.uuid: side_of[c] for g, c in zip(devices, sides)})
    facts = Facts.build([(devices[i].uuid, Holder(HolderKind.CONTAINER, f"pod ns/p{i}-{k} container main")
                          if sides[i] == "L" else Holder(HolderKind.PREPARED, f"claim ns/c{i}-{k} (pod ns/p{i}-{k})"))
                         for i in held for k in range(many_holders)])
    target = ",".join(f"gpu-{i}" for i, c in enumerate(sides) if c == "D") or "0"
    node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "spec": {}, "status": {},
                            "metadata": {"name": "gpu-node-1", "annotations": {SPLIT_KEY: target}}}
    d = reconcile(led, parse_split(target), facts, Observations(now=0, node_allocatable=sides.count("L"),
                                                                node_changed_at=-10))
    assert d.state == "converged"
    status = build_status(node="gpu-node-1", request=requested_split(node), decision=d, facts=facts, refusals=(),
                          updated="2025-06-01T12:00:00Z")
    node["metadata"]["annotations"][STATUS_KEY] = status.encode()
    return d.ledger, facts, node


# ---- 1. the controller reads the islands the daemon writes ----------------------------------------------------------

def test_the_controller_reads_the_nvlink_islands_the_daemon_publishes() -> None:
    two_boards = devices_from_spec("16xH100-80GB", "gpu-node-1")  # two HGX boards: islands 0 and 1
    _, _, node = published(two_boards, "L" * 12 + "D" * 4, held={0, 1, 12})
    doc = json.loads(node["metadata"]["annotations"][STATUS_KEY])
    assert [d["nvlink"] for d in doc["devices"]] == [0] * 8 + [1] * 8
    assert {d.group for d in decode_status(node["metadata"]["annotations"][STATUS_KEY]).devices} == {
        "nvlink-0", "nvlink-1"}
    assert node_view(node).groups == (FreeGroup("nvlink-1", legacy=4, dra=3), FreeGroup("nvlink-0", legacy=6))


def test_gpus_without_an_island_are_grouped_by_their_numa_node() -> None:
    mixed = devices_from_spec("4xA100-40GB,2xL4", "gpu-node-1")  # an A100 board (NUMA 0, 0, 0, 1) and two L4s (1)
    _, _, node = published(mixed, "LLLLLD")
    doc = json.loads(node["metadata"]["annotations"][STATUS_KEY])
    assert [d.get("nvlink") for d in doc["devices"]] == [0, 0, 0, 0, None, None]
    assert node_view(node).groups == (FreeGroup("nvlink-0", legacy=4), FreeGroup("numa-1", legacy=1, dra=1))


@pytest.mark.parametrize("bad", ['"0"', "-1", "true", "1.5", "null"])
def test_an_unreadable_island_is_read_as_none_and_the_numa_node_groups_the_gpu(bad: str) -> None:
    _, _, node = published(devices_from_spec("2xH100-80GB", "gpu-node-1"), "LL")
    text = node["metadata"]["annotations"][STATUS_KEY].replace('"nvlink":0', f'"nvlink":{bad}')
    node["metadata"]["annotations"][STATUS_KEY] = text
    assert {d.group for d in decode_status(text).devices} == {"numa-0", "numa-1"}
    assert node_view(node).frozen == ""


def test_the_document_with_islands_stays_within_its_size_bound() -> None:
    _, _, node = published(devices_from_spec("16xH100-80GB", "gpu-node-1"), "L" * 16, held=set(range(16)),
                           many_holders=20)
    text = node["metadata"]["annotations"][STATUS_KEY]
    assert len(text.encode()) <= MAX_BYTES and '"nvlink":1' in text


# ---- 2. the island counted on is the island that moves ---------------------------------------------------------

def moved_by_daemon(led: Ledger, facts: Facts, target: str) -> set[int]:
    """The GPUs the daemon starts moving for `target` (its first reconcile: free ones are withdrawn at once)."""
    d = reconcile(led, parse_split(target), facts, Observations(now=1, node_allocatable=None))
    return {i for i, g in enumerate(led.devices) if g.uuid in d.ledger.moves}


def island_members(name: str) -> set[int]:
    islands = nvlink_islands(QUADS)
    return {i for i, g in enumerate(QUADS) if f"nvlink-{islands[g.uuid]}" == name}


@pytest.mark.parametrize(("sides", "held", "api", "gpus", "island", "moved"), [
    # The island with room, not the highest indexes: island 1 has only gpu-6, gpu-7 free.
    ("LLLLLLLL", {4, 5}, "dra", 4, "nvlink-0", {0, 1, 2, 3}),
    # The island that already holds the pod's free DRA GPU (gpu-3), though island 1's two free GPUs fit tighter.
    ("LLLDLLLL", {4, 5}, "dra", 3, "nvlink-0", {1, 2}),
    # Legacy demand takes back the tightest DRA island's free GPUs; island 0 stays whole on DRA.
    ("DDDDDDDD", {4, 5}, "legacy", 2, "nvlink-1", {6, 7}),
    # Two equal islands: both sides break the tie the same way (joining DRA, the highest-numbered).
    ("LLLLLLLL", set(), "dra", 4, "nvlink-1", {4, 5, 6, 7}),
], ids=["island-with-room", "island-of-the-free-dra-gpus", "back-to-legacy", "tie"])
def test_the_island_the_controller_counted_on_is_the_one_the_daemon_moves(
        sides: str, held: set[int], api: str, gpus: int, island: str, moved: set[int]) -> None:
    led, facts, node = published(QUADS, sides, held)
    d = decide([node_view(node)], [PendingPod("team-a/p", api, gpus, "team-a")], POLICY)  # type: ignore[arg-type]
    (change,) = d.changes
    assert change.groups == (island,) and f"from NVLink island {island[-1]}" in change.reason
    assert moved_by_daemon(led, facts, change.target) == moved
    assert moved <= island_members(island) and len(moved) == change.moves


def test_moves_no_island_holds_promise_no_island() -> None:
    # 6 GPUs cannot come from one quad: the change names no island, and the daemon picks by affinity and index.
    led, facts, node = published(QUADS, "LLLLLLLL")
    (change,) = decide([node_view(node)], [PendingPod("team-a/p", "dra", 6, "team-a")], POLICY).changes
    assert change.groups == () and "island" not in change.reason
    assert moved_by_daemon(led, facts, change.target) == {2, 3, 4, 5, 6, 7}
