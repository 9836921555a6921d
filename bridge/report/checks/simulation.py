"""The DRA capacity simulation behind DRB032 (pure): can the DRA side hold each namespace's GPU pods, alone and in
the wave plan's order, as things are and with the GPUs that can move? The rule that reads it, and what it says,
is `bridge.report.checks.capacity` (its docstring explains the model).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

from bridge.kvalues.placement import Constraints
from bridge.report.cel import gfd_devices
from bridge.report.checks.context import CheckContext
from bridge.report.features import BRIDGE_DRIVER
from bridge.report.model import Device, Namespace, Node
from bridge.report.offers import DoubleOffer
from bridge.report.simulate import FitResult, PodNeed, Pool, Vector
from bridge.report.supply import Supply
from bridge.report.waves import flips, wave_order

BEFORE_NAMED = 5  # namespaces before one in wave order named in its finding (a list of all is quadratic in size)

# What one device must satisfy for a pod: the CEL its request carries (class, translated GFD terms, its claims' own
# selectors) and the node filters its node must pass (node selector, required affinity, taints: the pod's own,
# `bridge.report.podspec.dra_placement`). Devices are reduced to one bit per selector in play (bridge.report.simulate).
Selector = tuple[str, Constraints]


def _selector_order(s: Selector) -> tuple[str, str]:
    return (s[0], repr(s[1]))


def _vectors(ctx: CheckContext, selectors: list[Selector], node: str, devices: list[Device]) -> list[Vector]:
    """One match vector per device of `node`: the node passes the selector's node filters (evaluated once per
    distinct filters, `CheckContext.admitted`) and the device its CEL."""
    ev = ctx.evaluator
    admitted = [node in ctx.admitted(c) for _, c in selectors]
    return [tuple(a and ev.matches(cel, d) for a, (cel, _) in zip(admitted, selectors)) for d in devices]


@dataclass(frozen=True)
class Moves:
    """What moving GPUs to the DRA side adds for one namespace (only with the current split)."""

    by: str  # "controller" (it acts) or "operator" (no controller acts: the split is raised by hand)
    devices: int  # movable GPUs matching the namespace's (first) selector
    nodes: int  # nodes they are on
    freed: int  # of those, GPUs the namespace's own device-plugin pods hold now (free once they are replaced)
    alone: FitResult
    cumulative: FitResult | None  # in wave order, with the moves of the namespaces before it; None when unplanned
    per_node: dict[str, int] = field(default_factory=dict)  # node -> GPUs the simulated pods needed moved there
    held_back: dict[str, int] = field(default_factory=dict)  # pool -> free legacy GPUs the policy's floor keeps


@dataclass(frozen=True)
class NamespaceCapacity:
    namespace: str
    gpus: int
    pods: int
    alone: FitResult
    cumulative: FitResult  # after the namespaces before it in wave order; `alone` again when the plan leaves it out
    matching_devices: int  # DRA-side devices matching this namespace's (first) selector
    moves: Moves | None = None  # None: everything fits as it is, or a split is assumed
    wave: int | None = None  # the wave that flips it to dra (bridge.report.waves); None: already dra, or unplanned
    before: tuple[str, ...] = ()  # the last BEFORE_NAMED namespaces on DRA before its wave, in wave order
    before_count: int = 0  # how many namespaces are on DRA before its wave (the names stop at BEFORE_NAMED)
    planned: bool = True  # False: a blocker holds it back, so the plan does not move it (only `alone` is judged)


def dra_side(ctx: CheckContext) -> dict[str, list[Device]]:
    split = ctx.options.assume_split
    out: dict[str, list[Device]] = {}
    doubled = ctx.double_offers
    for node in ctx.model.nodes.values():
        if split == "current" or any(b.startswith("dra:") for b in node.backends):
            if node.devices:
                out[node.name] = _offered_once(node, doubled.get(node.name))
            continue
        total = node.gpu_total
        if not total:
            continue
        want = total if split == "all" else min(int(split), total)
        mine = [d for d in node.devices if d.driver == BRIDGE_DRIVER][:want]
        missing = want - len(mine)
        if missing > 0:
            if mine:
                extra = [replace(mine[0], name=f"gpu-sim-{i}", source="gfd") for i in range(missing)]
            else:
                extra = gfd_devices(node, missing)
            mine = mine + extra
        if mine:
            out[node.name] = mine
    return out


def _offered_once(node: Node, doubled: DoubleOffer | None) -> list[Device]:
    """The node's published devices without those also offered to the device plugin (DRB017): the ones the split
    status names first, then the last published, until the overcount is out."""
    if doubled is None:
        return list(node.devices)
    held = set(doubled.devices)
    bridge = [d for d in node.devices if d.driver == BRIDGE_DRIVER]
    drop = {d.name for d in bridge if d.name in held}
    for d in reversed(bridge):
        if len(drop) >= doubled.excess:
            break
        drop.add(d.name)
    return [d for d in node.devices if not (d.driver == BRIDGE_DRIVER and d.name in drop)]


def legacy_device(node: Node) -> Device:
    """What one of the node's legacy-side GPUs would look like published: a copy of a device the bridge publishes
    there, else one derived from the node's GFD labels."""
    mine = [d for d in node.devices if d.driver == BRIDGE_DRIVER]
    if mine:
        return replace(mine[0], name="gpu-moved", source="gfd")
    return gfd_devices(node, 1)[0]


