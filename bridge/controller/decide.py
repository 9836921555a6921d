"""The decision core (pure: values in, target changes out; no I/O, no clock): GPUs follow the workloads.

    decide(nodes, pending, policy, memory, now) -> Decision

Four steps, each over whole-GPU counts (bridge.controller.model):

1. **Fit.** Pending pods are taken in the scheduler's queue order (priority, then age, then size) and placed where
   the GPUs of their API are already free (best fit: the node left with the fewest free GPUs of that API, then the
   one with the fewest free GPUs of the other API, whose free GPUs a move could use). These
   pods need no move: the scheduler will bind them by itself, so their GPUs are reserved before anything moves.
2. **Floor.** A pool below its minimum legacy share gets free DRA GPUs back to the legacy side (only free ones,
   and only on nodes whose cool-down allows that direction).
3. **Move.** Each pod still unplaced goes to the node where it needs the **fewest moves**: the node with the most
   free GPUs of its API among those where the free GPUs of the other API make up the rest. Ties prefer a node where
   the GPUs to move are one topology group (NVLink island / NUMA node), then the node with the fewest free GPUs of
   the other API (best fit: large blocks stay whole for larger pods), then the name. Only free GPUs move, so every
   target stays inside `NodeView.safe_range` (never a held device).
4. **Limits.** A node an operator pinned, one still settling its previous target and one whose state is unknown
   are never changed; a node with moves under way changes further only in their direction; a reversal on a node
   (to DRA, then back to legacy) waits for the cool-down; a pool never goes
   below its minimum legacy share; the moves of the last 60 s never exceed `max_moves_per_minute` (a pod that needs
   more moves than the budget left gets what is left now, the rest in the next minutes).

Hysteresis (no flapping): GPUs move only for a pending pod that fits nowhere as things are (never to "balance"),
moves already under way count as supply (the node's `dra` includes them), a node changed in one direction does not
change back before the cool-down, and one decision never moves GPUs both ways on one node.

Every pod left pending gets a `Blocked` with the first reason that applies, checked from the most specific:
`no-matching-node` (no node passes its selector/affinity/taints), `frozen` (only a pinned/settling node could take
it), `cooldown`, `min-legacy-share`, `rate-limit`, else `no-capacity` (no node has enough free GPUs of either API).

Cost: pods are grouped by their node constraints; each group keeps its eligible nodes in buckets by free counts, so
a pod is placed by looking at a few buckets, not at every node (bench/controller_bench.py: 5,000 nodes x 8 GPUs and
10,000 pending pods).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from bridge.controller.model import (
    APIS,
    Api,
    Blocked,
    BlockReason,
    Decision,
    Direction,
    Memory,
    NodeView,
    PendingPod,
    Placement,
    Policy,
    TargetChange,
    direction_to,
    other,
)
from bridge.controller.placement import Constraints

_SCAN_FOR_GROUP = 16  # nodes looked at in one bucket for a whole-group move before taking the first


def _api_name(api: Api) -> str:
    return "DRA" if api == "dra" else "legacy"


@dataclass
class _Node:
    view: NodeView
    free: dict[Api, int]
    dra: int
    direction: Direction | None = None
    served: list[PendingPod] = field(default_factory=list)  # pods this node serves through moves
    reasons: list[str] = field(default_factory=list)  # floor restorations

    @property
    def changeable(self) -> bool:
        return self.view.frozen == ""

    def largest_group(self, api: Api) -> int:
        groups = self.view.groups.get(api) or ()
        return max(groups, default=0)


class _Index:
    """The eligible nodes of one constraint group, bucketed by free counts.

    `fit[api][c][o]`: nodes (any but unknown) with exactly `c` free GPUs of `api` and `o` of the other (step 1);
    emptied buckets are dropped, so a lookup visits only counts some node has.
    `move[direction][pool][(c_to, c_from)]`: changeable nodes that may change in `direction`, with `c_to` free GPUs
    of the receiving API and `c_from` of the giving one (step 3)."""

    def __init__(self, nodes: Iterable[_Node], move_ok: Mapping[Direction, set[str]]) -> None:
        self.fit: dict[Api, dict[int, dict[int, dict[str, None]]]] = {a: defaultdict(dict) for a in APIS}
        self.nodes: list[_Node] = list(nodes)
        self.move: dict[Direction, dict[str, dict[tuple[int, int], dict[str, None]]]] = {
            "to-dra": defaultdict(lambda: defaultdict(dict)), "to-legacy": defaultdict(lambda: defaultdict(dict))}
        self.move_ok = move_ok
        self.size = len(self.nodes)
        for n in self.nodes:
            self._add(n)

    def _keys(self, n: _Node) -> list[tuple[Direction, tuple[int, int]]]:
        out: list[tuple[Direction, tuple[int, int]]] = []
        if not n.changeable:
            return out
        for api in APIS:
            d = direction_to(api)
            if n.view.name in self.move_ok[d]:
                out.append((d, (n.free[api], n.free[other(api)])))
        return out

    def _add(self, n: _Node) -> None:
        for api in APIS:
            self.fit[api][n.free[api]].setdefault(n.free[other(api)], {})[n.view.name] = None
        for d, key in self._keys(n):
            self.move[d][n.view.pool][key][n.view.name] = None

    def _remove(self, n: _Node) -> None:
        for api in APIS:
            by_other = self.fit[api][n.free[api]]
            bucket = by_other.get(n.free[other(api)])
            if bucket is not None:
                bucket.pop(n.view.name, None)
                if not bucket:
                    del by_other[n.free[other(api)]]
        for d, key in self._keys(n):
            self.move[d][n.view.pool][key].pop(n.view.name, None)

    def best_fit(self, api: Api, gpus: int, top: int) -> str | None:
        """The node left with the fewest free GPUs of `api`, then with the fewest of the other API (so the free
        GPUs a later move could use stay together)."""
        by_free = self.fit[api]
        for c in range(gpus, top + 1):
            by_other = by_free.get(c)
            if by_other:
                return next(iter(by_other[min(by_other)]))
        return None


class _Planner:
    def __init__(self, nodes: Sequence[NodeView], policy: Policy, memory: Memory, now: float) -> None:
        self.policy = policy
        self.memory = memory
        self.now = now
        self.budget = memory.budget(policy, now)
        self.nodes: dict[str, _Node] = {}
        for v in sorted(nodes, key=lambda v: v.name):
            if v.frozen == "unknown":
                continue
            self.nodes[v.name] = _Node(v, {a: v.free(a) for a in APIS}, v.dra, direction=v.moving)
        self.top = max((n.view.total for n in self.nodes.values()), default=0)
        # Pools: totals and planned legacy counts over every known node (frozen ones count toward the share).
        self.pool_total: dict[str, int] = defaultdict(int)
        self.pool_legacy: dict[str, int] = defaultdict(int)
        for n in self.nodes.values():
            self.pool_total[n.view.pool] += n.view.total
            self.pool_legacy[n.view.pool] += n.view.total - n.dra
        self.floors: dict[str, int] = {}
        # Nodes that may change in each direction now (changeable, and no reversal inside the cool-down).
        self.move_ok: dict[Direction, set[str]] = {"to-dra": set(), "to-legacy": set()}
        self.cooling: dict[Direction, set[str]] = {"to-dra": set(), "to-legacy": set()}
        for n in self.nodes.values():
            if not n.changeable:
                continue
            for d in ("to-dra", "to-legacy"):
                if memory.in_cooldown(n.view.name, d, policy, now) > 0:
                    self.cooling[d].add(n.view.name)
                elif n.direction is None or n.direction == d:  # never against moves under way
                    self.move_ok[d].add(n.view.name)
        shape_ids: dict[object, int] = {}
        self.shapes = {n.view.name: shape_ids.setdefault(
            (tuple(sorted(n.view.labels.items())), n.view.taints, n.view.unschedulable), len(shape_ids))
            for n in self.nodes.values()}
        self.indexes: dict[Constraints, _Index] = {}
        self.members: dict[str, list[_Index]] = defaultdict(list)
        self.diagnosis: dict[tuple[Constraints, Api, int], tuple[BlockReason, str]] = {}

    # ---- bookkeeping -------------------------------------------------------------------------------------------

    def floor(self, pool: str) -> int:
        f = self.floors.get(pool)
        if f is None:
            f = self.floors[pool] = self.policy.min_legacy(pool, self.pool_total[pool])
        return f

    def index(self, c: Constraints) -> _Index:
        idx = self.indexes.get(c)
        if idx is None:
            # Nodes alike in labels, taints and cordon answer alike (unless a term names nodes): one check per kind.
            by_name = any(t.fields for t in c.terms)
            verdicts: dict[object, bool] = {}
            eligible = []
            for n in self.nodes.values():
                v = n.view
                key = (v.name if by_name else "", self.shapes[v.name])
                ok = verdicts.get(key)
                if ok is None:
                    ok = verdicts[key] = c.allows(v.name, v.labels, v.taints, v.unschedulable)
                if ok:
                    eligible.append(n)
            idx = _Index(eligible, self.move_ok)
            self.indexes[c] = idx
            for n in eligible:
                self.members[n.view.name].append(idx)
        return idx

    def _set(self, n: _Node, free: dict[Api, int], dra: int | None = None,
             direction: Direction | None = None) -> None:
        idxs = self.members.get(n.view.name, ())
        for idx in idxs:
            idx._remove(n)
        n.free = free
        if dra is not None:
            self.pool_legacy[n.view.pool] += n.dra - dra
            n.dra = dra
        if direction is not None and n.direction is None:
            n.direction = direction
            # One decision never moves GPUs both ways on a node.
            self.move_ok["to-legacy" if direction == "to-dra" else "to-dra"].discard(n.view.name)
        for idx in idxs:
            idx._add(n)

    def move(self, n: _Node, to: Api, count: int) -> None:
        frm = other(to)
        free = dict(n.free)
        free[frm] -= count
        free[to] += count
        self._set(n, free, n.dra + (count if to == "dra" else -count), direction_to(to))
        self.budget -= count

    def take(self, n: _Node, api: Api, gpus: int) -> None:
        free = dict(n.free)
        free[api] -= gpus
        self._set(n, free)

    # ---- step 1: fit -------------------------------------------------------------------------------------------

    def fit(self, pod: PendingPod) -> Placement | None:
        idx = self.index(pod.constraints)
        name = idx.best_fit(pod.api, pod.gpus, self.top)
        if name is None:
            return None
        self.take(self.nodes[name], pod.api, pod.gpus)
        return Placement(pod.key, name, 0)

    # ---- step 2: floor -----------------------------------------------------------------------------------------

    def restore_floors(self) -> None:
        for pool in sorted(self.pool_total):
            short = self.floor(pool) - self.pool_legacy[pool]
            if short <= 0:
                continue
            candidates = sorted((n for n in self.nodes.values()
                                 if n.view.pool == pool and n.view.name in self.move_ok["to-legacy"]
                                 and n.free["dra"] > 0), key=lambda n: (-n.free["dra"], n.view.name))
            for n in candidates:
                if short <= 0 or self.budget <= 0:
                    break
                k = min(short, n.free["dra"], self.budget)
                legacy_before = self.pool_legacy[pool]
                self.move(n, "legacy", k)
                short -= k
                n.reasons.append(
                    f"pool {pool or '(default)'} has {legacy_before} of {self.pool_total[pool]} GPUs on legacy, "
                    f"below its minimum legacy share {self.policy.share(pool):g} ({self.floor(pool)} GPUs); "
                    f"{n.view.name} had {n.free['dra'] + k} free DRA GPUs")

    # ---- step 3: move ------------------------------------------------------------------------------------------

    def _pool_allows(self, pool: str, d: Direction, count: int) -> bool:
        if d == "to-legacy":
            return True
        return self.pool_legacy[pool] - count >= self.floor(pool)

    def _candidate(self, idx: _Index, pod: PendingPod) -> tuple[_Node, int] | None:
        """The node needing the fewest moves for `pod`, and that number (ignoring the rate limit)."""
        d = direction_to(pod.api)
        frm = other(pod.api)
        g = pod.gpus
        for have in range(min(g - 1, self.top), -1, -1):
            need = g - have
            best: tuple[bool, int, str] | None = None
            for pool in sorted(idx.move[d]):
                if not self._pool_allows(pool, d, need):
                    continue
                grid = idx.move[d][pool]
                for give in range(need, self.top + 1):
                    bucket = grid.get((have, give))
                    if not bucket:
                        continue
                    pick, whole = None, False
                    for i, name in enumerate(bucket):
                        if pick is None:
                            pick = name
                        if self.nodes[name].largest_group(frm) >= need:
                            pick, whole = name, True
                            break
                        if i >= _SCAN_FOR_GROUP:
                            break
                    assert pick is not None
                    key = (not whole, give, pick)
                    if best is None or key < best:
                        best = key
                    if whole:
                        break  # a larger `give` in this pool is a worse fit; keep looking only for a whole group
            if best is not None:
                return self.nodes[best[2]], need
        return None

    def place_by_moves(self, pod: PendingPod) -> tuple[Placement | None, Blocked | None]:
        placed = self.fit(pod)  # the floor step may have freed legacy GPUs where it now fits
        if placed is not None:
            return placed, None
        idx = self.index(pod.constraints)
        found = self._candidate(idx, pod)
        if found is None:
            reason, message = self._diagnose(idx, pod)
            return None, Blocked(pod.key, pod.api, pod.gpus, reason, message)
        n, need = found
        if need > self.budget:
            if self.budget > 0:  # spend what is left on the best node; the rest follows next minute
                self.move(n, pod.api, self.budget)
                n.served.append(pod)
            return None, Blocked(pod.key, pod.api, pod.gpus, "rate-limit",
                                 f"needs {need} GPUs moved on {n.view.name}; the limit of "
                                 f"{self.policy.max_moves_per_minute} moves per minute is reached")
        self.move(n, pod.api, need)
        self.take(n, pod.api, pod.gpus)
        n.served.append(pod)
        return Placement(pod.key, n.view.name, need), None

    def _diagnose(self, idx: _Index, pod: PendingPod) -> tuple[BlockReason, str]:
        key = (pod.constraints, pod.api, pod.gpus)
        cached = self.diagnosis.get(key)
        if cached is not None:
            return cached
        out = self._diagnose_uncached(idx, pod)
        self.diagnosis[key] = out
        return out

    def _diagnose_uncached(self, idx: _Index, pod: PendingPod) -> tuple[BlockReason, str]:
        want = f"{pod.gpus} {_api_name(pod.api)} GPU{'s' if pod.gpus != 1 else ''}"
        if idx.size == 0:
            return "no-matching-node", (f"needs {want}; no GPU node with a known split passes its node selector, "
                                        f"affinity and taints")
        d = direction_to(pod.api)
        eligible = idx.nodes
        roomy = [n for n in eligible if n.free["legacy"] + n.free["dra"] >= pod.gpus]
        if not roomy:
            most = max((n.free["legacy"] + n.free["dra"] for n in eligible), default=0)
            return "no-capacity", (f"needs {want}; no eligible node has that many free GPUs on either side "
                                   f"(the most is {most})")
        if all(not n.changeable for n in roomy):
            kinds = sorted({n.view.frozen for n in roomy})
            first = roomy[0]
            return "frozen", (f"needs {want}; only {'/'.join(kinds)} nodes have room (e.g. {first.view.name}: "
                              f"{first.view.frozen_reason or first.view.frozen})")
        changeable = [n for n in roomy if n.changeable]
        if all(n.view.name in self.cooling[d] or (n.direction is not None and n.direction != d)
               for n in changeable):
            n = changeable[0]
            left = self.memory.in_cooldown(n.view.name, d, self.policy, self.now)
            if left > 0:
                return "cooldown", (f"needs {want}; the nodes with room changed the other way recently "
                                    f"(e.g. {n.view.name}, {left:.0f}s of cool-down left)")
            return "cooldown", (f"needs {want}; the nodes with room are moving GPUs the other way "
                                f"(e.g. {n.view.name}); they change direction once those moves land")
        pools = sorted({n.view.pool for n in changeable})
        return "min-legacy-share", (f"needs {want}; the pools with room are at their minimum legacy share "
                                    f"({', '.join(p or '(default)' for p in pools)})")

    # ---- result ------------------------------------------------------------------------------------------------

    def changes(self) -> tuple[TargetChange, ...]:
        out = []
        for n in self.nodes.values():
            if n.dra == n.view.dra:
                continue
            assert n.view.is_safe(n.dra), f"unsafe target {n.dra} for {n.view}"
            out.append(TargetChange(n.view.name, n.view.dra, n.dra, n.view.target, self._reason(n),
                                    tuple(p.key for p in n.served)))
        return tuple(out)

    def _reason(self, n: _Node) -> str:
        parts = list(n.reasons)
        v = n.view
        for api in APIS:
            pods = [p for p in n.served if p.api == api]
            if not pods:
                continue
            by_ns: dict[str, int] = defaultdict(int)
            for p in pods:
                by_ns[p.namespace or p.key.partition("/")[0]] += 1
            where = (f"in {next(iter(by_ns))}" if len(by_ns) == 1
                     else "(" + ", ".join(f"{ns}: {c}" for ns, c in sorted(by_ns.items())) + ")")
            gpus = sum(p.gpus for p in pods)
            moved = abs(n.dra - v.dra)
            parts.append(
                f"{len(pods)} pending {_api_name(api)} pod{'s' if len(pods) != 1 else ''} {where} "
                f"need{'s' if len(pods) == 1 else ''} {gpus} GPU{'s' if gpus != 1 else ''}; {v.name} had "
                f"{v.free(other(api))} free {_api_name(other(api))} GPU{'s' if v.free(other(api)) != 1 else ''}"
                + (f" and {v.free(api)} free {_api_name(api)}" if v.free(api) else "")
                + f": moving {moved} to {_api_name(api)}")
        return "; ".join(parts) if parts else f"{v.name}: target {v.dra} -> {n.dra}"


def queue_order(pods: Iterable[PendingPod]) -> list[PendingPod]:
    """The scheduler's queue order: higher priority first, then older, then larger, then by name."""
    return sorted(pods, key=lambda p: (-p.priority, p.since, -p.gpus, p.key))


def decide(nodes: Sequence[NodeView], pending: Sequence[PendingPod], policy: Policy,
           memory: Memory | None = None, now: float = 0.0) -> Decision:
    """One decision (see the module docstring). Deterministic for equal inputs."""
    memory = memory or Memory()
    planner = _Planner(nodes, policy, memory, now)
    free_before = {a: sum(n.free[a] for n in planner.nodes.values()) for a in APIS}
    order = queue_order(pending)
    placements: list[Placement] = []
    unplaced: list[PendingPod] = []
    for pod in order:
        placed = planner.fit(pod)
        if placed is None:
            unplaced.append(pod)
        else:
            placements.append(placed)
    planner.restore_floors()
    blocked: list[Blocked] = []
    for pod in unplaced:
        placed, block = planner.place_by_moves(pod)
        if placed is not None:
            placements.append(placed)
        if block is not None:
            blocked.append(block)
    return Decision(
        changes=planner.changes(),
        blocked=tuple(blocked),
        placements=tuple(placements),
        pending_pods={a: sum(1 for p in pending if p.api == a) for a in APIS},
        pending_gpus={a: sum(p.gpus for p in pending if p.api == a) for a in APIS},
        free_gpus=free_before,
    )


__all__ = ["decide", "queue_order"]
