"""A node's lifecycle on the stand-ins with the real `bridge node`: its kubelet down while GPU pods on it are
force-deleted, restarted while the daemon is down, and the node rebooted. These are the twins of
tests/real/test_real_kubelet_upgrade.py's force-delete tests, tests/real/test_real_kubelet_restart.py and
tests/real/test_real_node_reboot.py, which showed what real kubelets (v1.37.2, v1.38.0-beta.0) do. The kubelet
simulator's stop and start are a process's (`bridge.sandbox.kubelet.pods`): the new kubelet admits its first
listing as a batch before its sources are ready, takes over the containers the runtime still runs, asks to prepare
the next pod's claim before the orphan's is unprepared (the DRA manager's reconcile loop does that, shortened here
from 60 s to 5 s), and refuses a legacy pod bound to the orphan's GPU.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from bridge.kube import EVENTS, PODS
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from bridge.sandbox.cluster.inspect import SideWatch
from tests.polling import wait_until
from tests.real.realnodes import daemon_log, pod_claim
from tests.sandbox_cluster import create_gpu_template, create_namespaces, dra_gpu_pod, legacy_gpu_pod

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NODE = "n1"
NS = "team"
RECONCILE_S = 5.0


def _one_node(sandbox_cluster: Any, gpus: int = 2) -> SandboxCluster:
    """A 1.37 cluster of one node with `gpus` GPUs, half per side; a failed prepare is retried 2-3 s later."""
    cluster: SandboxCluster = sandbox_cluster((NodeSpec(NODE, f"{gpus}xH100-80GB", split=str(gpus // 2)),),
                                              version="1.37", bridge=True, resync_interval=2.0,
                                              dra_reconcile_period=RECONCILE_S)
    cluster.wait_daemons_settled(60)
    create_namespaces(cluster.api, NS)
    create_gpu_template(cluster.api, NS)
    return cluster


def _device(claim: dict[str, Any]) -> str:
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return str(results[0]["device"]) if results else ""


def test_a_dra_pod_force_deleted_while_the_kubelet_was_down_does_not_share_its_gpu_with_the_next_pod(
        sandbox_cluster: Any) -> None:
    cluster = _one_node(sandbox_cluster)
    api = cluster.api
    api.create(PODS, dra_gpu_pod("first", NS), NS)
    cluster.wait_pod_phase(NS, "first", "Running", 60)
    gone = pod_claim(cluster, NS, "first")

    cluster.stop_kubelet(NODE)
    api.delete(PODS, "first", NS, grace_period_seconds=0)  # kubectl delete --force --grace-period=0
    claims = api.resource_api().claims
    wait_until(lambda: all(c["metadata"]["uid"] != gone["metadata"]["uid"] for c in api.list(claims, NS)["items"]),
               30, "the force-deleted pod's claim to be deleted")
    api.create(PODS, dra_gpu_pod("next", NS), NS)
    wait_until(lambda: api.get(PODS, "next", NS)["spec"].get("nodeName") and _device(pod_claim(cluster, NS, "next")),
               30, "the scheduler to bind the next pod while the kubelet is down")
    new = pod_claim(cluster, NS, "next")
    assert _device(new) == _device(gone)  # the node's only DRA GPU, which the orphan's container still uses

    with SideWatch(cluster) as watch:
        started = time.monotonic()
        cluster.restart_kubelet(NODE)
        cluster.wait_pod_phase(NS, "next", "Running", 60)
        running_after = time.monotonic() - started
    assert watch.samples.clean, watch.samples.describe()
    node = cluster.node(NODE)
    assert node.daemon is not None
    log = node.daemon.log_path
    unprepared = [n for n, r in daemon_log(log, "claim unprepared") if r.get("uid") == gone["metadata"]["uid"]]
    prepared = [n for n, r in daemon_log(log, "claim prepared") if r.get("uid") == new["metadata"]["uid"]]
    assert unprepared and prepared and unprepared[0] < prepared[0], \
        "the GPU was prepared for the next claim while the force-deleted pod's claim still held it"
    assert running_after >= RECONCILE_S  # not before the reconcile loop let go of the orphan's claim
    # the kubelet asked first and was refused, with the reason and the way out
    refused = [e["message"] for e in api.list(EVENTS, NS)["items"] if e.get("reason") == "DeviceRefused"
               and e["involvedObject"]["name"] == new["metadata"]["name"]]
    assert refused, "the kubelet's prepare before the orphan's unprepare was not refused"
    for message in refused:
        assert f"ResourceClaim {NS}/{gone['metadata']['name']} (uid {gone['metadata']['uid']}) no longer exists" \
            in message, message
    failed = [e["message"] for e in api.list(EVENTS, NS)["items"] if e.get("reason") == "FailedPrepareDynamicResources"
              and e["involvedObject"]["name"] == "next"]
    assert any("no longer exists" in m for m in failed), failed
    assert cluster.node(NODE).sim.pods is not None
    assert [o.split(" (")[0] for o in cluster.node(NODE).sim.pods.orphans_killed] == [f"{NS}/first"]


def test_a_legacy_pod_bound_to_a_force_deleted_pods_gpu_while_the_kubelet_was_down_is_refused_by_the_kubelet(
        sandbox_cluster: Any) -> None:
    cluster = _one_node(sandbox_cluster)
    api = cluster.api
    api.create(PODS, legacy_gpu_pod("first", NS), NS)
    cluster.wait_pod_phase(NS, "first", "Running", 60)
    cluster.stop_kubelet(NODE)
    api.delete(PODS, "first", NS, grace_period_seconds=0)
    api.create(PODS, legacy_gpu_pod("next", NS), NS)
    wait_until(lambda: api.get(PODS, "next", NS)["spec"].get("nodeName"), 30,
               "the scheduler to bind the next pod while the kubelet is down")
    with SideWatch(cluster) as watch:
        cluster.restart_kubelet(NODE)
        status = wait_until(lambda: (s := api.get(PODS, "next", NS)["status"]).get("phase") not in (None, "Pending")
                            and s, 30, "the kubelet's decision on the next pod")
        api.create(PODS, legacy_gpu_pod("after", NS), NS)
        cluster.wait_pod_phase(NS, "after", "Running", 60)
    # the real kubelet's words; with the daemon not registered again yet it would be "no healthy devices present"
    assert (status.get("phase"), status.get("reason"), status.get("message")) == (
        "Failed", "UnexpectedAdmissionError", "Pod was rejected: Allocate failed due to requested number of devices "
        "unavailable for nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected")
    assert watch.samples.clean, watch.samples.describe()


def test_a_kubelet_restarted_while_the_daemon_is_down_keeps_its_running_gpu_pods_but_not_a_gpu_init_pod(
        sandbox_cluster: Any) -> None:
    """The twin of tests/real/test_real_kubelet_restart.py: containers the runtime runs skip the device manager's
    checks while the new kubelet's sources are not ready, so no plugin registered is no rejection; but an init
    container that ran to completion runs no more, so a running pod whose init container had a GPU is rejected."""
    cluster = _one_node(sandbox_cluster, gpus=4)
    api = cluster.api
    api.create(PODS, legacy_gpu_pod("legacy", NS), NS)
    api.create(PODS, dra_gpu_pod("dra", NS), NS)
    init = legacy_gpu_pod("init", NS)
    init["spec"]["initContainers"] = [{"name": "fetch", "image": "busybox",
                                       "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    api.create(PODS, init, NS)
    for name in ("legacy", "dra", "init"):
        cluster.wait_pod_phase(NS, name, "Running", 60)

    def containers() -> dict[str, list[tuple[str, int]]]:
        return {name: [(s.get("containerID", ""), s.get("restartCount", 0))
                       for s in api.get(PODS, name, NS)["status"]["containerStatuses"]] for name in ("legacy", "dra")}

    before = containers()
    cluster.kill_daemon(NODE)
    cluster.stop_kubelet(NODE)
    cluster.restart_kubelet(NODE)
    pods = cluster.node(NODE).sim.pods
    assert pods is not None and pods.sources_ready.wait(10)
    time.sleep(1)
    assert containers() == before
    assert [api.get(PODS, name, NS)["status"]["phase"] for name in ("legacy", "dra")] == ["Running", "Running"]
    rejected = [e["message"] for e in api.list(EVENTS, NS)["items"] if e.get("reason") == "UnexpectedAdmissionError"]
    assert rejected == ["Allocate failed due to no healthy devices present; cannot allocate unhealthy devices "
                        "nvidia.com/gpu, which is unexpected"]  # the init pod's (the real kubelet's words)
    status = api.get(PODS, "init", NS)["status"]
    assert (status.get("phase"), status.get("reason")) == ("Failed", "UnexpectedAdmissionError")
    cluster.restart_daemon(NODE)  # its DaemonSet pod back: it serves both APIs again, the pods kept
    cluster.wait_daemons_settled(60)
    assert containers() == before


def test_after_a_reboot_the_dra_pod_runs_again_on_its_gpu_and_the_bare_legacy_pod_is_refused(
        sandbox_cluster: Any) -> None:
    """The twin of tests/real/test_real_node_reboot.py: the restarted kubelet re-admits the node's pods before the
    daemon (a DaemonSet pod) is back, so the legacy pod is refused for good ("no healthy devices present", the real
    kubelet's words), while the DRA pod waits for its driver and runs again on its claim's GPU, prepared anew by a
    daemon whose claim records and CDI specs went with the old boot."""
    cluster = _one_node(sandbox_cluster)
    api = cluster.api
    api.create(PODS, legacy_gpu_pod("legacy", NS), NS)
    api.create(PODS, dra_gpu_pod("dra", NS), NS)
    for name in ("legacy", "dra"):
        cluster.wait_pod_phase(NS, name, "Running", 60)
    claim = pod_claim(cluster, NS, "dra")
    node = cluster.node(NODE)
    boot = (cluster.work_dir / "n0" / "boot_id").read_text()  # type: ignore[operator]
    with SideWatch(cluster) as watch:
        cluster.reboot_node(NODE, timeout=60)
        held = wait_until(lambda: (s := api.get(PODS, "legacy", NS)["status"]).get("phase") != "Running" and s, 30,
                          "the kubelet's verdict on the legacy pod")
        assert (held.get("phase"), held.get("reason"), held.get("message")) == (
            "Failed", "UnexpectedAdmissionError", "Pod was rejected: Allocate failed due to no healthy devices "
            "present; cannot allocate unhealthy devices nvidia.com/gpu, which is unexpected")
        cluster.wait_pod_phase(NS, "dra", "Running", 60)
        api.create(PODS, legacy_gpu_pod("after", NS), NS)  # the refused pod's GPU is free again
        cluster.wait_pod_phase(NS, "after", "Running", 60)
    assert watch.samples.clean, watch.samples.describe()
    assert (cluster.work_dir / "n0" / "boot_id").read_text() != boot  # type: ignore[operator]
    assert _device(pod_claim(cluster, NS, "dra")) == _device(claim)
    assert node.daemon is not None
    prepared = [r for _, r in daemon_log(node.daemon.log_path, "claim prepared")  # the log of both boots
                if r.get("uid") == claim["metadata"]["uid"]]
    assert len(prepared) == 2, "the new daemon did not prepare the claim again"
    assert any(claim["metadata"]["uid"] in p.name for p in node.cdi_root.iterdir())
