"""The controller's picture of the cluster (node views and pending demand), kept up to date from the watch events.

A decision needs, per GPU node, its `NodeView` (bridge.controller.nodestatus: the daemon's status, the devices
allocated claims name there, the GPUs its bound pods request), and the pending demand (bridge.controller.demand).
Rebuilding both from every object at every decision costs O(cluster) (at 5,000 nodes and 40,000 pods, half a
second); a decision after one pod changed should cost O(change). So `ClusterState` takes the informers' events
(ADDED / MODIFIED / DELETED, in any order, duplicates and relists included: an event is an upsert or a delete of
one object) and remembers what each object contributed last time, so an update or a delete takes exactly that back:

* a **Node**: its view is marked stale;
* a **Pod** bound to a node and not finished, or pending and nominated to a node (`legacy_holder_node`): its
  `nvidia.com/gpu` request, added to that node's requested count (the node's view is marked stale); an unbound
  pod: its object (Warning Events name it); a pending pod (`is_pending`): its demand, marked stale, and the claims
  and templates it reads (a reverse index, so a claim or template event marks exactly its readers stale) with its
  queue rank, which decides which pod a shared claim is counted for (`claim_owners`);
* a **ResourceClaim**: the (pool, device) pairs its allocation names, counted per node (the node's view is marked
  stale), and its readers' demand marked stale;
* a **ResourceClaimTemplate**: its readers' demand marked stale.

`state()` recomputes only what is stale (a node's view through the same `node_view`, a pod's demand through the
same `pod_demand` the full rebuild uses) and returns a `State`; a view recomputed equal stays the same object (a
Node's status or heartbeat written again, an event that changes nothing a view reads), so the decision core, which
goes by the objects (bridge/controller/decide.py), sees no change. `rebuild_state` is the full computation from the
objects, kept as the start-up path's reference and as the check: `check()` recomputes everything from this state's
own objects and says what differs (the controller runs it periodically and heals from it; the property tests run it
after random event sequences). All methods are thread-safe (the informers call from their own threads).
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from bridge.controller.demand import (
    Demand,
    Names,
    allocated_by_node,
    claim_owners,
    is_pending,
    legacy_bound_by_node,
    legacy_holder_node,
    pending_demand,
    pod_claims,
    pod_demand,
    pod_key,
    pod_rank,
    pod_requests,
)
from bridge.controller.model import NodeView, PendingPod
from bridge.controller.nodestatus import POOL_LABEL, SPLIT_KEY, STATUS_KEY, node_view
from bridge.kvalues.quantity import quantity_int

Obj = dict[str, Any]
Kind = Literal["node", "pod", "claim", "template"]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]


def is_gpu_node(node: Mapping[str, Any], names: Names) -> bool:
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    if STATUS_KEY in annotations or SPLIT_KEY in annotations or SPLIT_KEY in labels:
        return True
    status = node.get("status") or {}
    return quantity_int((status.get("capacity") or {}).get(names.resource)) > 0


@dataclass(frozen=True)
class State:
    views: tuple[NodeView, ...]  # GPU nodes, by name
    demand: Demand
    nodes: dict[str, Obj]  # every Node by name (the writer patches with its resourceVersion)
    pending_pods: dict[str, Obj]  # unbound pods by namespace/name (Warning Events name them)


def object_name(obj: Mapping[str, Any]) -> str:
    """The key the controller files an object under: "ns/name", or "name" for a cluster-scoped one."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))


def rebuild_state(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
                  claims: Mapping[str, Mapping[str, Any]], templates: Mapping[str, Mapping[str, Any]],
                  names: Names = Names(), pool_label: str = POOL_LABEL, tried_only: bool = False) -> State:
    """The whole state computed from every object (claims and templates keyed "ns/name")."""
    by_name = {object_name(n): dict(n) for n in nodes}
    pods = list(pods)
    allocated = allocated_by_node(claims.values(), names)
    bound = legacy_bound_by_node(pods, names)
    views = tuple(node_view(obj, allocated=allocated.get(name, set()), legacy_bound=bound.get(name, ()),
                            pool_label=pool_label)
                  for name, obj in sorted(by_name.items()) if is_gpu_node(obj, names))
    demand = pending_demand(pods, claims, templates, names, tried_only)
    pending = {pod_key(p): dict(p) for p in pods if not (p.get("spec") or {}).get("nodeName")}
    return State(views, demand, by_name, pending)


