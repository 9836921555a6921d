"""DRB032: can the DRA side hold each namespace's GPU demand? DRB037: do the pods pending for the device plugin get
GPUs?

**DRB032.** The DRA side is what ResourceSlices publish now (`--assume-split current`, the default), every GPU of
every GPU node (`all`), or N devices per GPU node (`N`). Nodes without published devices get devices derived from
their GFD labels (and nodes where the bridge already publishes some devices get copies of those). Nodes owned by
another DRA driver keep that driver's devices only. Each workload's pods need `nvidia.com/gpu` devices (or, for pods
already translated, the devices their claims request) matching the bridge DeviceClass's selectors AND the
workload's translated GFD selectors (or its claims' own selectors), all on one node.

Namespaces are simulated alone and cumulatively in wave order (dra first, then shadow, then legacy by increasing
demand), so a namespace that fits alone but not after the ones before it is named too.

**With the current split**, a namespace that does not fit the DRA side as it is may still be served: GPUs on the
legacy side can move (bridge.report.supply says which, with the controller's own view of each node). When
`bridge controller` runs and acts (bridge.report.splitcontroller), the simulation is run again with the GPUs it may
move (nodes it may change, the policy's floors) added as devices that need a move, and the finding says both: what
the DRA side has now and what the controller can move ("0 on DRA now; the controller can move 6 free legacy GPUs on
2 nodes"). A namespace that fits only with those moves gets an info finding, not a warning: the controller serves
it as its pods wait. When no controller acts, the same simulation with every node an operator may change gives the
exact commands that raise the split (`kubectl annotate node ... dra-bridge.io/dra-devices=N`, N = the node's DRA
count now plus the moves the simulated pods used there).

**DRB037.** Pods pending now that ask `nvidia.com/gpu` are the legacy side's demand. What the controller would do
with them comes from its own decision core (bridge.report.supply): fit as things are (nothing to say), served by
moving free DRA GPUs back to the legacy side (info when the controller acts; a warning with the commands that lower
the split when none does), or blocked (a warning with the controller's reason). Pods that the free legacy GPUs of a
node without the bridge can take are left to the scheduler.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from bridge.kvalues.placement import Constraints, constraints_of
from bridge.kvalues.podgpu import pod_devices
from bridge.report.cel import gfd_devices
from bridge.report.checks.context import CheckContext
from bridge.report.features import BRIDGE_DRIVER, GPU, SPLIT_LABEL
from bridge.report.findings import Finding, ObjectRef, rule
from bridge.report.model import Device, Namespace, Node
from bridge.report.offers import DoubleOffer
from bridge.report.simulate import FitResult, PodNeed, Pool, Vector
from bridge.report.splitcontroller import SplitController
from bridge.report.waves import flips, wave_order
from bridge.report.supply import Supply

MAX_COMMANDS = 5  # annotate commands spelled out in one fix; the rest are counted

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
    before: tuple[str, ...] = ()  # the namespaces whose pods are on DRA before its wave, in wave order
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
    plan = flips([ns for ns in namespaces if not everything and ns.name not in blocked])
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
            wave=plan.dra_wave(ns.name), before=tuple(before) if ns.name in planned else (),
            planned=ns.name in planned)
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


# ---- DRB032 ---------------------------------------------------------------------------------------------------

def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _controller_words(c: SplitController) -> str:
    """Why no controller moves GPUs here, with the evidence, as a clause."""
    head, tail = {"acting": ("bridge controller runs", ""),
                  "dry-run": ("bridge controller runs in dry run", " and changes nothing"),
                  "unknown-mode": ("a bridge controller runs", " in a mode the report cannot tell, so its moves are "
                                   "not counted"),
                  "not-running": ("bridge controller does not run", ""),
                  "absent": ("no bridge controller is known to run", "")}[c.state]
    return f"{head} ({c.evidence}){tail}"


def split_commands(ctx: CheckContext, per_node: dict[str, int]) -> list[str]:
    """The commands that raise each node's split by the moves the simulation used there, above what the node asks
    for now: `kubectl annotate`, or `kubectl label` where the operator set the split as a label (an annotation would
    override it silently, DRB013)."""
    out = []
    for name in sorted(per_node, key=lambda n: (-per_node[n], n)):
        view = ctx.supply.views[name]
        node = ctx.model.nodes[name]
        result = node.split_result()
        now = max(view.dra, result.wanted or 0) if result is not None else view.dra
        target = now + per_node[name]
        value = "all" if target >= view.total else str(target)
        verb = "label" if node.split_request is not None and node.split_request.source == "label" else "annotate"
        out.append(f"kubectl {verb} node {name} {SPLIT_LABEL}={value} --overwrite")
    return out


def _commands_text(commands: list[str]) -> str:
    shown = "; ".join(commands[:MAX_COMMANDS])
    more = len(commands) - MAX_COMMANDS
    return shown + (f" (and {more} more node(s): -o json lists them in details.commands)" if more > 0 else "")


def _moves_text(m: Moves, who: str) -> str:
    freed = (f" ({m.devices - m.freed} free now, {m.freed} held by this namespace's own device-plugin pods and freed "
             "as they are replaced)") if m.freed else ""
    what = "free legacy GPU" if not m.freed else "legacy GPU"
    return f"{who} can move {_plural(m.devices, what)} on {_plural(m.nodes, 'node')}{freed}"


def _together(cap: NamespaceCapacity) -> str:
    """"together with team-speech, team-nlp (on DRA before its wave 3)": the namespaces before it, by name."""
    names = ", ".join(cap.before[:5]) + (f" and {len(cap.before) - 5} more" if len(cap.before) > 5 else "")
    when = f"before its wave {cap.wave}" if cap.wave is not None else "already"
    return f"together with {names} (on DRA {when})"


def _short_by(fit: FitResult) -> str:
    return f"{fit.pending} pod(s) asking {fit.pending_devices} GPU(s)"


@rule("DRB032", "DRA capacity for the namespace's GPU demand", late=True)
def capacity(ctx: CheckContext) -> Iterator[Finding]:
    """Only namespaces the wave plan moves (or already in dra) are judged together with those before them; one a
    blocker holds back is judged alone. With the current split, the fix is the split commands that make it fit
    (`kubectl annotate|label node NODE dra-bridge.io/dra-devices=N`), covering the namespaces before it too."""
    split = ctx.options.assume_split
    split_txt = {"current": "the current split", "all": "split all"}.get(split, f"split {split} per node")
    controller = ctx.split_controller
    for name, cap in simulate_capacity(ctx).items():
        short = not cap.alone.fits
        together = not short and not cap.cumulative.fits
        if not short and not together:
            continue
        ns = ctx.model.namespaces[name]
        ref = ObjectRef("Namespace", "", name)
        m = cap.moves
        fit = cap.alone if short else cap.cumulative
        details: dict[str, object] = {
            "gpus": cap.gpus, "pods": cap.pods, "matchingDevices": cap.matching_devices,
            "pendingAlone": cap.alone.pending, "pendingCumulative": cap.cumulative.pending, "split": split,
            "planned": cap.planned, "before": list(cap.before)}
        if cap.wave is not None:
            details["wave"] = cap.wave
        if split == "current":
            details["controller"] = controller.state
            details["controllerEvidence"] = controller.evidence
        with_moves = None if m is None else (m.cumulative if cap.planned else m.alone)
        if m is not None:
            details.update({"movableDevices": m.devices, "movableNodes": m.nodes, "freedByNamespace": m.freed,
                            "movedBy": m.by, "pendingAloneWithMoves": m.alone.pending})
            if m.cumulative is not None:
                details["pendingCumulativeWithMoves"] = m.cumulative.pending
            if m.held_back:
                details["heldBackByPolicy"] = dict(sorted(m.held_back.items()))
        severity = "blocker" if ns.mode == "dra" else "warning"
        demand = f"needs {cap.gpus} GPUs in {_plural(cap.pods, 'pod')}"
        placement = _placement(ctx, name)
        if placement:
            details["placement"] = placement
            demand += f" (only on nodes matching {' / '.join(placement)})"
        if short:
            now = f"{demand}: {cap.matching_devices} matching on DRA" + (" now" if split == "current" else
                                                                         f" at {split_txt}")
            head = f"{now}, so {_short_by(fit)} would stay Pending"
        else:
            now = f"fits alone ({cap.gpus} GPUs); {_together(cap)} it does not fit as things are"
            head = f"fits alone ({cap.gpus} GPUs) but not {_together(cap)}: {_short_by(fit)} would stay Pending"
        if split != "current":
            yield Finding("DRB032", severity, ref, head,
                          f"Raise the DRA share on the GPU nodes by at least {fit.pending_devices} matching GPUs "
                          f"(kubectl annotate node NODE {SPLIT_LABEL}=all --overwrite), or check the workload's "
                          "selectors", details)
            continue
        if m is not None and m.by == "controller" and with_moves is not None:
            moved = _moves_text(m, "the controller")
            if with_moves.fits:
                yield Finding("DRB032", "info", ref, f"{now}; {moved}, enough for all of them ({controller.evidence})",
                              "Nothing to do: the controller moves GPUs as the pods wait (kubectl get events -A "
                              "--field-selector reason=SplitTargetChanged)", details)
                continue
            yield Finding("DRB032", severity, ref,
                          f"{head}; {moved}: {_short_by(with_moves)} would still stay Pending" + _limits_text(ctx, m),
                          _short_fix(ctx, m, with_moves), details)
            continue
        why = _controller_words(controller)
        if m is not None and m.per_node and with_moves is not None:
            commands = split_commands(ctx, m.per_node)
            details["commands"] = commands
            served = "all of them" if with_moves.fits else f"all but {_short_by(with_moves)}"
            rest = "" if with_moves.fits else (f"; then {_more_text(with_moves)}")
            yield Finding("DRB032", severity, ref,
                          f"{head}; {why}: raising the split by hand {_moves_text(m, '')[1:]}, enough for {served}",
                          f"Raise the split: {_commands_text(commands)}{rest} (or run bridge controller without "
                          "--dry-run to move GPUs as pods wait)", details)
            continue
        frozen = f" ({_frozen_text(ctx)})" if controller.acting and ctx.supply.frozen_nodes() else ""
        yield Finding("DRB032", severity, ref,
                      f"{head}; {why}, and no bridge node {'it may change ' if controller.acting else ''}has free "
                      f"legacy GPUs these pods match and can run on{frozen or _unknown_text(ctx)}",
                      _more_text(fit)[0].upper() + _more_text(fit)[1:] + "; rerun with --assume-split all to see the "
                      "whole fleet", details)


def _more_text(fit: FitResult) -> str:
    return (f"put {fit.pending_devices} more GPU(s) its pods match and can run on on the DRA side: hand GPU nodes to "
            f"the bridge (migration-guides/01-first-node) and raise their split (kubectl annotate node NODE "
            f"{SPLIT_LABEL}=N --overwrite), or free legacy GPUs on bridge nodes")


def _placement(ctx: CheckContext, namespace: str) -> list[str]:
    """The node selectors and required affinities that keep the namespace's GPU pods to some nodes, in words
    (gathered for every namespace in one pass, once per report)."""
    cached = ctx.__dict__.get("_placement_text")
    if not isinstance(cached, dict):
        by_ns: dict[str, set[str]] = defaultdict(set)
        for w in ctx.translatable:
            text = w.spec.placement.describe() if w.gpus_per_pod and w.replicas else ""
            if text:
                by_ns[w.namespace].add(text)
        cached = ctx.__dict__["_placement_text"] = {ns: sorted(texts) for ns, texts in by_ns.items()}
    return list(cached.get(namespace, ()))


def _unknown_text(ctx: CheckContext) -> str:
    """Bridge nodes whose free GPUs cannot be told (no readable split status), as a parenthesis (once per report:
    every namespace that does not fit says the same)."""
    cached = ctx.__dict__.get("_unknown_text")
    if isinstance(cached, str):
        return cached
    unknown = sorted(n for n, v in ctx.supply.views.items() if v.frozen == "unknown")
    text = "" if not unknown else (
        f" ({_plural(len(unknown), 'bridge node')} publish no readable split status, so their free GPUs are not "
        f"known: {', '.join(unknown[:3])}{', ...' if len(unknown) > 3 else ''})")
    ctx.__dict__["_unknown_text"] = text
    return text


def _limits_text(ctx: CheckContext, m: Moves) -> str:
    parts = []
    if m.held_back:
        parts.append("the policy keeps " + ", ".join(f"{n} free legacy GPU(s) in pool {p or '(default)'}"
                                                     for p, n in sorted(m.held_back.items()))
                     + f" ({ctx.split_controller.policy_text()})")
    if ctx.supply.frozen_nodes():
        parts.append(_frozen_text(ctx))
    return f"; {'; '.join(parts)}" if parts else ""


def _frozen_text(ctx: CheckContext) -> str:
    frozen = ctx.supply.frozen_nodes()
    names = sorted(frozen)
    return (f"it may not change {_plural(len(names), 'bridge node')} ({', '.join(names[:3])}"
            f"{', ...' if len(names) > 3 else ''}: {frozen[names[0]]})")


def _short_fix(ctx: CheckContext, m: Moves, fit: FitResult) -> str:
    fixes = [f"Put {fit.pending_devices} more GPU(s) these pods match within the controller's reach: free legacy GPUs "
             "on bridge nodes or hand more GPU nodes to the bridge (migration-guides/01-first-node)"]
    if m.held_back:
        fixes.append("lower the policy's minimum legacy share (bridge controller --min-legacy-share, or its policy "
                     "ConfigMap)")
    if ctx.supply.frozen_nodes():
        fixes.append("unpin nodes the controller may change (kubectl annotate node NODE dra-bridge.io/split-pinned-)")
    return "; ".join(fixes)


# ---- DRB037 ---------------------------------------------------------------------------------------------------

def _fits_elsewhere(ctx: CheckContext, pods: list[tuple[str, int]], spec_of: dict[str, dict[str, object]]) -> set[str]:
    """Pending legacy pods that free `nvidia.com/gpu` on a node without the bridge can take (the scheduler will)."""
    free: dict[str, int] = {}
    for node in ctx.model.nodes.values():
        if "bridge" not in node.backends and node.allocatable.get(GPU, 0) > 0:
            free[node.name] = node.allocatable[GPU]
    if not free:
        return set()
    for pod in ctx.model.data.of("Pod"):
        spec = pod.get("spec") or {}
        name = spec.get("nodeName")
        if name in free and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            free[str(name)] -= pod_devices(spec, GPU)
    out = set()
    for key, gpus in sorted(pods, key=lambda kp: -kp[1]):
        admitted = ctx.admitted(constraints_of(spec_of.get(key) or {}))
        for name in sorted(free, key=lambda n: free[n]):
            if free[name] >= gpus and name in admitted:
                free[name] -= gpus
                out.add(key)
                break
    return out


@rule("DRB037", "GPUs for pods pending on the device plugin")
def legacy_pending(ctx: CheckContext) -> Iterator[Finding]:
    if ctx.options.assume_split != "current":
        return
    if not ctx.model.unbound_pods:
        return
    supply = ctx.supply
    legacy = {k: p for k, p in supply.pending.items() if p.api == "legacy"}
    if not legacy:
        return
    decision = supply.decision
    placed = {p.pod: p for p in decision.placements}
    blocked = {b.pod: b for b in decision.blocked}
    specs = {f"{(p.get('metadata') or {}).get('namespace', '')}/{(p.get('metadata') or {}).get('name', '')}":
             p.get("spec") or {} for p in ctx.model.data.of("Pod") if not (p.get("spec") or {}).get("nodeName")}
    waiting = [(k, p.gpus) for k, p in legacy.items() if k in blocked or (k in placed and placed[k].moves)]
    elsewhere = _fits_elsewhere(ctx, waiting, specs)
    controller = ctx.split_controller
    by_ns: dict[str, list[str]] = defaultdict(list)
    for key, _ in waiting:
        if key not in elsewhere:
            by_ns[legacy[key].namespace].append(key)
    changes = {c.node: c for c in decision.changes if c.direction == "to-legacy"}
    for ns, keys in sorted(by_ns.items()):
        keys.sort()
        gpus = sum(legacy[k].gpus for k in keys)
        served = [k for k in keys if k in placed]
        stuck = [k for k in keys if k in blocked]
        nodes = sorted({placed[k].node for k in served})
        moves = sum(placed[k].moves for k in served)
        details: dict[str, object] = {"pods": [k.split("/", 1)[1] for k in keys], "gpus": gpus,
                                      "servedByMoves": len(served), "blocked": len(stuck),
                                      "controller": controller.state}
        names = ", ".join(k.split("/", 1)[1] for k in keys[:3]) + (", ..." if len(keys) > 3 else "")
        head = f"{len(keys)} pending pod(s) asking {GPU} ({gpus} GPUs: {names}) fit no free GPU on the legacy side"
        reasons = "; ".join(sorted({blocked[k].message for k in stuck})[:2])
        ref = ObjectRef("Namespace", "", ns)
        if controller.acting:
            if not stuck:
                yield Finding("DRB037", "info", ref,
                              f"{head}; the controller can move {_plural(moves, 'free DRA GPU')} back on "
                              f"{_plural(len(nodes), 'node')} for them ({controller.evidence})",
                              "Nothing to do: the controller moves GPUs as the pods wait", details)
                continue
            yield Finding("DRB037", "warning", ref,
                          f"{head}; the controller cannot serve {len(stuck)} of them: {reasons}",
                          "Free GPUs on the DRA side, lower the DRA share, or add GPU nodes", details)
            continue
        why = _controller_words(controller)
        commands = [f"kubectl annotate node {c.node} {SPLIT_LABEL}={c.target} --overwrite"
                    for n, c in sorted(changes.items()) if n in nodes]
        details["commands"] = commands
        if commands:
            yield Finding("DRB037", "warning", ref,
                          f"{head}, and {why}; moving {_plural(moves, 'free DRA GPU')} back on "
                          f"{_plural(len(nodes), 'node')} serves {'them' if not stuck else f'{len(served)} of them'}",
                          f"Lower the split: {_commands_text(commands)}; or run bridge controller (without "
                          "--dry-run)", details)
            continue
        yield Finding("DRB037", "warning", ref, f"{head}, and {why}; no free DRA GPU can take them: {reasons}",
                      "Free GPUs, lower the DRA share on nodes whose DRA GPUs are idle, or add GPU nodes", details)
