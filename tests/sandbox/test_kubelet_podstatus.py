"""The pod status and container events the kubelet simulator writes, as a real kubelet v1.37.2 wrote them for the
same pods (tests/real/test_kubelet_differential.py compares the two on a live cluster; these pin the details
without one): the sandbox condition before and after, terminal reasons, init containers, observedGeneration,
volume mounts, and the Normal events of starting and killing containers."""

from __future__ import annotations

from typing import Any

from bridge.sandbox.kubelet.podevents import kill_events, start_events
from bridge.sandbox.kubelet.podstatus import RunState, build_status
from bridge.sandbox.kubelet.version import KubeletVersion

V137, V136, V133 = KubeletVersion(37), KubeletVersion(36), KubeletVersion(33)
NOW = "2026-01-01T00:00:00Z"
MOUNT = {"name": "kube-api-access-x1y2z", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
         "readOnly": True}


def pod(*, init: bool = False, generation: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "probe", "image": "probe:1", "volumeMounts": [MOUNT]}]}
    if init:
        spec["initContainers"] = [{"name": "init", "image": "probe:1"}]
    return {"metadata": {"name": "p", "uid": "u1", "generation": generation}, "spec": spec}


def conds(status: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    return {c["type"]: (c["status"], c.get("reason"), c.get("message"), c.get("observedGeneration"))
            for c in status["conditions"]}


def test_before_the_containers_start_there_is_no_sandbox_and_containers_wait() -> None:
    status = build_status(pod(init=True), RunState(start_time=NOW), host_ip="h", pod_ip="p", now=NOW, version=V137)
    assert status["phase"] == "Pending" and status["observedGeneration"] == 1
    c = conds(status)
    assert c["PodReadyToStartContainers"] == ("False", "PodSandboxNotReady", "no pod sandbox exists", 1)
    assert c["Initialized"] == ("False", "ContainersNotInitialized", "containers with incomplete status: [init]", 1)
    waiting = [s["state"]["waiting"]["reason"] for s in status["initContainerStatuses"] + status["containerStatuses"]]
    assert waiting == ["PodInitializing", "PodInitializing"]
    assert status["containerStatuses"][0]["volumeMounts"] == [{**MOUNT, "recursiveReadOnly": "Disabled"}]


def test_running_the_sandbox_is_ready_and_a_finished_init_container_is_ready() -> None:
    run = RunState(start_time=NOW, started_at=NOW)
    status = build_status(pod(init=True), run, host_ip="h", pod_ip="p", now=NOW, version=V137)
    assert status["phase"] == "Running"
    assert conds(status)["PodReadyToStartContainers"] == ("True", None, None, 1)
    (init,) = status["initContainerStatuses"]
    assert init["state"]["terminated"]["reason"] == "Completed" and init["ready"] and not init["started"]


def test_a_killed_pod_failed_its_sandbox_is_not_ready_and_initialized_keeps_no_reason() -> None:
    run = RunState(start_time=NOW, started_at=NOW, finished_at=NOW, exit_codes={"probe": 143})
    status = build_status(pod(init=True, generation=2), run, host_ip="h", pod_ip="p", now=NOW, version=V137)
    assert status["phase"] == "Failed" and status["observedGeneration"] == 2
    c = conds(status)
    assert c["PodReadyToStartContainers"] == ("False", "PodSandboxNotReady", "pod sandbox is not ready", 2)
    assert c["Ready"] == c["ContainersReady"] == ("False", "PodFailed", None, 2)
    assert c["Initialized"] == ("True", None, None, 2)


def test_conditions_the_kubelet_does_not_own_are_kept_first_as_the_pod_has_them() -> None:
    # A victim of preemption: kube-scheduler wrote DisruptionTarget before deleting it (status_manager.go
    # `mergePodStatus` keeps it through the kubelet's writes; the real kubelet v1.37.2 lists it first).
    victim = pod()
    preempted = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                 "message": "default-scheduler: preempting to accommodate a higher priority pod",
                 "lastTransitionTime": "2025-12-31T23:59:00Z"}
    stale_ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2025-12-31T23:00:00Z"}
    victim["status"] = {"conditions": [stale_ready, preempted]}
    run = RunState(start_time=NOW, started_at=NOW, finished_at=NOW, exit_codes={"probe": 137})
    status = build_status(victim, run, host_ip="h", pod_ip="p", now=NOW, version=V137)
    assert [c["type"] for c in status["conditions"]] == ["DisruptionTarget", "PodReadyToStartContainers",
                                                          "Initialized", "Ready", "ContainersReady", "PodScheduled"]
    assert status["conditions"][0] == preempted
    assert conds(status)["Ready"][:2] == ("False", "PodFailed")  # the kubelet's own are its own


def test_a_pod_that_succeeded_is_completed() -> None:
    run = RunState(start_time=NOW, started_at=NOW, finished_at=NOW, exit_codes={"probe": 0})
    status = build_status(pod(), run, host_ip="h", pod_ip="p", now=NOW, version=V137)
    c = conds(status)
    assert status["phase"] == "Succeeded"
    assert c["Ready"][:2] == c["ContainersReady"][:2] == ("False", "PodCompleted")
    assert c["Initialized"][:2] == ("True", "PodCompleted")  # with no init container too


def test_older_releases_write_what_they_wrote() -> None:
    """Through 1.36 the sandbox condition has no reason; before 1.34 no observedGeneration is written."""
    run = RunState(start_time=NOW)
    assert conds(build_status(pod(), run, host_ip="h", pod_ip="p", now=NOW, version=V136))[
        "PodReadyToStartContainers"] == ("False", None, None, 1)
    old = build_status(pod(), run, host_ip="h", pod_ip="p", now=NOW, version=V133)
    assert "observedGeneration" not in old and all("observedGeneration" not in c for c in old["conditions"])


def test_starting_a_pod_records_pulled_created_started_per_container_init_first() -> None:
    events = [(e.field_path, e.reason) for e in start_events(pod(init=True), V137)]
    assert events == [("spec.initContainers{init}", r) for r in ("Pulled", "Created", "Started")] + [
        ("spec.containers{probe}", r) for r in ("Pulled", "Created", "Started")]
    pulled = start_events(pod(), V137)[0].message
    assert pulled == 'Container image "probe:1" already present on machine and can be accessed by the pod'
    assert start_events(pod(), KubeletVersion(34))[0].message == 'Container image "probe:1" already present on machine'


def test_an_image_pulled_always_is_pulled_and_a_deleted_pod_kills_its_running_containers() -> None:
    latest = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    assert [e.reason for e in start_events(latest, V137)] == ["Pulling", "Pulled", "Created", "Started"]
    tagged = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "reg:5000/busybox:1"}]}}
    assert [e.reason for e in start_events(tagged, V137)] == ["Pulled", "Created", "Started"]
    kills = kill_events(pod(init=True))
    assert [(e.field_path, e.reason, e.message) for e in kills] == [
        ("spec.containers{probe}", "Killing", "Stopping container probe")]