def _claim_devices(claim: Mapping[str, Any], names: Names) -> tuple[tuple[str, str], ...]:
    """The (pool, device) pairs of the bridge's driver that a claim's allocation names (`allocated_by_node`)."""
    return tuple((pool, device) for pool, devices in allocated_by_node([claim], names).items() for device in devices)


class ClusterState:
    def __init__(self, names: Names = Names(), pool_label: str = POOL_LABEL, tried_only: bool = False) -> None:
        self.names = names
        self.pool_label = pool_label
        self.tried_only = tried_only  # pods are demand only once kube-scheduler refused them (demand.py)
        self._lock = threading.Lock()
        # Objects, as the watches last reported them.
        self._nodes: dict[str, Obj] = {}
        self._pods: dict[str, Obj] = {}
        self._claims: dict[str, Obj] = {}
        self._templates: dict[str, Obj] = {}
        self.events = 0  # applied (tests, metrics)
        self._derive_nothing()

    def _derive_nothing(self) -> None:
        # What each object contributes.
        self._bound: dict[str, str] = {}  # pod -> the node whose legacy GPUs it holds (bound there or nominated)
        self._bound_on: dict[str, dict[str, tuple[tuple[int, float, str], int]]] = {}  # node -> pod -> (rank, GPUs)
        self._claim_devices: dict[str, tuple[tuple[str, str], ...]] = {}  # claim -> (pool, device) it allocates
        self._allocated: dict[str, Counter[str]] = {}  # node (pool) -> device -> claims naming it
        self._pending_pods: dict[str, Obj] = {}  # unbound pods
        self._reads: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}  # pending pod -> (claims, templates)
        self._rank: dict[str, tuple[int, float, str]] = {}  # pending pod -> pod_rank
        self._claim_readers: dict[str, set[str]] = {}
        self._template_readers: dict[str, set[str]] = {}
        self._owners: dict[str, str] = {}  # claim -> the pending pod it counts for
        self._demand: dict[str, Demand] = {}  # pending pod -> its demand
        self._pending: dict[str, PendingPod] = {}  # every pending pod's demand, by PendingPod.key
        self._skipped: dict[str, tuple[str, ...]] = {}  # pending pod -> its notes, when it has any
        self._invalid: dict[str, tuple[tuple[str, str], ...]] = {}  # pending pod -> (key, why) of a count not valid
        # Derived state, recomputed by `state()` for what is stale.
        self._views: dict[str, NodeView] = {}
        self._order: list[str] = []  # GPU node names, sorted
        self._view_list: list[NodeView] = []  # their views, in that order
        self._stale_nodes: set[str] = set()
        self._stale_demand: set[str] = set()
        self._stale_owners: set[str] = set()
        self._views_tuple: tuple[NodeView, ...] = ()
        self._demand_total: Demand | None = Demand((), ())  # None: recompute from `_demand`

    # ---- events ------------------------------------------------------------------------------------------------

    def apply(self, kind: Kind, event: EventType | str, obj: Mapping[str, Any]) -> None:
        """One watch event: ADDED and MODIFIED upsert the object, DELETED removes it (an unknown one is ignored)."""
        key = pod_key(obj) if kind == "pod" else object_name(obj)
        deleted = event == "DELETED"
        with self._lock:
            self.events += 1
            if kind == "node":
                self._node(key, None if deleted else dict(obj))
            elif kind == "pod":
                self._pod(key, None if deleted else dict(obj))
            elif kind == "claim":
                self._claim(key, None if deleted else dict(obj))
            elif kind == "template":
                self._template(key, None if deleted else dict(obj))
            else:
                raise ValueError(f"unknown kind {kind!r}")

    def _node(self, name: str, obj: Obj | None) -> None:
        if obj is None:
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = obj
        self._stale_nodes.add(name)

    def _pod(self, key: str, obj: Obj | None) -> None:
        old = self._pods.pop(key, None) if obj is None else self._pods.get(key)
        if old is not None:
            self._drop_pod(key)
        if obj is None:
            return
        self._pods[key] = obj
        spec = obj.get("spec") or {}
        node = legacy_holder_node(obj)
        if node:
            n = pod_requests(spec, self.names.resource)
            if n:
                self._bound[key] = node
                self._bound_on.setdefault(node, {})[key] = (pod_rank(obj), n)
                self._stale_nodes.add(node)
        if not spec.get("nodeName"):
            self._pending_pods[key] = obj
        if is_pending(obj):
            refs = pod_claims(obj)
            claims = tuple(dict.fromkeys(r.claim for r in refs if r.claim))
            templates = tuple(dict.fromkeys(r.template for r in refs if r.template))
            self._reads[key] = (claims, templates)
            self._rank[key] = pod_rank(obj)
            for c in claims:
                self._claim_readers.setdefault(c, set()).add(key)
                self._stale_owners.add(c)
            for t in templates:
                self._template_readers.setdefault(t, set()).add(key)
            self._stale_demand.add(key)

    def _drop_pod(self, key: str) -> None:
        """Take back everything the pod's last version contributed."""
        node = self._bound.pop(key, None)
        if node is not None:
            on = self._bound_on[node]
            del on[key]
            if not on:
                del self._bound_on[node]
            self._stale_nodes.add(node)
        self._pending_pods.pop(key, None)
        reads = self._reads.pop(key, None)
        if reads is not None:
            claims, templates = reads
            for c in claims:
                readers = self._claim_readers[c]
                readers.discard(key)
                if not readers:
                    del self._claim_readers[c]
                self._stale_owners.add(c)
            for t in templates:
                readers = self._template_readers[t]
                readers.discard(key)
                if not readers:
                    del self._template_readers[t]
            del self._rank[key]
            self._forget_demand(key)
        self._stale_demand.discard(key)

    def _claim(self, key: str, obj: Obj | None) -> None:
        for pool, device in self._claim_devices.pop(key, ()):
            counts = self._allocated[pool]
            counts[device] -= 1
            if counts[device] <= 0:
                del counts[device]
                if not counts:
                    del self._allocated[pool]
            self._stale_nodes.add(pool)
        if obj is None:
            self._claims.pop(key, None)
        else:
            self._claims[key] = obj
            devices = _claim_devices(obj, self.names)
            if devices:
                self._claim_devices[key] = devices
            for pool, device in devices:
                self._allocated.setdefault(pool, Counter())[device] += 1
                self._stale_nodes.add(pool)
        self._stale_demand.update(self._claim_readers.get(key, ()))

    def _template(self, key: str, obj: Obj | None) -> None:
        if obj is None:
            self._templates.pop(key, None)
        else:
            self._templates[key] = obj
        self._stale_demand.update(self._template_readers.get(key, ()))

    # ---- the state ---------------------------------------------------------------------------------------------

    def state(self) -> State:
        """Views and demand as of every event applied so far (recomputing only what is stale)."""
        with self._lock:
            return self._state()

    def _state(self) -> State:
        self._refresh()
        demand = self._demand_total
        if demand is None:
            skipped = tuple(s for notes in self._skipped.values() for s in notes)
            invalid = tuple(i for bad in self._invalid.values() for i in bad)
            demand = self._demand_total = Demand(tuple(self._pending.values()), skipped, invalid)
        return State(self._views_tuple, demand, dict(self._nodes), dict(self._pending_pods))

    def _forget_demand(self, key: str) -> None:
        old = self._demand.pop(key, None)
        if old is not None:
            for p in old.pending:
                del self._pending[p.key]
            self._skipped.pop(key, None)
            self._invalid.pop(key, None)
            self._demand_total = None

    def _refresh(self) -> None:
        for claim in self._stale_owners:
            readers = self._claim_readers.get(claim)
            owner = min(readers, key=self._rank.__getitem__) if readers else None
            before = self._owners.pop(claim, None)
            if owner is not None:
                self._owners[claim] = owner
            if owner != before:
                self._stale_demand.update(k for k in (owner, before) if k is not None and k in self._rank)
        self._stale_owners.clear()
        for key in self._stale_demand:
            self._forget_demand(key)
            d = self._demand[key] = pod_demand(self._pods[key], self._claims, self._templates, self._owners,
                                               self.names, self.tried_only)
            for p in d.pending:
                self._pending[p.key] = p
            if d.skipped:
                self._skipped[key] = d.skipped
            if d.invalid:
                self._invalid[key] = d.invalid
            self._demand_total = None
        self._stale_demand.clear()
        if not self._stale_nodes:
            return
        for name in self._stale_nodes:
            obj = self._nodes.get(name)
            had = name in self._views
            at = bisect.bisect_left(self._order, name)
            if obj is not None and is_gpu_node(obj, self.names):
                bound = tuple(n for _, n in sorted(self._bound_on.get(name, {}).values()))
                view = node_view(obj, allocated=set(self._allocated.get(name, ())), legacy_bound=bound,
                                 pool_label=self.pool_label)
                if had and self._views[name] == view:
                    continue  # an equal view keeps its object: the core's memos go by the object (decide.py, `_Run`)
                self._views[name] = view
                if had:
                    self._view_list[at] = view
                else:
                    self._order.insert(at, name)
                    self._view_list.insert(at, view)
            elif had:
                del self._views[name], self._order[at], self._view_list[at]
        self._stale_nodes.clear()
        self._views_tuple = tuple(self._view_list)

    def reload(self) -> None:
        """Derive everything again from the objects (the full rebuild, through the same per-object steps)."""
        with self._lock:
            nodes, pods, claims, templates = self._nodes, self._pods, self._claims, self._templates
            self._nodes, self._pods, self._claims, self._templates = {}, {}, {}, {}
            self._derive_nothing()
            for name, node in nodes.items():
                self._node(name, node)
            for key, claim in claims.items():
                self._claim(key, claim)
            for key, template in templates.items():
                self._template(key, template)
            for key, pod in pods.items():
                self._pod(key, pod)

    def check(self) -> list[str]:
        """What the incremental state gets wrong against the full rebuild (`rebuild_state`) from this state's own
        objects: [] when nothing."""
        with self._lock:
            mine = self._state()
            nodes, pods = list(self._nodes.values()), list(self._pods.values())
            claims, templates = dict(self._claims), dict(self._templates)
        return differences(mine, rebuild_state(nodes, pods, claims, templates, self.names, self.pool_label,
                                               self.tried_only))


