"""A binding that lands late on a real cluster (issue 24): a DRA pod whose PersistentVolumeClaim is bound only after
it is scheduled (a `WaitForFirstConsumer` StorageClass served by a slow stand-in provisioner, tests/real/
provisioner.py) while its node's split moves every GPU from DRA to the device plugin and a legacy pod asks for one.

The real kube-scheduler, in the pod's binding cycle (pkg/scheduler/schedule_one.go `bindingCycle`), first sets
`status.nominatedNodeName` (NominatedNodeNameForExpectation, beta and on by default in 1.35 and still in 1.37.2,
because PreBindPreFlight finds work: VolumeBinding has a claim to bind, DynamicResources a claim to allocate), then
runs PreBind, where VolumeBinding waits for the volume (polling every second, up to 600 s); only after PreBind does
it Bind. What the claim shows meanwhile depends on the release:

* 1.35: PreBind plugins run one after the other, VolumeBinding before DynamicResources, so the claim's allocation is
  written only once the volume is bound: the node daemon sees a pod nominated to its node whose claim is not
  allocated (`incoming`) and keeps every DRA GPU on DRA.
* 1.37 (from 1.36): plugins whose PreBindPreFlight allows it run in parallel (pkg/scheduler/framework/runtime/
  framework.go `getPreBindPluginGroups`; VolumeBinding and DynamicResources both do), so the allocation is written at
  once and the pod waits, nominated and unbound, with an allocated claim: the daemon sees that claim through the
  nominated pod and keeps its GPU.

Either way the move waits, the DRA pod runs on the GPU the scheduler chose, the legacy pod waits for it, no GPU is
held or offered twice and no claim is stuck. The grace is the daemon's default (`--split-grace auto`: 5 s on these
releases), the provisioner binds 10 s after that.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.kube.api import EVENTS, NODES, PODS
from bridge.ledger.status import status_of
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from bridge.sandbox.cluster.inspect import SideWatch
from bridge.sandbox.real.binaries import NODE
from tests.polling import wait_until
from tests.real.conftest import CONTROL_PLANE, REAL_LINES, require_binaries
from tests.real.provisioner import PVCS, PVS, STORAGE_CLASSES, LateProvisioner, claim, storage_class
from tests.real.realnodes import claim_template, create_pod, ensure_namespace, probe_log, probe_pod
from tests.sandbox_cluster import spec_for_tests

pytestmark = [pytest.mark.slow, pytest.mark.real, pytest.mark.timeout(500)]

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 300.0
NAME = "gpu-node"
PROVISIONER = "sandbox.dra-bridge.io/late-local"
GRACE_S = 5.0  # `--split-grace auto` from 1.35 (bridge.node.bindinggrace)
DELAY_S = GRACE_S + 10.0


@pytest.fixture(scope="module", params=REAL_LINES)
def cluster(request: pytest.FixtureRequest) -> Iterator[SandboxCluster]:
    line = request.param
    require_binaries(line, CONTROL_PLANE + NODE + ("kubelet", "kubectl"))
    # split_grace None: the daemon's own default, resolved from the API server's /version
    spec = spec_for_tests((NodeSpec(NAME, "1xH100-80GB", split="1"),), backend="real", version=line,
                          real_kubelets=True, bridge=True, node_status_frequency=10.0, split_grace=None)
    with SandboxCluster(spec).start(timeout=START_TIMEOUT) as c:
        ensure_namespace(c, "legacy")
        ensure_namespace(c, "dra")
        c.api.create(c.api.resource_api().claim_templates, claim_template("one-gpu"), "dra")
        c.api.create(STORAGE_CLASSES, storage_class("late-local", PROVISIONER))
        yield c


def dra_pod_with_late_volume() -> dict[str, Any]:
    pod = probe_pod("trainer", claim_template="one-gpu",
                    extra={"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]})
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return pod


def split_status(cluster: SandboxCluster) -> Any:
    return status_of(cluster.api.get(NODES, NAME))


def gpu_holders(cluster: SandboxCluster) -> list[str]:
    status = split_status(cluster)
    return [] if status is None else [h for d in status.devices for h in d.holders]


def allocatable(cluster: SandboxCluster) -> int:
    return int((cluster.api.get(NODES, NAME).get("status") or {}).get("allocatable", {}).get("nvidia.com/gpu", "0"))


def published(cluster: SandboxCluster) -> int:
    slices = cluster.api.list(cluster.api.resource_api().slices, field_selector=f"spec.nodeName={NAME}")["items"]
    return sum(len(s["spec"].get("devices") or []) for s in slices)


def events(cluster: SandboxCluster, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in cluster.api.list(EVENTS, namespace)["items"]
            if e["involvedObject"].get("name") == name and e.get("reason") == reason]


def pod_claim(cluster: SandboxCluster) -> dict[str, Any] | None:
    pod = cluster.pod("dra", "trainer") or {}
    names = [s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []]
    if not names or not names[0]:
        return None
    return cluster.api.get(cluster.api.resource_api().claims, str(names[0]), "dra")


def phase(cluster: SandboxCluster, namespace: str, name: str) -> str | None:
    pod = cluster.pod(namespace, name)
    return None if pod is None else (pod.get("status") or {}).get("phase")


def test_a_dra_pod_bound_late_by_its_volume_keeps_its_gpu_through_a_move_to_legacy(cluster: SandboxCluster) -> None:
    line = cluster.spec.kubernetes_version
    api = cluster.api
    wait_until(lambda: (allocatable(cluster), published(cluster)) == (0, 1), 90, "the GPU on DRA")
    api.create(PVCS, claim("data", "late-local"), "dra")
    started = time.monotonic()
    with SideWatch(cluster) as watch, LateProvisioner(api, PROVISIONER, delay_s=DELAY_S) as provisioner:
        create_pod(cluster, "dra", dra_pod_with_late_volume())

        # the binding cycle: nominated to the node, not bound, the volume not there yet
        wait_until(lambda: (cluster.pod("dra", "trainer") or {}).get("status", {}).get("nominatedNodeName") == NAME,
                   60, "kube-scheduler nominates the pod to its node at the start of the binding cycle")
        nominated_after = time.monotonic() - started
        assert not (cluster.pod("dra", "trainer") or {})["spec"].get("nodeName")
        api.patch(NODES, NAME, {"metadata": {"annotations": {"dra-bridge.io/dra-devices": "0"}}})
        create_pod(cluster, "legacy", probe_pod("old-job", gpus=1))

        # the daemon keeps the GPU for the incoming pod past its grace, while VolumeBinding still waits
        wait_until(lambda: any("pod dra/trainer" in h and "nominated to this node" in h for h in gpu_holders(cluster)),
                   30, "the split status shows the GPU kept for the pod nominated to this node")
        time.sleep(GRACE_S + 2)
        assert (allocatable(cluster), published(cluster)) == (0, 1), "the GPU left DRA during the binding"
        assert not (cluster.pod("dra", "trainer") or {})["spec"].get("nodeName")
        assert not any(p.volume for p in provisioner.provisioned.values()), "the volume came too soon for this test"
        pending = [p for p in split_status(cluster).pending if p.device == "gpu-0"]
        assert pending and pending[0].phase == "held", pending
        # (read after the grace, not at the nomination: on 1.36+ the allocation lands a moment after the pod is
        # nominated, and the daemon's once-a-second status may first show the claim not allocated yet)
        holders = gpu_holders(cluster)
        claim_now = pod_claim(cluster)
        if line == "1.35":  # PreBind in order: VolumeBinding first, the claim not allocated yet
            assert any("its claim not allocated yet" in h for h in holders), holders
            assert claim_now is None or not (claim_now.get("status") or {}).get("allocation"), claim_now
        else:  # 1.36+: DynamicResources' PreBind ran alongside VolumeBinding's and wrote the allocation
            assert claim_now is not None and (claim_now.get("status") or {}).get("allocation"), claim_now
            # The daemon reads a nominated pod's claim again only every held_poll_s (5 s: claims are not watched)
            # and writes its status after that evaluation: the allocation may reach the status after the grace.
            def allocated_shown() -> list[str] | None:
                shown = gpu_holders(cluster)
                return shown if any("DRA claim allocated" in h for h in shown) else None

            holders = wait_until(allocated_shown, 30, "the split status to show the claim allocated")

        # the volume is bound, the pod is bound and runs on the GPU the scheduler chose; the legacy pod waits
        cluster.wait_pod_phase("dra", "trainer", "Running", timeout=120)
        bound_after = time.monotonic() - started
        assert len(probe_log(cluster, "dra", "trainer").gpus) == 1
        record = provisioner.provisioned["dra/data"]
        assert record.node == NAME and record.created_at - record.seen_at >= DELAY_S
        assert phase(cluster, "legacy", "old-job") == "Pending"
        assert not events(cluster, "dra", "trainer", "DRAClaimStuck")
        assert not events(cluster, "dra", "trainer", "FailedPrepareDynamicResources")
        assert not node_status(cluster).get("stuck")

        # the DRA pod ends: the move finishes and the legacy pod gets the GPU
        api.delete(PODS, "trainer", "dra")
        cluster.wait_pod_phase("dra", "trainer", "Gone", timeout=120)
        cluster.wait_pod_phase("legacy", "old-job", "Running", timeout=120)
        assert len(probe_log(cluster, "legacy", "old-job").gpus) == 1
        wait_until(lambda: (allocatable(cluster), published(cluster)) == (1, 0), 60, "the GPU on legacy")
    print(f"{line}: nominated after {nominated_after:.1f}s, bound and running after {bound_after:.1f}s "
          f"(volume {DELAY_S:.0f}s after the scheduler selected the node); the GPU's holders meanwhile: {holders}")
    assert watch.samples.count > 0
    assert watch.samples.clean, watch.samples.describe()
    api.delete(PODS, "old-job", "legacy")
    cluster.wait_pod_phase("legacy", "old-job", "Gone", timeout=120)
    api.delete(PVCS, "data", "dra")
    api.delete(PVS, record.volume)


def node_status(cluster: SandboxCluster) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "bridge", "node", "status", NAME, "--kubeconfig", str(cluster.kubeconfig),
                        "-o", "json"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout)["status"] or {})
