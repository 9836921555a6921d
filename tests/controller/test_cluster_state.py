"""The controller's incremental cluster state equals the full rebuild after any sequence of watch events.

`ClusterState` keeps node views and pending demand up to date from events, recomputing only what an event touches
(issue 25: a decision after one pod changed must not rebuild the cluster). The full rebuild (`rebuild_state`) stays
the reference: here random sequences of adds, updates and deletes of Nodes, Pods, ResourceClaims and
ResourceClaimTemplates, in any order (a pod before the claim it names, a claim deleted under its readers), with
duplicates and relists (every object of a kind delivered again, vanished ones deleted) are fed to a `ClusterState`,
and at random points, and at the end, its state must equal `rebuild_state` over the objects the server holds.
"""

from __future__ import annotations

import collections
import os
from typing import Any

import pytest

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from bridge.controller.cluster import ClusterState, differences, rebuild_state
from bridge.controller.decide import decide
from bridge.controller.model import Policy
from bridge.controller.nodestatus import PIN_KEY, POOL_LABEL
from tests.controller.status_docs import gpu_node

CLASS = "gpu.dra-bridge.io"
NODES = ["n0", "n1", "n2", "n3"]
PODS = [f"p{i}" for i in range(8)]
CLAIMS = ["c0", "c1", "c2", "p4-gen", "p5-gen"]
TEMPLATES = ["t0", "t1"]
KINDS = ("node", "pod", "claim", "template")
EXAMPLES = int(os.environ.get("BRIDGE_STATE_EXAMPLES", "80"))  # more: BRIDGE_STATE_EXAMPLES=2000, -o timeout=0


def node_variant(name: str, v: int) -> dict[str, Any]:
    """Nodes a cluster really has: a daemon's status in several shapes, pinned, cordoned and tainted, not Ready, no
    daemon (capacity only), no GPUs at all, an unreadable status."""
    sides = [["legacy"] * 4, ["legacy", "legacy", "dra", "dra"], ["dra"] * 4, ["legacy", "withdrawn", "dra", "dra"]]
    pending = [{"device": "gpu-1", "from": "legacy", "to": "dra", "phase": "waiting-node-status", "reason": "x"}]
    labels = {POOL_LABEL: f"pool-{v % 2}", "nvidia.com/gpu.product": "H100" if v % 3 else "L4"}
    if v == 0:
        return gpu_node(name, sides[0], labels=labels)
    if v == 1:
        return gpu_node(name, sides[1], held=[0, 2], target="2", labels=labels, numa={0: 0, 1: 0, 2: 1, 3: 1})
    if v == 2:
        return gpu_node(name, sides[3], target="3", pending=pending, requested="3", labels=labels,
                        nvlink={0: 0, 1: 0, 2: 0, 3: 0})
    if v == 3:
        return gpu_node(name, sides[2], labels={**labels, PIN_KEY: "true"}, ready=False)
    if v == 4:
        node = gpu_node(name, sides[1], held=[1], labels=labels)
        node["spec"] = {"unschedulable": True, "taints": [{"key": "team", "value": "a", "effect": "NoSchedule"}]}
        return node
    if v == 5:
        return {"metadata": {"name": name, "labels": labels}, "status": {"capacity": {"nvidia.com/gpu": "4"}}}
    if v == 6:
        return {"metadata": {"name": name}, "status": {"capacity": {"cpu": "8"}}}
    node = gpu_node(name, sides[0], labels=labels)
    node["metadata"]["annotations"]["dra-bridge.io/split-status"] = "{not json"
    return node


def container(gpus: int = 0, claim: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "m", "image": "x", "resources": {}}
    if gpus:
        c["resources"] = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}
    if claim:
        c["resources"]["claims"] = [{"name": "g"}]
    return c


