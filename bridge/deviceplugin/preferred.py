"""Preferred allocation: which `allocation_size` devices the kubelet should pick (pure, side-effect free).

The kubelet asks `GetPreferredAllocation(available, must_include, size)` before `Allocate` and treats the answer as
a hint. Rules, in order of priority:

1. every must-include ID is in the answer; the answer has exactly `size` IDs, all from `available`;
2. among the candidate sets, the one with the most NVLink links *between its members* wins (a 2-GPU job on a
   DGX-1 should land on a 2-link pair, not on a pair with no NVLink);
3. then the set with the most member pairs on the same NUMA node (host memory and PCIe locality);
4. then a deterministic tie-break: the set whose members sort first by (GPU index, ID), so the same request
   always gets the same answer and allocations pack from the low indexes up.

Search: exhaustive over the combinations when there are at most `EXHAUSTIVE_LIMIT` of them (8 GPUs: at most 70),
otherwise greedy (add the device that adds the most links, then the most same-NUMA pairs, then the lowest rank).
Invalid requests raise `PreferredAllocationError`; the servicer turns that into INVALID_ARGUMENT.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from bridge.inventory.model import GpuDevice

EXHAUSTIVE_LIMIT = 20_000


class PreferredAllocationError(ValueError):
    """The request cannot be satisfied as asked (must-include not available, size out of range, ...)."""


@dataclass(frozen=True)
class Topology:
    """What preferred allocation needs to know about the devices: rank (GPU index), NUMA node, NVLink links."""

    rank: Mapping[str, int] = field(default_factory=dict)
    numa: Mapping[str, int | None] = field(default_factory=dict)
    # frozenset({a, b}) -> number of NVLink links between a and b
    links: Mapping[frozenset[str], int] = field(default_factory=dict)

    @classmethod
    def from_devices(cls, devices: Iterable[GpuDevice]) -> Topology:
        devs = list(devices)
        links: dict[frozenset[str], int] = {}
        for d in devs:
            for peer, n in d.nvlink_peers:
                if n > 0 and peer != d.uuid:
                    key = frozenset((str(d.uuid), str(peer)))
                    # NVML reports each direction; keep the larger count if they ever disagree.
                    links[key] = max(links.get(key, 0), n)
        return cls(
            rank={str(d.uuid): d.index for d in devs},
            numa={str(d.uuid): d.numa_node for d in devs},
            links=links,
        )

    def links_between(self, a: str, b: str) -> int:
        return self.links.get(frozenset((a, b)), 0)

    def same_numa(self, a: str, b: str) -> bool:
        na, nb = self.numa.get(a), self.numa.get(b)
        return na is not None and na == nb

    def sort_key(self, device_id: str) -> tuple[int, str]:
        # Unknown IDs (not in the inventory) sort after every known GPU, then by ID.
        return (self.rank.get(device_id, 1 << 30), device_id)


def _score(topo: Topology, members: Sequence[str]) -> tuple[int, int]:
    links = 0
    numa = 0
    for a, b in itertools.combinations(members, 2):
        links += topo.links_between(a, b)
        numa += topo.same_numa(a, b)
    return links, numa


def preferred_allocation(
    available: Sequence[str], must_include: Sequence[str], size: int, topology: Topology
) -> list[str]:
    """The preferred `size` device IDs out of `available`, containing all of `must_include` (see module doc)."""
    avail = sorted(set(available), key=topology.sort_key)
    must = sorted(set(must_include), key=topology.sort_key)
    if size < 0:
        raise PreferredAllocationError(f"allocation_size {size} is negative")
    missing = [m for m in must if m not in set(avail)]
    if missing:
        raise PreferredAllocationError(f"must-include devices {missing} are not in the available list")
    if size < len(must):
        raise PreferredAllocationError(
            f"allocation_size {size} is smaller than the {len(must)} must-include devices"
        )
    if size > len(avail):
        raise PreferredAllocationError(f"allocation_size {size} exceeds the {len(avail)} available devices")
    rest = [d for d in avail if d not in set(must)]
    need = size - len(must)
    if need == 0:
        return must
    if math.comb(len(rest), need) <= EXHAUSTIVE_LIMIT:
        chosen = _exhaustive(topology, must, rest, need)
    else:
        chosen = _greedy(topology, must, rest, need)
    return sorted(chosen, key=topology.sort_key)


def _exhaustive(topo: Topology, must: list[str], rest: list[str], need: int) -> list[str]:
    best: list[str] | None = None
    best_score: tuple[int, int] | None = None
    # combinations() yields in lexicographic order of `rest` (sorted by rank), so keeping the first set with the
    # best score is the deterministic "lowest ranks first" tie-break.
    for combo in itertools.combinations(rest, need):
        members = must + list(combo)
        score = _score(topo, members)
        if best_score is None or score > best_score:
            best, best_score = members, score
    assert best is not None
    return best


def _greedy(topo: Topology, must: list[str], rest: list[str], need: int) -> list[str]:
    chosen = list(must)
    pool = list(rest)
    for _ in range(need):
        def gain(d: str) -> tuple[int, int, int]:
            links = sum(topo.links_between(d, c) for c in chosen)
            numa = sum(topo.same_numa(d, c) for c in chosen)
            return (links, numa, -pool.index(d))

        pick = max(pool, key=gain)
        chosen.append(pick)
        pool.remove(pick)
    return chosen
