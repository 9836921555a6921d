"""The scheduler and claim-controller stand-ins together against the API emulator, through bridge.kube only: what a
user of the sandbox sees (pods bound, claims created, reserved and released, Events, conditions)."""

from __future__ import annotations

import re

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bridge.kube import EVENTS, NODES, PODS, PRIORITY_CLASSES, AlreadyExists, KubeAPI, NotFound, connect
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.claimcontroller import ClaimController
from bridge.sandbox.scheduler import Scheduler
from bridge.sandbox.scheduler.scheduler import PREBIND_SECONDS_ANNOTATION
from tests.kubenodes import register_node
from tests.polling import wait_until

Obj = dict[str, Any]
DRIVER = "gpu.dra-bridge.io"


@dataclass
class Cluster:
    srv: ApiServer
    api: KubeAPI
    scheduler: Scheduler
    controller: ClaimController

    @property
    def rapi(self) -> Any:
        return self.api.resource_api()

    def add_node(self, name: str, gpus: int = 0, dra_gpus: int = 0, memory: str = "80Gi") -> None:
        register_node(self.api, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        alloc = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
        self.api.patch(NODES, name, {"status": {"allocatable": alloc, "capacity": alloc}}, subresource="status")
        if dra_gpus:
            self.add_slice(name, dra_gpus, memory)

    def add_slice(self, node: str, gpus: int, memory: str = "80Gi", product: str = "H100") -> None:
        devices = [{"name": f"gpu-{i}", "attributes": {"productName": {"string": product}, "index": {"int": i}},
                    "capacity": {"memory": {"value": memory}}} for i in range(gpus)]
        self.api.create(self.rapi.slices, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                  "resourceSliceCount": 1}, "devices": devices}})

    def template(self, name: str, selector: str | None = None, count: int = 1) -> None:
        exactly: Obj = {"deviceClassName": DRIVER, "count": count}
        if selector:
            exactly["selectors"] = [{"cel": {"expression": selector}}]
        self.api.create(self.rapi.claim_templates, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}})

    def dra_pod(self, name: str, template: str = "one-gpu", annotations: dict[str, str] | None = None) -> None:
        self.api.create(PODS, {"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
                               "spec": {"containers": [{"name": "main", "image": "cuda",
                                                        "resources": {"claims": [{"name": "gpu"}]}}],
                                        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}]}},
                        "default")

    def legacy_pod(self, name: str, gpus: int, resource: str = "nvidia.com/gpu") -> None:
        self.api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                               "spec": {"containers": [{"name": "main", "image": "cuda",
                                                        "resources": {"limits": {resource: str(gpus)}}}]}}, "default")

    def pod(self, name: str) -> Obj:
        return self.api.get(PODS, name, "default")

    def bound(self, name: str) -> str:
        return str(wait_until(lambda: self.pod(name)["spec"].get("nodeName"), what=f"{name} bound"))

    def claim_of(self, pod_name: str) -> Obj:
        statuses = wait_until(lambda: self.pod(pod_name)["status"].get("resourceClaimStatuses"),
                              what=f"claim of {pod_name}")
        return self.api.get(self.rapi.claims, statuses[0]["resourceClaimName"], "default")

    def claim_gone(self, name: str) -> bool:
        try:
            self.api.get(self.rapi.claims, name, "default")
        except NotFound:
            return True
        return False

    def events(self, name: str, reason: str) -> list[Obj]:
        return [e for e in self.api.list(EVENTS, "default")["items"]
                if e["involvedObject"]["name"] == name and e["reason"] == reason]


