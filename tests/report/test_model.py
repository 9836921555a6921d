"""The model: one row per top owner, replica counts, node backends."""

from __future__ import annotations

from bridge.report.model import build_model
from tests.report.conftest import (
    cluster,
    container,
    daemonset,
    deployment,
    gpu_device,
    node,
    owned,
    pod,
    resource_slice,
    spec,
)

GPU1 = spec(container({"nvidia.com/gpu": 1}))


def rows(data):  # type: ignore[no-untyped-def]
    return {(w.kind, w.namespace, w.name): (w.replicas, w.pods) for w in build_model(data).workloads}


def test_pods_resolve_to_deployment_through_replicaset() -> None:
    data = cluster(deployment("web", replicas=3, pod_spec=GPU1),
                   owned("ReplicaSet", "web-abc", "team", ("Deployment", "web")),
                   *(pod(f"web-abc-{i}", pod_spec=GPU1, owner=("ReplicaSet", "web-abc")) for i in range(2)))
    assert rows(data) == {("Deployment", "team", "web"): (3, 2)}


def test_pods_resolve_to_cronjob_through_job_and_finished_pods_do_not_count() -> None:
    cron = owned("CronJob", "nightly", "team", None, {"jobTemplate": {"spec": {"parallelism": 2, "template": {"spec": GPU1}}}})
    data = cluster(cron, owned("Job", "nightly-1", "team", ("CronJob", "nightly"), {"template": {"spec": GPU1}}),
                   pod("nightly-1-a", pod_spec=GPU1, owner=("Job", "nightly-1")),
                   pod("nightly-1-b", pod_spec=GPU1, owner=("Job", "nightly-1"), phase="Succeeded"))
    assert rows(data) == {("CronJob", "team", "nightly"): (2, 1)}


def test_bare_pods_and_unknown_owner_kinds_stand_as_themselves() -> None:
    data = cluster(pod("solo", pod_spec=GPU1),
                   pod("rc-1", pod_spec=GPU1, owner=("RayCluster", "ray")), pod("rc-2", pod_spec=GPU1, owner=("RayCluster", "ray")))
    assert rows(data) == {("Pod", "team", "solo"): (1, 1), ("RayCluster", "team", "ray"): (2, 2)}


def test_missing_intermediate_owner_stops_at_the_known_one() -> None:
    data = cluster(pod("web-abc-1", pod_spec=GPU1, owner=("ReplicaSet", "web-abc")))
    assert rows(data) == {("ReplicaSet", "team", "web-abc"): (1, 1)}


def test_controllers_without_pods_get_rows_and_non_gpu_workloads_are_left_out() -> None:
    data = cluster(deployment("idle", replicas=0, pod_spec=GPU1), deployment("cpu", replicas=5),
                   *(pod(f"cpu-{i}", owner=("Deployment", "cpu")) for i in range(5)))
    m = build_model(data)
    assert rows(data) == {("Deployment", "team", "idle"): (0, 0)}
    assert m.ignored_pods == 5


def test_node_backends_from_agent_pods_and_slices() -> None:
    data = cluster(node("dp"), node("br", 8, allocatable=4), node("other", 0),
                   daemonset("nvidia-device-plugin-daemonset", "gpu-operator", "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"),
                   pod("dp-x", "gpu-operator", owner=("DaemonSet", "nvidia-device-plugin-daemonset"), node="dp"),
                   resource_slice("br", [gpu_device(i) for i in range(4)]),
                   resource_slice("other", [gpu_device(0)], driver="gpu.nvidia.com"))
    nodes = build_model(data).nodes
    assert nodes["dp"].backends == {"device-plugin"}
    assert nodes["br"].backends == {"bridge"} and nodes["br"].gpu_total == 8 and len(nodes["br"].devices) == 4
    assert nodes["other"].backends == {"dra:gpu.nvidia.com"} and nodes["other"].gpu_total == 1


def test_daemonset_without_captured_pods_is_placed_by_node_selector() -> None:
    ds = daemonset("nvidia-device-plugin", "gpu-operator", "x", pod_spec={
        "nodeSelector": {"gpu": "yes"}, "containers": [{"name": "c", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17"}]})
    data = cluster(ds, node("a", 4, allocatable=0, labels={"gpu": "yes"}), node("b", 4, allocatable=0))
    nodes = build_model(data).nodes
    assert nodes["a"].backends == {"device-plugin"} and nodes["b"].backends == set()


def test_finished_job_holds_no_gpus() -> None:
    done = owned("Job", "done", "team", None, {"parallelism": 4, "template": {"spec": GPU1}})
    done["status"] = {"completionTime": "2026-11-01T00:00:00Z", "succeeded": 4}
    data = cluster(done, pod("done-a", pod_spec=GPU1, owner=("Job", "done"), phase="Succeeded"))
    assert rows(data) == {("Job", "team", "done"): (0, 0)}
    assert rows(cluster(done)) == {}
