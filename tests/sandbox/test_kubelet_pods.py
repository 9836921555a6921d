"""The kubelet simulator runs the pods bound to its node like a kubelet: admission with the real rejection
reasons, Allocate and NodePrepareResources before the containers start, Running with container statuses, Jobs that
finish, unprepare and device release on termination and deletion, and PodResources listing the active pods.

Pods are bound by hand here (`spec.nodeName`) and claims allocated by hand, so these tests stand on the kubelet
alone; the scheduler and claim controller stand-ins are exercised in the sandbox-cluster tests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from bridge._proto.podresources.v1 import podresources_pb2 as prpb
from bridge._proto.podresources.v1 import podresources_pb2_grpc as prpb_grpc
from bridge.dra.health import HealthBoard
from bridge.kube import EVENTS, NODES, PODS, KubeAPI, NotFound, connect
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.kubelet import RUN_SECONDS_ANNOTATION, STOP_SECONDS_ANNOTATION, KubeletConfig, KubeletSimulator
from bridge.sandbox.kubelet.pods import effective_grace
from tests.dra.cluster import ensure_namespace, gpu, make_claim
from tests.polling import wait_until
from tests.sandbox.draplugins import DRIVER, Script, ScriptedPlugin
from tests.sandbox.plugins import RES, FakePlugin, Served, start_plugin

NODE = "node-a"
NS = "team"


@dataclass
class World:
    api: KubeAPI
    kubelet: KubeletSimulator
    widgets: FakePlugin
    dra: Script

    def pod(self, name: str, *, widgets: int = 0, cpu: str | None = None, claims: list[str] = (),  # type: ignore[assignment]
            annotations: dict[str, str] | None = None, restart: str = "Always",
            init: list[dict[str, Any]] | None = None, bound: bool = True, grace: int | None = None,
            finalizers: list[str] = (), **status: Any) -> dict[str, Any]:  # type: ignore[assignment]
        resources: dict[str, Any] = {}
        if widgets:
            resources["limits"] = {RES: str(widgets)}
        if cpu:
            resources["requests"] = {"cpu": cpu}
        if claims:
            resources["claims"] = [{"name": c} for c in claims]
        spec: dict[str, Any] = {"restartPolicy": restart,
                                "containers": [{"name": "main", "image": "cuda:12", "resources": resources}]}
        if bound:
            spec["nodeName"] = NODE
        if claims:
            spec["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
        if init:
            spec["initContainers"] = init
        if grace is not None:
            spec["terminationGracePeriodSeconds"] = grace
        obj = {"apiVersion": "v1", "kind": "Pod", "spec": spec,
               "metadata": {"name": name, "namespace": NS, "annotations": annotations or {},
                            "finalizers": list(finalizers)}}
        return self.api.create(PODS, obj, NS)

    def get(self, name: str) -> dict[str, Any]:
        return self.api.get(PODS, name, NS)

    def bind(self, name: str) -> None:
        """POST pods/<name>/binding, as the scheduler's DefaultBinder does after PreBind."""
        bind(self.api, name)

    def dra_pod(self, name: str, claim: str, device: str) -> tuple[dict[str, Any], str]:
        """A pod with one claim, in the scheduler's order: the claim allocated to `device` and reserved for the pod
        (PreBind), then the pod bound here (Bind). Returns the pod and the claim's UID."""
        pod = self.pod(name, claims=[claim], bound=False)
        uid = make_claim(self.api, NS, claim, pod, [gpu(device, pool=NODE)])["metadata"]["uid"]
        self.bind(name)
        return pod, uid

    def phase(self, name: str) -> str | None:
        try:
            return (self.get(name).get("status") or {}).get("phase")
        except NotFound:
            return "gone"

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.api.list(EVENTS, NS)["items"] if e.get("reason") == reason]

    def listed(self) -> dict[str, set[str]]:
        with grpc.insecure_channel(f"unix://{self.kubelet.podresources_socket}") as ch:
            pods = prpb_grpc.PodResourcesListerStub(ch).List(prpb.ListPodResourcesRequest(), timeout=10).pod_resources
        return {p.name: {i for c in p.containers for d in c.devices for i in d.device_ids} for p in pods}

    def listed_containers(self) -> dict[str, set[str]]:
        with grpc.insecure_channel(f"unix://{self.kubelet.podresources_socket}") as ch:
            pods = prpb_grpc.PodResourcesListerStub(ch).List(prpb.ListPodResourcesRequest(), timeout=10).pod_resources
        return {p.name: {c.name for c in p.containers} for p in pods}