def pod_variant(name: str, v: int) -> dict[str, Any]:
    """Pods: pending legacy or DRA (a shared claim, a template with or without its generated claim yet, both APIs,
    a node selector, a priority), bound and running or finished, gated, being deleted, nominated to a node."""
    ns = "team-a" if v % 2 else "team-b"
    meta: dict[str, Any] = {"name": name, "namespace": ns, "creationTimestamp": f"2025-06-01T12:0{v}:00Z"}
    spec: dict[str, Any] = {"containers": [container(1 + v % 3)]}
    status: dict[str, Any] = {"phase": "Pending"}
    shared = {"name": "g", "resourceClaimName": f"c{v % 3}"}
    templ = {"name": "g", "resourceClaimTemplateName": f"t{v % 2}"}
    if v in (1, 2, 3):
        spec = {"containers": [container(claim=True)], "resourceClaims": [shared], "priority": 10 * (v == 2)}
        meta["namespace"] = "team-a"
    elif v in (4, 5):
        spec = {"containers": [container(claim=True)], "resourceClaims": [templ]}
        if v == 5:
            status["resourceClaimStatuses"] = [{"name": "g", "resourceClaimName": f"{name}-gen"}]
        meta["namespace"] = "team-a"
    elif v == 6:
        spec = {"containers": [container(2, claim=True)], "resourceClaims": [shared],
                "nodeSelector": {"nvidia.com/gpu.product": "H100"}}
        meta["namespace"] = "team-a"
    elif v in (7, 8):
        spec["nodeName"] = NODES[v % len(NODES)]
        status["phase"] = "Running" if v == 7 else "Succeeded"
    elif v == 9:
        spec["nodeName"] = NODES[(v + 1) % len(NODES)]  # bound, not started yet
    elif v == 10:
        spec["schedulingGates"] = [{"name": "wait"}]
    elif v == 11:
        meta["deletionTimestamp"] = "2025-06-01T13:00:00Z"
    elif v == 12:  # a preemptor kube-scheduler nominated: its victims terminate there
        spec["priority"] = 1000
        status["nominatedNodeName"] = NODES[v % len(NODES)]
    elif v == 13:  # a DRA pod in a binding cycle that waits (KEP-5278), to a node that may not exist
        spec = {"containers": [container(1, claim=True)], "resourceClaims": [templ]}
        status["nominatedNodeName"] = NODES[v % len(NODES)]
        meta["namespace"] = "team-a"
    return {"metadata": meta, "spec": spec, "status": status}


def claim_variant(name: str, v: int) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": CLASS, "count": 1 + v % 3}
    if v == 3:
        body = {"deviceClassName": CLASS, "allocationMode": "All"}
    if v == 4:
        body = {"deviceClassName": "other.example.com", "count": 2}
    claim: dict[str, Any] = {"metadata": {"name": name, "namespace": "team-a"},
                             "spec": {"devices": {"requests": [{"name": "g", "exactly": body}]}}}
    if v >= 5:
        node = NODES[v % len(NODES)]
        claim["status"] = {"allocation": {"devices": {"results": [
            {"request": "g", "driver": CLASS, "pool": node, "device": f"gpu-{d}"} for d in range(v - 4)]}}}
    return claim


def template_variant(name: str, v: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a"}, "spec": {"spec": {"devices": {"requests": [
        {"name": "g", "exactly": {"deviceClassName": CLASS, "count": 1 + v}}]}}}}


VARIANTS = {"node": (NODES, node_variant, 8), "pod": (PODS, pod_variant, 14), "claim": (CLAIMS, claim_variant, 8),
            "template": (TEMPLATES, template_variant, 3)}
STATS: collections.Counter[str] = collections.Counter()


