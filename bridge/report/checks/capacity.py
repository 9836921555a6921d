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
from bridge.report.simulate import FitResult, PodNeed, Pool, Vector
from bridge.report.splitcontroller import SplitController
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
    cumulative: FitResult | None  # in wave order (controller only)
    per_node: dict[str, int] = field(default_factory=dict)  # node -> GPUs the simulated pods needed moved there
    held_back: dict[str, int] = field(default_factory=dict)  # pool -> free legacy GPUs the policy's floor keeps


@dataclass(frozen=True)
class NamespaceCapacity:
    namespace: str
    gpus: int
    pods: int
    alone: FitResult
    cumulative: FitResult
    matching_devices: int  # DRA-side devices matching this namespace's (first) selector
    moves: Moves | None = None  # None: everything fits as it is, or a split is assumed


def dra_side(ctx: CheckContext) -> dict[str, list[Device]]:
    split = ctx.options.assume_split
    out: dict[str, list[Device]] = {}
    for node in ctx.model.nodes.values():
        if split == "current" or any(b.startswith("dra:") for b in node.backends):
            if node.devices:
                out[node.name] = list(node.devices)
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


def legacy_device(node: Node) -> Device:
    """What one of the node's legacy-side GPUs would look like published: a copy of a device the bridge publishes
    there, else one derived from the node's GFD labels."""
    mine = [d for d in node.devices if d.driver == BRIDGE_DRIVER]
    if mine:
        return replace(mine[0], name="gpu-moved", source="gfd")
    return gfd_devices(node, 1)[0]


def wave_order(namespaces: list[Namespace]) -> list[Namespace]:
    rank = {"dra": 0, "shadow": 1, "legacy": 2}
    return sorted(namespaces, key=lambda n: (rank[n.mode], n.demand.get(GPU, 0), n.name))


class _Movable:
    """The pools with GPUs that need a move, for one mover (controller or operator)."""

    def __init__(self, ctx: CheckContext, selectors: list[Selector], devices: dict[str, list[Device]],
                 supply: Supply, by_controller: bool) -> None:
        self.supply = supply
        self.by_controller = by_controller
        self.free, self.held_back = supply.movable(by_controller)
        self.changeable = {n for n in supply.views if supply.may_change(n, by_controller)}
        self.vector: dict[str, Vector] = {}
        for name in self.changeable:
            node = ctx.model.nodes[name]
            self.vector[name] = _vectors(ctx, selectors, name, [legacy_device(node)])[0] + (True,)
        names = sorted(set(devices) | self.changeable)
        rows = []
        for name in names:
            now = [v + (False,) for v in _vectors(ctx, selectors, name, devices.get(name, []))]
            rows.append(now + [self.vector[name]] * self.free.get(name, 0) if name in self.vector else now)
        self.base = Pool.from_nodes(rows, len(selectors), [n if n in self.changeable else None for n in names])
        self.room_left = self._room_left()

    def _room_left(self) -> dict[str, int | None]:
        room = self.supply.room(self.by_controller)
        used: dict[str, int] = defaultdict(int)
        for name, n in self.free.items():
            used[self.supply.views[name].pool] += n
        return {pool: None if r is None else max(0, r - used[pool]) for pool, r in room.items()}

    def extras(self, namespace: str, room: dict[str, int | None]) -> dict[str, int]:
        """GPUs the namespace's own pods free on changeable nodes, within `room` (consumed)."""
        out: dict[str, int] = {}
        for name, held in sorted(self.supply.held_legacy.get(namespace, {}).items()):
            if name not in self.changeable:
                continue
            v = self.supply.views[name]
            n = min(held, v.legacy_held)
            left = room.get(v.pool)
            if left is not None:
                n = min(n, left)
                room[v.pool] = left - n
            if n > 0:
                out[name] = n
        return out