@pytest.fixture
def cluster(make_server: Callable[..., ApiServer], tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(version: str = "1.37.0", extended_resource_name: str | None = None) -> Cluster:
        srv = make_server(version=version)
        srv.write_kubeconfig(tmp_path / f"kc-{srv.port}")
        api = connect(tmp_path / f"kc-{srv.port}", timeout=5.0)
        spec: Obj = {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}
        if extended_resource_name:
            spec["extendedResourceName"] = extended_resource_name
        api.create(api.resource_api().device_classes, {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                                       "metadata": {"name": DRIVER}, "spec": spec})
        sched = Scheduler(api, profile=srv.profile, initial_backoff=0.05, max_backoff=0.2).start()
        ctl = ClaimController(api, profile=srv.profile).start()
        c = Cluster(srv, api, sched, ctl)
        made.append(c)
        return c

    yield make
    for c in made:
        c.scheduler.stop()
        c.controller.stop()


def test_legacy_and_dra_pods_all_run_and_no_gpu_is_given_twice(cluster):
    c = cluster()
    for n in ("n1", "n2"):
        c.add_node(n, gpus=4, dra_gpus=4)
    c.template("one-gpu")
    c.template("big-h100", f'device.attributes["{DRIVER}"].productName == "H100" && '
                           f'device.capacity["{DRIVER}"].memory.compareTo(quantity("80Gi")) >= 0')
    for i, gpus in enumerate((1, 2, 1, 2)):
        c.legacy_pod(f"legacy-{i}", gpus)
    for i in range(6):
        c.dra_pod(f"dra-{i}", "big-h100" if i % 2 else "one-gpu")
    legacy_use: dict[str, int] = {}
    for i, gpus in enumerate((1, 2, 1, 2)):
        n = c.bound(f"legacy-{i}")
        legacy_use[n] = legacy_use.get(n, 0) + gpus
    assert all(v <= 4 for v in legacy_use.values())
    held = set()
    for i in range(6):
        node = c.bound(f"dra-{i}")
        claim = c.claim_of(f"dra-{i}")
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert result["pool"] == node
        held.add((node, result["device"]))
        assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": f"dra-{i}",
                                                   "uid": c.pod(f"dra-{i}")["metadata"]["uid"]}]
        # bindClaim stamps the allocation once it reserves the claim (1.36+ defaults; seen on kube-scheduler v1.37.2)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", claim["status"]["allocation"]["allocationTimestamp"])
        assert claim["metadata"]["generateName"] == f"dra-{i}-gpu-"
        assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
        assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
    assert len(held) == 6
    # The scheduler records the Event after the binding, which is what `bound` saw.
    scheduled = wait_until(lambda: c.events("dra-0", "Scheduled"), what="dra-0's Scheduled Event")
    assert scheduled[0]["message"].startswith("Successfully assigned default/dra-0 to ")


