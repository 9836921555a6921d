"""The node lifecycle controller stand-in (`bridge.sandbox.nodelifecycle`) and the kubelet simulator's heartbeat
Lease (`bridge.sandbox.kubelet.nodelease`): the rules, read from kube-controller-manager v1.37.2, on their surprising
cases, and the controller against the API emulator. Its agreement with the real controller on a whole node failure
is tests/real/test_node_lifecycle_differential.py."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.kube import NODES, KubeAPI, connect
from bridge.kube.api import LEASES
from bridge.sandbox.apiserver import ApiServer, profile_for
from bridge.sandbox.kubelet.nodelease import NodeLease, micro_now
from bridge.sandbox.nodelifecycle import NodeLifecycleController, NodeMonitorTimes
from bridge.sandbox.nodelifecycle import logic
from bridge.sandbox.nodelifecycle.logic import FULL, NORMAL, PARTIAL, TaintQueue
from tests.polling import wait_until

NOW = "2026-12-07T12:00:00Z"


def node(name: str = "n1", ready: str | None = "True", taints: list[dict[str, Any]] | None = None,
         labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    conditions = [] if ready is None else [
        {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
         "lastHeartbeatTime": "2026-12-07T11:00:00Z", "lastTransitionTime": "2026-12-07T10:00:00Z"},
        {"type": "Ready", "status": ready, "reason": "KubeletReady", "message": "kubelet is posting ready status",
         "lastHeartbeatTime": "2026-12-07T11:00:00Z", "lastTransitionTime": "2026-12-07T10:00:00Z"}]
    return {"metadata": {"name": name, "labels": labels or {}, "creationTimestamp": "2026-12-07T09:00:00Z"},
            "spec": {"taints": taints or [], **spec}, "status": {"conditions": conditions}}


# -- zones ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("ready", "state"), [
    (["Unknown"], FULL),  # a one-node cluster whose kubelet died: every zone down
    (["True", "Unknown"], NORMAL),
    (["True", "False", None], NORMAL),  # two not Ready (a missing condition counts) is never a disruption
    (["True", "True", "Unknown", "False", "Unknown"], PARTIAL),  # 3 of 5: more than two and at least 55 %
    (["True", "True", "True", "Unknown", "False", "Unknown"], NORMAL),  # 3 of 6 is 50 %
])
def test_a_zone_is_disrupted_only_with_no_ready_node_or_more_than_two_and_55_percent_not_ready(
        ready: list[str | None], state: str) -> None:
    assert logic.zone_state(ready)[1] == state


def test_the_zone_key_prefers_the_beta_labels_and_is_empty_without_any() -> None:
    both = {"topology.kubernetes.io/zone": "ga", "failure-domain.beta.kubernetes.io/zone": "beta",
            "topology.kubernetes.io/region": "r"}
    assert logic.zone_key(node(labels=both)) == "r:\x00:beta"
    assert logic.zone_key(node(labels={"topology.kubernetes.io/zone": "a"})) == ":\x00:a"
    assert logic.zone_key(node()) == ""


# -- conditions and taints -----------------------------------------------------------------------------------------


def test_a_node_that_stopped_posting_has_its_ready_and_pressure_conditions_unknown_with_their_heartbeats_kept() -> None:
    status = logic.mark_unknown(node(), NOW)
    by_type = {c["type"]: c for c in status["conditions"]}
    assert by_type["Ready"] == {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                                "message": "Kubelet stopped posting node status.",
                                "lastHeartbeatTime": "2026-12-07T11:00:00Z", "lastTransitionTime": NOW}
    assert by_type["MemoryPressure"]["status"] == "Unknown"
    # never posted by the kubelet: added, as of the Node's creation
    assert by_type["DiskPressure"] == {"type": "DiskPressure", "status": "Unknown", "reason": "NodeStatusNeverUpdated",
                                       "message": "Kubelet never posted node status.",
                                       "lastHeartbeatTime": "2026-12-07T09:00:00Z", "lastTransitionTime": NOW}
    assert "NetworkUnavailable" not in by_type  # the control plane's condition is left alone


def test_a_condition_already_unknown_keeps_its_transition_time() -> None:
    once = {"metadata": node()["metadata"], "status": logic.mark_unknown(node(), NOW)}
    again = logic.mark_unknown(once, "2026-12-07T13:00:00Z")
    assert again == once["status"]


def test_noschedule_taints_follow_the_conditions_and_leave_other_taints_alone() -> None:
    foreign = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    noexecute = {"key": logic.UNREACHABLE, "effect": "NoExecute"}
    assert logic.condition_taints(node(ready="Unknown", taints=[foreign, noexecute])) == (
        [{"key": logic.UNREACHABLE, "effect": "NoSchedule"}], [])
    assert logic.condition_taints(node(ready="False")) == ([{"key": logic.NOT_READY, "effect": "NoSchedule"}], [])
    stale = {"key": logic.UNREACHABLE, "effect": "NoSchedule", "timeAdded": NOW}
    assert logic.condition_taints(node(taints=[stale, foreign, noexecute])) == (
        [], [{"key": logic.UNREACHABLE, "effect": "NoSchedule"}])
    assert logic.condition_taints(node(unschedulable=True)) == (
        [{"key": logic.UNSCHEDULABLE, "effect": "NoSchedule"}], [])


def test_adding_a_taint_of_the_same_key_and_effect_replaces_it_and_an_identical_one_changes_nothing() -> None:
    old = {"key": logic.UNREACHABLE, "effect": "NoExecute", "timeAdded": "2026-12-07T11:00:00Z"}
    new = {**old, "timeAdded": NOW}
    assert logic.swapped_taints([old], [new], []) == [new]
    assert logic.swapped_taints([old], [old], []) is None
    assert logic.swapped_taints([old], [], [{"key": logic.NOT_READY, "effect": "NoExecute"}]) is None


def test_a_pod_is_marked_not_ready_keeping_its_reason_and_only_when_it_is_ready() -> None:
    ready = {"type": "Ready", "status": "True", "reason": "", "lastTransitionTime": "2026-12-07T10:00:00Z"}
    pod = {"status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}, ready]}}
    status = logic.mark_pod_not_ready(pod, NOW)
    assert status is not None and status["phase"] == "Running"
    assert status["conditions"][1] == {**ready, "status": "False", "lastTransitionTime": NOW}
    assert logic.mark_pod_not_ready({"status": status}, NOW) is None
    assert logic.mark_pod_not_ready({"status": {"phase": "Pending"}}, NOW) is None


# -- the rate-limited NoExecute queue ------------------------------------------------------------------------------


def taint_times(queue: TaintQueue, until: float, step: float = 0.1) -> list[tuple[str, float]]:
    done: list[tuple[str, float]] = []
    t = 0.0
    while t <= until + 1e-9:
        queue.try_each(t, lambda name, t=t: (done.append((name, round(t, 1))) or True, 0.0))
        t = round(t + step, 1)
    return done


def test_a_zone_taints_one_node_at_once_then_one_per_period_of_its_rate() -> None:
    q = TaintQueue(0.5, 0.0)
    q.add("a", "u1", 0.0)
    q.add("b", "u2", 0.0)
    assert taint_times(q, 3.0) == [("a", 0.0), ("b", 2.0)]


def test_a_tainted_node_is_not_queued_again_until_removed() -> None:
    q = TaintQueue(10.0, 0.0)
    q.add("a", "u1", 0.0)
    assert taint_times(q, 0.5) == [("a", 0.0)]
    assert q.add("a", "u1", 1.0) is False  # still a member: its taint is not re-stamped every monitor pass
    assert q.remove("a") is True
    assert q.add("a", "u1", 1.0) is True


def test_a_zone_leaving_full_disruption_taints_its_next_node_only_after_one_period() -> None:
    q = TaintQueue(0.5, 0.0)
    q.swap_limiter(0, 0.0)  # every zone down: stopped
    q.add("a", "u1", 0.0)
    assert taint_times(q, 5.0) == []
    q.swap_limiter(0.5, 5.0)  # the stopped limiter had no token: the new one starts drained
    done: list[str] = []
    for t in (5.0, 6.9, 7.1):
        q.try_each(t, lambda name: (done.append(f"{name}@{t}") or True, 0.0))
    assert done == ["a@7.1"]


def test_with_an_eviction_rate_of_one_a_zone_that_was_fully_disrupted_never_taints_again() -> None:
    """client-go's stopped limiter reports a rate of 1, so swapping to 1 node/s is taken for "no change"."""
    q = TaintQueue(1.0, 0.0)
    q.swap_limiter(0, 0.0)
    q.swap_limiter(1.0, 1.0)
    q.add("a", "u1", 1.0)
    assert taint_times(q, 5.0) == []