class Events(RuleBasedStateMachine):
    variants = VARIANTS

    def __init__(self) -> None:
        super().__init__()
        self.state = ClusterState()
        self.server: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in KINDS}  # kind -> key -> object

    def made(self, kind: str, name: str, v: int) -> dict[str, Any]:
        """The object the server holds for (kind, name, variant)."""
        return self.variants[kind][1](name, v)

    def fed(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """What the state is given of a server object (the controller's informers may cut it down)."""
        return obj

    def key(self, kind: str, obj: dict[str, Any]) -> str:
        meta = obj["metadata"]
        return f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]

    def _upsert(self, kind: str, data: st.DataObject) -> None:
        names, _, count = self.variants[kind]
        obj = self.made(kind, data.draw(st.sampled_from(names)), data.draw(st.integers(0, count - 1)))
        known = self.key(kind, obj) in self.server[kind]
        self.server[kind][self.key(kind, obj)] = obj
        # ADDED for a new object, MODIFIED for a known one, and sometimes the other way round (a relist's replay).
        event = data.draw(st.sampled_from(["MODIFIED" if known else "ADDED", "ADDED", "MODIFIED"]))
        self.state.apply(kind, event, self.fed(kind, obj))  # type: ignore[arg-type]
        STATS[f"{kind} {event}"] += 1

    @initialize(data=st.data())
    def a_populated_cluster(self, data: st.DataObject) -> None:
        """Every object of the universe once, in a drawn order and variant (the informers' initial lists)."""
        items = [(kind, name) for kind in KINDS for name in self.variants[kind][0]]
        for kind, name in data.draw(st.permutations(items), label="initial order"):
            obj = self.made(kind, name, data.draw(st.integers(0, self.variants[kind][2] - 1)))
            self.server[kind][self.key(kind, obj)] = obj
            self.state.apply(kind, "ADDED", self.fed(kind, obj))  # type: ignore[arg-type]

    # One rule per kind (and pods twice): objects come and change more often than they go.
    @rule(data=st.data())
    def node_changes(self, data: st.DataObject) -> None:
        self._upsert("node", data)

    @rule(data=st.data())
    def pod_changes(self, data: st.DataObject) -> None:
        self._upsert("pod", data)

    @rule(data=st.data())
    def another_pod_changes(self, data: st.DataObject) -> None:
        self._upsert("pod", data)

    @rule(data=st.data())
    def claim_changes(self, data: st.DataObject) -> None:
        self._upsert("claim", data)

    @rule(data=st.data())
    def template_changes(self, data: st.DataObject) -> None:
        self._upsert("template", data)

    @rule(kind=st.sampled_from(KINDS), data=st.data())
    def delete(self, kind: str, data: st.DataObject) -> None:
        names, _, count = self.variants[kind]
        obj = self.made(kind, data.draw(st.sampled_from(names)), data.draw(st.integers(0, count - 1)))
        self.server[kind].pop(self.key(kind, obj), None)  # deleting an unknown object (a duplicate) is harmless
        self.state.apply(kind, "DELETED", self.fed(kind, obj))  # type: ignore[arg-type]
        STATS[f"{kind} DELETED"] += 1

    @rule(kind=st.sampled_from(KINDS))
    def relist(self, kind: str) -> None:
        """The watch fell behind: every object of the kind is delivered again, in another order."""
        for obj in reversed(list(self.server[kind].values())):
            self.state.apply(kind, "MODIFIED", self.fed(kind, obj))  # type: ignore[arg-type]
        STATS["relist"] += 1

    @rule()
    def decide(self) -> None:
        """A decision reads the state between events (recomputing what is stale); it must be the rebuild's."""
        self.compare()

    def compare(self) -> None:
        truth = rebuild_state(self.server["node"].values(), self.server["pod"].values(), self.server["claim"],
                              self.server["template"])
        mine = self.state.state()
        assert differences(mine, truth) == []
        STATS["compared"] += 1
        STATS["views"] += len(mine.views)
        STATS["pending demand"] += len(mine.demand.pending)
        STATS["held on some node"] += sum(1 for v in mine.views if v.dra_held or v.legacy_held)

    @rule()
    def controller_checks_and_reloads(self) -> None:
        """The controller's own check (a rebuild from the state's objects) finds nothing, and a reload changes
        nothing."""
        assert self.state.check() == []
        self.state.reload()
        self.compare()

    def teardown(self) -> None:
        self.compare()

    @invariant()
    def nothing_is_lost(self) -> None:
        assert self.state.events >= 0


