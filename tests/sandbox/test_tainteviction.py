"""The taint eviction controller stand-in (`bridge.sandbox.tainteviction`) and the API emulator's
DefaultTolerationSeconds admission (`bridge.sandbox.apiserver.tolerationseconds`): their rules, read from
kube-controller-manager and kube-apiserver v1.37.2, on the surprising cases, and the controller against the
emulator. The agreement with the real ones on a node whose kubelet stopped is
tests/real/test_node_lifecycle_differential.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.kube import EVENTS, NODES, PODS, KubeAPI, NotFound, connect
from bridge.sandbox.apiserver import ApiServer, profile_for
from bridge.sandbox.apiserver.tolerationseconds import DefaultTolerationSeconds
from bridge.sandbox.tainteviction import TaintEvictionController
from bridge.sandbox.tainteviction import logic
from bridge.sandbox.tainteviction.logic import NEVER, TimedQueue
from tests.polling import wait_until

UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
TAINTS = ((UNREACHABLE, ""),)


def tol(key: str = UNREACHABLE, effect: str = "NoExecute", seconds: int | None = None, **more: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"key": key, "operator": "Exists", "effect": effect, **more}
    if seconds is not None:
        t["tolerationSeconds"] = seconds
    return t


def default(key: str, seconds: int = 300) -> dict[str, Any]:
    return {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}


# -- DefaultTolerationSeconds ---------------------------------------------------------------------------------------


def admitted(tolerations: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    pod: dict[str, Any] = {"spec": {} if tolerations is None else {"tolerations": tolerations}}
    DefaultTolerationSeconds().admit(pod)
    return list(pod["spec"].get("tolerations") or [])


def test_a_pod_without_tolerations_gets_300_seconds_on_not_ready_and_unreachable_in_that_order() -> None:
    assert admitted(None) == [default(NOT_READY), default(UNREACHABLE)]


def test_a_toleration_of_the_same_key_counts_whatever_its_seconds_or_operator_and_is_kept_as_written() -> None:
    own = {"key": UNREACHABLE, "operator": "Equal", "value": "x", "effect": "NoExecute", "tolerationSeconds": 5}
    assert admitted([own]) == [own, default(NOT_READY)]


def test_an_empty_key_or_effect_counts_for_both_taints_but_another_effect_does_not() -> None:
    assert admitted([{"operator": "Exists"}]) == [{"operator": "Exists"}]  # tolerates everything: nothing added
    assert admitted([{"key": NOT_READY, "operator": "Exists"}]) == [{"key": NOT_READY, "operator": "Exists"},
                                                                    default(UNREACHABLE)]
    # NoSchedule on the same key is not a NoExecute toleration: the 300 s one is added beside it
    assert admitted([tol(effect="NoSchedule")]) == [tol(effect="NoSchedule"), default(NOT_READY), default(UNREACHABLE)]


def test_the_seconds_are_the_api_servers_flags() -> None:
    pod: dict[str, Any] = {"spec": {}}
    DefaultTolerationSeconds(not_ready=7, unreachable=3).admit(pod)
    assert [t["tolerationSeconds"] for t in pod["spec"]["tolerations"]] == [7, 3]
    assert DefaultTolerationSeconds(7, 3).flags() == ["--default-not-ready-toleration-seconds=7",
                                                      "--default-unreachable-toleration-seconds=3"]


# -- which toleration decides ---------------------------------------------------------------------------------------


def test_each_taint_is_matched_by_the_first_toleration_that_tolerates_it_only() -> None:
    # the first one tolerates for ever; the 60 s one after it is never looked at
    assert logic.min_toleration_seconds(logic.matching_tolerations(TAINTS, [tol(), tol(seconds=60)]) or []) == NEVER
    assert logic.min_toleration_seconds(logic.matching_tolerations(TAINTS, [tol(seconds=60), tol()]) or []) == 60


def test_the_shortest_matched_toleration_wins_and_zero_or_less_means_now() -> None:
    taints = ((UNREACHABLE, ""), ("gpu.example.com/dead", "yes"))
    tolerations = [tol(seconds=300), tol(key="gpu.example.com/dead", seconds=30)]
    assert logic.min_toleration_seconds(logic.matching_tolerations(taints, tolerations) or []) == 30
    assert logic.min_toleration_seconds([tol(seconds=-5), tol(seconds=30)]) == 0
    assert logic.min_toleration_seconds([tol(), tol(key="other")]) == NEVER  # no seconds on any: for ever


def test_a_taint_no_toleration_matches_means_no_tolerations_used() -> None:
    assert logic.matching_tolerations(TAINTS, [tol(key=NOT_READY, seconds=300)]) is None
    assert logic.matching_tolerations(TAINTS, []) is None


def test_only_no_execute_taints_count() -> None:
    node = {"spec": {"taints": [{"key": UNREACHABLE, "effect": "NoSchedule"},
                                {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": "x"},
                                {"key": "a", "value": "b", "effect": "NoExecute"}]}}
    assert logic.no_execute_taints(node) == ((UNREACHABLE, ""), ("a", "b"))


# -- scheduling (`processPodOnNode`) --------------------------------------------------------------------------------


def test_a_pod_not_tolerating_the_taint_is_evicted_at_once_and_that_is_not_a_cancellable_wait() -> None:
    queue = TimedQueue()
    assert logic.schedule(queue, "ns/p", TAINTS, [], 100.0) == ("now", False)
    assert queue.due(100.0) == ["ns/p"]
    assert queue.cancel("ns/p") is False  # no "Cancelling deletion" Event for it


def test_a_tolerated_pod_is_evicted_its_seconds_after_it_was_first_scheduled() -> None:
    queue = TimedQueue()
    assert logic.schedule(queue, "ns/p", TAINTS, [tol(seconds=30)], 100.0) == ("later", False)
    assert queue.due(129.9) == []
    assert queue.due(130.0) == ["ns/p"]
    assert queue.due(131.0) == []  # handed out once


def test_a_later_taint_change_keeps_the_first_schedule_even_when_the_toleration_is_now_shorter() -> None:
    queue = TimedQueue()
    logic.schedule(queue, "ns/p", TAINTS, [tol(seconds=300)], 100.0)
    # both taints now, the not-ready toleration is 10 s: upstream keeps the eviction at 100 + 300
    both = ((UNREACHABLE, ""), (NOT_READY, ""))
    assert logic.schedule(queue, "ns/p", both, [tol(seconds=300), tol(key=NOT_READY, seconds=10)], 150.0) == \
        ("kept", False)
    assert queue.work["ns/p"].fire_at == 400.0


def test_a_toleration_for_ever_cancels_a_waiting_eviction_with_an_event() -> None:
    queue = TimedQueue()
    logic.schedule(queue, "ns/p", TAINTS, [tol(seconds=30)], 100.0)
    assert logic.schedule(queue, "ns/p", TAINTS, [tol()], 110.0) == ("never", True)
    assert queue.due(1000.0) == []


def test_a_pod_that_stopped_tolerating_is_evicted_now_and_its_wait_cancelled() -> None:
    queue = TimedQueue()
    logic.schedule(queue, "ns/p", TAINTS, [tol(seconds=30)], 100.0)
    assert logic.schedule(queue, "ns/p", TAINTS, [], 110.0) == ("now", True)
    assert queue.due(110.0) == ["ns/p"]


# -- the pod's status before the delete ----------------------------------------------------------------------------


def test_the_evicted_pod_gets_a_disruption_target_condition_with_its_generation() -> None:
    pod = {"metadata": {"generation": 3}, "status": {"phase": "Running", "conditions": [{"type": "Ready"}]}}
    status = logic.disruption_status(pod, "T1", with_generation=True)
    assert status is not None and status["phase"] == "Running"
    assert status["conditions"] == [{"type": "Ready"}, {
        "type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
        "message": "Taint manager: deleting due to NoExecute taint", "lastTransitionTime": "T1",
        "observedGeneration": 3}]
    assert "observedGeneration" not in logic.disruption_status(pod, "T1", with_generation=False)["conditions"][1]


def test_a_pod_that_has_the_condition_already_is_not_written_again() -> None:
    once = logic.disruption_status({"metadata": {}, "status": {}}, "T1", with_generation=False)
    assert logic.disruption_status({"metadata": {}, "status": once}, "T2", with_generation=False) is None


# -- against the emulator -------------------------------------------------------------------------------------------


@pytest.fixture
def api(short_tmp: Path) -> Iterator[KubeAPI]:
    with ApiServer(toleration_seconds=DefaultTolerationSeconds(not_ready=300, unreachable=2)) as srv:
        yield connect(str(srv.write_kubeconfig(short_tmp / "kubeconfig")))


def _pod(api: KubeAPI, name: str, node: str, tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}, "default")


def _taint(api: KubeAPI, node: str, taints: list[dict[str, Any]]) -> None:
    api.patch(NODES, node, {"spec": {"taints": taints or None}})


def _events(api: KubeAPI, pod: str) -> list[str]:
    return [e["message"] for e in api.list(EVENTS, "default")["items"]
            if e["involvedObject"]["name"] == pod and e["reason"] == "TaintManagerEviction"]


def _gone_or_deleting(api: KubeAPI, name: str) -> bool:
    try:
        return bool(api.get(PODS, name, "default")["metadata"].get("deletionTimestamp"))
    except NotFound:
        return True


def test_the_emulator_stores_every_pod_with_the_default_tolerations(api: KubeAPI) -> None:
    api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    pod = _pod(api, "p", "n1")
    assert pod["spec"]["tolerations"] == [default(NOT_READY, 300), default(UNREACHABLE, 2)]
    # an update that leaves them out gets them back (the plugin runs on UPDATE too)
    body = dict(pod, spec={**pod["spec"], "tolerations": [tol(key="x", effect="NoSchedule")]})
    updated = api.update(PODS, body, "default")
    assert updated["spec"]["tolerations"] == [tol(key="x", effect="NoSchedule"), default(NOT_READY, 300),
                                              default(UNREACHABLE, 2)]


def test_pods_on_a_node_tainted_unreachable_are_evicted_after_their_toleration_and_the_untolerating_at_once(
        api: KubeAPI) -> None:
    api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    _pod(api, "defaulted", "n1")  # the 2 s default toleration
    _pod(api, "forever", "n1", [tol()])
    with TaintEvictionController(api, profile=profile_for("1.37")) as controller:
        _taint(api, "n1", [{"key": UNREACHABLE, "effect": "NoExecute"}, {"key": "evict", "effect": "NoExecute"}])
        # "evict" is tolerated by no pod: both go at once
        wait_until(lambda: _gone_or_deleting(api, "defaulted") and _gone_or_deleting(api, "forever"), timeout=10)
        _taint(api, "n1", [{"key": UNREACHABLE, "effect": "NoExecute"}])
        _pod(api, "late", "n1")
        _pod(api, "stays", "n1", [tol()])
        wait_until(lambda: "default/late" in controller.scheduled(), timeout=10)
        assert not _gone_or_deleting(api, "late")
        wait_until(lambda: _gone_or_deleting(api, "late"), timeout=10)
        assert not api.get(PODS, "stays", "default")["metadata"].get("deletionTimestamp")
        assert controller.errors == 0
    # no kubelet runs the node here: the pod waits out its grace period Terminating, as on a node whose kubelet died
    late = api.get(PODS, "late", "default")
    assert late["metadata"]["deletionGracePeriodSeconds"] == 30
    conditions = {c["type"]: c for c in late["status"]["conditions"]}
    assert conditions["DisruptionTarget"]["reason"] == "DeletionByTaintManager"
    assert _events(api, "late") == ["Marking for deletion Pod default/late"]


def test_removing_the_taint_in_time_cancels_the_eviction_with_an_event(api: KubeAPI) -> None:
    api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    _pod(api, "p", "n1", [tol(seconds=30)])
    with TaintEvictionController(api, profile=profile_for("1.37")) as controller:
        _taint(api, "n1", [{"key": UNREACHABLE, "effect": "NoExecute"}])
        wait_until(lambda: "default/p" in controller.scheduled(), timeout=10)
        _taint(api, "n1", [])
        wait_until(lambda: not controller.scheduled(), timeout=10)
        wait_until(lambda: _events(api, "p") == ["Cancelling deletion of Pod default/p"], timeout=10)
    assert not api.get(PODS, "p", "default")["metadata"].get("deletionTimestamp")