def bind(api: KubeAPI, name: str) -> None:
    api.create(PODS, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": NS},
                      "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}}, NS, subresource="binding")


class Env:
    """An API emulator with the namespace; `start()` starts the kubelet (version-dependent) and the plugins."""

    def __init__(self, api: KubeAPI, root: Path) -> None:
        self.api, self.root = api, root
        self.served: list[Served] = []
        self.plugins: list[ScriptedPlugin] = []
        self.kubelets: list[KubeletSimulator] = []

    def start(self, version: str = "1.34", *, resync_interval: float = 60.0, reconcile_period: float = 60.0,
              first_sync_delay: float = 0.1, board: HealthBoard | None = None) -> World:
        """The kubelet with its periods scaled down (node status, error backoff); the pod worker's resync keeps
        the real 60 s unless a test scales it."""
        kubelet = KubeletSimulator(self.root / "kl", kube=self.api, node_name=NODE, dra_call_timeout=5.0,
                                   config=KubeletConfig(version=version, register_node=True, run_pods=True,
                                                        node_status_frequency=0.2, sync_retry=0.2,
                                                        resync_interval=resync_interval,
                                                        dra_reconcile_period=reconcile_period,
                                                        first_sync_delay=first_sync_delay))
        self.kubelets.append(kubelet.start())
        widgets = start_plugin(kubelet, self.served, ["w0", "w1", "w2", "w3"])
        script = Script()
        self.plugins.append(ScriptedPlugin(kubelet.root, DRIVER, script, board=board))
        assert kubelet.dra is not None
        kubelet.dra.wait_for_plugin(DRIVER, 30)
        api = self.api
        wait_until(lambda: (api.get(NODES, NODE).get("status") or {}).get("allocatable", {}).get(RES) == "4",
                   30, "the node's allocatable widgets")
        return World(api, kubelet, widgets, script)

    def stop(self) -> None:
        for k in self.kubelets:
            k.stop()
        for s in self.served:
            s.stop()
        for p in self.plugins:
            p.stop()


@pytest.fixture
def env(short_tmp: Path, request: pytest.FixtureRequest) -> Iterator[Env]:
    """The API server at the release in `request.param` (indirect parametrization), 1.34 by default."""
    version = getattr(request, "param", "1.34.2")
    with ApiServer(version=version) as srv:
        api = connect(str(srv.write_kubeconfig(short_tmp / "kubeconfig")))
        ensure_namespace(api, NS)
        e = Env(api, short_tmp)
        try:
            yield e
        finally:
            e.stop()


@pytest.fixture
def world(env: Env) -> World:
    return env.start()


def test_a_bound_pod_gets_its_devices_from_allocate_and_runs_with_ready_container_statuses(world: World) -> None:
    world.pod("train", widgets=2)
    wait_until(lambda: world.phase("train") == "Running", 30, "the pod to run")
    status = world.get("train")["status"]
    (main,) = status["containerStatuses"]
    assert main["ready"] and main["started"] and "running" in main["state"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"
    assert status["hostIP"] == "127.0.0.1" and status["startTime"]
    assert len(world.widgets.allocations) == 1 and len(world.widgets.allocations[0]) == 2
    assert world.listed() == {"train": set(world.widgets.allocations[0])}


def test_a_pod_whose_devices_are_taken_is_rejected_with_unexpected_admission_error(world: World) -> None:
    world.pod("big", widgets=3)
    wait_until(lambda: world.phase("big") == "Running", 30, "the first pod")
    world.pod("late", widgets=2)
    wait_until(lambda: world.phase("late") == "Failed", 30, "the rejection")
    status = world.get("late")["status"]
    assert status["reason"] == "UnexpectedAdmissionError"
    assert status["message"] == ("Pod was rejected: Allocate failed due to requested number of devices unavailable "
                                 f"for {RES}. Requested: 2, Available: 1, which is unexpected")
    (event,) = world.events("UnexpectedAdmissionError")
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "late"
    assert set(world.listed()) == {"big"}  # the rejected pod holds nothing


def test_a_pod_that_does_not_fit_the_node_allocatable_is_rejected_out_of_the_resource(world: World) -> None:
    world.pod("greedy", cpu="1000")
    wait_until(lambda: world.phase("greedy") == "Failed", 30, "the rejection")
    status = world.get("greedy")["status"]
    assert status["reason"] == "OutOfcpu"
    assert status["message"] == ("Pod was rejected: Node didn't have enough resource: cpu, requested: 1000000, "
                                 "used: 0, capacity: 64000")


def test_a_job_pod_finishes_after_its_run_time_and_gives_its_devices_back(world: World) -> None:
    world.pod("job", widgets=4, restart="Never", annotations={RUN_SECONDS_ANNOTATION: "0.3"})
    wait_until(lambda: world.phase("job") == "Succeeded", 30, "the job to succeed")
    (main,) = world.get("job")["status"]["containerStatuses"]
    assert main["state"]["terminated"]["exitCode"] == 0 and main["state"]["terminated"]["reason"] == "Completed"
    assert world.listed() == {}
    world.pod("next", widgets=4)
    wait_until(lambda: world.phase("next") == "Running", 30, "the next pod to get all four widgets")


def test_the_devices_an_init_container_held_are_reused_by_the_app_container_and_never_listed(world: World) -> None:
    init = [{"name": "fetch", "image": "busybox", "resources": {"limits": {RES: "2"}}}]
    world.pod("staged", widgets=2, init=init)
    wait_until(lambda: world.phase("staged") == "Running", 30, "the pod to run")
    assert world.widgets.allocations[0] == world.widgets.allocations[1]  # devicesToReuse
    init_status = world.get("staged")["status"]["initContainerStatuses"][0]
    assert init_status["state"]["terminated"]["reason"] == "Completed"
    assert world.listed() == {"staged": set(world.widgets.allocations[0])}
    assert "fetch" not in world.listed_containers()["staged"]  # an ordinary init container is never listed


def test_a_dra_pod_is_prepared_before_it_runs_and_unprepared_when_deleted(world: World) -> None:
    # The claim as the scheduler leaves it (allocated, reserved for the pod), then the pod bound here.
    _, uid = world.dra_pod("infer", "gpu", "gpu-0")
    wait_until(lambda: world.phase("infer") == "Running", 30, "the DRA pod to run")
    assert world.dra.calls[0] == ("prepare", (uid,))
    world.api.delete(PODS, "infer", NS)  # graceful: the kubelet finishes the pod and deletes it
    wait_until(lambda: world.phase("infer") == "gone", 30, "the pod to be deleted for good")
    assert ("unprepare", (uid,)) in world.dra.calls


KEEP = "tests.dra-bridge.io/keep"  # a finalizer: the pod stays readable, with its last status, after the kubelet


def stopped(world: World, name: str) -> tuple[float, dict[str, Any]]:
    """Wait for the kubelet to have stopped the deleted pod `name` (its terminal status written); the time that took
    from now and its app container's terminated state."""
    began = time.monotonic()
    wait_until(lambda: world.phase(name) in ("Failed", "Succeeded"), 60, f"{name}'s terminal status")
    took = time.monotonic() - began
    (main,) = world.get(name)["status"]["containerStatuses"]
    world.api.patch(PODS, name, {"metadata": {"finalizers": []}}, NS)
    return took, main["state"]["terminated"]


def test_a_deleted_pod_keeps_its_devices_and_claims_until_its_containers_have_stopped(world: World) -> None:
    """The real kubelet lists a pod whose termination was requested among its active pods, and unprepares its claims
    and returns its devices only once its containers have exited: a GPU is busy for that whole time."""
    world.pod("legacy", widgets=2, annotations={STOP_SECONDS_ANNOTATION: "1.5"}, finalizers=[KEEP])
    _, uid = world.dra_pod("infer", "gpu", "gpu-0")
    world.api.patch(PODS, "infer", {"metadata": {"annotations": {STOP_SECONDS_ANNOTATION: "1.5"},
                                                 "finalizers": [KEEP]}}, NS)
    wait_until(lambda: world.phase("legacy") == world.phase("infer") == "Running", 30, "both pods to run")
    devices = world.listed()["legacy"]
    world.api.delete(PODS, "legacy", NS)
    world.api.delete(PODS, "infer", NS)
    wait_until(lambda: len(world.events("Killing")) == 2, 10, "the kubelet to send SIGTERM to both")
    time.sleep(0.5)
    assert world.listed() == {"legacy": devices, "infer": set()}  # still active: PodResources lists both
    assert ("unprepare", (uid,)) not in world.dra.calls
    assert world.phase("legacy") == world.phase("infer") == "Running"
    took, state = stopped(world, "legacy")
    assert state["exitCode"] == 143  # exited by itself on SIGTERM, within the grace period (30 s)
    assert ("unprepare", (uid,)) in world.dra.calls
    wait_until(lambda: world.listed() == {}, 10, "PodResources to forget both")
    world.pod("next", widgets=4)  # all four widgets are free again
    wait_until(lambda: world.phase("next") == "Running", 30, "the next pod to get all four widgets")


def test_containers_still_running_at_the_end_of_the_grace_period_are_killed_with_137(world: World) -> None:
    world.pod("stubborn", widgets=1, grace=3, annotations={STOP_SECONDS_ANNOTATION: "3600"}, finalizers=[KEEP])
    wait_until(lambda: world.phase("stubborn") == "Running", 30, "the pod to run")
    world.api.delete(PODS, "stubborn", NS)
    took, state = stopped(world, "stubborn")
    assert state["exitCode"] == 137 and 2.5 < took < 10, (took, state)


def test_a_second_delete_with_a_shorter_grace_period_kills_sooner_but_never_under_2_s(world: World) -> None:
    world.pod("slow", widgets=1, grace=30, annotations={STOP_SECONDS_ANNOTATION: "3600"}, finalizers=[KEEP])
    wait_until(lambda: world.phase("slow") == "Running", 30, "the pod to run")
    world.api.delete(PODS, "slow", NS)
    wait_until(lambda: bool(world.events("Killing")), 10, "the kubelet to send SIGTERM")
    world.api.delete(PODS, "slow", NS, grace_period_seconds=1)  # the kubelet's kill takes at least 2 s
    took, state = stopped(world, "slow")
    assert state["exitCode"] == 137 and 1.5 < took < 10, (took, state)


@pytest.mark.parametrize(("meta", "spec", "current", "expected"), [
    ({}, {"terminationGracePeriodSeconds": 30}, 0, 30),  # not marked yet (an outright removal): the spec's
    ({"deletionGracePeriodSeconds": 10}, {"terminationGracePeriodSeconds": 30}, 0, 10),  # the API server's
    ({"deletionGracePeriodSeconds": 5}, {"terminationGracePeriodSeconds": 30}, 10, 5),  # shortened
    ({"deletionGracePeriodSeconds": 20}, {"terminationGracePeriodSeconds": 30}, 10, 10),  # never longer again
    ({"deletionGracePeriodSeconds": 0}, {"terminationGracePeriodSeconds": 30}, 0, 1),  # force deletion: 1 s
    ({}, {}, 0, 1),  # nothing says: 1 s
])
def test_the_grace_period_is_the_pod_workers_effective_one(meta: dict[str, Any], spec: dict[str, Any], current: int,
                                                            expected: int) -> None:
    assert effective_grace({"metadata": meta, "spec": spec}, current) == expected


def test_a_failing_prepare_keeps_the_pod_pending_with_an_event(world: World) -> None:
    pod, uid = world.dra_pod("flaky", "gpu", "gpu-0")
    world.dra.errors = {uid: "device gpu-0 is still held on the legacy side"}
    expected = ("Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for "
                "ResourceClaim gpu: device gpu-0 is still held on the legacy side")
    wait_until(lambda: [e for e in world.events("FailedPrepareDynamicResources") if e["message"] == expected], 30,
               "the event naming the per-claim error")
    assert all(e["type"] == "Warning" for e in world.events("FailedPrepareDynamicResources"))
    status = world.get("flaky")["status"]
    assert status["phase"] == "Pending"
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    # The pod worker records the failure after it recorded the Event.
    [failure] = wait_until(lambda: world.kubelet.pods.prepare_failures if world.kubelet.pods else [], 30,
                           "the kubelet's record of the failed prepare")
    assert failure.pod == f"{NS}/flaky" and 60.0 <= failure.retry_in <= 90.0  # the pod worker's resync


def test_a_failed_prepare_is_retried_at_the_pod_resync_not_on_status_updates_but_on_a_spec_or_annotation_update(
        env: Env) -> None:
    world = env.start(resync_interval=3.0)  # the resync scaled down 20x, so the wait is observable
    pod, uid = world.dra_pod("flaky", "gpu", "gpu-0")
    world.dra.errors = {uid: "held"}
    wait_until(lambda: world.dra.calls.count(("prepare", (uid,))) == 1, 30, "the first prepare")
    # A status-only change (another component's condition) is a RECONCILE: no sync, no new prepare.
    world.api.patch(PODS, "flaky", {"status": {"conditions": [{"type": "example.com/ready", "status": "False"}]}},
                    NS, subresource="status")
    time.sleep(1.0)
    assert world.dra.calls.count(("prepare", (uid,))) == 1
    # An annotation change is an UPDATE: the pod is synced (and the prepare tried) at once.
    world.api.patch(PODS, "flaky", {"metadata": {"annotations": {"example.com/nudge": "1"}}}, NS)
    wait_until(lambda: world.dra.calls.count(("prepare", (uid,))) == 2, 2, "the prepare after the update")
    # Without updates, the next try comes at the resync: 3-4.5 s later.
    world.dra.errors = {}
    start = time.monotonic()
    wait_until(lambda: world.phase("flaky") == "Running", 10, "the resync's prepare to succeed")
    assert 2.5 <= time.monotonic() - start <= 6.0


def test_on_a_1_36_kubelet_a_health_change_of_the_refused_device_syncs_the_pod_at_once(short_tmp: Path,
                                                                                           env: Env) -> None:
    board = HealthBoard(NODE, {"GPU-0": "gpu-0"})
    world = env.start("1.36", board=board)  # the real 60-90 s resync
    pod, uid = world.dra_pod("waiting", "gpu", "gpu-0")
    world.dra.errors = {uid: "device gpu-0 is held on the legacy side"}
    wait_until(lambda: world.dra.calls.count(("prepare", (uid,))) == 1, 30, "the refused prepare")
    board.set("gpu-0", "Unknown", "held on the legacy side")
    # 30 s: the kubelet's threads and the API server on a loaded machine; the resync they rule out is 60-90 s away.
    wait_until(lambda: world.dra.calls.count(("prepare", (uid,))) == 2, 30, "a sync caused by the health change")
    world.dra.errors = {}
    board.set("gpu-0", "Healthy")
    wait_until(lambda: world.phase("waiting") == "Running", 30, "the pod to start without waiting for the resync")


def health_of(world: World, name: str) -> list[dict[str, Any]] | None:
    (main,) = world.get(name)["status"]["containerStatuses"]
    return main.get("allocatedResourcesStatus")


def test_on_a_1_36_kubelet_a_legacy_pods_status_shows_its_devices_health_as_the_plugin_reports_it(env: Env) -> None:
    world = env.start("1.36")
    world.pod("train", widgets=2)
    wait_until(lambda: world.phase("train") == "Running", 30, "the pod to run")
    held = sorted(world.widgets.allocations[0])
    assert health_of(world, "train") == [
        {"name": RES, "resources": [{"resourceID": i, "health": "Healthy"} for i in held]}]
    world.widgets.set(held[1], "Unhealthy")  # the plugin's next ListAndWatch: the kubelet syncs the pod at once
    expected = [{"resourceID": held[0], "health": "Healthy"}, {"resourceID": held[1], "health": "Unhealthy"}]
    wait_until(lambda: health_of(world, "train") == [{"name": RES, "resources": expected}], 30,
               "the unhealthy device in the pod's status")


def test_an_ended_pod_keeps_its_device_plugin_devices_until_a_podresources_list_so_its_last_status_shows_them(
        env: Env) -> None:
    """The device manager gives an ended pod's devices back only at its next UpdateAllocatedDevices, which an
    allocation or a PodResources List calls (v1.37.2 server_v1.go), not at termination: the terminal status still
    shows their health, as a real kubelet's first terminal status does."""
    world = env.start("1.36")
    world.pod("job", widgets=2, restart="Never", annotations={RUN_SECONDS_ANNOTATION: "0.3"})
    wait_until(lambda: world.phase("job") == "Succeeded", 30, "the job to succeed")
    shown = [{"name": RES, "resources": [{"resourceID": i, "health": "Healthy"}
                                          for i in sorted(world.widgets.allocations[0])]}]
    assert health_of(world, "job") == shown
    assert [a.pod_name for a in world.kubelet.devices.assignments()] == ["job"]  # still held after the end
    assert world.listed() == {}  # List: not an active pod, and its devices given back
    assert world.kubelet.devices.assignments() == []
    assert health_of(world, "job") == shown  # a terminated pod's status is not written again


def test_a_podresources_list_during_an_admission_keeps_the_devices_that_admission_allocates(world: World) -> None:
    """A pod being admitted is active (HandlePodAdditions adds it to the pod manager first): the List shows it,
    without devices while its Allocate call is out, and its UpdateAllocatedDevices must not take back the devices
    that call is handing out, or the next pod could be given the same ones."""
    world.widgets.gate = gate = threading.Event()
    world.pod("first", widgets=2)
    assert world.widgets.allocating.wait(30)
    assert world.listed() == {"first": set()}  # listed while it is admitted, its devices not recorded yet...
    gate.set()
    wait_until(lambda: world.phase("first") == "Running", 30, "the pod to run")
    held = set(world.widgets.allocations[0])
    assert world.listed() == {"first": held}  # ...and keeps its devices after
    world.pod("second", widgets=2)
    wait_until(lambda: world.phase("second") == "Running", 30, "the second pod to run")
    assert world.listed() == {"first": held, "second": set(world.widgets.allocations[1])}
    assert not held & set(world.widgets.allocations[1])


def test_on_a_1_36_kubelet_a_dra_pods_status_shows_its_claims_devices_by_cdi_id_while_prepared(env: Env) -> None:
    board = HealthBoard(NODE, {"GPU-0": "gpu-0"})
    world = env.start("1.36", board=board)
    _, uid = world.dra_pod("infer", "gpu", "gpu-0")
    world.api.patch(PODS, "infer", {"metadata": {"finalizers": [KEEP]}}, NS)
    wait_until(lambda: world.phase("infer") == "Running", 30, "the DRA pod to run")
    cdi_id = f"k8s.{DRIVER}/claim={uid}-gpu-0"  # the first CDI device ID of the plugin's answer
    assert health_of(world, "infer") == [{"name": "claim:gpu", "resources": [{"resourceID": cdi_id,
                                                                              "health": "Healthy"}]}]
    board.set("gpu-0", "Unhealthy", "XID 79: GPU has fallen off the bus")
    wait_until(lambda: health_of(world, "infer") == [{"name": "claim:gpu", "resources": [
        {"resourceID": cdi_id, "health": "Unhealthy", "message": "XID 79: GPU has fallen off the bus"}]}], 30,
        "the unhealthy device, with the plugin's message, in the pod's status")
    world.api.delete(PODS, "infer", NS)
    wait_until(lambda: world.phase("infer") == "Failed", 30, "the terminal status")
    assert ("unprepare", (uid,)) in world.dra.calls
    assert health_of(world, "infer") is None  # unprepared before the terminal status: no longer cached
    world.api.patch(PODS, "infer", {"metadata": {"finalizers": []}}, NS)


def test_a_1_34_kubelet_writes_no_device_health_into_pod_status(world: World) -> None:
    world.pod("train", widgets=1)
    wait_until(lambda: world.phase("train") == "Running", 30, "the pod to run")
    assert health_of(world, "train") is None


def test_podresources_lists_active_pods_even_without_devices_and_forgets_deleted_ones(world: World) -> None:
    world.pod("plain")
    wait_until(lambda: world.phase("plain") == "Running", 30, "the pod to run")
    assert world.listed() == {"plain": set()}
    world.api.delete(PODS, "plain", NS)
    wait_until(lambda: world.phase("plain") == "gone", 30, "the pod to be deleted")
    wait_until(lambda: world.listed() == {}, 30, "PodResources to forget it")


EXT = "deviceclass.resource.kubernetes.io/gpu.dra-bridge.io"


def extended_resource_pod(env: Env) -> tuple[dict[str, Any], str]:
    """A pod asking for the DeviceClass's extended resource, as the 1.36+ scheduler leaves it: a special claim it
    created (owned by the pod, allocated, reserved) and `status.extendedResourceClaimStatus` naming it."""
    pod = env.api.create(PODS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ext", "namespace": NS},
        "spec": {"containers": [{"name": "main", "image": "cuda:12", "resources": {"limits": {EXT: "1"}}}]}}, NS)
    claim = make_claim(env.api, NS, "ext-gpu", pod, [gpu("gpu-0", pool=NODE)], request="container-0-request-0")
    claim["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "ext",
                                             "uid": pod["metadata"]["uid"], "controller": True}]
    env.api.update(env.api.resource_api().claims, claim, NS)
    env.api.patch(PODS, "ext", {"status": {"extendedResourceClaimStatus": {
        "resourceClaimName": "ext-gpu",
        "requestMappings": [{"containerName": "main", "resourceName": EXT, "requestName": "container-0-request-0"}],
    }}}, NS, subresource="status")
    bind(env.api, "ext")  # after PreBind, as the scheduler binds
    return pod, claim["metadata"]["uid"]