@pytest.mark.timeout(300)  # about 20 s on a quiet 2-core machine; the shared CI machine can be ten times slower
def test_the_incremental_state_equals_the_rebuild_after_any_sequence_of_events() -> None:
    STATS.clear()
    run_state_machine_as_test(Events, settings=settings(
        max_examples=EXAMPLES, stateful_step_count=50, deadline=None, database=None, derandomize=True,
        suppress_health_check=[HealthCheck.too_slow]))
    # Not a vacuous pass: the comparisons saw views, demand and held devices.
    assert STATS["views"] > 10 * EXAMPLES and STATS["pending demand"] > 10 * EXAMPLES, dict(STATS)
    assert STATS["held on some node"] > 2 * EXAMPLES, dict(STATS)


def test_one_pod_event_recomputes_one_pod_and_one_node() -> None:
    state = ClusterState()
    for i, name in enumerate(NODES):
        state.apply("node", "ADDED", node_variant(name, i % 3))
    for i in range(6):
        state.apply("pod", "ADDED", pod_variant(f"q{i}", 0))
    before = state.state()
    bound = pod_variant("q0", 0)  # the scheduler bound q0 to n3 and it runs
    bound["spec"]["nodeName"], bound["status"]["phase"] = "n3", "Running"
    state.apply("pod", "MODIFIED", bound)
    after = state.state()
    changed = [b.name for a, b in zip(before.views, after.views) if a is not b]
    assert changed == ["n3"]
    assert next(v for v in after.views if v.name == "n3").legacy_held == 1  # its one GPU is held there now
    assert "team-b/q0" not in {p.key for p in after.demand.pending}
    assert {p.key for p in before.demand.pending} - {p.key for p in after.demand.pending} == {"team-b/q0"}


def test_bound_legacy_pods_the_status_does_not_count_yet_are_named_in_the_order_the_scheduler_served_them() -> None:
    """Queue order: higher priority first, then older. The daemon has reported none of them (no holders)."""
    state = ClusterState()
    state.apply("node", "ADDED", gpu_node("n9", ["legacy"] * 6 + ["dra"] * 2))

    def bound(name: str, gpus: int, minute: int, priority: int = 0) -> dict[str, Any]:
        pod = pod_variant(name, 0)
        pod["metadata"]["creationTimestamp"] = f"2025-06-01T12:{minute:02d}:00Z"
        pod["spec"] = {"containers": [container(gpus)], "nodeName": "n9", "priority": priority}
        pod["status"]["phase"] = "Running"
        return pod

    for pod in (bound("late", 3, 30), bound("early", 1, 10), bound("urgent", 2, 50, priority=100)):
        state.apply("pod", "ADDED", pod)
    (view,) = state.state().views
    assert view.legacy_held == 6 and view.unreported == (("legacy", 2), ("legacy", 1), ("legacy", 3))
    state.apply("pod", "DELETED", bound("early", 1, 10))
    (view,) = state.state().views
    assert view.legacy_held == 5 and view.unreported == (("legacy", 2), ("legacy", 3))
    assert state.check() == []


def test_a_node_event_that_changes_nothing_a_view_reads_keeps_the_view_object() -> None:
    state = ClusterState()
    for i, name in enumerate(NODES):
        state.apply("node", "ADDED", node_variant(name, i % 3))
    before = state.state()
    again = node_variant("n1", 1)
    again["metadata"]["resourceVersion"] = "2"  # the Node written again (a heartbeat, a status republished)
    state.apply("node", "MODIFIED", again)
    after = state.state()
    assert all(a is b for a, b in zip(before.views, after.views))
    cordoned = node_variant("n1", 1)
    cordoned["spec"] = {"unschedulable": True}
    state.apply("node", "MODIFIED", cordoned)
    assert [b.name for a, b in zip(after.views, state.state().views) if a is not b] == ["n1"]
    assert state.check() == []