def test_a_claim_matching_nothing_stays_pending_with_a_failed_scheduling_event_until_devices_appear(cluster):
    c = cluster()
    c.add_node("n1", dra_gpus=2)
    c.template("b200", f'device.attributes["{DRIVER}"].productName == "B200"')
    c.dra_pod("waits", "b200")
    (event,) = wait_until(lambda: c.events("waits", "FailedScheduling"), what="FailedScheduling")
    assert event["message"] == ("0/1 nodes are available: 1 cannot allocate all claims. "  # 1.37: no PostFilter reason
                                "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
    assert event["reportingComponent"] == "default-scheduler" and event["type"] == "Warning"
    cond = wait_until(lambda: [x for x in c.pod("waits")["status"].get("conditions") or []
                               if x["type"] == "PodScheduled"], what="condition")[0]
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable" and cond["message"] == event["message"]
    assert not c.pod("waits")["spec"].get("nodeName")
    c.add_node("n2")
    c.add_slice("n2", 1, product="B200")  # a cluster event: the pod is retried and fits now
    assert c.bound("waits") == "n2"


def test_deleting_a_dra_pod_releases_and_deletes_its_claim_so_the_device_serves_the_next_pod(cluster):
    c = cluster()
    c.add_node("n1", dra_gpus=1)
    c.template("one-gpu")
    c.dra_pod("first")
    c.bound("first")
    claim = c.claim_of("first")
    c.dra_pod("second")
    wait_until(lambda: c.events("second", "FailedScheduling"), what="second waits")
    # No kubelet runs here to finish a graceful deletion: the pod is force-deleted (grace 0), as its kubelet would.
    c.api.delete(PODS, "first", "default", grace_period_seconds=0)
    wait_until(lambda: c.claim_gone(claim["metadata"]["name"]), what="claim of the deleted pod removed")
    assert c.bound("second") == "n1"
    assert c.claim_of("second")["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"


def test_a_finished_pod_is_dropped_from_reserved_for_and_its_claim_deallocated_and_deleted(cluster):
    c = cluster()
    c.add_node("n1", dra_gpus=1)
    c.template("one-gpu")
    c.dra_pod("job")
    c.bound("job")
    name = c.claim_of("job")["metadata"]["name"]
    c.api.patch(PODS, "job", {"status": {"phase": "Succeeded"}}, "default", subresource="status")
    wait_until(lambda: c.claim_gone(name), what="claim of the finished pod deleted")
    # The controller counts a deletion once the API server answered it, after the claim is gone for everyone.
    wait_until(lambda: c.controller.deallocated >= 1 and c.controller.deleted_claims >= 1,
               what="the controller to count the deallocation and the deletion")


def test_extended_resource_pod_gets_a_scheduler_made_claim_on_a_node_without_the_plugin_resource(cluster):
    c = cluster("1.37.0")
    c.add_node("dp-node", gpus=8)
    c.add_node("dra-node", dra_gpus=2)
    c.legacy_pod("ext", 1, resource=f"deviceclass.resource.kubernetes.io/{DRIVER}")
    assert c.bound("ext") == "dra-node"
    status = wait_until(lambda: c.pod("ext")["status"].get("extendedResourceClaimStatus"), what="claim status")
    claim = c.api.get(c.rapi.claims, status["resourceClaimName"], "default")
    assert claim["metadata"]["name"].startswith("ext-extended-resources-")
    assert claim["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert claim["metadata"]["ownerReferences"][0]["name"] == "ext"
    assert status["requestMappings"] == [{"containerName": "main",
                                          "resourceName": f"deviceclass.resource.kubernetes.io/{DRIVER}",
                                          "requestName": "container-0-request-0"}]
    c.api.delete(PODS, "ext", "default", grace_period_seconds=0)  # no kubelet: force, as its kubelet would end it
    wait_until(lambda: c.claim_gone(claim["metadata"]["name"]), what="extended claim removed with its pod")


def test_a_class_extended_resource_name_goes_to_the_device_plugin_where_the_node_has_it(cluster):
    c = cluster("1.37.0", extended_resource_name="nvidia.com/gpu")
    c.add_node("dp-node", gpus=2)
    c.legacy_pod("legacy", 1)
    assert c.bound("legacy") == "dp-node"
    assert not c.pod("legacy")["status"].get("extendedResourceClaimStatus")


def test_a_cel_runtime_error_is_reported_as_a_scheduler_error(cluster):
    c = cluster()
    c.add_node("n1", dra_gpus=1)
    c.template("broken", f'device.attributes["{DRIVER}"].noSuchAttribute == 1')
    c.dra_pod("broken", "broken")
    (event,) = wait_until(lambda: c.events("broken", "FailedScheduling"), what="FailedScheduling")
    assert event["message"].startswith('running "DynamicResources" filter plugin: claim default/broken-gpu-')
    assert "CEL runtime error" in event["message"]
    cond = wait_until(lambda: [x for x in c.pod("broken")["status"].get("conditions") or []
                               if x["type"] == "PodScheduled"], what="condition")[0]
    assert cond["reason"] == "SchedulerError"


def test_a_missing_template_is_an_event_from_the_claim_controller_and_the_pod_waits_without_scheduler_events(cluster):
    c = cluster()
    c.add_node("n1", dra_gpus=1)
    c.dra_pod("orphan", "no-such-template")
    wait_until(lambda: (c.events("orphan", "FailedResourceClaimCreation") or [{}])[0].get("count", 0) >= 2,
               what="the controller retrying")
    (event,) = c.events("orphan", "FailedResourceClaimCreation")  # retries count on one Event
    assert event["message"] == ('PodResourceClaim gpu: resource claim template "no-such-template": '
                                'resourceclaimtemplate.resource.k8s.io "no-such-template" not found')
    assert event["source"]["component"] == "resource_claim"
    assert not c.events("orphan", "FailedScheduling")
    c.template("no-such-template")  # created late: the controller's retry creates the claim, the scheduler binds
    assert c.bound("orphan") == "n1"


def test_scheduling_gates_keep_a_pod_out_with_the_scheduling_gated_condition(cluster):
    c = cluster()
    c.add_node("n1")
    c.api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gated", "namespace": "default"},
                        "spec": {"schedulingGates": [{"name": "example.com/wait"}],
                                 "containers": [{"name": "main", "image": "x"}]}}, "default")
    cond = wait_until(lambda: [x for x in c.pod("gated")["status"].get("conditions") or []
                               if x["type"] == "PodScheduled"], what="condition")[0]
    assert cond["reason"] == "SchedulingGated"
    assert cond["message"] == "Scheduling is blocked due to non-empty scheduling gates"
    assert not c.events("gated", "FailedScheduling")


@pytest.mark.parametrize("version, nominates", [("1.35.0", True), ("1.34.2", False)])
def test_a_slow_prebind_keeps_the_decision_out_of_the_api_except_for_the_nomination(cluster, version: str,
                                                                                     nominates: bool) -> None:
    """Up to 1.35 the allocation decided in the scheduling cycle is written only after VolumeBinding's PreBind
    (modelled by the prebind-seconds annotation); from 1.35 the pod is nominated to its node meanwhile, and the bind
    clears it."""
    c = cluster(version)
    c.add_node("n1", dra_gpus=1)
    c.template("one-gpu")
    c.dra_pod("slow", annotations={PREBIND_SECONDS_ANNOTATION: "3"})
    if nominates:
        wait_until(lambda: c.pod("slow")["status"].get("nominatedNodeName") == "n1", what="the nomination")
    else:
        time.sleep(1.0)
        assert not c.pod("slow")["status"].get("nominatedNodeName")
    pod = c.pod("slow")
    assert not pod["spec"].get("nodeName")
    claim = c.claim_of("slow")
    assert not (claim.get("status") or {}).get("allocation"), "the allocation is written in PreBind, not before"
    # Meanwhile the decision holds the device: a second pod does not get it.
    c.dra_pod("second")
    wait_until(lambda: c.events("second", "FailedScheduling"), what="second waits for the only GPU")
    assert c.bound("slow") == "n1"
    bound = c.pod("slow")
    assert not bound["status"].get("nominatedNodeName"), "the API server clears the nomination on bind (1.35+)"
    assert c.claim_of("slow")["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"


def test_from_1_36_the_allocation_is_written_while_the_volume_wait_holds_the_bind(cluster) -> None:
    """From 1.36 VolumeBinding's and DynamicResources' PreBind run in parallel (framework.go
    `getPreBindPluginGroups`): the claim is allocated at once, the pod stays nominated and unbound until the
    (modelled) volume wait is over."""
    c = cluster("1.37.0")
    c.add_node("n1", dra_gpus=1)
    c.template("one-gpu")
    c.dra_pod("slow", annotations={PREBIND_SECONDS_ANNOTATION: "3"})
    wait_until(lambda: (c.claim_of("slow").get("status") or {}).get("allocation"), what="the allocation")
    pod = c.pod("slow")
    assert pod["status"].get("nominatedNodeName") == "n1" and not pod["spec"].get("nodeName")
    assert c.bound("slow") == "n1"
    assert not c.pod("slow")["status"].get("nominatedNodeName")


def test_the_claim_controller_drops_a_consumer_pod_that_does_not_exist_and_keeps_one_it_cannot_check(cluster):
    """1.36+ (pkg/controller/resourceclaim/controller.go syncClaim): a pod consumer whose pod is gone is removed, a
    consumer of another resource is kept as is. This is what emptied reservedFor between two patches in the real
    differential test, which once read as "the real server does not merge the list"."""
    c = cluster()
    widget = {"apiGroup": "example.com", "resource": "widgets", "name": "w", "uid": "uid-w"}
    claim = c.api.create(c.rapi.claims, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "shared", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}}, "default")
    claim["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}},
        "reservedFor": [{"resource": "pods", "name": "ghost", "uid": "uid-ghost"}, widget]}
    c.api.update(c.rapi.claims, claim, "default", subresource="status")
    wait_until(lambda: c.api.get(c.rapi.claims, "shared", "default")["status"].get("reservedFor") == [widget],
               what="only the widget consumer left")
    assert c.api.get(c.rapi.claims, "shared", "default")["status"]["allocation"]  # still in use: not deallocated


