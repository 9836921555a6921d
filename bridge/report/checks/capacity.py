"""DRB032: can the DRA side hold each namespace's GPU demand?

The DRA side is what ResourceSlices publish now (`--assume-split current`, the default), every GPU of every GPU
node (`all`), or N devices per GPU node (`N`). Nodes without published devices get devices derived from their GFD
labels (and nodes where the bridge already publishes some devices get copies of those). Nodes owned by another DRA
driver keep that driver's devices only. Each workload's pods need `nvidia.com/gpu` devices matching the bridge
DeviceClass's selectors AND the workload's translated GFD selectors, all on one node.

Namespaces are simulated alone and cumulatively in wave order (dra first, then shadow, then legacy by increasing
demand), so a namespace that fits alone but not after the ones before it is named too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from bridge.report.cel import gfd_devices
from bridge.report.checks.context import CheckContext
from bridge.report.features import BRIDGE_DRIVER, GPU
from bridge.report.findings import Finding, ObjectRef, rule
from bridge.report.model import Device, Namespace
from bridge.report.simulate import FitResult, PodNeed, Pool


@dataclass(frozen=True)
class NamespaceCapacity:
    namespace: str
    gpus: int
    pods: int
    alone: FitResult
    cumulative: FitResult
    matching_devices: int  # DRA-side devices matching this namespace's (first) selector


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


def wave_order(namespaces: list[Namespace]) -> list[Namespace]:
    rank = {"dra": 0, "shadow": 1, "legacy": 2}
    return sorted(namespaces, key=lambda n: (rank[n.mode], n.demand.get(GPU, 0), n.name))


def simulate_capacity(ctx: CheckContext) -> dict[str, NamespaceCapacity]:
    cached = ctx.__dict__.get("_capacity")
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    by_ns: dict[str, list[tuple[str, int, int]]] = {}  # ns -> [(cel, gpus per pod, pods)]
    for w in ctx.gpu_workloads:
        if w.gpus_per_pod and w.replicas:
            by_ns.setdefault(w.namespace, []).append((ctx.request_cel(w), w.gpus_per_pod, w.replicas))
    selectors = sorted({cel for items in by_ns.values() for cel, _, _ in items})
    index = {cel: i for i, cel in enumerate(selectors)}
    devices = dra_side(ctx)
    ev = ctx.evaluator
    pool = Pool.from_nodes(
        ([tuple(ev.matches(s, d) for s in selectors) for d in devs] for devs in devices.values()), len(selectors)
    )
    namespaces = [ctx.model.namespaces[n] for n in by_ns]
    result: dict[str, NamespaceCapacity] = {}
    running = pool.copy()
    for ns in wave_order(namespaces):
        needs = [PodNeed(index[cel], k) for cel, k, pods in by_ns[ns.name] for _ in range(pods)]
        alone = pool.copy().fit(needs)
        cumulative = running.fit(needs)
        first = index[by_ns[ns.name][0][0]]
        result[ns.name] = NamespaceCapacity(
            ns.name, sum(p.devices for p in needs), len(needs), alone, cumulative, pool.matching(first)
        )
    ctx.__dict__["_capacity"] = result
    return result


@rule("DRB032", "DRA capacity for the namespace's GPU demand")
def capacity(ctx: CheckContext) -> Iterator[Finding]:
    split = ctx.options.assume_split
    split_txt = {"current": "the current split", "all": "split all"}.get(split, f"split {split} per node")
    for name, cap in simulate_capacity(ctx).items():
        ns = ctx.model.namespaces[name]
        ref = ObjectRef("Namespace", "", name)
        details = {"gpus": cap.gpus, "pods": cap.pods, "matchingDevices": cap.matching_devices,
                   "pendingAlone": cap.alone.pending, "pendingCumulative": cap.cumulative.pending, "split": split}
        if not cap.alone.fits:
            severity = "blocker" if ns.mode == "dra" else "warning"
            yield Finding("DRB032", severity, ref,
                          f"needs {cap.gpus} GPUs in {cap.pods} pods; the DRA side at {split_txt} has "
                          f"{cap.matching_devices} matching devices: {cap.alone.pending} pod(s) would stay Pending",
                          "Raise the DRA share on the GPU nodes (kubectl label node NODE dra-bridge.io/dra-devices=all)"
                          " or check the workload's selectors; rerun with --assume-split all to see the whole fleet",
                          details)
        elif not cap.cumulative.fits:
            yield Finding("DRB032", "warning", ref,
                          f"fits alone ({cap.gpus} GPUs) but not together with the namespaces before it in the wave "
                          f"plan at {split_txt}: {cap.cumulative.pending} pod(s) would stay Pending",
                          "Move more GPUs to the DRA side before this wave", details)