@pytest.mark.parametrize("env", ["1.36.0"], indirect=True)  # a 1.34 API server drops the field (gate off)
def test_from_1_36_the_scheduler_made_extended_resource_claim_is_prepared_for_the_pod(env: Env) -> None:
    world = env.start("1.36")  # the DRA plugin registered before the pod arrives (else its first sync fails)
    _, uid = extended_resource_pod(env)
    wait_until(lambda: world.phase("ext") == "Running", 30, "the pod to run")
    assert world.dra.calls[0] == ("prepare", (uid,))
    assert world.widgets.allocations == []  # the DRA-backed name is not a device-plugin resource


@pytest.mark.parametrize("env", ["1.36.0"], indirect=True)
def test_a_1_34_kubelet_rejects_the_extended_resource_pod_and_never_prepares_its_claim(env: Env) -> None:
    # Kubelet skew: DRAExtendedResource is alpha (off) in a 1.34 kubelet, so the mappings are not read and the
    # implicit deviceclass.resource.kubernetes.io name (not an extended resource name) is counted against 0.
    extended_resource_pod(env)
    world = env.start("1.34")
    wait_until(lambda: world.phase("ext") == "Failed", 30, "the pod to be rejected")
    status = world.get("ext")["status"]
    assert status["reason"] == f"OutOf{EXT}"
    assert status["message"] == (f"Pod was rejected: Node didn't have enough resource: {EXT}, requested: 1, used: 0, "
                                 "capacity: 0")
    assert world.dra.calls == []