# -- against the API emulator --------------------------------------------------------------------------------------


@pytest.fixture
def api(short_tmp: Path) -> Iterator[KubeAPI]:
    with ApiServer() as srv:
        yield connect(str(srv.write_kubeconfig(short_tmp / "kubeconfig")))


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _register(api: KubeAPI, name: str, *, ready: bool = True) -> None:
    api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    if ready:
        api.patch(NODES, name, {"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": _now(),
             "lastTransitionTime": _now()}]}}, subresource="status")


def _ready(api: KubeAPI, name: str) -> dict[str, Any]:
    ready = logic.condition(api.get(NODES, name), "Ready")
    assert ready is not None
    return ready


def _renew(api: KubeAPI, name: str, stop: threading.Event) -> None:
    lease = api.create(LEASES, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                "metadata": {"name": name, "namespace": "kube-node-lease"},
                                "spec": {"holderIdentity": name, "leaseDurationSeconds": 1,
                                         "renewTime": micro_now()}}, "kube-node-lease")
    while not stop.wait(0.25):
        lease["spec"]["renewTime"] = micro_now()
        lease = api.update(LEASES, lease, "kube-node-lease")


TIMES = NodeMonitorTimes(monitor_period=0.2, grace_period=3.0, startup_grace_period=4.0)


