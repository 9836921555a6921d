"""End to end over real sockets and the API emulator: kubelet simulator -> DRA plugin -> CDI spec on disk."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from bridge.ledger import Side
from bridge.dra.component import DraConfig, DraNode
from bridge.dra.plugin import PluginConfig
from bridge.dra.stores import CheckpointClaimStore
from bridge.inventory.model import DeviceID, HealthEvent
from bridge.inventory.simulated import devices_from_spec
from bridge.kube import EVENTS, connect
from bridge.ledger.checkpoint import Checkpoint, read_boot_id
from bridge.sandbox.kubelet.dramanager import DraManager, PodPrepareError
from tests.dra.cluster import DRIVER, NODE, cdi_files, gpu, make_claim, make_pod, wait_until
from tests.dra.conftest import Cluster

GPUS = devices_from_spec("4xH100-80GB", NODE)
LEGACY = {GPUS[0].uuid}


@pytest.fixture
def daemon(cluster: Cluster) -> Iterator[DraNode]:
    boot = cluster.root / "boot_id"
    boot.write_text("boot-1\n")

    def side_of(uuid: DeviceID) -> str:
        return Side.LEGACY if uuid in LEGACY else Side.DRA

    node = DraNode(
        DraConfig(NODE, PluginConfig(kubelet_root=str(cluster.kubelet_root), health_resend_interval=0.5),
                  cdi_root=cluster.cdi_root, boot_id_path=boot),
        connect(str(cluster.kubeconfig)), GPUS, side_of,
        CheckpointClaimStore(Checkpoint(cluster.state_dir, boot_id=lambda: read_boot_id(boot))),
    )
    node.start()
    yield node
    node.stop()


def test_a_claim_allocated_to_gpu_3_is_prepared_into_a_cdi_spec_and_unprepared(
    cluster: Cluster, daemon: DraNode, kubelet: DraManager
) -> None:
    kubelet.wait_for_plugin(DRIVER)
    pod = make_pod(cluster.api, "team-a", "trainer", ["gpu"])
    claim = make_claim(cluster.api, "team-a", "gpu", pod, [gpu("gpu-3")])
    uid = claim["metadata"]["uid"]

    records = kubelet.prepare_pod(pod)
    [device] = records[uid].prepared[DRIVER]
    assert (device.pool, device.device) == (NODE, "gpu-3")
    assert device.cdi_ids == (f"k8s.{DRIVER}/claim={uid}-gpu-3",)
    spec = json.loads(cdi_files(cluster.cdi_root)[uid].read_text())
    assert spec["devices"][0]["name"] == f"{uid}-gpu-3"
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [{"path": f"/dev/nvidia{GPUS[3].minor}"}]
    assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]  # the runtime must not add GPUs
    # The kubelet counts the plugin registered before it tells the plugin so (NotifyRegistrationStatus, from the
    # kubelet's watcher thread): wait for the plugin's side.
    status = daemon.plugin.registration.wait_for_status(30)
    assert status is not None and status.registered

    assert kubelet.unprepare_pod(pod) == [uid]
    assert cdi_files(cluster.cdi_root) == {}


def test_two_claims_in_one_call_one_bad_the_good_one_is_prepared_and_the_bad_one_names_its_cause(
    cluster: Cluster, daemon: DraNode, kubelet: DraManager
) -> None:
    kubelet.wait_for_plugin(DRIVER)
    pod = make_pod(cluster.api, "team-b", "mixed", ["good", "legacy"])
    good = make_claim(cluster.api, "team-b", "good", pod, [gpu("gpu-1")])
    make_claim(cluster.api, "team-b", "legacy", pod, [gpu("gpu-0")])
    with pytest.raises(PodPrepareError, match=r"ResourceClaim legacy: device gpu-0 \(GPU-[0-9a-f-]+\) is owned by the legacy side"):
        kubelet.prepare_pod(pod)
    assert [len(uids) for _, uids in kubelet.prepare_calls] == [2]  # ONE call per driver with both claims
    assert set(cdi_files(cluster.cdi_root)) == {good["metadata"]["uid"]}
    refusal = wait_until(lambda: [e for e in cluster.api.list(EVENTS, "team-b")["items"]
                                  if e["reason"] == "DeviceRefused"], what="the refusal Event")
    assert refusal[0]["involvedObject"]["name"] == "legacy"


def test_claims_the_kubelet_would_not_send_are_still_answered_per_claim(
    cluster: Cluster, daemon: DraNode, kubelet: DraManager
) -> None:
    """A pod whose claim is unallocated or belongs to another driver fails in the kubelet before any call; the
    driver's own answer for such claims (if asked directly) is a per-claim error, checked in test_prepare."""
    kubelet.wait_for_plugin(DRIVER)
    pod = make_pod(cluster.api, "team-c", "p", ["bare"])
    make_claim(cluster.api, "team-c", "bare", pod, None)
    with pytest.raises(PodPrepareError, match="ResourceClaim bare: not allocated"):
        kubelet.prepare_pod(pod)
    assert kubelet.prepare_calls == []


def test_health_changes_reach_the_kubelet_over_the_stream(cluster: Cluster, daemon: DraNode, kubelet: DraManager) -> None:
    kubelet.wait_for_plugin(DRIVER)
    wait_until(lambda: kubelet.health(DRIVER, NODE, "gpu-2"), what="the first health list")
    daemon.on_health(HealthEvent(GPUS[2].uuid, False, "XID 79", xid=79))
    seen = wait_until(lambda: (h := kubelet.health(DRIVER, NODE, "gpu-2")) and h.health == "Unhealthy" and h,
                      what="Unhealthy at the kubelet")
    assert seen.message == "XID 79" and seen.timeout_seconds == 30