def simulate_capacity(ctx: CheckContext) -> dict[str, NamespaceCapacity]:
    cached = ctx.__dict__.get("_capacity")
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    by_ns: dict[str, list[tuple[Selector, int, int]]] = {}  # ns -> [(selector, gpus per pod, pods)]
    for w in ctx.gpu_workloads:
        if w.gpus_per_pod and w.replicas:
            by_ns.setdefault(w.namespace, []).append(((ctx.request_cel(w), w.spec.placement), w.gpus_per_pod,
                                                      w.replicas))
    selectors = sorted({sel for items in by_ns.values() for sel, _, _ in items}, key=_selector_order)
    index = {sel: i for i, sel in enumerate(selectors)}
    devices = dra_side(ctx)
    pool = Pool.from_nodes((_vectors(ctx, selectors, name, devs) for name, devs in devices.items()), len(selectors))
    namespaces = wave_order([ctx.model.namespaces[n] for n in by_ns])
    needs_of: dict[str, list[PodNeed]] = {}
    result: dict[str, NamespaceCapacity] = {}
    running = pool.copy()
    for ns in namespaces:
        needs = needs_of[ns.name] = [PodNeed(index[sel], k) for sel, k, pods in by_ns[ns.name] for _ in range(pods)]
        alone = pool.copy().fit(needs)
        cumulative = running.fit(needs)
        first = index[by_ns[ns.name][0][0]]
        result[ns.name] = NamespaceCapacity(
            ns.name, sum(p.devices for p in needs), len(needs), alone, cumulative, pool.matching(first)
        )
    if ctx.options.assume_split == "current" and any(not c.cumulative.fits for c in result.values()):
        _with_moves(ctx, result, selectors, index, by_ns, devices, needs_of, namespaces)
    ctx.__dict__["_capacity"] = result
    return result


def _with_moves(ctx: CheckContext, result: dict[str, NamespaceCapacity], selectors: list[Selector],
                index: dict[Selector, int], by_ns: dict[str, list[tuple[Selector, int, int]]],
                devices: dict[str, list[Device]],
                needs_of: dict[str, list[PodNeed]], namespaces: list[Namespace]) -> None:
    if not any("bridge" in n.backends and n.split_status is not None for n in ctx.model.nodes.values()):
        return  # no bridge node publishes a readable split status: nothing is known to be movable
    supply = ctx.supply
    by_controller = ctx.split_controller.acting
    if not any(supply.may_change(n, by_controller) for n in supply.views):
        return  # no bridge node the mover may change (or none whose split status can be read)
    mv = _Movable(ctx, selectors, devices, supply, by_controller)
    running: Pool | None = None
    room = dict(mv.room_left)
    if by_controller:
        running = mv.base.copy()
    for ns in namespaces:
        cap = result[ns.name]
        needs = needs_of[ns.name]
        extras = mv.extras(ns.name, room) if running is not None else {}
        for name, n in extras.items():
            assert running is not None
            running.add(name, [mv.vector[name]] * n)
        cumulative = running.fit(needs) if running is not None else None
        if cap.alone.fits and cap.cumulative.fits:
            continue
        freed = mv.extras(ns.name, dict(mv.room_left))  # free GPUs first, then its own within the floor's room
        first = index[by_ns[ns.name][0][0]]
        matching = {n for n in set(mv.free) | set(freed) if mv.vector[n][first]}
        alone = cap.alone
        per_node: dict[str, int] = {}
        if matching:
            p = mv.base.copy()
            for name, n in freed.items():
                p.add(name, [mv.vector[name]] * n)
            alone = p.fit(needs)
            per_node = {n: k for n, k in p.moved.items() if k}
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


def annotate_commands(ctx: CheckContext, per_node: dict[str, int]) -> list[str]:
    """`kubectl annotate` commands that raise each node's split by the moves the simulation used there."""
    out = []
    for name in sorted(per_node, key=lambda n: (-per_node[n], n)):
        view = ctx.supply.views[name]
        target = view.dra + per_node[name]
        value = "all" if target >= view.total else str(target)
        out.append(f"kubectl annotate node {name} {SPLIT_LABEL}={value} --overwrite")
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