class _Movable:
    """The pools with GPUs that need a move, for one mover (controller or operator)."""

    def __init__(self, ctx: CheckContext, selectors: list[Selector], devices: dict[str, list[Device]],
                 supply: Supply, by_controller: bool, committed: dict[str, dict[str, int]]) -> None:
        self.supply = supply
        self.by_controller = by_controller
        self.committed = committed
        self.free, self.held_back = supply.movable(by_controller)
        self.changeable = {n for n in supply.views if supply.may_change(n, by_controller)}
        self.vector: dict[str, Vector] = {}
        names = sorted(set(devices) | self.changeable | {n for c in committed.values() for n in c})
        for name in names:
            if name in self.changeable or any(name in c for c in committed.values()):
                self.vector[name] = _vectors(ctx, selectors, name, [legacy_device(ctx.model.nodes[name])])[0] + (True,)
        rows = []
        for name in names:
            now = [v + (False,) for v in _vectors(ctx, selectors, name, devices.get(name, []))]
            rows.append(now + [self.vector[name]] * self.free.get(name, 0) if name in self.changeable else now)
        self.base = Pool.from_nodes(rows, len(selectors), [n if n in self.vector else None for n in names])
        self.room_left = self._room_left()

    def _room_left(self) -> dict[str, int | None]:
        room = self.supply.room(self.by_controller)
        used: dict[str, int] = defaultdict(int)
        for name, n in self.free.items():
            used[self.supply.views[name].pool] += n
        return {pool: None if r is None else max(0, r - used[pool]) for pool, r in room.items()}

    def extras(self, namespace: str, room: dict[str, int | None]) -> dict[str, int]:
        """GPUs the namespace's own pods free on changeable nodes, within `room` (consumed), beyond those its node's
        split already sends to DRA (`committed`)."""
        out: dict[str, int] = {}
        committed = self.committed.get(namespace, {})
        for name, held in sorted(self.supply.held_legacy.get(namespace, {}).items()):
            if name not in self.changeable:
                continue
            v = self.supply.views[name]
            n = min(held, v.legacy_held) - committed.get(name, 0)
            left = room.get(v.pool)
            if left is not None:
                n = min(n, left)
                room[v.pool] = left - max(n, 0)
            if n > 0:
                out[name] = n
        return out

    def add_own(self, pool: Pool, namespace: str, extras: dict[str, int]) -> None:
        """The namespace's own GPUs into `pool`: those its nodes' splits already send to DRA (no move needed: the
        flag clear) and `extras` (a move each)."""
        for name, n in self.committed.get(namespace, {}).items():
            pool.add(name, [self.vector[name][:-1] + (False,)] * n)
        for name, n in extras.items():
            pool.add(name, [self.vector[name]] * n)


def _committed(ctx: CheckContext) -> dict[str, dict[str, int]]:
    """namespace -> bridge node -> legacy GPUs its own Running pods hold there that the node's requested split already
    puts on the DRA side: the daemon moves them as soon as those pods are replaced (after the namespace's flip), so
    they are the namespace's DRA capacity. Shared out per node in wave order (the namespace that flips first has
    its pods replaced first) when several namespaces hold GPUs there."""
    behind: dict[str, int] = {}
    for node in ctx.model.nodes.values():  # from the model alone: most clusters have no node behind its target
        status = node.split_status
        result = node.split_result() if status is not None and "bridge" in node.backends else None
        if status is not None and result is not None and result.wanted is not None:
            if result.wanted > sum(1 for d in status.devices if d.side.value == "dra"):
                behind[node.name] = result.wanted
    if not behind:
        return {}
    supply = ctx.supply
    order = [ns.name for ns in wave_order([ctx.model.namespaces[n] for n in supply.held_legacy
                                           if n in ctx.model.namespaces])]
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for name, wanted in sorted(behind.items()):
        view = supply.views.get(name)
        if view is None or view.frozen == "unknown":
            continue
        waiting = wanted - view.dra
        for ns in order:
            held = supply.held_legacy[ns].get(name, 0)
            take = min(held, waiting)
            if take > 0:
                out[ns][name] = take
                waiting -= take
    return dict(out)