@pytest.mark.parametrize("env", ["1.36.0"], indirect=True)
def test_a_1_36_kubelet_rejects_an_extended_resource_pod_whose_mappings_do_not_cover_the_container(env: Env) -> None:
    pod, _ = extended_resource_pod(env)
    # The mapping names another container: the kubelet's removeMissingExtendedResources keeps the request.
    env.api.patch(PODS, "ext", {"status": {"extendedResourceClaimStatus": {
        "resourceClaimName": "ext-gpu",
        "requestMappings": [{"containerName": "other", "resourceName": EXT, "requestName": "container-0-request-0"}],
    }}}, NS, subresource="status")
    world = env.start("1.36")
    wait_until(lambda: world.phase("ext") == "Failed", 30, "the pod to be rejected")
    assert world.get("ext")["status"]["reason"] == f"OutOf{EXT}"
    assert world.dra.calls == []
    assert [e["reason"] for e in world.events(f"OutOf{EXT}")] == [f"OutOf{EXT}"]


@pytest.mark.parametrize("env", ["1.36.0"], indirect=True)
def test_a_1_36_kubelet_rejects_an_extended_resource_pod_bound_before_the_scheduler_wrote_its_mappings(
        env: Env) -> None:
    env.api.create(PODS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "early", "namespace": NS},
        "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "cuda:12",
                                                   "resources": {"limits": {EXT: "1"}}}]}}, NS)
    world = env.start("1.36")
    wait_until(lambda: world.phase("early") == "Failed", 30, "the pod to be rejected")
    assert world.get("early")["status"]["reason"] == f"OutOf{EXT}"