def test_a_node_that_appears_while_the_pod_is_in_its_scheduling_cycle_gets_it_retried_not_parked(
        cluster, monkeypatch: pytest.MonkeyPatch):
    """The cycle runs on a snapshot taken before the Node's allocatable was written; the event arrives mid-cycle.
    kube-scheduler (scheduling_queue.go determineSchedulingHintForInFlightPod) sends such a pod to backoff; parked
    as unschedulable it would wait for the next event or the 5-minute flush (seen under load in CI)."""
    c = cluster()
    sched = c.scheduler
    original = type(sched)._snapshot
    fired: list[bool] = []

    def snapshot_then_node_arrives(self):  # type: ignore[no-untyped-def]
        snap = original(self)
        if not fired:
            fired.append(True)
            c.add_node("late", gpus=1)
            wait_until(lambda: "late" in {n["metadata"]["name"] for n in self._informers["nodes"].snapshot().values()
                                          if (n.get("status") or {}).get("allocatable")},
                       what="the scheduler's informer to see the node")
        return snap

    monkeypatch.setattr(type(sched), "_snapshot", snapshot_then_node_arrives)
    c.legacy_pod("early", 1)
    assert c.bound("early") == "late"
    assert [e["message"] for e in c.events("early", "FailedScheduling")] == \
        ["no nodes available to schedule pods"]