def test_a_renewed_lease_alone_keeps_a_node_ready_and_it_goes_unknown_a_grace_period_after_the_last_renewal(
        api: KubeAPI) -> None:
    _register(api, "leased")
    _register(api, "other")  # a second, Ready node... that posts nothing either: it goes Unknown first
    stop = threading.Event()
    renewer = threading.Thread(target=_renew, args=(api, "leased", stop), daemon=True)
    renewer.start()
    try:
        with NodeLifecycleController(api, profile=profile_for("1.37"), times=TIMES):
            wait_until(lambda: _ready(api, "other")["status"] == "Unknown", 10,
                       "the node without a Lease to go Unknown")
            assert _ready(api, "leased")["status"] == "True"
            stop.set()
            renewer.join()
            wait_until(lambda: _ready(api, "leased")["status"] == "Unknown", 10, "the leased node to go Unknown")
            assert _ready(api, "leased")["reason"] == "NodeStatusUnknown"
    finally:
        stop.set()


def test_a_node_that_never_posted_its_status_goes_unknown_after_the_startup_grace_period(api: KubeAPI) -> None:
    _register(api, "silent", ready=False)
    with NodeLifecycleController(api, profile=profile_for("1.35"), times=TIMES):
        wait_until(lambda: (api.get(NODES, "silent").get("status") or {}).get("conditions"), 10,
                   "the controller to write the conditions")
        ready = _ready(api, "silent")
        assert (ready["status"], ready["reason"], ready["message"]) == (
            "Unknown", "NodeStatusNeverUpdated", "Kubelet never posted node status.")
        wait_until(lambda: any(t["key"] == logic.UNREACHABLE
                               for t in (api.get(NODES, "silent").get("spec") or {}).get("taints") or []), 5,
                   "the unreachable NoSchedule taint")  # (a Node with nothing in its spec has none stored)


# -- the kubelet simulator's Lease ---------------------------------------------------------------------------------


def test_the_kubelet_lease_is_created_once_its_node_exists_owned_by_it_and_renewed_until_stopped(api: KubeAPI) -> None:
    lease = NodeLease(api, "n1", duration_s=1)
    lease.start()
    try:
        threading.Event().wait(0.6)  # more than two periods of 0.25 s
        assert api.list(LEASES, "kube-node-lease")["items"] == [], "a Lease without its owner Node"
        _register(api, "n1")
        wait_until(lambda: lease.renewals >= 2, 10, "two renewals")
        got = api.get(LEASES, "n1", "kube-node-lease")
        node_uid = api.get(NODES, "n1")["metadata"]["uid"]
        assert got["spec"]["holderIdentity"] == "n1" and got["spec"]["leaseDurationSeconds"] == 1
        assert got["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "n1",
                                                       "uid": node_uid}]
    finally:
        lease.stop()
    renewed = api.get(LEASES, "n1", "kube-node-lease")["spec"]["renewTime"]
    threading.Event().wait(0.6)
    assert api.get(LEASES, "n1", "kube-node-lease")["spec"]["renewTime"] == renewed


def _taint_keys(api: KubeAPI, name: str) -> list[tuple[str, str]]:
    return [(t["key"], t["effect"]) for t in (api.get(NODES, name).get("spec") or {}).get("taints") or []]


def test_a_node_is_registered_tainted_not_ready_and_the_controller_lifts_the_taint_once_it_is_ready(
        api: KubeAPI) -> None:
    """TaintNodesByCondition (the emulator's admission) taints every new Node `not-ready:NoSchedule`, so nothing is
    scheduled there before the node lifecycle controller has seen it Ready. A Node registered Not Ready keeps the
    taint; a Node with a NoSchedule taint of that key already is not tainted twice."""
    api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "fresh"}})
    assert _taint_keys(api, "fresh") == [(logic.NOT_READY, "NoSchedule")]
    own = api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "own"},
                             "spec": {"taints": [{"key": logic.NOT_READY, "value": "x", "effect": "NoSchedule"}]}})
    assert own["spec"]["taints"] == [{"key": logic.NOT_READY, "value": "x", "effect": "NoSchedule"}]
    api.patch(NODES, "fresh", {"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "lastHeartbeatTime": _now(),
         "lastTransitionTime": _now()}]}}, subresource="status")
    with NodeLifecycleController(api, profile=profile_for("1.37"), times=TIMES):
        _register(api, "ready")
        wait_until(lambda: _taint_keys(api, "ready") == [], 10, "the Ready node's not-ready taint to go")
        assert (logic.NOT_READY, "NoSchedule") in _taint_keys(api, "fresh")
