"""DRA capacity simulation: can the DRA side of the fleet hold a namespace's GPU pods?

Each pod needs `k` devices matching one selector, all on one node (a claim's devices come from one node). Nodes
are reduced to a *shape*: how many free devices they have per match vector (which of the selectors in play each
device satisfies). Identical nodes collapse into one histogram entry, so placing a pod costs O(distinct shapes),
not O(nodes): a homogeneous 5,000-node fleet is a handful of shapes.

Placement is best fit, largest pods first (first-fit decreasing): the node shape with the fewest matching free
devices that still holds the pod, taking first the devices that match the fewest selectors (keeping flexible
devices for later pods). This is the scheduler's outcome in the common cases, not a proof of optimality: a "does
not fit" is exact for one selector, and conservative when several overlapping selectors compete.

**Devices that need a move** (GPUs on the legacy side that `bridge controller`, or an operator, can move to DRA):
a vector may carry flags after its selector positions; a set flag marks such a device. A pod takes devices without
flags first, so it moves as few GPUs as it can. Nodes whose devices may change later (more GPUs freed) or whose
moves must be counted are **tracked** by name (`names`): `add(node, vectors)` gives a tracked node more devices at
any point, and `moved` counts, per tracked node, the flagged devices pods took. Untracked nodes keep costing
nothing: tracking is per node only where asked for, and a copy copies only the tracked names.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import groupby

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
    pending_devices: int = 0  # devices the pods left unplaced ask for

    @property
    def fits(self) -> bool:
        return self.placed == self.pods

    @property
    def pending(self) -> int:
        return self.pods - self.placed


class Pool:
    """A multiset of node shapes. `copy()` is cheap (shapes are shared tuples; tracked names are copied)."""

    def __init__(self, shapes: Counter[Shape] | None = None, selectors: int = 0,
                 _free: dict[tuple[int, int], tuple[Shape, int, int]] | None = None,
                 _order: dict[int, tuple[Shape, tuple[tuple[Vector, int], ...]]] | None = None) -> None:
        self.shapes: Counter[Shape] = shapes if shapes is not None else Counter()
        self.selectors = selectors
        # (id(shape), selector) -> (shape, matching free devices, all free devices), and id(shape) -> (shape, its
        # entries in the order a pod takes devices): shapes are values, so copies share these. Keyed by identity
        # (hashing a shape walks all of it) with the shape kept in the entry and checked, so an id reused by
        # another object never answers.
        self._free = _free if _free is not None else {}
        self._order = _order if _order is not None else {}
        # Tracked nodes: shape -> names (an ordered set), name -> its shape (() when it has no free device left).
        self._names: dict[Shape, dict[str, None]] = {}
        self._where: dict[str, Shape] = {}
        self.moved: Counter[str] = Counter()  # tracked node -> flagged devices pods took there

    @classmethod
    def from_nodes(cls, node_vectors: Iterable[Sequence[Vector]], selectors: int,
                   names: Iterable[str | None] | None = None) -> "Pool":
        """`names`, parallel to `node_vectors`: a name tracks that node (None: untracked)."""
        pool = cls(Counter(), selectors)
        for vectors, name in zip(node_vectors, names if names is not None else _nones()):
            shape = _shape(vectors)
            if name is not None:
                pool._where[name] = shape
                if shape:
                    pool._names.setdefault(shape, {})[name] = None
            if shape:
                pool.shapes[shape] += 1
        return pool

    def copy(self) -> "Pool":
        p = Pool(Counter(self.shapes), self.selectors, self._free, self._order)
        p._names = {shape: dict(names) for shape, names in self._names.items()}
        p._where = dict(self._where)
        p.moved = Counter(self.moved)
        return p

    def _free_of(self, shape: Shape, selector: int) -> tuple[Shape, int, int]:
        hit = self._free.get((id(shape), selector))
        if hit is None or hit[0] is not shape:
            hit = (shape, sum(c for v, c in shape if v[selector]), sum(c for _, c in shape))
            self._free[(id(shape), selector)] = hit
        return hit

    def _taking_order(self, shape: Shape) -> tuple[tuple[Vector, int], ...]:
        """The shape's entries in the order a pod takes devices: unflagged first, then those matching the fewest
        selectors."""
        hit = self._order.get(id(shape))
        if hit is None or hit[0] is not shape:
            flags = self.selectors
            hit = self._order[id(shape)] = (shape, tuple(sorted(
                shape, key=lambda vc: (vc[0][flags:], sum(vc[0][:flags]), vc[0]))))
        return hit[1]

    def matching(self, selector: int) -> int:
        return sum(n * sum(c for v, c in shape if v[selector]) for shape, n in self.shapes.items())

    def nodes_with_match(self, selector: int) -> int:
        return sum(n for shape, n in self.shapes.items() if any(v[selector] for v, _ in shape))

    def _set(self, old: Shape, new: Shape, name: str | None) -> None:
        """One node goes from shape `old` (() when it had none) to `new`."""
        if old:
            self.shapes[old] -= 1
            if self.shapes[old] == 0:
                del self.shapes[old]
        if new:
            self.shapes[new] += 1
        if name is None:
            return
        if old:
            names = self._names.get(old)
            if names is not None:
                names.pop(name, None)
                if not names:
                    del self._names[old]
        self._where[name] = new
        if new:
            self._names.setdefault(new, {})[name] = None

    def add(self, name: str, vectors: Sequence[Vector]) -> None:
        """More free devices on a tracked node (KeyError for a node not tracked)."""
        old = self._where[name]
        merged: Counter[Vector] = Counter(dict(old))
        merged.update(vectors)
        self._set(old, _shape_counts(merged), name)

    def place(self, need: PodNeed) -> bool:
        """Best fit: the shape with the fewest matching free devices that holds the pod, then the fewest free
        devices, the first in the pool's order on a tie."""
        best: Shape | None = None
        best_free = best_total = 0
        selector, devices = need.selector, need.devices
        free_of = self._free_of
        for shape in self.shapes:
            _, free, total = free_of(shape, selector)
            if free >= devices and (best is None or free < best_free or (free == best_free and total < best_total)):
                best, best_free, best_total = shape, free, total
        if best is None:
            return False
        shape = best
        remaining = devices
        taken: dict[Vector, int] = {}
        flags = self.selectors
        for v, c in self._taking_order(shape):
            if remaining == 0:
                break
            if v[selector]:
                t = min(c, remaining)
                taken[v] = t
                remaining -= t
        new_shape: Shape = tuple((v, c - taken.get(v, 0)) for v, c in shape if c - taken.get(v, 0) > 0)
        names = self._names.get(shape)
        name: str | None = None
        if names and len(names) >= self.shapes[shape]:  # every node of this shape is tracked: take one by name
            name = next(iter(names))
            self.moved[name] += sum(t for v, t in taken.items() if any(v[flags:]))
        self._set(shape, new_shape, name)
        return True

    def fit(self, needs: Iterable[PodNeed]) -> FitResult:
        """Largest pods first. A pod that does not fit changes nothing, so until the next pod is placed one asking
        at least as many devices of the same selector does not fit either and is not tried again."""
        ordered = sorted(needs, key=lambda p: -p.devices)
        placed = pending = 0
        failed: dict[int, int] = {}  # selector -> the fewest devices a pod that did not fit asked, since the last fit
        for p, run in groupby(ordered):  # runs of equal needs (a workload's pods)
            n = sum(1 for _ in run)
            while n:
                if p.devices >= failed.get(p.selector, p.devices + 1) or not self.place(p):
                    pending += n * p.devices  # this one did not fit, so neither do the equal ones after it
                    failed[p.selector] = min(p.devices, failed.get(p.selector, p.devices))
                    break
                placed += 1
                n -= 1
                if failed:
                    failed = {}
        return FitResult(len(ordered), placed, sum(p.devices for p in ordered), pending)


def _shape(vectors: Sequence[Vector]) -> Shape:
    return tuple(sorted(Counter(vectors).items())) if vectors else ()


def _shape_counts(counts: Counter[Vector]) -> Shape:
    return tuple(sorted((v, c) for v, c in counts.items() if c > 0))


def _nones() -> Iterator[None]:
    while True:
        yield None
