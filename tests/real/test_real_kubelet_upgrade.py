"""A node's kubelet upgraded in place while GPU pods of both APIs run on it, with real kubelets of two built lines
under the newer control plane (the skew policy lets a kubelet be up to three minors older, so a cluster upgrades
its control plane first and its nodes later). In-place upgrades are how many on-premises GPU clusters move a node
to a new release; the node daemon keeps running through it.

What must hold: the new kubelet reads the old one's checkpoints (device manager and DRA manager) and takes the
running pods over without preparing their claims again or restarting a container; our daemon registers with it
through both APIs; the split stays; new pods of both APIs get GPUs nobody holds; and at no sample (`SideWatch`)
is a GPU held twice or offered to both APIs. And while the kubelet is down for its upgrade, a GPU pod force-deleted
there must not share its GPU with the pod the scheduler gives it to next."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from bridge.kube.api import EVENTS, NODES, PODS
from bridge.sandbox.apiserver.profiles import parse_minor
from bridge.sandbox.cluster import ClusterError, SandboxCluster
from bridge.sandbox.cluster.inspect import SideWatch, holders
from bridge.sandbox.real.binaries import LINES, NODE
from tests.real.conftest import CONTROL_PLANE, REAL_LINES, require_binaries
from tests.real.realnodes import (
    BOTH_PODS,
    GPU_NODE,
    create_pod,
    daemon_log,
    gpu_node_spec,
    node_with_a_pod_of_each_api,
    pod_claim,
    probe_log,
    probe_pod,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(500)]

NAME = GPU_NODE
START_TIMEOUT = 300.0


# each built line upgraded to the next newer one (default lines 1.37,1.35: 1.35 -> 1.37)
_OLDEST_FIRST = sorted(REAL_LINES, key=parse_minor)
UPGRADES = list(zip(_OLDEST_FIRST, _OLDEST_FIRST[1:]))


@pytest.fixture(scope="module", params=UPGRADES or [pytest.param(None, marks=pytest.mark.skip(
    reason="an upgrade needs two lines in BRIDGE_REAL_LINES"))], ids=lambda p: f"{p[0]}-to-{p[1]}" if p else "none")
def upgrade(request: pytest.FixtureRequest) -> tuple[str, str]:
    old, new = request.param
    require_binaries(new, CONTROL_PLANE + NODE + ("kubelet", "kubectl"))
    require_binaries(old, ("kubelet",))
    return old, new


@pytest.fixture
def cluster(upgrade: tuple[str, str]) -> Iterator[SandboxCluster]:
    """A fresh cluster per test (about 15 s): each upgrades its node's kubelet."""

    old, new = upgrade
    with node_with_a_pod_of_each_api(gpu_node_spec(new, kubelet_version=old), START_TIMEOUT) as c:
        yield c


def kubelet_version(cluster: SandboxCluster) -> str:
    return str(cluster.api.get(NODES, NAME)["status"]["nodeInfo"]["kubeletVersion"])


def containers(cluster: SandboxCluster, namespace: str, pod: str) -> list[tuple[str, str, int]]:
    """(name, containerID, restartCount) of each container: a restart changes the ID and the count."""
    statuses = cluster.api.get(PODS, pod, namespace)["status"].get("containerStatuses") or []
    return [(s["name"], s.get("containerID", ""), int(s.get("restartCount", 0))) for s in statuses]


def node_ready_on(cluster: SandboxCluster, version: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        node: dict[str, Any] = cluster.api.get(NODES, NAME)
        ready = [c for c in node["status"].get("conditions") or [] if c["type"] == "Ready"]
        gpus = node["status"].get("allocatable", {}).get("nvidia.com/gpu")
        slices = cluster.api.list(cluster.api.resource_api().slices, field_selector=f"spec.nodeName={NAME}")["items"]
        published = sum(len(s["spec"].get("devices") or []) for s in slices)
        state = (node["status"]["nodeInfo"]["kubeletVersion"], bool(ready and ready[0]["status"] == "True"), gpus,
                 published)
        if state == (version, True, "2", 2):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"after the upgrade, the node is not Ready on {version} with the split (2 legacy, "
                                 f"2 DRA) within {timeout:.0f}s: (kubeletVersion, Ready, allocatable, published) = "
                                 f"{state}")
        time.sleep(0.5)




