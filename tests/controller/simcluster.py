"""A simulated GPU cluster in discrete steps, for driving the real decision core and node-status adapter.

Per step (one simulated second): pods finish, new pods arrive, a scheduler binds pending pods, every node daemon
advances its moves, and (every `interval` steps) the controller decides. The pieces follow the real components
closely enough for the properties under test, and no further:

* **Node daemon** (like bridge.ledger's reconcile): it sees a new target `daemon_lag` steps after it was written,
  then meets it by moving only *free* devices (withdrawn at once, offered on the other side `move_time` steps
  later); a device held by a pod never moves (the daemon waits for it). Its status is the real schema-1 JSON
  document (bridge.controller.nodestatus reads it), reporting the target it has acted on.
* **Scheduler**: pending pods in queue order (priority, then age), each bound to a node with enough free devices of
  its API, chosen at random among those that fit (the real scheduler's GPU-agnostic scoring is not a best fit, so
  the controller's prediction is not assumed to be right).
* **Controller**: `node_view` over each Node object, `decide`, targets written, `Memory` kept, exactly as
  bridge/controller/loop.py does.

`Sim.violations` collects every breach of the one-owner rule (a held device moved, a device bound on a side it is
not on); tests assert it stays empty.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from bridge.controller.decide import decide
from bridge.controller.model import Api, Memory, PendingPod, Policy
from bridge.controller.nodestatus import SPLIT_KEY, STATUS_KEY, node_view


@dataclass
class Device:
    name: str
    side: str = "legacy"  # legacy | dra | withdrawn
    to: str = ""  # while withdrawn: the side it is moving to
    ready_at: int = 0
    holder: str = ""


@dataclass
class SimPod:
    key: str
    api: Api
    gpus: int
    arrived: int
    duration: int
    node: str = ""
    bound_at: int = -1
    waited_with_room: int = 0  # consecutive steps pending while enough free GPUs existed cluster-wide
    worst_wait_with_room: int = 0


@dataclass
class SimNode:
    name: str
    devices: list[Device]
    target: int | None = None  # the annotation (None: absent, the daemon's default "0")
    seen: int | None = None  # the target the daemon has acted on (it lags the annotation by `daemon_lag` steps)
    written_at: int = 0

    def status(self, move_time: int) -> str:
        pending = [{"device": d.name, "from": "legacy" if d.to == "dra" else "dra", "to": d.to,
                    "phase": "waiting-scheduler", "reason": "moving"} for d in self.devices if d.side == "withdrawn"]
        requested = {"value": str(self.seen), "source": "annotation"} if self.seen is not None else {
            "value": "0", "source": "default"}
        doc = {"version": 1, "node": self.name, "updated": "", "requested": requested,
               "state": "converging" if pending else "converged", "message": "", "wanted": self.seen,
               "devices": [{"name": d.name, "uuid": "", "side": d.side, "holders": [d.holder] if d.holder else []}
                           for d in self.devices], "pending": pending, "refusals": []}
        return json.dumps(doc)

    def obj(self, move_time: int) -> dict[str, Any]:
        ann = {STATUS_KEY: self.status(move_time)}
        if self.target is not None:
            ann[SPLIT_KEY] = str(self.target)
        return {"metadata": {"name": self.name, "annotations": ann, "labels": {}}, "spec": {}, "status": {}}

    def free(self, side: str) -> list[Device]:
        return [d for d in self.devices if d.side == side and not d.holder]


@dataclass
class Sim:
    nodes: list[SimNode]
    policy: Policy
    seed: int = 0
    move_time: int = 3
    interval: int = 2
    daemon_lag: int = 0  # steps before a daemon sees a new target (its watch, its reconcile period)
    now: int = 0
    memory: Memory = field(default_factory=Memory)
    pending: list[SimPod] = field(default_factory=list)
    running: list[SimPod] = field(default_factory=list)
    finished: list[SimPod] = field(default_factory=list)
    changes: list[tuple[int, str, str, int]] = field(default_factory=list)  # (step, node, direction, moves)
    violations: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.by_name = {n.name: n for n in self.nodes}

    # ---- the pieces --------------------------------------------------------------------------------------------

    def arrive(self, api: Api, gpus: int, duration: int) -> None:
        key = f"ns-{api}/p{self.now}-{len(self.pending) + len(self.running) + len(self.finished)}"
        self.pending.append(SimPod(key, api, gpus, self.now, duration))

    def _finish(self) -> None:
        for pod in [p for p in self.running if p.bound_at + p.duration <= self.now]:
            self.running.remove(pod)
            self.finished.append(pod)
            for d in self.by_name[pod.node].devices:
                if d.holder == pod.key:
                    d.holder = ""

    def _schedule(self) -> None:
        for pod in sorted(self.pending, key=lambda p: (p.arrived, p.key)):
            fits = [n for n in self.nodes if len(n.free(pod.api)) >= pod.gpus]
            if not fits:
                continue
            node = self.rng.choice(fits)
            for d in node.free(pod.api)[: pod.gpus]:
                if d.side != pod.api:
                    self.violations.append(f"{pod.key} bound to {d.name} on the {d.side} side")
                d.holder = pod.key
            pod.node, pod.bound_at = node.name, self.now
            self.pending.remove(pod)
            self.running.append(pod)

    def _daemons(self) -> None:
        for n in self.nodes:
            for d in n.devices:
                if d.side == "withdrawn" and d.ready_at <= self.now:
                    if d.holder:
                        self.violations.append(f"{n.name}/{d.name} was taken while withdrawn")
                    d.side, d.to = d.to, ""
            if n.target != n.seen and self.now - n.written_at >= self.daemon_lag:
                n.seen = n.target
            target = n.seen or 0
            on_dra = sum(1 for d in n.devices if d.side == "dra" or d.to == "dra")
            if on_dra < target:
                for d in n.free("legacy")[: target - on_dra]:
                    d.side, d.to, d.ready_at = "withdrawn", "dra", self.now + self.move_time
            elif on_dra > target:
                for d in n.free("dra")[: on_dra - target]:
                    d.side, d.to, d.ready_at = "withdrawn", "legacy", self.now + self.move_time

    def _controller(self) -> None:
        views = [node_view(n.obj(self.move_time)) for n in self.nodes]
        demand = [PendingPod(p.key, p.api, p.gpus, p.key.partition("/")[0], since=float(p.arrived))
                  for p in self.pending]
        decision = decide(views, demand, self.policy, self.memory, float(self.now))
        by_view = {v.name: v for v in views}
        for c in decision.changes:
            view = by_view[c.node]
            lo, hi = view.safe_range
            if not lo <= c.dra <= hi:
                self.violations.append(f"target {c.dra} for {c.node} would move a held device ({view})")
            self.by_name[c.node].target = c.dra
            self.by_name[c.node].written_at = self.now
            self.changes.append((self.now, c.node, c.direction, c.moves))
        self.memory = self.memory.after(decision, float(self.now)).forget(set(self.by_name), self.policy,
                                                                           float(self.now))

    def _measure(self) -> None:
        free_total = [len(n.free("legacy")) + len(n.free("dra")) for n in self.nodes]
        for pod in self.pending:
            if any(f >= pod.gpus for f in free_total):
                pod.waited_with_room += 1
                pod.worst_wait_with_room = max(pod.worst_wait_with_room, pod.waited_with_room)
            else:
                pod.waited_with_room = 0

    def step(self) -> None:
        self._finish()
        self._schedule()
        self._measure()
        self._daemons()
        if self.now % self.interval == 0:
            self._controller()
        self.now += 1

    # ---- results -----------------------------------------------------------------------------------------------

    def worst_wait_with_room(self) -> int:
        return max((p.worst_wait_with_room for p in self.pending + self.running + self.finished), default=0)

    def reversals_inside_cooldown(self) -> list[tuple[int, str]]:
        last: dict[str, tuple[int, str]] = {}
        out = []
        for t, node, direction, _ in self.changes:
            if node in last and last[node][1] != direction and t - last[node][0] < self.policy.cooldown_s:
                out.append((t, node))
            last[node] = (t, direction)
        return out


def cluster(nodes: int, gpus: int) -> list[SimNode]:
    return [SimNode(f"node-{i}", [Device(f"gpu-{j}") for j in range(gpus)]) for i in range(nodes)]


__all__ = ["Device", "Sim", "SimNode", "SimPod", "cluster"]
