"""Graceful pod deletion in the API emulator, as kube-apiserver does it (staging/src/k8s.io/apiserver/pkg/registry/
rest/delete.go `BeforeDelete`, pkg/registry/core/pod/strategy.go `CheckGracefulDelete`): a bound pod that has not
ended stays terminating until its kubelet deletes it with grace 0; everything else goes at once."""

from __future__ import annotations

import pytest
from kubernetes.client import ApiException, V1DeleteOptions, V1Preconditions

from bridge.sandbox.apiserver.clock import parse_rfc3339
from bridge.sandbox.apiserver.deletion import before_delete

from .conftest import pod

NOW = 1_700_000_000.0


def bound(phase: str = "Running", grace: int | None = None) -> dict:
    spec: dict = {"nodeName": "node-a", "containers": [{"name": "c", "image": "x"}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"name": "p"}, "spec": spec, "status": {"phase": phase}}


def test_a_bound_running_pod_is_marked_for_its_termination_grace_period_not_removed() -> None:
    d = before_delete(bound(), is_pod=True, options={}, query={}, now=NOW)
    assert d.grace == 30 and parse_rfc3339(d.timestamp) == NOW + 30
    assert before_delete(bound(grace=120), is_pod=True, options={}, query={}, now=NOW).grace == 120
    assert before_delete(bound(), is_pod=True, options={"gracePeriodSeconds": 5}, query={}, now=NOW).grace == 5


@pytest.mark.parametrize("obj, options", [
    (bound(phase="Succeeded"), {}),
    (bound(phase="Failed"), {}),
    ({"metadata": {"name": "p"}, "spec": {"containers": []}, "status": {"phase": "Pending"}}, {}),  # not bound
    (bound(), {"gracePeriodSeconds": 0}),  # force
])
def test_an_ended_unbound_or_force_deleted_pod_is_marked_with_grace_0_and_removed_at_once(obj: dict,
                                                                                          options: dict) -> None:
    d = before_delete(obj, is_pod=True, options=options, query={}, now=NOW)
    assert d.grace == 0 and parse_rfc3339(d.timestamp) == NOW and not d.pending


def test_other_kinds_are_never_deleted_gracefully() -> None:
    assert before_delete(bound(), is_pod=False, options={"gracePeriodSeconds": 30}, query={}, now=NOW).grace is None


def test_a_terminating_pod_may_only_have_its_grace_period_shortened() -> None:
    terminating = bound()
    terminating["metadata"].update(deletionTimestamp="2023-11-14T22:13:50Z", deletionGracePeriodSeconds=30)
    marked = parse_rfc3339("2023-11-14T22:13:50Z")
    start = marked - 30
    longer = before_delete(terminating, is_pod=True, options={"gracePeriodSeconds": 60}, query={}, now=start + 1)
    assert longer.pending and longer.grace == 30
    assert before_delete(terminating, is_pod=True, options={}, query={}, now=start + 1).pending
    shorter = before_delete(terminating, is_pod=True, options={"gracePeriodSeconds": 10}, query={}, now=start + 1)
    assert (shorter.grace, parse_rfc3339(shorter.timestamp)) == (10, start + 10)
    late = before_delete(terminating, is_pod=True, options={"gracePeriodSeconds": 10}, query={}, now=start + 20)
    assert (late.grace, parse_rfc3339(late.timestamp)) == (1, start + 20)  # never into the past, still graceful
    now = before_delete(terminating, is_pod=True, options={"gracePeriodSeconds": 0}, query={}, now=start + 1)
    assert (now.grace, parse_rfc3339(now.timestamp)) == (0, start + 1)  # marked with now, then removed
    terminating["metadata"]["deletionGracePeriodSeconds"] = 0
    assert before_delete(terminating, is_pod=True, options={}, query={}, now=start + 1).grace is None  # as it is


def test_through_the_api_a_bound_pod_stays_terminating_until_the_kubelets_final_delete(core) -> None:
    body = pod("p")
    body["spec"]["nodeName"] = "node-a"
    created = core.create_namespaced_pod("default", body)
    answered = core.delete_namespaced_pod("p", "default")
    assert answered.metadata.deletion_timestamp is not None and answered.metadata.deletion_grace_period_seconds == 30
    core.delete_namespaced_pod("p", "default")  # a second DELETE changes nothing
    terminating = core.read_namespaced_pod("p", "default")
    assert terminating.metadata.deletion_grace_period_seconds == 30
    assert terminating.metadata.generation == created.metadata.generation + 1
    with pytest.raises(ApiException) as wrong:
        core.delete_namespaced_pod("p", "default", body=V1DeleteOptions(
            grace_period_seconds=0, preconditions=V1Preconditions(uid="another-uid")))
    assert wrong.value.status == 409
    core.delete_namespaced_pod("p", "default", body=V1DeleteOptions(
        grace_period_seconds=0, preconditions=V1Preconditions(uid=created.metadata.uid)))
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("p", "default")
    assert gone.value.status == 404


def test_through_the_api_an_unbound_pod_is_removed_at_once_and_answered_marked(core) -> None:
    """store.go: the graceful strategy's mark (now, grace 0, generation + 1) is written, then the pod removed; the
    answer is the marked pod, as kube-apiserver v1.37.2 answers (tests/real/test_differential.py)."""
    created = core.create_namespaced_pod("default", pod("pending"))
    answered = core.delete_namespaced_pod("pending", "default")
    assert answered.metadata.deletion_timestamp is not None and answered.metadata.deletion_grace_period_seconds == 0
    assert answered.metadata.generation == created.metadata.generation + 1
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("pending", "default")
    assert gone.value.status == 404
