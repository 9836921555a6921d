"""DRB032: can the DRA side hold each namespace's GPU demand? DRB037: do the pods pending for the device plugin get
GPUs?

**DRB032** (the simulation is `bridge.report.checks.simulation`). The DRA side is what ResourceSlices publish now
(`--assume-split current`, the default), every GPU of every GPU node (`all`), or N devices per GPU node (`N`). Nodes
without published devices get devices derived from their GFD labels (and nodes where the bridge already publishes
some devices get copies of those). Nodes owned by another DRA driver keep that driver's devices only; GPUs a bridge
node offers through both APIs (DRB017) are not capacity. Each workload's pods need `nvidia.com/gpu` devices (or, for
pods already translated, the devices their claims request) matching the bridge DeviceClass's selectors AND the
workload's translated GFD selectors (or its claims' own selectors), all on one node the pod can run on: its node
selector, required node affinity and untolerated taints keep it off the others (`bridge.kvalues.placement`, after the
GFD labels the webhook moves into the claim). Workloads opted out (`dra-bridge.io/translate: "false"`) stay legacy
and ask nothing of the DRA side.

Each namespace is simulated alone, and in the wave plan's order (`bridge.report.waves`: dra namespaces first, then
the ones the plan moves), so a namespace that fits alone but not after the ones before it is named, with them. A
namespace a blocker holds back is not in the plan: it is judged alone only. GPUs a node's requested split already
puts on the DRA side while the namespace's own pods still hold them count as its capacity (the daemon moves them as
those pods are replaced after the flip).

**With the current split**, a namespace that does not fit the DRA side as it is may still be served: GPUs on the
legacy side can move (bridge.report.supply says which, with the controller's own view of each node). When
`bridge controller` runs and acts (bridge.report.splitcontroller), the simulation is run again with the GPUs it may
move (nodes it may change, the policy's floors) added as devices that need a move, and the finding says both: what
the DRA side has now and what the controller can move ("0 on DRA now; the controller can move 6 free legacy GPUs on
2 nodes"). A namespace that fits only with those moves gets an info finding, not a warning: the controller serves
it as its pods wait. When no controller acts, the same simulation, in wave order, with every node an operator may
change gives the exact commands that raise the split enough for the namespace and those before it (`kubectl
annotate node ... dra-bridge.io/dra-devices=N`, or `kubectl label` where the split is a label; N = what the node asks
for now plus the moves the simulated pods used there). Applied, the next run finds the namespace fits.

**DRB037.** Pods pending now that ask `nvidia.com/gpu` are the legacy side's demand. What the controller would do
with them comes from its own decision core (bridge.report.supply): fit as things are (nothing to say), served by
moving free DRA GPUs back to the legacy side (info when the controller acts; a warning with the commands that lower
the split when none does), or blocked (a warning with the controller's reason). Pods that the free legacy GPUs of a
node without the bridge can take are left to the scheduler.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from bridge.kvalues.placement import constraints_of
from bridge.kvalues.podgpu import pod_devices
from bridge.report.checks.context import CheckContext
from bridge.report.checks.simulation import Moves, NamespaceCapacity, simulate_capacity
from bridge.report.features import GPU, SPLIT_LABEL
from bridge.report.findings import Finding, ObjectRef, rule
from bridge.report.simulate import FitResult
from bridge.report.splitcontroller import SplitController

MAX_COMMANDS = 5  # annotate commands spelled out in one fix; the rest are counted

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
    more = cap.before_count - len(cap.before)
    names = (f"{more} more and " if more > 0 else "") + ", ".join(cap.before)
    when = f"before its wave {cap.wave}" if cap.wave is not None else "already"
    return f"together with {names} (on DRA {when})"


def _short_by(fit: FitResult) -> str:
    return f"{fit.pending} pod(s) asking {fit.pending_devices} GPU(s)"


@rule("DRB032", "DRA capacity for the namespace's GPU demand", severities=("blocker", "warning", "info"),
      fix="The split commands the finding gives (kubectl annotate|label node NODE dra-bridge.io/dra-devices=N "
          "--overwrite), or bridge controller moving GPUs as pods wait; where no bridge node can serve, more "
          "GPU nodes handed to the bridge.", late=True)
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
            "planned": cap.planned, "before": list(cap.before), "beforeCount": cap.before_count}
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


@rule("DRB037", "GPUs for pods pending on the device plugin", severities=("warning", "info"),
      fix="The commands that lower the split (kubectl annotate node NODE dra-bridge.io/dra-devices=N "
          "--overwrite), or bridge controller; else free GPUs or add GPU nodes.")
def legacy_pending(ctx: CheckContext) -> Iterator[Finding]:
    """Pods pending for the device plugin that no free legacy GPU can take: whether moving free DRA GPUs back serves
    them, and who moves them."""
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
