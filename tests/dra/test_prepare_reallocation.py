"""A claim deallocated and allocated again under the same UID, end to end through `bridge node` (both APIs, the
ownership ledger, the checkpoint) and the kubelet simulator.

How it happens on a real node: the pod using the claim is deleted while the kubelet is down (so nothing is
unprepared), the claim controller removes the allocation once no pod reserves it, a new pod reserves it and the
scheduler allocates another GPU; the restarted kubelet, which still has the claim UID in its checkpoint, asks the
driver to prepare that UID again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.kube import NODES, PODS, KubeAPI
from tests.dra.cluster import DRIVER, NODE, cdi_files, gpu, make_claim, make_pod, reallocate, wait_until
from tests.node.test_dual_api_e2e import GPUS, SPLIT_KEY, Env, NodeProc, healthy_split, node_env

pytestmark = pytest.mark.slow


@pytest.fixture
def env(short_tmp: Path) -> Iterator[Env]:
    with node_env(short_tmp, "gpu-2,gpu-5") as e:
        yield e


def test_a_claim_reallocated_from_gpu_2_to_gpu_5_under_the_same_uid_is_prepared_on_gpu_5_and_gpu_2_is_freed(
    env: Env,
) -> None:
    kubelet, api = env.kubelet, env.api
    assert kubelet.dra is not None
    proc = NodeProc(env.node_args())
    try:
        assert kubelet.devices.wait_for(lambda m: healthy_split(kubelet) == (6, 2), 60), proc.lines[-20:]
        kubelet.dra.wait_for_plugin(DRIVER, 60)
        wait_until(lambda: env.slice_devices() == {"gpu-2", "gpu-5"}, 60, "the slice with gpu-2 and gpu-5")

        first = make_pod(api, "team-a", "first", ["gpu"])
        uid = make_claim(api, "team-a", "gpu", first, [gpu("gpu-2")])["metadata"]["uid"]
        records = kubelet.dra.prepare_pod_with_retry(first, timeout=30)
        assert [d.device for d in records[uid].prepared[DRIVER]] == ["gpu-2"]

        # While the kubelet is down: the first pod goes, the claim is allocated to gpu-5 for a second pod, which the
        # scheduler then binds to this node (allocation before binding, as the scheduler's PreBind/Bind do).
        api.delete(PODS, "first", "team-a", grace_period_seconds=0)  # force-deleted: its kubelet is down
        second = api.create(PODS, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "second", "namespace": "team-a"},
            "spec": {"containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}],
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu"}]}}, "team-a")
        reallocate(api, "team-a", "gpu", second, "gpu-5")
        api.create(PODS, {"apiVersion": "v1", "kind": "Binding",
                          "metadata": {"name": "second", "namespace": "team-a"},
                          "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}}, "team-a",
                   subresource="binding")
        second = api.get(PODS, "second", "team-a")
        kubelet.restart()
        kubelet.dra.wait_for_plugin(DRIVER, 60)
        records = kubelet.dra.prepare_pod_with_retry(second, timeout=30)

        # The answer, the CDI spec and the checkpoint name gpu-5, and only gpu-5.
        [dev] = records[uid].prepared[DRIVER]
        assert (dev.device, dev.cdi_ids) == ("gpu-5", (f"k8s.{DRIVER}/claim={uid}-gpu-5",))
        spec = json.loads(cdi_files(env.cdi_root)[uid].read_text())
        assert [(d["name"], d["containerEdits"]["deviceNodes"]) for d in spec["devices"]] == \
            [(f"{uid}-gpu-5", [{"path": f"/dev/nvidia{GPUS[5].minor}"}])]
        records = json.loads((env.root / "st" / "claims.json").read_text())  # the claim records' checkpoint
        assert [d["device"] for d in records["data"]["preparedClaims"][uid]["devices"]] == ["gpu-5"]
        # Logged before the answer, but read from the daemon's output by the test's reader thread in its own time.
        wait_until(lambda: any("allocation changed since it was prepared" in line for line in proc.lines), 30,
                   "the daemon's log line about the changed allocation")

        # gpu-2 is free in the ledger: with the target down to gpu-5 alone it goes back to the device plugin
        # (a device held by a claim record would stay on DRA, "will move when free").
        node = api.get(NODES, NODE)
        node["metadata"]["annotations"][SPLIT_KEY] = "gpu-5"
        api.update(NODES, node)
        assert kubelet.devices.wait_for(lambda m: healthy_split(kubelet) == (7, 1), 60), proc.lines[-20:]
        wait_until(lambda: env.slice_devices() == {"gpu-5"}, 60, "only gpu-5 left in the slice")
    finally:
        rc = proc.stop()
    assert rc == 0, proc.lines[-30:]