def test_an_in_place_kubelet_upgrade_keeps_the_running_pods_gpus_and_the_new_kubelet_serves_both_apis(
        cluster: SandboxCluster, upgrade: tuple[str, str]) -> None:
    old, new = upgrade
    node = cluster.node(NAME)
    assert node.daemon is not None
    assert kubelet_version(cluster) == LINES[old]
    gpus = {f"{ns}/{pod}": probe_log(cluster, ns, pod).gpus for ns, pod in BOTH_PODS}
    started = {f"{ns}/{pod}": containers(cluster, ns, pod) for ns, pod in BOTH_PODS}
    held = holders(cluster)
    log = node.daemon.log_path
    prepares = log.read_text().count('"msg": "NodePrepareResources"')
    registered = log.read_text().count("registered with the kubelet")

    with SideWatch(cluster) as watch:
        cluster.upgrade_kubelet(NAME, new, timeout=120)
        node_ready_on(cluster, LINES[new])
        # the daemon saw the new kubelet's registration socket and registered the device plugin again
        deadline = time.monotonic() + 60
        while log.read_text().count("registered with the kubelet") <= registered:
            assert time.monotonic() < deadline, "the daemon did not register with the upgraded kubelet"
            time.sleep(0.3)
        time.sleep(3)  # the new kubelet's first pod syncs: a re-prepare or a restart would come now
        assert {f"{ns}/{pod}": containers(cluster, ns, pod) for ns, pod in BOTH_PODS} == started
        assert {f"{ns}/{pod}": probe_log(cluster, ns, pod).gpus for ns, pod in BOTH_PODS} == gpus
        assert holders(cluster) == held
        assert log.read_text().count('"msg": "NodePrepareResources"') == prepares

        # the new kubelet hands GPUs out through both APIs: the free ones, each once
        create_pod(cluster, "legacy", probe_pod("after-legacy", gpus=1))
        create_pod(cluster, "dra", probe_pod("after-dra", claim_template="one-gpu"))
        for ns, pod in (("legacy", "after-legacy"), ("dra", "after-dra")):
            cluster.wait_pod_phase(ns, pod, "Running", timeout=120)
        after = {f"{ns}/{pod}": probe_log(cluster, ns, pod).gpus
                 for ns, pod in (("legacy", "after-legacy"), ("dra", "after-dra"))}
    assert all(len(g) == 1 for g in after.values()), after
    everyone = [next(iter(g)) for g in (*gpus.values(), *after.values())]
    assert len(set(everyone)) == 4, f"a GPU is in two pods: {gpus} {after}"
    assert watch.samples.count > 0
    assert watch.samples.clean, watch.samples.describe()
    with pytest.raises(ClusterError, match="an upgrade goes to a newer line"):
        cluster.upgrade_kubelet(NAME, new)



def allocated_device(claim: dict[str, Any]) -> str:
    results = (claim.get("status") or {}).get("allocation", {}).get("devices", {}).get("results") or []
    return str(results[0]["device"]) if results else ""