def simulate_capacity(ctx: CheckContext) -> dict[str, NamespaceCapacity]:
    """Each namespace alone, and in wave order after the namespaces before it (those the plan moves, and those in
    dra already); with the current split, also with the GPUs that can move (`_with_moves`). Cached per context."""
    cached = ctx.__dict__.get("_capacity")
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    by_ns: dict[str, list[tuple[Selector, int, int]]] = {}  # ns -> [(selector, gpus per pod, pods)]
    for w in ctx.translatable:
        if w.gpus_per_pod and w.replicas:
            by_ns.setdefault(w.namespace, []).append(((ctx.request_cel(w), w.spec.placement), w.gpus_per_pod,
                                                      w.replicas))
    selectors = sorted({sel for items in by_ns.values() for sel, _, _ in items}, key=_selector_order)
    index = {sel: i for i, sel in enumerate(selectors)}
    devices = dra_side(ctx)
    current = ctx.options.assume_split == "current" and any(
        "bridge" in n.backends and n.split_status is not None for n in ctx.model.nodes.values())
    committed = _committed(ctx) if current else {}
    own_nodes = sorted({n for c in committed.values() for n in c} | set(devices))
    own_vector = {n: _vectors(ctx, selectors, n, [legacy_device(ctx.model.nodes[n])])[0]
                  for c in committed.values() for n in c}
    tracked = {n for c in committed.values() for n in c}
    pool = Pool.from_nodes((_vectors(ctx, selectors, name, devices.get(name, [])) for name in own_nodes),
                           len(selectors), [n if n in tracked else None for n in own_nodes])
    namespaces = wave_order([ctx.model.namespaces[n] for n in by_ns])
    blocked, everything = ctx.blocked
    # The plan over the same namespaces as the wave plan's (every namespace with GPU workloads, demand or not), so
    # the wave numbers agree with it.
    plan = flips([ctx.model.namespaces[n] for n in sorted({w.namespace for w in ctx.gpu_workloads})
                  if not everything and n not in blocked])
    planned = {ns.name for ns in plan.to_dra} | {ns.name for ns in namespaces if ns.mode == "dra"}
    needs_of: dict[str, list[PodNeed]] = {}
    result: dict[str, NamespaceCapacity] = {}
    running = pool.copy()
    before: list[str] = []
    for ns in namespaces:
        needs = needs_of[ns.name] = [PodNeed(index[sel], k) for sel, k, pods in by_ns[ns.name] for _ in range(pods)]
        own = committed.get(ns.name, {})
        alone_pool = pool.copy()
        for name, n in own.items():
            alone_pool.add(name, [own_vector[name]] * n)
        alone = alone_pool.fit(needs)
        cumulative = alone
        if ns.name in planned:
            for name, n in own.items():
                running.add(name, [own_vector[name]] * n)
            cumulative = running.fit(needs)
        first = index[by_ns[ns.name][0][0]]
        result[ns.name] = NamespaceCapacity(
            ns.name, sum(p.devices for p in needs), len(needs), alone, cumulative, pool.matching(first),
            wave=plan.dra_wave(ns.name), before=tuple(before[-BEFORE_NAMED:]) if ns.name in planned else (),
            before_count=len(before) if ns.name in planned else 0, planned=ns.name in planned)
        if ns.name in planned:
            before.append(ns.name)
    if current and any(not c.cumulative.fits for c in result.values()):
        _with_moves(ctx, result, selectors, index, by_ns, devices, needs_of, namespaces, committed)
    ctx.__dict__["_capacity"] = result
    return result


def _with_moves(ctx: CheckContext, result: dict[str, NamespaceCapacity], selectors: list[Selector],
                index: dict[Selector, int], by_ns: dict[str, list[tuple[Selector, int, int]]],
                devices: dict[str, list[Device]], needs_of: dict[str, list[PodNeed]], namespaces: list[Namespace],
                committed: dict[str, dict[str, int]]) -> None:
    """The same simulation with the GPUs the mover may move (bridge.report.supply), alone and in wave order: the
    moves a namespace's pods take are counted per node (`Pool.moved`), so the split commands cover the namespace
    and every one before it."""
    supply = ctx.supply
    by_controller = ctx.split_controller.acting
    if not any(supply.may_change(n, by_controller) for n in supply.views):
        return  # no bridge node the mover may change (or none whose split status can be read)
    mv = _Movable(ctx, selectors, devices, supply, by_controller, committed)
    running = mv.base.copy()
    room = dict(mv.room_left)
    for ns in namespaces:
        cap = result[ns.name]
        needs = needs_of[ns.name]
        cumulative: FitResult | None = None
        if cap.planned:
            mv.add_own(running, ns.name, mv.extras(ns.name, room))
            cumulative = running.fit(needs)
        if cap.alone.fits and cap.cumulative.fits:
            continue
        freed = mv.extras(ns.name, dict(mv.room_left))  # free GPUs first, then its own within the floor's room
        first = index[by_ns[ns.name][0][0]]
        matching = {n for n in set(mv.free) | set(freed) if n in mv.changeable and mv.vector[n][first]}
        p = mv.base.copy()
        mv.add_own(p, ns.name, freed)
        alone = p.fit(needs)
        moved = running.moved if cumulative is not None else p.moved
        per_node = {n: k for n, k in moved.items() if k}
        result[ns.name] = replace(cap, moves=Moves(
            "controller" if by_controller else "operator",
            sum(mv.free.get(n, 0) + freed.get(n, 0) for n in matching), len(matching),
            sum(freed.get(n, 0) for n in matching), alone, cumulative, per_node, dict(mv.held_back)))