def test_a_kubelet_heartbeat_retries_no_waiting_pod_but_a_change_scheduling_reads_does(cluster):
    """updateNodeInCache / NodeSchedulingPropertiesChange: a Node update that changes only condition times (what a
    kubelet writes every few seconds) moves no pod; a new label (or allocatable, taints, ...) does."""
    c = cluster()
    c.add_node("n1")

    def heartbeat(second: int) -> None:
        c.api.patch(NODES, "n1", {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                                             "lastHeartbeatTime": f"2026-01-01T00:00:0{second}Z"}]}},
                    subresource="status")

    heartbeat(0)  # Ready appears: a condition's status changed, which counts
    c.legacy_pod("waits", 1)
    wait_until(lambda: c.events("waits", "FailedScheduling"), what="waits refused")
    time.sleep(0.5)  # past the backoff (0.05-0.2 s here): the pod now waits for an event
    before = c.scheduler.attempts
    for second in range(1, 4):
        heartbeat(second)
        time.sleep(0.3)
    assert c.scheduler.attempts == before
    c.api.patch(NODES, "n1", {"metadata": {"labels": {"gpu": "none"}}})
    wait_until(lambda: c.scheduler.attempts > before, what="the pod retried on the label")


def _prio_pod(c: Cluster, name: str, priority: int) -> Obj:
    """A one-GPU pod of PriorityClass `p<priority>` (made when missing); the emulator's Priority admission sets
    `spec.priority` from it."""
    try:
        c.api.create(PRIORITY_CLASSES, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                        "metadata": {"name": f"p{priority}"}, "value": priority})
    except AlreadyExists:
        pass
    container = {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return c.api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                               "spec": {"priorityClassName": f"p{priority}", "containers": [container]}}, "default")


def _condition(pod: Obj, kind: str) -> Obj:
    return next(x for x in pod["status"].get("conditions") or [] if x["type"] == kind)


def test_a_higher_preemptor_takes_over_the_nomination_and_the_terminating_victim_of_a_lower_one(cluster):
    """`low` (0) holds the only GPU; `mid` (500) preempts it and is nominated to n1. No kubelet runs here, so `low`
    stays terminating. `high` (1000) arrives: `mid`'s nomination does not count against it (lower priority), `low`
    is again the victim, but being deleted already it gets no second DELETE or Event; `mid`'s nomination is cleared
    (executor.go clearNominatedNodeName) and `high` is nominated. When `low` is gone, `high` binds; `mid` waits."""
    c = cluster()
    c.add_node("n1", gpus=1)
    _prio_pod(c, "low", 0)
    assert c.bound("low") == "n1"
    mid = _prio_pod(c, "mid", 500)
    wait_until(lambda: c.pod("mid")["status"].get("nominatedNodeName") == "n1", what="mid nominated")
    victim = wait_until(lambda: (p := c.pod("low"))["metadata"].get("deletionTimestamp") and p, what="low deleted")
    target = _condition(victim, "DisruptionTarget")
    assert (target["status"], target["reason"], target["message"]) == (
        "True", "PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod")
    (event,) = wait_until(lambda: c.events("low", "Preempted"), what="low's Preempted Event")
    assert event["message"] == f"Preempted by pod {mid['metadata']['uid']} on node n1" and event["type"] == "Normal"
    assert event["related"]["name"] == "mid" and event["action"] == "Preempting"

    high = _prio_pod(c, "high", 1000)
    wait_until(lambda: c.pod("high")["status"].get("nominatedNodeName") == "n1", what="high nominated")
    assert _condition(c.pod("high"), "PodScheduled")["message"] == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: found a potential placement for pod on "
        "node n1, preempting 1 victims")
    wait_until(lambda: not c.pod("mid")["status"].get("nominatedNodeName"), what="mid's nomination cleared")
    assert len(c.events("low", "Preempted")) == 1  # low was being deleted: no second DELETE, no second Event
    assert c.pod("low")["metadata"]["deletionTimestamp"] == victim["metadata"]["deletionTimestamp"]

    c.api.delete(PODS, "low", "default", grace_period_seconds=0)  # its kubelet would end it now
    assert c.bound("high") == "n1"
    assert high["metadata"]["uid"] == c.pod("high")["metadata"]["uid"]
    assert not c.pod("mid")["spec"].get("nodeName")