def test_after_a_kubelet_restart_running_pods_are_not_prepared_again_but_a_pod_not_started_yet_is(
        env: Env) -> None:
    # The resync scaled down: the restarted kubelet syncs the waiting pod before the plugin registered again, which
    # fails (driver not registered) and is retried at the next resync, as on a real node.
    world = env.start(resync_interval=2.0)
    pod, uid = world.dra_pod("steady", "gpu", "gpu-0")
    wait_until(lambda: world.phase("steady") == "Running", 30, "the DRA pod to run")
    waiting, other = world.dra_pod("waiting", "other", "gpu-1")
    world.dra.errors = {other: "held"}
    wait_until(lambda: world.dra.calls.count(("prepare", (other,))) == 1, 30, "the refused prepare")
    world.dra.errors = {}
    world.kubelet.restart()
    assert world.kubelet.dra is not None
    world.kubelet.dra.wait_for_plugin(DRIVER, 30)
    # The new kubelet syncs every pod at once: the one without a sandbox reaches its prepare, the running one not.
    wait_until(lambda: world.phase("waiting") == "Running", 30, "the pod that had not started")
    assert world.dra.calls.count(("prepare", (uid,))) == 1
    assert world.phase("steady") == "Running"


# A kubelet that was down (`stop`) and starts again (`start`): a new process. It lists its pods and admits them as
# one batch before its sources count as ready, takes over the pods its runtime still runs, and kills the others.


