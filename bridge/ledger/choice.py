"""Which devices serve DRA when the target is a count (`N`, `all`, `0`): pure, deterministic.

Rules, in order of priority:
1. **Fewest moves.** Devices already on the DRA side (or on their way there) stay; only the difference moves.
2. **Cheap changes first.** A move still in flight is cancelled before a settled device is moved (it was never
   offered on its target side, so returning it to where it came from costs nothing and is always safe).
3. **Free devices first.** A device held on its current side (or whose side's holders are unknown) cannot move
   now; when a free device can take its place, the free one is chosen, so a target converges at once wherever the
   node has room. Only when no free device is left is a busy one chosen, and it moves when it frees up.
4. **One topology group.** When one topology group (NVLink island, else NUMA node:
   bridge.inventory.model.topology_group) has enough free devices for every free device that moves, they all come
   from it: first a group that also holds every free device of the receiving side (a pod asking for those plus the
   moved ones gets one group), then the tightest (a group whose free devices all move leaves no half behind), then
   `group_order` (NVLink islands before NUMA nodes; joining DRA the highest-numbered group, leaving it the lowest).
   `bridge controller` ranks a node's groups by the same rule from the split status, so the group it counted on
   is the one that moves (bridge/controller/decide.py).
5. **Affinity.** Otherwise, and inside that group, devices join the DRA side in order of affinity to the devices
   already there: NVLink links first (summed over the DRA set), then a shared NUMA node; devices leave it in the
   opposite order. So the DRA block stays one NVLink/NUMA island where the node allows it, and so does the legacy
   block.
6. **Highest index first** (joining; lowest first when leaving) breaks ties, so `N=2` on an idle 8-GPU node is
   `gpu-6, gpu-7` (the low indexes, which device-plugin allocations fill first, stay legacy).

Each step re-evaluates affinity against the set built so far (greedy), which is exact for the common layouts
(one or two NUMA nodes, full or quad NVLink meshes) and cheap (N x devices) for any node.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from bridge.inventory.model import DeviceID, GpuDevice, topology_groups

_KINDS = {"nvlink": 2, "numa": 1}


def group_order(name: str, *, joining_dra: bool) -> tuple[int, int]:
    """Sort key (smallest first) among topology groups that serve a move equally well (rule 4): NVLink islands, then
    NUMA nodes, then unknown; then the highest number when devices join the DRA side (islands are numbered by their
    lowest index, so the high indexes go first), the lowest when they leave it."""
    kind, _, ident = name.partition("-")
    number = int(ident) if ident.isdigit() else 0
    return -_KINDS.get(kind, 0), -number if joining_dra else number


def _affinity(gpu: GpuDevice, group: Collection[GpuDevice]) -> tuple[int, int]:
    links = sum(gpu.nvlink_links_to(g.uuid) for g in group if g.uuid != gpu.uuid)
    numa = sum(1 for g in group if g.uuid != gpu.uuid and gpu.numa_node is not None and g.numa_node == gpu.numa_node)
    return links, numa


def _one_group(giving: Sequence[GpuDevice], k: int, receiving: Sequence[GpuDevice], groups: Mapping[DeviceID, str],
               *, joining_dra: bool) -> str | None:
    """The topology group the `k` free devices of `giving` should move from (rule 4), or None when none holds k."""
    free: dict[str, int] = {}
    for g in giving:
        if groups[g.uuid]:
            free[groups[g.uuid]] = free.get(groups[g.uuid], 0) + 1
    there = {groups[g.uuid] for g in receiving}

    def rank(name: str) -> tuple[int, int, tuple[int, int]]:
        tier = 0 if there <= {name} else 1
        return tier, free[name] - k, group_order(name, joining_dra=joining_dra)

    fits = [name for name, n in free.items() if n >= k]
    return min(fits, key=rank) if fits else None


def choose_dra(devices: Sequence[GpuDevice], count: int, *, on_dra: Collection[DeviceID],
               busy: Collection[DeviceID] = (), in_flight: Collection[DeviceID] = ()) -> frozenset[DeviceID]:
    """The `count` devices that should serve DRA.

    `on_dra`: devices on the DRA side now or moving there; `busy`: devices that cannot leave their current side now;
    `in_flight`: devices in a move (either direction). Raises ValueError for a count outside 0..len(devices)."""
    if not 0 <= count <= len(devices):
        raise ValueError(f"cannot put {count} of {len(devices)} devices on the DRA side")
    by_id = {g.uuid: g for g in devices}
    groups = topology_groups(devices)
    chosen = [by_id[u] for u in on_dra if u in by_id]

    def leave_key(g: GpuDevice) -> tuple[bool, bool, tuple[int, int], int]:
        rest = [c for c in chosen if c.uuid != g.uuid]
        return (g.uuid not in in_flight, g.uuid in busy, _affinity(g, rest), g.index)

    def join_key(g: GpuDevice) -> tuple[bool, bool, tuple[int, int], int]:
        return (g.uuid in in_flight, g.uuid not in busy, _affinity(g, chosen), g.index)

    def leave(pool: Callable[[], list[GpuDevice]]) -> None:
        while len(chosen) > count and (candidates := pool()):
            chosen.remove(min(candidates, key=leave_key))

    def join(pool: Callable[[], list[GpuDevice]]) -> None:
        while len(chosen) < count and (candidates := pool()):
            pick = max(candidates, key=join_key)
            others.remove(pick)
            chosen.append(pick)

    def settled_free(side: Sequence[GpuDevice]) -> list[GpuDevice]:
        return [g for g in side if g.uuid not in busy and g.uuid not in in_flight]

    # Leave: cancel in-flight first, then free devices from one group, then free, least attached, lowest index.
    leave(lambda: [g for g in chosen if g.uuid in in_flight])
    if len(chosen) > count:
        staying = {c.uuid for c in chosen}
        legacy = [g for g in devices if g.uuid not in staying and g.uuid not in busy]
        group = _one_group(settled_free(chosen), len(chosen) - count, legacy, groups, joining_dra=False)
        leave(lambda: [g for g in settled_free(chosen) if groups[g.uuid] == group])
    leave(lambda: chosen)
    # Join: cancel in-flight first, then free devices from one group, then free, most attached, highest index.
    others = [g for g in devices if g.uuid not in {c.uuid for c in chosen}]
    join(lambda: [g for g in others if g.uuid in in_flight])
    if len(chosen) < count:
        group = _one_group(settled_free(others), count - len(chosen), [g for g in chosen if g.uuid not in busy],
                           groups, joining_dra=True)
        join(lambda: [g for g in settled_free(others) if groups[g.uuid] == group])
    join(lambda: others)
    return frozenset(g.uuid for g in chosen)


__all__ = ["choose_dra", "group_order"]