def differences(mine: State, truth: State, limit: int = 5) -> list[str]:
    """How `mine` differs from `truth` (views and demand in any order; at most `limit` lines per part)."""
    out: list[str] = []
    a, b = {v.name: v for v in mine.views}, {v.name: v for v in truth.views}
    out += [f"node {n}: incremental {a.get(n)} != rebuilt {b.get(n)}" for n in sorted(set(a) | set(b))
            if a.get(n) != b.get(n)][:limit]
    pa, pb = {p.key: p for p in mine.demand.pending}, {p.key: p for p in truth.demand.pending}
    if len(pa) != len(mine.demand.pending) or len(pb) != len(truth.demand.pending):
        out.append("a pending pod's demand is listed twice")
    out += [f"pod {k}: incremental {pa.get(k)} != rebuilt {pb.get(k)}" for k in sorted(set(pa) | set(pb))
            if pa.get(k) != pb.get(k)][:limit]
    if sorted(mine.demand.invalid) != sorted(truth.demand.invalid):
        out.append(f"invalid counts: incremental {sorted(mine.demand.invalid)[:limit]} != rebuilt "
                   f"{sorted(truth.demand.invalid)[:limit]}")
    if sorted(mine.demand.skipped) != sorted(truth.demand.skipped):
        out.append(f"skipped notes: incremental {sorted(mine.demand.skipped)[:limit]} != rebuilt "
                   f"{sorted(truth.demand.skipped)[:limit]}")
    if mine.nodes != truth.nodes:
        out.append(f"nodes: {sorted(set(mine.nodes) ^ set(truth.nodes))[:limit]} differ")
    if mine.pending_pods != truth.pending_pods:
        out.append(f"unbound pods: {sorted(set(mine.pending_pods) ^ set(truth.pending_pods))[:limit]} differ")
    return out


__all__ = ["ClusterState", "State", "differences", "is_gpu_node", "object_name", "rebuild_state"]