def test_a_kubelet_started_again_takes_over_its_running_pods_with_no_allocate_or_prepare_even_without_a_plugin(
        env: Env) -> None:
    world = env.start()
    world.pod("legacy", widgets=2)
    _, uid = world.dra_pod("infer", "gpu", "gpu-0")
    wait_until(lambda: world.phase("legacy") == world.phase("infer") == "Running", 30, "both pods to run")
    held = world.listed()
    world.kubelet.stop()
    for s in env.served:  # the device plugin is gone too: after the restart no widget is healthy
        s.stop()
    world.kubelet.start()
    assert world.kubelet.pods is not None and world.kubelet.pods.sources_ready.wait(10)
    time.sleep(0.5)  # the takeover's pod syncs
    # Containers the runtime runs skip the device manager's checks while the sources are not ready ("scenario 2:
    # kubelet restart"); without that the legacy pod would be rejected: "no healthy devices present".
    assert world.phase("legacy") == world.phase("infer") == "Running"
    assert world.events("UnexpectedAdmissionError") == []
    assert len(world.widgets.allocations) == 1
    assert world.dra.calls.count(("prepare", (uid,))) == 1
    assert world.listed() == held
    assert world.kubelet.pods.runtime_orphans() == []


def test_a_pod_force_deleted_while_the_kubelet_was_down_is_killed_as_an_orphan_and_unprepared_after_the_next_prepare(
        env: Env) -> None:
    """What a real kubelet does (tests/real/test_real_kubelet_upgrade.py, v1.37.2 and v1.38.0-beta.0): the next pod's
    claim for the same device is prepared first, the orphan's containers are killed by housekeeping, and the
    orphan's claim is unprepared only by the DRA manager's reconcile loop. A plugin must refuse that prepare
    itself while the old claim holds the device (the node daemon does)."""
    world = env.start(resync_interval=1.0, reconcile_period=3.0)
    _, old = world.dra_pod("first", "gpu", "gpu-0")
    wait_until(lambda: world.phase("first") == "Running", 30, "the first pod")
    world.kubelet.stop()
    world.api.delete(PODS, "first", NS, grace_period_seconds=0)  # kubectl delete --force: gone at once
    _, new = world.dra_pod("next", "next", "gpu-0")  # the scheduler gives the device to the next pod
    started = time.monotonic()
    world.kubelet.start()
    wait_until(lambda: ("unprepare", (old,)) in world.dra.calls, 30, "the orphan's claim to be unprepared")
    unprepared_after = time.monotonic() - started
    assert world.phase("next") == "Running"
    assert world.dra.calls.index(("prepare", (new,))) < world.dra.calls.index(("unprepare", (old,)))
    assert unprepared_after >= 3.0  # not before the reconcile loop's first pass
    pods = world.kubelet.pods
    assert pods is not None
    assert [o.split(" (")[0] for o in pods.orphans_killed] == [f"{NS}/first"]
    assert pods.runtime_orphans() == []


