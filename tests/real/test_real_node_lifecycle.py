"""A real node's life with the bridge on it: split moves at the real kubelet's own node-status cadence (10 s), a
DaemonSet-style rollout, a daemon crash and a kubelet restart while GPU pods of both APIs run. Through all of it
(`SideWatch` samples every GPU's holders and the sides it is offered to): no GPU held twice, none offered to both
APIs, and the running containers keep their devices."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from bridge.kube.api import NODES
from bridge.sandbox.apiserver.profiles import parse_minor
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from bridge.sandbox.cluster.inspect import SideWatch, holders
from bridge.sandbox.real.binaries import NODE
from tests.real.conftest import CONTROL_PLANE, REAL_LINES, require_binaries
from tests.real.realnodes import create_pod, node_with_a_pod_of_each_api, probe_log, probe_pod, register_device_plugin
from tests.sandbox_cluster import spec_for_tests

START_TIMEOUT = 300.0  # a loaded 2-core CI machine starts two kubelets, two containerds and two daemons slowly

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

NAME = "gpu-node"


@pytest.fixture(scope="module", params=REAL_LINES)
def cluster(request: pytest.FixtureRequest) -> Iterator[SandboxCluster]:
    """On both built lines: v1.35's device manager still has the old disconnect rule (an old instance's stream
    ending disconnects the current endpoint: kubernetes `pkg/kubelet/cm/devicemanager/endpoint.go` of that
    release), which is what the rollout test is about there."""
    line = request.param
    require_binaries(line, CONTROL_PLANE + NODE + ("kubelet", "kubectl"))
    # the kubelet's default node-status cadence: moves to DRA wait for it, as on a real node
    spec = spec_for_tests((NodeSpec(NAME, "4xH100-80GB", split="2"),), backend="real", version=line,
                          real_kubelets=True, bridge=True, node_status_frequency=10.0, split_grace=1.0)
    with node_with_a_pod_of_each_api(spec, START_TIMEOUT) as c:
        yield c


@pytest.fixture
def watch(cluster: SandboxCluster) -> Iterator[SideWatch]:
    with SideWatch(cluster) as w:
        yield w
    assert w.samples.count > 0
    assert w.samples.clean, w.samples.describe()


def allocatable(cluster: SandboxCluster) -> int:
    value = (cluster.api.get(NODES, NAME).get("status") or {}).get("allocatable", {}).get("nvidia.com/gpu", "0")
    return int(value)


def published(cluster: SandboxCluster) -> int:
    slices = cluster.api.list(cluster.api.resource_api().slices, field_selector=f"spec.nodeName={NAME}")["items"]
    return sum(len(s["spec"].get("devices") or []) for s in slices)


def wait_split(cluster: SandboxCluster, legacy: int, dra: int, timeout: float = 90.0) -> float:
    start = time.monotonic()
    while (allocatable(cluster), published(cluster)) != (legacy, dra):
        if time.monotonic() - start > timeout:
            raise AssertionError(f"split not ({legacy} legacy, {dra} DRA) within {timeout:.0f}s: Node allocatable "
                                 f"{allocatable(cluster)}, published {published(cluster)}")
        time.sleep(0.3)
    return time.monotonic() - start


def set_split(cluster: SandboxCluster, value: str) -> None:
    cluster.api.patch(NODES, NAME, {"metadata": {"annotations": {"dra-bridge.io/dra-devices": value}}})


def running_gpus(cluster: SandboxCluster) -> dict[str, set[str]]:
    return {f"{ns}/{pod}": probe_log(cluster, ns, pod).gpus for ns, pod in (("legacy", "held"), ("dra", "claimed"))}


def test_free_gpus_move_both_ways_at_the_kubelets_cadence_and_held_ones_stay(cluster: SandboxCluster,
                                                                             watch: SideWatch) -> None:
    before = running_gpus(cluster)
    wait_split(cluster, 2, 2)
    set_split(cluster, "3")  # one free legacy GPU moves to DRA (the held one cannot)
    took = wait_split(cluster, 1, 3)
    print(f"legacy -> DRA move visible after {took:.1f}s (node status every 10 s)")
    set_split(cluster, "1")  # two free DRA GPUs back to legacy (the claimed one cannot)
    wait_split(cluster, 3, 1)
    set_split(cluster, "0")  # the claimed GPU is held: it stays on DRA until its pod ends
    time.sleep(3)
    assert (allocatable(cluster), published(cluster)) == (3, 1)
    assert running_gpus(cluster) == before
    set_split(cluster, "2")
    wait_split(cluster, 2, 2)


def test_a_running_init_containers_gpu_known_only_from_the_kubelets_checkpoint_does_not_move(
        cluster: SandboxCluster, watch: SideWatch) -> None:
    """PodResources omits init containers; the real kubelet's device-manager checkpoint
    (device-plugins/kubelet_internal_checkpoint, written after every Allocate) is where the daemon finds them."""
    pod = probe_pod("in-init", init_gpus=1)
    pod["spec"]["initContainers"][0]["env"] = [{"name": "PROBE_SLEEP", "value": "100000"}]  # stays in init
    create_pod(cluster, "legacy", pod)
    assert len(probe_log(cluster, "legacy", "in-init", container="init", timeout=120).gpus) == 1
    set_split(cluster, "4")  # both legacy GPUs are held now: nothing may move
    time.sleep(12)  # more than a node-status period
    assert (allocatable(cluster), published(cluster)) == (2, 2)
    status = subprocess.run([sys.executable, "-m", "bridge", "node", "status", NAME, "--kubeconfig",
                             str(cluster.kubeconfig)], capture_output=True, text=True, timeout=60).stdout
    assert "held by pod legacy/in-init container init (legacy init container)" in status, status
    _delete_pod(cluster, "legacy", "in-init")
    wait_split(cluster, 1, 3)  # freed: it moves now
    set_split(cluster, "2")
    wait_split(cluster, 2, 2)


def test_a_surge_rollout_keeps_the_pods_devices_and_the_nodes_allocatable(cluster: SandboxCluster,
                                                                          watch: SideWatch) -> None:
    before = running_gpus(cluster)
    node = cluster.node(NAME)
    old = node.daemon
    assert old is not None
    cluster.start_daemon_instance(NAME)  # the new pod: standby until the old one exits
    assert old.stop() == 0
    wait_split(cluster, 2, 2, timeout=60)
    assert running_gpus(cluster) == before
    # Through 1.36 the old instance's stream ending disconnects the new one, whose devices the kubelet then marks
    # unhealthy until it registers again (about a second; charts/dra-bridge/README.md says so): a legacy pod the
    # kubelet admits in that gap fails with "Allocate failed due to no healthy devices present" (seen on 1.35.4).
    # New pods are for after the new instance's registration has held.
    wait_registration_held(cluster)
    # the new instance serves both APIs: a new pod of each runs
    create_pod(cluster, "legacy", probe_pod("after-rollout", gpus=1))
    create_pod(cluster, "dra", probe_pod("after-rollout", claim_template="one-gpu"))
    for ns in ("legacy", "dra"):
        cluster.wait_pod_phase(ns, "after-rollout", "Running", timeout=120)
        assert len(probe_log(cluster, ns, "after-rollout").gpus) == 1
    for ns in ("legacy", "dra"):
        _delete_pod(cluster, ns)


def wait_registration_held(cluster: SandboxCluster, quiet: float = 3.0, timeout: float = 60.0) -> None:
    """Wait until the node daemon's latest device-plugin registration has gone `quiet` seconds without a disconnect."""
    daemon = cluster.node(NAME).daemon
    assert daemon is not None
    last, since, deadline = "", time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = [line for line in daemon.log_path.read_text().splitlines()
                  if "registered with the kubelet" in line or "re-registering with the full device list" in line]
        tail = events[-1] if events else ""
        if tail != last:
            last, since = tail, time.monotonic()
        elif "registered with the kubelet" in tail and time.monotonic() - since >= quiet:
            return
        time.sleep(0.2)
    raise AssertionError(f"the new instance's registration did not hold for {quiet}s within {timeout}s: {last!r}")


