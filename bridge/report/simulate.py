"""DRA capacity simulation: can the DRA side of the fleet hold a namespace's GPU pods?

Each pod needs `k` devices matching one selector, all on one node (a claim's devices come from one node). Nodes
are reduced to a *shape*: how many free devices they have per match vector (which of the selectors in play each
device satisfies). Identical nodes collapse into one histogram entry, so placing a pod costs O(distinct shapes),
not O(nodes): a homogeneous 5,000-node fleet is a handful of shapes.

Placement is best fit, largest pods first (first-fit decreasing): the node shape with the fewest matching free
devices that still holds the pod, taking first the devices that match the fewest selectors (keeping flexible
devices for later pods). This is the scheduler's outcome in the common cases, not a proof of optimality: a "does
not fit" is exact for one selector, and conservative when several overlapping selectors compete.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Vector = tuple[bool, ...]
Shape = tuple[tuple[Vector, int], ...]  # sorted (vector, free count) pairs with count > 0


@dataclass(frozen=True)
class PodNeed:
    selector: int  # index into the pool's selector list
    devices: int


@dataclass(frozen=True)
class FitResult:
    pods: int
    placed: int
    devices_needed: int

    @property
    def fits(self) -> bool:
        return self.placed == self.pods

    @property
    def pending(self) -> int:
        return self.pods - self.placed


class Pool:
    """A multiset of node shapes. `copy()` is cheap (shapes are shared tuples)."""

    def __init__(self, shapes: Counter[Shape] | None = None, selectors: int = 0,
                 _free: dict[tuple[Shape, int], tuple[int, int]] | None = None) -> None:
        self.shapes: Counter[Shape] = shapes if shapes is not None else Counter()
        self.selectors = selectors
        # (shape, selector) -> (matching free devices, all free devices); shapes are values, so copies share it.
        self._free = _free if _free is not None else {}

    @classmethod
    def from_nodes(cls, node_vectors: Iterable[Sequence[Vector]], selectors: int) -> "Pool":
        shapes: Counter[Shape] = Counter()
        for vectors in node_vectors:
            if not vectors:
                continue
            shapes[tuple(sorted(Counter(vectors).items()))] += 1
        return cls(shapes, selectors)

    def copy(self) -> "Pool":
        return Pool(Counter(self.shapes), self.selectors, self._free)

    def _free_of(self, shape: Shape, selector: int) -> tuple[int, int]:
        hit = self._free.get((shape, selector))
        if hit is None:
            hit = (sum(c for v, c in shape if v[selector]), sum(c for _, c in shape))
            self._free[(shape, selector)] = hit
        return hit

    def matching(self, selector: int) -> int:
        return sum(n * sum(c for v, c in shape if v[selector]) for shape, n in self.shapes.items())

    def nodes_with_match(self, selector: int) -> int:
        return sum(n for shape, n in self.shapes.items() if any(v[selector] for v, _ in shape))

    def place(self, need: PodNeed) -> bool:
        best: tuple[int, int, Shape] | None = None
        for shape in self.shapes:
            free, total = self._free_of(shape, need.selector)
            if free >= need.devices and (best is None or (free, total) < best[:2]):
                best = (free, total, shape)
        if best is None:
            return False
        shape = best[2]
        remaining = need.devices
        taken: dict[Vector, int] = {}
        for v, c in sorted(shape, key=lambda vc: (sum(vc[0]), vc[0])):
            if remaining == 0:
                break
            if v[need.selector]:
                t = min(c, remaining)
                taken[v] = t
                remaining -= t
        new_shape: Shape = tuple((v, c - taken.get(v, 0)) for v, c in shape if c - taken.get(v, 0) > 0)
        self.shapes[shape] -= 1
        if self.shapes[shape] == 0:
            del self.shapes[shape]
        if new_shape:
            self.shapes[new_shape] += 1
        return True

    def fit(self, needs: Iterable[PodNeed]) -> FitResult:
        ordered = sorted(needs, key=lambda p: -p.devices)
        placed = sum(1 for p in ordered if self.place(p))
        return FitResult(len(ordered), placed, sum(p.devices for p in ordered))
