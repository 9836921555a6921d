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
                 _free: dict[tuple[Shape, int], tuple[int, int]] | None = None) -> None:
        self.shapes: Counter[Shape] = shapes if shapes is not None else Counter()
        self.selectors = selectors
        # (shape, selector) -> (matching free devices, all free devices); shapes are values, so copies share it.
        self._free = _free if _free is not None else {}
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
        p = Pool(Counter(self.shapes), self.selectors, self._free)
        p._names = {shape: dict(names) for shape, names in self._names.items()}
        p._where = dict(self._where)
        p.moved = Counter(self.moved)
        return p

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
        flags = self.selectors
        for v, c in sorted(shape, key=lambda vc: (vc[0][flags:], sum(vc[0][:flags]), vc[0])):
            if remaining == 0:
                break
            if v[need.selector]:
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
        ordered = sorted(needs, key=lambda p: -p.devices)
        left = [p.devices for p in ordered if not self.place(p)]
        return FitResult(len(ordered), len(ordered) - len(left), sum(p.devices for p in ordered), sum(left))


def _shape(vectors: Sequence[Vector]) -> Shape:
    return tuple(sorted(Counter(vectors).items())) if vectors else ()


def _shape_counts(counts: Counter[Vector]) -> Shape:
    return tuple(sorted((v, c) for v, c in counts.items() if c > 0))


def _nones() -> Iterator[None]:
    while True:
        yield None
