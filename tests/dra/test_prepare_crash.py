"""Crash safety of a RE-prepare: the DRA daemon SIGKILLed at each step of preparing a claim whose allocation
changed under the same UID (gpu-2 -> gpu-3), restarted, the kubelet retries.

At each point the disk holds something a fresh prepare never leaves: `prepare-after-checkpoint-started` a
PrepareStarted record naming gpu-3 next to the claim's OLD spec file (gpu-2); `prepare-after-cdi-write` the new
spec under a PrepareStarted record; `prepare-after-checkpoint-completed` the finished state before the answer.
Whatever the point, the end state must be the claim prepared exactly once on gpu-3 (one record, one spec naming
only gpu-3) and gpu-2 free for another claim. The daemon is the same subprocess harness as in test_crash.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge.kube import PODS, KubeAPI
from bridge.sandbox.kubelet.dramanager import DraManager
from tests.dra.cluster import DRIVER, NODE, cdi_files, gpu, make_claim, make_pod, reallocate, wait_until
from tests.dra.conftest import Cluster
from tests.dra.test_crash import daemon_factory  # noqa: F401  (the fixture, shared with the crash tests)

pytestmark = pytest.mark.slow


def reallocate_to_a_new_pod(api: KubeAPI, ns: str, claim_name: str, pod_name: str, device: str) -> dict[str, Any]:
    """The claim's pod is gone; the claim is deallocated, allocated to `device` for a new pod, which is bound."""
    pod = api.create(PODS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name, "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": claim_name}]}}],
                 "resourceClaims": [{"name": claim_name, "resourceClaimName": claim_name}]}}, ns)
    reallocate(api, ns, claim_name, pod, device)
    api.create(PODS, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod_name, "namespace": ns},
                      "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}}, ns, subresource="binding")
    return api.get(PODS, pod_name, ns)


@pytest.mark.parametrize("point", ["prepare-after-checkpoint-started", "prepare-after-cdi-write",
                                   "prepare-after-checkpoint-completed"])
def test_a_crash_while_re_preparing_a_reallocated_claim_ends_prepared_once_on_the_new_gpu(
    cluster: Cluster, kubelet: DraManager, daemon_factory: Any, point: str
) -> None:
    first_daemon = daemon_factory()
    kubelet.wait_for_plugin(DRIVER)
    first = make_pod(cluster.api, "ns", "first", ["gpu"])
    uid = make_claim(cluster.api, "ns", "gpu", first, [gpu("gpu-2")])["metadata"]["uid"]
    kubelet.prepare_pod_with_retry(first, timeout=30)
    first_daemon.close()

    cluster.api.delete(PODS, "first", "ns", grace_period_seconds=0)  # force-deleted while its kubelet is away
    second = reallocate_to_a_new_pod(cluster.api, "ns", "gpu", "second", "gpu-3")
    daemon = daemon_factory(BRIDGE_CRASH_AT=point, BRIDGE_CRASH_ONCE_FILE=str(cluster.root / "once"))
    kubelet.restart()  # forgets that the claim is prepared: it asks again, for the UID it knows
    kubelet.wait_for_plugin(DRIVER)
    records = kubelet.prepare_pod_with_retry(second, timeout=60, interval=0.3)

    assert daemon.starts >= 2, "the daemon should have crashed once and been restarted"
    assert [(d.device, d.cdi_ids) for d in records[uid].prepared[DRIVER]] == \
        [("gpu-3", (f"k8s.{DRIVER}/claim={uid}-gpu-3",))]
    assert set(cdi_files(cluster.cdi_root)) == {uid}
    spec = json.loads(cdi_files(cluster.cdi_root)[uid].read_text())
    assert [d["name"] for d in spec["devices"]] == [f"{uid}-gpu-3"]
    assert {u: (r["state"], [d["device"] for d in r["devices"]]) for u, r in daemon.records().items()} == \
        {uid: ("PrepareCompleted", ["gpu-3"])}
    # gpu-2 was released with the old record: another claim gets it.
    third = make_pod(cluster.api, "ns", "third", ["other"])
    other = make_claim(cluster.api, "ns", "other", third, [gpu("gpu-2")])["metadata"]["uid"]
    assert [d.device for d in kubelet.prepare_pod_with_retry(third, timeout=30)[other].prepared[DRIVER]] == ["gpu-2"]


def test_a_crash_before_the_background_sync_keeps_the_answered_claim_prepared(
    cluster: Cluster, kubelet: DraManager, daemon_factory: Any
) -> None:
    """The kubelet's answer no longer waits for the fsync: a SIGKILL between the answer and the sync must not
    lose or undo the prepared claim (the renamed checkpoint is in the page cache; only a reboot loses it, and a
    reboot voids every claim record anyway)."""
    daemon = daemon_factory(BRIDGE_CRASH_AT="claims-before-sync", BRIDGE_CRASH_ONCE_FILE=str(cluster.root / "once"))
    kubelet.wait_for_plugin(DRIVER)
    pod = make_pod(cluster.api, "ns", "p", ["gpu"])
    uid = make_claim(cluster.api, "ns", "gpu", pod, [gpu("gpu-1")])["metadata"]["uid"]
    records = kubelet.prepare_pod_with_retry(pod, timeout=60, interval=0.3)
    assert [d.device for d in records[uid].prepared[DRIVER]] == ["gpu-1"]
    wait_until(lambda: daemon.output.count("READY") >= 2, 60, "the daemon killed before its sync and restarted")
    assert (cluster.root / "once.claims-before-sync").exists()
    # The restart's sweep found a finished prepare, not a half-finished one: record and spec are kept.
    assert {u: r["state"] for u, r in daemon.records().items()} == {uid: "PrepareCompleted"}
    assert set(cdi_files(cluster.cdi_root)) == {uid}
    kubelet.wait_for_plugin(DRIVER)
    kubelet.unprepare_pod_with_retry(pod, timeout=30)
    assert cdi_files(cluster.cdi_root) == {} and daemon.records() == {}