def _delete_pod(cluster: SandboxCluster, namespace: str, name: str = "after-rollout") -> None:
    from bridge.kube.api import PODS

    cluster.api.delete(PODS, name, namespace)
    cluster.wait_pod_phase(namespace, name, "Gone", timeout=120)


def test_a_daemon_killed_while_pods_run_recovers_and_nothing_is_booked_twice(cluster: SandboxCluster,
                                                                            watch: SideWatch) -> None:
    before = running_gpus(cluster)
    held_before = holders(cluster)
    cluster.kill_daemon(NAME)
    cluster.restart_daemon(NAME)
    wait_split(cluster, 2, 2, timeout=60)
    assert running_gpus(cluster) == before
    assert holders(cluster) == held_before


def test_a_kubelet_restart_does_not_prepare_running_pods_again(cluster: SandboxCluster, watch: SideWatch) -> None:
    node = cluster.node(NAME)
    assert node.daemon is not None
    before = running_gpus(cluster)
    prepares = node.daemon.log_path.read_text().count('"msg": "NodePrepareResources"')
    cluster.restart_kubelet(NAME)
    wait_split(cluster, 2, 2, timeout=90)
    time.sleep(5)
    assert running_gpus(cluster) == before
    assert node.daemon.log_path.read_text().count('"msg": "NodePrepareResources"') == prepares