def test_the_check_finds_a_wrong_state_and_a_reload_heals_it() -> None:
    state = ClusterState()
    state.apply("node", "ADDED", node_variant("n0", 0))
    bound = pod_variant("q0", 0)
    bound["spec"]["nodeName"], bound["status"]["phase"] = "n0", "Running"
    state.apply("pod", "ADDED", bound)
    assert state.check() == []
    rank, gpus = state._bound_on["n0"]["team-b/q0"]
    state._bound_on["n0"]["team-b/q0"] = (rank, gpus + 3)  # a bookkeeping bug, simulated
    state._stale_nodes.add("n0")
    [wrong] = state.check()
    assert wrong.startswith("node n0: incremental") and "legacy_held=4" in wrong and "legacy_held=1" in wrong
    state.reload()
    assert state.check() == []
    assert state.state().views[0].legacy_held == 1


def test_a_preemptor_waiting_for_its_victim_moves_no_gpu_and_keeps_the_victims_gpu() -> None:
    # As kube-scheduler v1.37.2 does it (tests/real/test_real_preemption.py): `low` (priority 0) holds n1's legacy
    # GPU; `high` (priority 1000) preempted it and waits, nominated to n1, while `low` stops. n1's DRA GPU is free.
    node = gpu_node("n1", ["legacy", "dra"], held=[0])
    low = pod_variant("low", 7)
    low["spec"]["nodeName"] = "n1"
    low["metadata"]["deletionTimestamp"] = "2025-06-01T13:00:00Z"
    high = pod_variant("high", 0)
    high["spec"]["priority"] = 1000
    state = ClusterState()
    for kind, obj in (("node", node), ("pod", low), ("pod", high)):
        state.apply(kind, "ADDED", obj)
    # Not nominated yet: a pending legacy pod, and the free DRA GPU moves for it.
    (change,) = decide(list(state.state().views), list(state.state().demand.pending), Policy()).changes
    assert (change.node, change.dra) == ("n1", 0)
    high["status"]["nominatedNodeName"] = "n1"
    state.apply("pod", "MODIFIED", high)
    s = state.state()
    assert s.demand.pending == () and [(v.legacy_held, v.dra_held) for v in s.views] == [(1, 0)]
    assert decide(list(s.views), list(s.demand.pending), Policy()).changes == ()
    # The victim gone, its GPU stays held for the preemptor: a DRA pod asking 2 GPUs does not get it moved.
    state.apply("pod", "DELETED", low)
    state.apply("template", "ADDED", template_variant("t0", 1))
    state.apply("pod", "ADDED", pod_variant("dra", 4))
    s = state.state()
    assert [(v.legacy_held, v.legacy, v.dra) for v in s.views] == [(1, 1, 1)]
    assert [(p.key, p.gpus) for p in s.demand.pending] == [("team-a/dra", 2)]
    d = decide(list(s.views), list(s.demand.pending), Policy())
    assert d.changes == () and [b.pod for b in d.blocked] == ["team-a/dra"]
    assert state.check() == []


def test_waiting_for_the_scheduler_a_pods_refusal_makes_it_demand_and_the_rebuild_agrees() -> None:
    state = ClusterState(tried_only=True)
    state.apply("node", "ADDED", gpu_node("n1", ["legacy", "dra"]))
    p = pod_variant("p", 0)
    state.apply("pod", "ADDED", p)
    assert state.state().demand.pending == () and state.check() == []
    p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    state.apply("pod", "MODIFIED", p)
    assert [d.key for d in state.state().demand.pending] == ["team-b/p"] and state.check() == []