def test_a_gpu_whose_pod_was_force_deleted_while_the_kubelet_was_down_is_prepared_again_only_after_its_unprepare(
        cluster: SandboxCluster, upgrade: tuple[str, str]) -> None:
    """A classic operator move on a node whose kubelet is down: `kubectl delete --force` on a GPU pod stuck there.
    The API forgets the pod at once, kube-controller-manager deallocates and deletes its claim, and kube-scheduler
    allocates the same GPU to the next pod and binds it to the node while the old container still runs. When the
    kubelet comes back (here as its upgrade), the daemon must not prepare the GPU for the new claim before the old
    one is unprepared (the kubelet's cleanup of the orphaned pod); a prepare that comes first is refused and the
    kubelet retries.

    What the real kubelets do (v1.37.2 and v1.38.0-beta.0 seen): about 1.5 s after start they ask to prepare the
    next pod's claim, while the orphaned container still runs (it is killed half a second later, with its grace
    period); the daemon refuses ("already prepared for ResourceClaim ..."). The DRA manager's reconcile loop
    (every 60 s, pkg/kubelet/cm/dra/manager.go) unprepares the orphan's claim, and the pod worker's retry then
    prepares the GPU for the next pod: it runs about 80 s after the kubelet came back, never beside the old one."""
    old, new = upgrade
    node = cluster.node(NAME)
    assert node.daemon is not None and node.real is not None
    create_pod(cluster, "dra", probe_pod("filler", claim_template="one-gpu"))  # the node's other DRA GPU is taken
    cluster.wait_pod_phase("dra", "filler", "Running", timeout=120)
    gone = pod_claim(cluster, "dra", "claimed")
    device = allocated_device(gone)
    gpu = probe_log(cluster, "dra", "claimed").gpus

    cluster.stop_kubelet(NAME)
    cluster.api.delete(PODS, "claimed", "dra", grace_period_seconds=0)  # kubectl delete --force --grace-period=0
    deadline = time.monotonic() + 60
    while any(c["metadata"]["uid"] == gone["metadata"]["uid"]
              for c in cluster.api.list(cluster.api.resource_api().claims, "dra")["items"]):
        assert time.monotonic() < deadline, "kube-controller-manager did not delete the force-deleted pod's claim"
        time.sleep(0.3)
    create_pod(cluster, "dra", probe_pod("next", claim_template="one-gpu"))
    deadline = time.monotonic() + 30
    while not (cluster.api.get(PODS, "next", "dra")["spec"].get("nodeName")
               and allocated_device(pod_claim(cluster, "dra", "next"))):
        assert time.monotonic() < deadline, "kube-scheduler did not bind the next pod while the kubelet was down"
        time.sleep(0.3)
    new_claim = pod_claim(cluster, "dra", "next")
    assert allocated_device(new_claim) == device  # the only free DRA GPU: the one the old container still uses

    with SideWatch(cluster) as watch:
        cluster.upgrade_kubelet(NAME, new, timeout=120)
        cluster.wait_pod_phase("dra", "next", "Running", timeout=240)
    assert probe_log(cluster, "dra", "next").gpus == gpu
    log = node.daemon.log_path
    unprepared = [n for n, r in daemon_log(log, "claim unprepared") if r.get("uid") == gone["metadata"]["uid"]]
    prepared = [n for n, r in daemon_log(log, "claim prepared") if r.get("uid") == new_claim["metadata"]["uid"]]
    assert prepared, "the daemon never prepared the next pod's claim"
    assert unprepared and unprepared[0] < prepared[0], \
        "the GPU was prepared for the next claim while the force-deleted pod's claim still held it"
    assert watch.samples.clean, watch.samples.describe()
    # a refusal (every run here had one) tells the operator why, and that it resolves itself
    events = cluster.api.list(EVENTS, "dra")["items"]
    refused = [e["message"] for e in events if e.get("reason") == "DeviceRefused"
               and e["involvedObject"]["name"] == new_claim["metadata"]["name"]]
    for message in refused:
        assert f"ResourceClaim dra/{gone['metadata']['name']} (uid {gone['metadata']['uid']}) no longer exists" \
            in message, message


def test_a_legacy_pod_bound_to_a_force_deleted_pods_gpu_while_the_kubelet_was_down_is_refused_by_the_kubelet(
        cluster: SandboxCluster, upgrade: tuple[str, str]) -> None:
    """The device-plugin side of the force-delete above. The restarted kubelet admits the new pod before its device
    manager lets go of the orphan's devices (`UpdateAllocatedDevices` waits for its pod sources to be ready), so it
    refuses the pod: "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu.
    Requested: 1, Available: 0, which is unexpected" (UnexpectedAdmissionError; a bare pod stays Failed, a
    controller's is replaced). Upstream behaviour, pinned so that a kubelet that changes it is noticed. The GPU
    comes free with the orphan's cleanup and the next legacy pod gets it (in the runs here, its container started
    about 8 s after the orphan's was killed; the daemon cannot see an orphan's container, so on this side it relies
    on the kubelet's order)."""
    old, new = upgrade
    create_pod(cluster, "legacy", probe_pod("filler", gpus=1))  # the node's other legacy GPU is taken
    cluster.wait_pod_phase("legacy", "filler", "Running", timeout=120)
    gpu = probe_log(cluster, "legacy", "held").gpus
    cluster.stop_kubelet(NAME)
    cluster.api.delete(PODS, "held", "legacy", grace_period_seconds=0)
    create_pod(cluster, "legacy", probe_pod("next", gpus=1))
    deadline = time.monotonic() + 30
    while not cluster.api.get(PODS, "next", "legacy")["spec"].get("nodeName"):
        assert time.monotonic() < deadline, "kube-scheduler did not bind the next pod while the kubelet was down"
        time.sleep(0.3)
    with SideWatch(cluster) as watch:
        cluster.upgrade_kubelet(NAME, new, timeout=120)
        deadline = time.monotonic() + 120
        while (status := cluster.api.get(PODS, "next", "legacy")["status"]).get("phase") in (None, "Pending"):
            assert time.monotonic() < deadline, f"the kubelet did not decide on the next pod: {status}"
            time.sleep(0.5)
        assert (status.get("phase"), status.get("reason"), status.get("message")) == (
            "Failed", "UnexpectedAdmissionError", "Pod was rejected: Allocate failed due to requested number of "
            "devices unavailable for nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected")
        create_pod(cluster, "legacy", probe_pod("after", gpus=1))
        cluster.wait_pod_phase("legacy", "after", "Running", timeout=120)
    assert probe_log(cluster, "legacy", "after").gpus == gpu
    assert watch.samples.count > 0
    assert watch.samples.clean, watch.samples.describe()
