"""The split on one node, end to end in-process: the daemon (`DualNode`), the kubelet simulator (device manager,
PodResources, DRA manager), the API emulator, and a test-local node-status loop (`tests/node/nodestatus.py`).

After every phase: no GPU is both offered by the device plugin (Healthy in the kubelet's view) and published in the
ResourceSlice, and none is both assigned to a legacy container and prepared for a claim.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bridge.inventory.simulated import SimulatedSource
from bridge.kube import EVENTS, NODES, PODS, KubeAPI, connect
from bridge.ledger import SPLIT_KEY, SplitStatus, status_of
from bridge.node.daemon import NodeConfig
from bridge.node.dual import DraOptions, DualNode
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.kubelet import KubeletSimulator
from bridge.sandbox.kubelet.dramanager import PodPrepareError
from bridge.sandbox.kubelet.devicemanager import Assignment
from tests.dra.cluster import DRIVER, NODE, ensure_namespace, gpu, make_claim, make_pod, wait_until
from tests.node.kubeletcalls import allocate_directly
from tests.node.nodestatus import NodeStatusPoster

pytestmark = pytest.mark.slow
RESOURCE = "nvidia.com/gpu"


@dataclass
class Node:
    api: KubeAPI
    root: Path
    kubelet: KubeletSimulator
    status: NodeStatusPoster
    daemon: DualNode
    gpus: tuple[Any, ...]
    legacy_pods: dict[str, str] = field(default_factory=dict)  # name -> pod UID

    def set_split(self, value: str) -> None:
        self.api.patch(NODES, NODE, {"metadata": {"annotations": {SPLIT_KEY: value}}})

    def healthy(self) -> set[str]:
        return self.kubelet.devices.resource(RESOURCE).healthy

    def published(self) -> set[str]:
        items = self.api.list(self.api.resource_api().slices, field_selector=f"spec.nodeName={NODE}")["items"]
        return {d["name"] for s in items for d in s["spec"].get("devices") or []}

    def name(self, uuid: str) -> str:
        return next(f"gpu-{g.index}" for g in self.gpus if g.uuid == uuid)

    def legacy_names(self) -> set[str]:
        return {self.name(u) for u in self.healthy()}

    def split_status(self) -> SplitStatus | None:
        return status_of(self.api.get(NODES, NODE))

    def converged(self) -> bool:
        s = self.daemon.split
        return s is not None and s.last is not None and s.last.state == "converged" and not s.ledger.moves

    def check_one_owner(self) -> None:
        both = self.legacy_names() & self.published()
        assert not both, f"offered to both APIs: {both}"
        assert self.kubelet.dra is not None
        prepared = {a.device for a in self.kubelet.dra.dynamic_assignments()}
        assigned = {self.name(i) for a in self.kubelet.devices.assignments() for i in a.device_ids}
        assert not prepared & assigned, f"used through both APIs: {prepared & assigned}"

    def allocate(self, name: str) -> str:
        """A legacy pod bound here and admitted by the kubelet (device manager Allocate); returns its GPU."""
        ensure_namespace(self.api, "team")
        pod = self.api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team"},
                                     "spec": {"nodeName": NODE, "containers": [
                                         {"name": "main", "image": "cuda", "resources": {"limits": {RESOURCE: "1"}}}]}},
                              "team")
        uid = pod["metadata"]["uid"]
        resp = self.kubelet.devices.allocate(uid, "main", RESOURCE, 1, namespace="team", pod_name=name)
        self.legacy_pods[name] = uid
        return self.name(resp.envs["NVIDIA_VISIBLE_DEVICES"])

    def bind(self, name: str, gpus: int) -> str:
        """A legacy pod the scheduler bound here, asking for `gpus`, that the kubelet has not admitted yet; its UID."""
        ensure_namespace(self.api, "team")
        limits = {RESOURCE: str(gpus)}
        pod = self.api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team"},
                                     "spec": {"nodeName": NODE, "containers": [
                                         {"name": "main", "image": "cuda", "resources": {"limits": limits}}]}}, "team")
        self.legacy_pods[name] = pod["metadata"]["uid"]
        return str(pod["metadata"]["uid"])

    def legacy(self, name: str, gpu_index: int) -> None:
        """A legacy pod bound here that the kubelet admitted with gpu-<index> (its device-manager state, checkpoint
        included, as after Allocate)."""
        ensure_namespace(self.api, "team")
        pod = self.api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team"},
                                     "spec": {"nodeName": NODE, "containers": [
                                         {"name": "main", "image": "cuda", "resources": {"limits": {RESOURCE: "1"}}}]}},
                              "team")
        self.kubelet.devices.seed_assignment(Assignment(pod["metadata"]["uid"], "team", name, "main", RESOURCE,
                                                        (self.gpus[gpu_index].uuid,)))
        self.legacy_pods[name] = pod["metadata"]["uid"]

    def finish(self, name: str) -> None:
        """The pod ended, as its kubelet ends it: the terminal status is written, the GPU freed in the device manager
        (in memory: the checkpoint file keeps the entry until its next write) and the pod deleted (at once: it has
        ended)."""
        self.api.patch(PODS, name, {"status": {"phase": "Succeeded"}}, "team", subresource="status")
        self.kubelet.devices.remove_pod(self.legacy_pods.pop(name))
        self.api.delete(PODS, name, "team")


@pytest.fixture
def node(short_tmp: Path) -> Iterator[Node]:
    with ApiServer() as srv:
        kubeconfig = srv.write_kubeconfig(short_tmp / "kubeconfig")
        api = connect(str(kubeconfig))
        api.create(NODES, {"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": NODE, "annotations": {SPLIT_KEY: "0"}}})
        kubelet = KubeletSimulator(short_tmp / "kl", kube=connect(str(kubeconfig)), node_name=NODE,
                                   dra_call_timeout=20, dra_health_retry=0.2).start()
        status = NodeStatusPoster(api, NODE, kubelet.devices).start()
        source = SimulatedSource.from_spec("8xH100-80GB", NODE)
        daemon = DualNode(NodeConfig(node_name=NODE, kubelet_root=short_tmp / "kl", cdi_root=short_tmp / "cdi",
                                     state_dir=short_tmp / "st", http_address=None),
                          source, DraOptions(mode="on", kubeconfig=str(kubeconfig), split_grace_s=0.3,
                                             move_timeout_s=30, settle_s=0.1), environ={})
        daemon.start()
        n = Node(api, short_tmp, kubelet, status, daemon, source.devices())
        try:
            assert kubelet.devices.wait_for(lambda m: len(n.healthy()) == 8, 30)
            assert kubelet.dra is not None
            kubelet.dra.wait_for_plugin(DRIVER, 30)
            yield n
        finally:
            daemon.stop()
            status.stop()
            kubelet.stop()


def test_targets_0_4_8_2_with_running_legacy_pods_that_keep_their_gpus_until_they_finish(node: Node) -> None:
    held = {node.allocate(f"p{i}"): f"p{i}" for i in range(3)}
    node.set_split("4")
    wait_until(lambda: len(node.published()) == 4 and node.converged(), 60, "4 GPUs on DRA")
    assert not node.published() & set(held), "a busy GPU was chosen while free ones could take its place"
    assert all(name in node.legacy_names() for name in held)
    node.check_one_owner()

    node.set_split("8")
    wait_until(lambda: len(node.published()) == 5, 60, "every free GPU on DRA")
    status = wait_until(lambda: (s := node.split_status()) and len(s.pending) == 3 and s, 30, "3 waiting")
    for p in status.pending:
        assert p.phase == "held" and f"{p.device} held by pod team/p" in p.reason and "will move when free" in p.reason
    node.check_one_owner()
    for name, pod in sorted(held.items()):
        node.finish(pod)
        wait_until(lambda: name in node.published(), 60, f"{name} on DRA once its pod finished")
        node.check_one_owner()
    wait_until(node.converged, 30, "target 8 reached")
    assert node.legacy_names() == set()

    node.set_split("2")
    wait_until(lambda: node.published() == {"gpu-6", "gpu-7"} and len(node.legacy_names()) == 6, 60, "target 2")
    node.check_one_owner()
    assert node.allocate("late") in {f"gpu-{i}" for i in range(6)}


def test_a_claim_allocated_and_bound_but_not_prepared_keeps_its_gpu_on_dra_and_prepares(node: Node) -> None:
    node.set_split("1")
    wait_until(lambda: node.published() == {"gpu-7"} and node.converged(), 60, "gpu-7 on DRA")
    pod = make_pod(node.api, "ml", "infer-0", ["gpu"])
    uid = make_claim(node.api, "ml", "gpu", pod, [gpu("gpu-7")])["metadata"]["uid"]  # the scheduler's work
    node.set_split("0")  # ... and the kubelet has not prepared yet (down, busy, another claim failing)
    # (If the pod watch delivers the pod after the new target, the move starts and is aborted when the claim shows
    # up: the GPU was never offered to the device plugin. Either way it ends held on DRA.)
    status = wait_until(lambda: (s := node.split_status()) and s.requested == "0" and s.pending
                        and s.pending[0].phase == "held" and s, 30, "the waiting status")
    [pending] = status.pending
    assert pending.device == "gpu-7"
    assert "claim ml/gpu (pod ml/infer-0) (DRA claim allocated, not prepared yet)" in pending.reason
    wait_until(lambda: node.published() == {"gpu-7"}, 30, "gpu-7 published")
    assert "gpu-7" not in node.legacy_names()
    node.check_one_owner()
    assert node.kubelet.dra is not None
    records = node.kubelet.dra.prepare_pod_with_retry(pod, timeout=30)
    assert records[uid].prepared[DRIVER][0].device == "gpu-7"
    node.check_one_owner()


def test_a_legacy_allocate_while_the_node_status_lags_wins_and_another_gpu_moves(node: Node) -> None:
    node.status.pause()  # the kubelet has not posted the smaller allocatable yet
    node.set_split("1")
    assert node.daemon.split is not None
    gpu7 = node.gpus[7].uuid
    wait_until(lambda: node.daemon.split.side_of(gpu7) == "withdrawn", 30, "gpu-7 withdrawn")
    assert allocate_directly(node.root / "kl", gpu7) is None  # never offered to DRA: the Allocate wins, the move is aborted
    assert node.daemon.split.side_of(gpu7) == "legacy"
    node.status.resume()
    wait_until(lambda: node.published() == {"gpu-6"} and node.converged(), 60, "gpu-6 moved instead")
    assert gpu7 in node.healthy()
    events = [e["message"] for e in node.api.list(EVENTS, "default")["items"] if e["reason"] == "DRADeviceMoveAborted"]
    assert any("gpu-7 move aborted legacy->dra" in m and "device-plugin Allocate" in m for m in events)


def test_a_running_init_container_keeps_its_gpu_off_dra_until_it_terminates(node: Node) -> None:
    """PodResources never reports init containers: the GPU is known from the kubelet's device-manager checkpoint
    (the simulator writes it as the kubelet does after an Allocate), and held while the init container runs."""
    ensure_namespace(node.api, "ml")
    pod = node.api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-7", "namespace": "ml"},
                                 "spec": {"nodeName": NODE,
                                          "initContainers": [{"name": "init", "image": "cuda",
                                                              "resources": {"limits": {RESOURCE: "1"}}}],
                                          "containers": [{"name": "main", "image": "cuda"}]}}, "ml")
    pod["status"] = {"phase": "Pending", "initContainerStatuses": [
        {"name": "init", "ready": False, "restartCount": 0, "image": "cuda", "imageID": "",
         "state": {"running": {"startedAt": "2025-06-01T12:00:00Z"}}}]}
    pod = node.api.update(PODS, pod, "ml", subresource="status")
    node.kubelet.devices.seed_assignment(Assignment(pod["metadata"]["uid"], "ml", "train-7", "init", RESOURCE,
                                                    (node.gpus[7].uuid,), init_only=True))
    node.set_split("gpu-7")
    status = wait_until(lambda: (s := node.split_status()) and s.requested == "gpu-7" and s.pending and s, 30, "held")
    assert status.pending[0].reason == ("gpu-7 held by pod ml/train-7 container init (legacy init container); will "
                                        "move when free")
    events = [e["message"] for e in node.api.list(EVENTS, "default")["items"] if e["reason"] == "DRADeviceNotMoved"]
    assert status.pending[0].reason in events
    assert node.published() == set()
    pod["status"]["initContainerStatuses"][0]["state"] = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    pod["status"]["phase"] = "Running"
    node.api.update(PODS, pod, "ml", subresource="status")
    wait_until(lambda: node.published() == {"gpu-7"} and node.converged(), 60, "gpu-7 on DRA after the init container")


def test_prepare_takes_a_free_gpu_back_and_waits_for_a_held_one_naming_its_holder(node: Node) -> None:
    assert node.kubelet.dra is not None
    # gpu-3 is free on the device plugin's side: a claim allocated to it (on a slice published before a move) is
    # prepared after the daemon took it back.
    pod = make_pod(node.api, "ml", "late-bind", ["c3"])
    uid = make_claim(node.api, "ml", "c3", pod, [gpu("gpu-3")])["metadata"]["uid"]
    records = node.kubelet.dra.prepare_pod_with_retry(pod, timeout=30)
    assert records[uid].prepared[DRIVER][0].device == "gpu-3"
    # The daemon's guard refuses any Allocate of gpu-3 from the moment it was taken back; the kubelet's own view
    # follows by a ListAndWatch push, which it receives in its own time.
    wait_until(lambda: "gpu-3" not in node.legacy_names(), 30, "the kubelet to see gpu-3 leave the device plugin")
    wait_until(lambda: "gpu-3" in node.published(), 30, "gpu-3 published")
    node.check_one_owner()
    # gpu-2 is held by a legacy container: the claim gets a per-claim error naming it, and an Event.
    node.legacy("legacy-0", 2)
    pod2 = make_pod(node.api, "ml", "waits", ["c2"])
    uid2 = make_claim(node.api, "ml", "c2", pod2, [gpu("gpu-2")])["metadata"]["uid"]
    with pytest.raises(PodPrepareError) as refused:
        node.kubelet.dra.prepare_pod(pod2)
    assert "held on the legacy side by pod team/legacy-0 container main (legacy container)" in str(refused.value)
    assert "is prepared once it is free" in str(refused.value)
    # The refusal's Event is recorded in the background, after the node lock is released.
    wait_until(lambda: any("pod team/legacy-0" in e["message"] and e["involvedObject"]["name"] == "c2"
                           for e in node.api.list(EVENTS, "ml")["items"] if e["reason"] == "DeviceRefused"),
               30, "a DeviceRefused Event on claim c2 naming the holder")
    node.finish("legacy-0")
    records = node.kubelet.dra.prepare_pod_with_retry(pod2, timeout=30)
    assert records[uid2].prepared[DRIVER][0].device == "gpu-2"
    # As for gpu-3: the prepare may take gpu-2 back itself, and then the kubelet's view (a ListAndWatch push) and
    # the ResourceSlice (the publisher's write) each follow in their own time.
    wait_until(lambda: "gpu-2" not in node.legacy_names(), 30, "the kubelet to see gpu-2 leave the device plugin")
    wait_until(lambda: "gpu-2" in node.published(), 30, "gpu-2 published")
    node.check_one_owner()
    status = wait_until(lambda: (s := node.split_status()) and any(r.api == "prepare" for r in s.refusals) and s, 30,
                        "the refusal in the status")
    assert any(r.device == "gpu-2" for r in status.refusals)


def test_free_gpus_a_bound_legacy_pod_will_be_admitted_with_stay_legacy_until_the_kubelet_admits_it(node: Node) -> None:
    """The kubelet admits a pod with the devices healthy at that instant and fails it when too few are left: a pod
    the scheduler bound here keeps as many free legacy GPUs as it asks for until the kubelet has admitted it."""
    for i in range(5):
        node.legacy(f"busy-{i}", i)  # gpu-0..4 run legacy containers
    uid = node.bind("late", 2)
    node.set_split("all")
    status = wait_until(lambda: (s := node.split_status()) and s.requested == "all"
                        and sum("kept on legacy for pod team/late" in p.reason for p in s.pending) == 2 and s,
                        30, "two free GPUs kept for the pod waiting for admission")
    # The third free GPU moves; its ResourceSlice comes after the status that says what stays (the move protocol
    # publishes once the kubelet shows the smaller allocatable), so wait for it rather than read it at once.
    wait_until(lambda: len(node.published()) == 1, 30, "the third free GPU published")
    assert node.published() <= {"gpu-5", "gpu-6", "gpu-7"}
    kept = {p.device for p in status.pending if "kept on legacy" in p.reason}
    assert kept == {"gpu-5", "gpu-6", "gpu-7"} - node.published()
    # The kubelet admits it: the device manager gives it the two healthy free GPUs.
    resp = node.kubelet.devices.allocate(uid, "main", RESOURCE, 2, namespace="team", pod_name="late")
    assert {node.name(u) for u in resp.envs["NVIDIA_VISIBLE_DEVICES"].split(",")} == kept
    node.check_one_owner()
    # Once it and the others end, every GPU goes to DRA.
    for name in [*(f"busy-{i}" for i in range(5)), "late"]:
        node.finish(name)
    wait_until(lambda: len(node.published()) == 8 and node.converged(), 60, "every GPU on DRA")
    node.check_one_owner()