@rule("DRB032", "DRA capacity for the namespace's GPU demand")
def capacity(ctx: CheckContext) -> Iterator[Finding]:
    split = ctx.options.assume_split
    split_txt = {"current": "the current split", "all": "split all"}.get(split, f"split {split} per node")
    controller = ctx.split_controller
    for name, cap in simulate_capacity(ctx).items():
        ns = ctx.model.namespaces[name]
        ref = ObjectRef("Namespace", "", name)
        m = cap.moves
        details: dict[str, object] = {
            "gpus": cap.gpus, "pods": cap.pods, "matchingDevices": cap.matching_devices,
            "pendingAlone": cap.alone.pending, "pendingCumulative": cap.cumulative.pending, "split": split}
        if split == "current":
            details["controller"] = controller.state
            details["controllerEvidence"] = controller.evidence
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
        if not cap.alone.fits:
            if split != "current":
                yield Finding("DRB032", severity, ref,
                              f"{demand}; the DRA side at {split_txt} has {cap.matching_devices} matching devices: "
                              f"{cap.alone.pending} pod(s) would stay Pending",
                              "Raise the DRA share on the GPU nodes (kubectl annotate node NODE "
                              f"{SPLIT_LABEL}=all --overwrite) or check the workload's selectors", details)
                continue
            now = f"{demand}: {cap.matching_devices} matching on DRA now"
            if m is not None and m.by == "controller":
                moved = _moves_text(m, "the controller")
                if m.alone.fits:
                    yield Finding("DRB032", "info", ref, f"{now}; {moved}, enough for all of them "
                                  f"({controller.evidence})",
                                  "Nothing to do: the controller moves GPUs as the pods wait (kubectl get events -A "
                                  "--field-selector reason=SplitTargetChanged)", details)
                    continue
                yield Finding("DRB032", severity, ref,
                              f"{now}; {moved}: {m.alone.pending} pod(s) would still stay Pending"
                              + _limits_text(ctx, m), _short_fix(ctx, m), details)
                continue
            # No controller acts: the split must be raised by hand.
            why = _controller_words(controller)
            if m is not None and m.per_node:
                commands = annotate_commands(ctx, m.per_node)
                details["commands"] = commands
                served = "all of them" if m.alone.fits else f"all but {m.alone.pending} pod(s)"
                yield Finding("DRB032", severity, ref,
                              f"{now}, so {cap.alone.pending} pod(s) would stay Pending; {why}: raising the split by "
                              f"hand {_moves_text(m, '')[1:]}, enough for {served}",
                              f"Raise the split: {_commands_text(commands)}; or run bridge controller (without "
                              "--dry-run) to move GPUs as pods wait", details)
                continue
            frozen = f" ({_frozen_text(ctx)})" if controller.acting and ctx.supply.frozen_nodes() else ""
            yield Finding("DRB032", severity, ref,
                          f"{now}, so {cap.alone.pending} pod(s) would stay Pending; {why}, and no bridge node "
                          f"{'it may change ' if controller.acting else ''}has free legacy GPUs these pods match "
                          "and can run on"
                          f"{frozen or _unknown_text(ctx)}",
                          "Hand more GPU nodes to the bridge and raise their split (kubectl annotate node NODE "
                          f"{SPLIT_LABEL}=N --overwrite), free legacy GPUs on bridge nodes, or check the workload's "
                          "selectors; rerun with --assume-split all to see the whole fleet", details)
        elif not cap.cumulative.fits:
            if m is not None and m.cumulative is not None:
                if m.cumulative.fits:
                    yield Finding("DRB032", "info", ref,
                                  f"fits alone ({cap.gpus} GPUs); together with the namespaces before it in the wave "
                                  f"plan it fits only with the GPUs the controller can move ({controller.evidence})",
                                  "Nothing to do: the controller moves GPUs as the pods wait", details)
                    continue
                yield Finding("DRB032", "warning", ref,
                              f"fits alone ({cap.gpus} GPUs) but not together with the namespaces before it in the "
                              f"wave plan, even with the GPUs the controller can move: {m.cumulative.pending} pod(s) "
                              "would stay Pending" + _limits_text(ctx, m), _short_fix(ctx, m), details)
                continue
            yield Finding("DRB032", "warning", ref,
                          f"fits alone ({cap.gpus} GPUs) but not together with the namespaces before it in the wave "
                          f"plan at {split_txt}: {cap.cumulative.pending} pod(s) would stay Pending",
                          "Move more GPUs to the DRA side before this wave", details)


def _placement(ctx: CheckContext, namespace: str) -> list[str]:
    """The node selectors and required affinities that keep the namespace's GPU pods to some nodes, in words
    (gathered for every namespace in one pass, once per report)."""
    cached = ctx.__dict__.get("_placement_text")
    if not isinstance(cached, dict):
        by_ns: dict[str, set[str]] = defaultdict(set)
        for w in ctx.gpu_workloads:
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


def _short_fix(ctx: CheckContext, m: Moves) -> str:
    fixes = ["Free legacy GPUs on bridge nodes or hand more GPU nodes to the bridge"]
    if m.held_back:
        fixes.append("lower the policy's minimum legacy share")
    if ctx.supply.frozen_nodes():
        fixes.append("unpin nodes the controller may change (kubectl annotate node NODE dra-bridge.io/split-pinned-)")
    fixes.append("or check the workload's selectors")
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