def test_when_the_kubelet_holds_our_socket_path_the_daemon_moves_to_a_fresh_socket(cluster: SandboxCluster,
                                                                                   watch: SideWatch) -> None:
    """A late copy of the daemon's own Register (what a kubelet that completes it after our 15 s timeout leaves):
    from 1.37 the kubelet refuses it ("device plugin already connected") and drops its client of our path, so it
    refuses that path for good. When our socket is re-created, the daemon must register on a fresh one; through 1.36
    the kubelet takes the copy and nothing needs to move."""
    node = cluster.node(NAME)
    assert node.real is not None and node.daemon is not None
    plugin_dir = node.real.kubelet_root / "device-plugins"
    (ours,) = [p for p in plugin_dir.glob("dra-bridge-nvidia.com-gpu*.sock")]
    before = running_gpus(cluster)
    refused = register_device_plugin(plugin_dir, ours.name, "nvidia.com/gpu")
    assert cluster.plane is not None
    if parse_minor(cluster.plane.bin.line) < 37:
        assert refused == ""
        return
    assert refused == f"device plugin already connected: /var/lib/kubelet/device-plugins/{ours.name}"
    ours.unlink()  # the daemon re-serves and registers again: refused on its old path, it moves
    rotated = plugin_dir / f"{ours.stem}-r1.sock"
    deadline = time.monotonic() + 30
    while not (rotated.exists() and "registered with the kubelet" in node.daemon.log_path.read_text().split(
            rotated.name, 1)[-1]):
        assert time.monotonic() < deadline, "the daemon did not register on a fresh socket"
        time.sleep(0.2)
    wait_registration_held(cluster)
    wait_split(cluster, 2, 2, timeout=60)
    assert running_gpus(cluster) == before
    create_pod(cluster, "legacy", probe_pod("after-rotation", gpus=1))  # allocated through the new endpoint
    cluster.wait_pod_phase("legacy", "after-rotation", "Running", timeout=120)
    assert len(probe_log(cluster, "legacy", "after-rotation").gpus) == 1
    _delete_pod(cluster, "legacy", "after-rotation")
