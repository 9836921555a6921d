"""Preferred allocation: which `allocation_size` devices the kubelet should pick (pure, side-effect free).

The kubelet asks `GetPreferredAllocation(available, must_include, size)` before `Allocate` and treats the answer as
a hint. Rules, in order of priority:

1. every must-include ID is in the answer; the answer has exactly `size` IDs, all from `available`;
2. among the candidate sets, the one with the most NVLink links *between its members* wins (a 2-GPU job on a
   DGX-1 should land on a 2-link pair, not on a pair with no NVLink);
3. then the set with the most member pairs on the same NUMA node (host memory and PCIe locality);
4. then a deterministic tie-break: the set whose members sort first by (GPU index, ID), so the same request
   always gets the same answer and allocations pack from the low indexes up.

Search, bounded whatever the input (a caller must never be able to pin a worker):
* exhaustive over the combinations when scoring all of them costs at most `EXHAUSTIVE_WORK` member pairs (8 GPUs:
  at most 70 sets; 16 GPUs choose 8: 12,870 sets of 28 pairs);
* otherwise greedy: add the device that adds the most links, then the most same-NUMA pairs, then the lowest rank,
  with the gains kept incrementally, so one answer costs O(size x devices) whatever the NVLink fabric;
* `expired()` (the call's deadline or cancellation) is polled during either search: when it fires, the
  exhaustive search answers the best set found so far and the greedy one fills the rest in rank order. Either
  answer still honours rule 1; only the optimality is given up.
Callers bound the input too: the servicer passes only IDs of this node's inventory (at most 1,024).
Invalid requests raise `PreferredAllocationError`; the servicer turns that into INVALID_ARGUMENT.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from bridge.deviceplugin.requests import name_ids
from bridge.inventory.model import GpuDevice

# Member pairs scored by the exhaustive search at most (about 0.2 s of CPU in CPython).
EXHAUSTIVE_WORK = 400_000
# How many candidate sets the exhaustive search scores between two looks at `expired()`.
_CHECK_EVERY = 256

Expired = Callable[[], bool]


def never() -> bool:
    return False


class PreferredAllocationError(ValueError):
    """The request cannot be satisfied as asked (must-include not available, size out of range, ...)."""


@dataclass(frozen=True)
class Topology:
    """What preferred allocation needs to know about the devices: rank (GPU index), NUMA node, NVLink links."""

    rank: Mapping[str, int] = field(default_factory=dict)
    numa: Mapping[str, int | None] = field(default_factory=dict)
    # frozenset({a, b}) -> number of NVLink links between a and b
    links: Mapping[frozenset[str], int] = field(default_factory=dict)
    # device -> ((peer, links), ...): the same facts as `links`, indexed for the incremental greedy search
    peers: Mapping[str, tuple[tuple[str, int], ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        peers: dict[str, list[tuple[str, int]]] = {}
        for pair, n in self.links.items():
            if n <= 0 or len(pair) != 2:
                continue
            a, b = sorted(pair)
            peers.setdefault(a, []).append((b, n))
            peers.setdefault(b, []).append((a, n))
        object.__setattr__(self, "peers", {d: tuple(p) for d, p in peers.items()})

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


def check_request(available: Sequence[str], must_include: Sequence[str], size: int) -> None:
    """Raise PreferredAllocationError when no answer can satisfy the request as asked (rule 1)."""
    avail = set(available)
    must = list(dict.fromkeys(must_include))
    if size < 0:
        raise PreferredAllocationError(f"allocation_size {size} is negative")
    missing = [m for m in must if m not in avail]
    if missing:
        raise PreferredAllocationError(f"must-include devices {name_ids(missing)} are not in the available list")
    if size < len(must):
        raise PreferredAllocationError(f"allocation_size {size} is smaller than the {len(must)} must-include devices")
    if size > len(avail):
        raise PreferredAllocationError(f"allocation_size {size} exceeds the {len(avail)} available devices")


def preferred_allocation(
    available: Sequence[str], must_include: Sequence[str], size: int, topology: Topology,
    expired: Expired = never,
) -> list[str]:
    """The preferred `size` device IDs out of `available`, containing all of `must_include` (see module doc).
    `expired()` returning True ends the search early with a valid, possibly less optimal, answer."""
    check_request(available, must_include, size)
    avail = sorted(set(available), key=topology.sort_key)
    must = sorted(set(must_include), key=topology.sort_key)
    must_set = set(must)
    rest = [d for d in avail if d not in must_set]
    need = size - len(must)
    if need == 0:
        return must
    if math.comb(len(rest), need) * max(1, math.comb(size, 2)) <= EXHAUSTIVE_WORK:
        chosen = _exhaustive(topology, must, rest, need, expired)
    else:
        chosen = _greedy(topology, must, rest, need, expired)
    return sorted(chosen, key=topology.sort_key)


def _exhaustive(topo: Topology, must: list[str], rest: list[str], need: int, expired: Expired) -> list[str]:
    best: list[str] | None = None
    best_score: tuple[int, int] | None = None
    # combinations() yields in lexicographic order of `rest` (sorted by rank), so keeping the first set with the
    # best score is the deterministic "lowest ranks first" tie-break.
    for n, combo in enumerate(itertools.combinations(rest, need)):
        members = must + list(combo)
        score = _score(topo, members)
        if best_score is None or score > best_score:
            best, best_score = members, score
        if n % _CHECK_EVERY == _CHECK_EVERY - 1 and expired():
            break
    assert best is not None
    return best


def _greedy(topo: Topology, must: list[str], rest: list[str], need: int, expired: Expired) -> list[str]:
    """Pick by (links to the chosen set, same-NUMA members in it, lowest rank); gains are updated per pick from
    the picked device's peers, never recomputed over the whole chosen set."""
    chosen = list(must)
    position = {d: i for i, d in enumerate(rest)}  # rest is in rank order
    link_gain = dict.fromkeys(rest, 0)
    per_numa: dict[int, int] = {}

    def take(device: str) -> None:
        for peer, n in topo.peers.get(device, ()):
            if peer in link_gain:
                link_gain[peer] += n
        numa = topo.numa.get(device)
        if numa is not None:
            per_numa[numa] = per_numa.get(numa, 0) + 1

    def gain(d: str) -> tuple[int, int, int]:
        numa = topo.numa.get(d)
        return (link_gain[d], per_numa.get(numa, 0) if numa is not None else 0, -position[d])

    for device in chosen:
        take(device)
    for picked in range(need):
        if expired():  # out of time: the lowest-ranked of the rest, so the answer is still complete
            chosen += sorted(link_gain, key=position.__getitem__)[: need - picked]
            break
        pick = max(link_gain, key=gain)
        del link_gain[pick]
        chosen.append(pick)
        take(pick)
    return chosen