def test_a_podresources_list_while_the_kubelet_restarts_frees_no_device_before_its_first_batch(world: World) -> None:
    """A new kubelet serves PodResources and its device manager (the checkpoint read back) before its pod source has
    listed anything; its sources are not ready, so a List then (our daemon calls one as soon as the new kubelet
    takes its registration) keeps every device. The stopped process's readiness must not leak into the new one:
    with no pod known yet, the List would free the running pod's devices and the next pod would get them."""
    world.pod("first", widgets=4)
    wait_until(lambda: world.phase("first") == "Running", 30, "the first pod")
    world.kubelet.stop()
    assert not world.kubelet.devices.sources_ready()
    world.kubelet.devices.update_allocated()  # what a List in the restart window does
    assert [a.pod_name for a in world.kubelet.devices.assignments()] == ["first"]


def test_a_legacy_pod_bound_to_the_devices_of_a_pod_deleted_while_the_kubelet_was_down_is_refused_in_the_first_batch(
        env: Env) -> None:
    """The real kubelet's answer (v1.37.2, v1.38.0-beta.0): the orphan's devices are freed only once the sources
    are ready, after the first batch, so the pod the scheduler bound to them while the kubelet was down is
    rejected; the next pod gets them."""
    world = env.start(first_sync_delay=1.0)  # time for the plugin to register with the new kubelet first
    world.pod("first", widgets=4)
    wait_until(lambda: world.phase("first") == "Running", 30, "the first pod")
    world.kubelet.stop()
    world.api.delete(PODS, "first", NS, grace_period_seconds=0)
    world.pod("next", widgets=1)
    world.kubelet.start()
    start_plugin(world.kubelet, env.served, ["w0", "w1", "w2", "w3"])  # its socket went with the old kubelet
    wait_until(lambda: world.phase("next") == "Failed", 30, "the rejection")
    status = world.get("next")["status"]
    assert status["reason"] == "UnexpectedAdmissionError"
    assert status["message"] == ("Pod was rejected: Allocate failed due to requested number of devices unavailable "
                                 f"for {RES}. Requested: 1, Available: 0, which is unexpected")
    world.pod("later", widgets=4)
    wait_until(lambda: world.phase("later") == "Running", 30, "the next pod to get all four widgets")
