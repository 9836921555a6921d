"""The GPUs that can change sides: what `bridge controller` (or an operator) can move on each bridge node (pure).

The report asks the questions the controller asks, with the controller's own code, so both agree:

* each bridge node as the controller sees it (`bridge.controller.nodestatus.node_view`: the node daemon's split
  status, the claims allocated on the node and the `nvidia.com/gpu` its bound pods request): the split it will have,
  its free GPUs per side, and whether the controller may change it (`frozen`: pinned by the operator, settling a
  previous target, unknown without a readable status);
* the policy's floor per pool (`Policy.min_legacy`: the minimum legacy share of the pool's GPUs, over the nodes the
  controller can read, as its planner counts them);
* what the controller would do with the pods pending now (`bridge.controller.decide.decide` over
  `bridge.controller.demand.pending_demand`, with no cool-down memory and no rate limit: the report asks what can
  be served, not how fast). Pending pods that fit the free GPUs of their API as things are take those first (the
  controller places them before moving anything), so those GPUs are not counted as movable.

**Movable to DRA** on a node = its free legacy GPUs (after the pending legacy pods that fit there), plus, for one
namespace, the legacy GPUs its own bound pods hold there: when that namespace's pods are replaced through DRA they
free them, and the controller moves freed GPUs like any other. Only on nodes the mover may change: for the
controller, nodes not frozen, and within each pool at most `legacy - floor` GPUs in all; for an operator raising
splits by hand, every node with a readable status (pins and floors are the controller's rules). When a floor leaves
room for fewer GPUs than the pool's nodes offer, the room goes to the nodes with the most first (fewest nodes to
change), by name on ties: the controller chooses per pod, so this says how many, not exactly where.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.controller.decide import decide
from bridge.controller.demand import allocated_by_node, nominated_node, pending_demand
from bridge.controller.model import Decision, NodeView, PendingPod, Policy
from bridge.controller.nodestatus import node_view
from bridge.report.features import GPU, SYSTEM_NAMESPACES
from bridge.report.model import ClusterModel
from bridge.report.splitcontroller import SplitController

Obj = dict[str, Any]
NO_RATE_LIMIT = 10**9


def _key(o: Obj) -> str:
    m = o.get("metadata") or {}
    return f"{m.get('namespace', '')}/{m.get('name', '')}"


@dataclass(frozen=True)
class Supply:
    views: Mapping[str, NodeView]  # every bridge node, as the controller sees it
    floors: Mapping[str, int]  # pool -> GPUs the policy keeps on the legacy side
    pool_legacy: Mapping[str, int]  # pool -> legacy GPUs on nodes the controller can read
    held_legacy: Mapping[str, Mapping[str, int]]  # namespace -> bridge node -> legacy GPUs its bound pods hold
    reserved_legacy: Mapping[str, int]  # node -> free legacy GPUs pending legacy pods fit (they take them first)
    decision: Decision  # what the controller would do with the pods pending now
    pending: Mapping[str, PendingPod] = field(default_factory=dict)  # key -> pending pod

    def free_legacy(self, node: str) -> int:
        v = self.views[node]
        return max(0, v.free("legacy") - self.reserved_legacy.get(node, 0))

    def may_change(self, node: str, by_controller: bool) -> bool:
        frozen = self.views[node].frozen
        return frozen == "" if by_controller else frozen != "unknown"

    def room(self, by_controller: bool) -> dict[str, int | None]:
        """pool -> GPUs that may leave its legacy side (None: no floor applies)."""
        if not by_controller:
            return {}
        return {pool: max(0, self.pool_legacy[pool] - floor) for pool, floor in self.floors.items()}

    def movable(self, by_controller: bool, namespace: str = "") -> tuple[dict[str, int], dict[str, int]]:
        """(node -> GPUs movable to DRA, pool -> free legacy GPUs the floor holds back), see the module docstring;
        with `namespace`, its own held legacy GPUs count too."""
        held = self.held_legacy.get(namespace, {}) if namespace else {}
        candidates: dict[str, dict[str, int]] = defaultdict(dict)  # pool -> node -> candidates
        for name, v in self.views.items():
            if not self.may_change(name, by_controller):
                continue
            n = self.free_legacy(name) + min(held.get(name, 0), v.legacy_held)
            if n > 0:
                candidates[v.pool][name] = n
        room = self.room(by_controller)
        out: dict[str, int] = {}
        held_back: dict[str, int] = {}
        for pool, nodes in candidates.items():
            left = room.get(pool)
            for name in sorted(nodes, key=lambda n: (-nodes[n], n)):
                take = nodes[name] if left is None else min(nodes[name], left)
                if take:
                    out[name] = take
                if left is not None:
                    left -= take
            if left is not None:
                held_back[pool] = sum(nodes.values()) - sum(out.get(n, 0) for n in nodes)
        return out, {p: n for p, n in held_back.items() if n}

    def frozen_nodes(self) -> dict[str, str]:
        """Bridge nodes the controller will not change: name -> why."""
        return {n: f"{v.frozen}: {v.frozen_reason}" for n, v in self.views.items() if v.frozen}


@dataclass(frozen=True)
class BoundGpuPod:
    namespace: str
    name: str
    phase: str
    gpus: int  # nvidia.com/gpu it holds under the device plugin (bridge.kvalues.podgpu)


def bound_gpu_pods(model: ClusterModel) -> dict[str, list[BoundGpuPod]]:
    """bridge node -> the pods bound there, not finished, that hold `nvidia.com/gpu`: one pass over the pods, the
    device-plugin count read only for pods on bridge nodes (the supply and DRB017 share it)."""
    bridge = {n.name for n in model.nodes.values() if "bridge" in n.backends}
    out: dict[str, list[BoundGpuPod]] = defaultdict(list)
    if not bridge:
        return {}
    for node_name, pod in model.bound:  # bound and not finished (`is_bound_and_running`), in input order
        if node_name in bridge:
            n = model.legacy_gpus(pod.get("spec") or {})
            if n:
                meta = pod.get("metadata") or {}
                out[str(node_name)].append(BoundGpuPod(str(meta.get("namespace", "")), str(meta.get("name", "")),
                                                       str((pod.get("status") or {}).get("phase") or ""), n))
    return dict(out)


def build_supply(model: ClusterModel, controller: SplitController,
                 bound: dict[str, list[BoundGpuPod]] | None = None) -> Supply:
    """The pods bound to bridge nodes (`bound_gpu_pods`, computed here when not given) and one pass for the unbound
    ones; the rest of the cluster is not read. The decision core runs without memory (no cool-down, no rate limit),
    so it needs no clock."""
    data = model.data
    bridge = {n.name for n in model.nodes.values() if "bridge" in n.backends}
    requested: dict[str, int] = defaultdict(int)
    held: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    unbound = [pod for pod in model.unbound if (pod.get("metadata") or {}).get("namespace") not in SYSTEM_NAMESPACES]
    for node_name, pods in (bound if bound is not None else bound_gpu_pods(model)).items():
        for p in pods:
            requested[node_name] += p.gpus
            held[p.namespace][node_name] += p.gpus
    for pod in unbound:  # nominated to a node: its GPUs are held there, not demand (bridge.controller.demand)
        node_name = nominated_node(pod)
        if node_name in bridge:
            n = model.legacy_gpus(pod.get("spec") or {})
            if n:
                requested[node_name] += n
                held[str((pod.get("metadata") or {}).get("namespace", ""))][node_name] += n
    claims = data.of("ResourceClaim") if bridge else []
    allocated = allocated_by_node(claims)
    views: dict[str, NodeView] = {}
    for raw in data.of("Node"):
        name = str((raw.get("metadata") or {}).get("name", ""))
        if name in bridge:
            views[name] = node_view(raw, allocated=allocated.get(name, set()), legacy_requested=requested.get(name, 0),
                                    pool_label=controller.pool_label)
    policy = controller.policy
    pool_total: dict[str, int] = defaultdict(int)
    pool_legacy: dict[str, int] = defaultdict(int)
    for v in views.values():
        if v.frozen != "unknown":
            pool_total[v.pool] += v.total
            pool_legacy[v.pool] += v.legacy
    floors = {pool: policy.min_legacy(pool, total) for pool, total in pool_total.items()}

    demand = pending_demand(unbound, {_key(c): c for c in claims},
                            {_key(t): t for t in data.of("ResourceClaimTemplate")}) if unbound else None
    pending = {p.key: p for p in demand.pending} if demand is not None else {}
    unlimited = Policy(policy.min_legacy_share, policy.pools, max_moves_per_minute=NO_RATE_LIMIT, cooldown_s=0.0,
                       max_moves_per_decision=NO_RATE_LIMIT)
    decision = decide(list(views.values()), list(pending.values()), unlimited)
    reserved: dict[str, int] = defaultdict(int)
    for placed in decision.placements:
        asked = pending.get(placed.pod)
        if asked is not None and asked.api == "legacy" and placed.moves == 0:
            reserved[placed.node] += asked.gpus
    return Supply(views, floors, dict(pool_legacy), {k: dict(v) for k, v in held.items()}, dict(reserved), decision,
                  pending)


__all__ = ["NO_RATE_LIMIT", "BoundGpuPod", "Supply", "bound_gpu_pods", "build_supply"]
