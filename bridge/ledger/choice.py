"""Which devices serve DRA when the target is a count (`N`, `all`, `0`): pure, deterministic.

Rules, in order of priority:
1. **Fewest moves.** Devices already on the DRA side (or on their way there) stay; only the difference moves.
2. **Cheap changes first.** A move still in flight is cancelled before a settled device is moved (it was never
   offered on its target side, so returning it to where it came from costs nothing and is always safe).
3. **Free devices first.** A device held on its current side (or whose side's holders are unknown) cannot move
   now; when a free device can take its place, the free one is chosen, so a target converges at once wherever the
   node has room. Only when no free device is left is a busy one chosen, and it moves when it frees up.
4. **Topology.** Devices join the DRA side in order of affinity to the devices already there: NVLink links first
   (summed over the DRA set), then a shared NUMA node; devices leave it in the opposite order. So the DRA block
   stays one NVLink/NUMA island where the node allows it, and so does the legacy block.
5. **Highest index first** (joining; lowest first when leaving) breaks ties, so `N=2` on an idle 8-GPU node is
   `gpu-6, gpu-7` (the low indexes, which device-plugin allocations fill first, stay legacy).

Each step re-evaluates affinity against the set built so far (greedy), which is exact for the common layouts
(one or two NUMA nodes, full or quad NVLink meshes) and cheap (N x devices) for any node.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from bridge.inventory.model import DeviceID, GpuDevice


def _affinity(gpu: GpuDevice, group: Collection[GpuDevice]) -> tuple[int, int]:
    links = sum(gpu.nvlink_links_to(g.uuid) for g in group if g.uuid != gpu.uuid)
    numa = sum(1 for g in group if g.uuid != gpu.uuid and gpu.numa_node is not None and g.numa_node == gpu.numa_node)
    return links, numa


def choose_dra(devices: Sequence[GpuDevice], count: int, *, on_dra: Collection[DeviceID],
               busy: Collection[DeviceID] = (), in_flight: Collection[DeviceID] = ()) -> frozenset[DeviceID]:
    """The `count` devices that should serve DRA.

    `on_dra`: devices on the DRA side now or moving there; `busy`: devices that cannot leave their current side now;
    `in_flight`: devices in a move (either direction). Raises ValueError for a count outside 0..len(devices)."""
    if not 0 <= count <= len(devices):
        raise ValueError(f"cannot put {count} of {len(devices)} devices on the DRA side")
    by_id = {g.uuid: g for g in devices}
    chosen = [by_id[u] for u in on_dra if u in by_id]
    while len(chosen) > count:  # leave: cancel in-flight first, then free, least attached, lowest index
        def leave_key(g: GpuDevice) -> tuple[bool, bool, tuple[int, int], int]:
            rest = [c for c in chosen if c.uuid != g.uuid]
            return (g.uuid not in in_flight, g.uuid in busy, _affinity(g, rest), g.index)

        chosen.remove(min(chosen, key=leave_key))
    others = [g for g in devices if g.uuid not in {c.uuid for c in chosen}]
    while len(chosen) < count:  # join: cancel in-flight first, then free, most attached, highest index
        def join_key(g: GpuDevice) -> tuple[bool, bool, tuple[int, int], int]:
            return (g.uuid in in_flight, g.uuid not in busy, _affinity(g, chosen), g.index)

        pick = max(others, key=join_key)
        others.remove(pick)
        chosen.append(pick)
    return frozenset(g.uuid for g in chosen)


__all__ = ["choose_dra"]
