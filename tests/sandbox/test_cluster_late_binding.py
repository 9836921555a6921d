"""A binding that lands late (issue 24, section 1): the scheduler decides a pod's GPU in its scheduling cycle but
writes the claim's allocation only in PreBind, which VolumeBinding may hold for minutes. Meanwhile the node's split
asks that GPU for the device plugin. On a sandbox cluster with one node of one GPU, the scheduler stand-in's slow
PreBind (`sandbox.dra-bridge.io/prebind-seconds`) holds the DRA pod's binding cycle while the split moves to legacy
and a legacy pod asks for the GPU.

* 1.35 and 1.37 (the scheduler nominates the pod to its node at the start of the binding cycle): the node daemon
  sees the nominated pod waiting for its allocation (1.35), or its claim allocated at once because from 1.36
  VolumeBinding's and DynamicResources' PreBind run in parallel (1.37), and keeps the GPU on DRA; the DRA pod runs,
  the legacy pod waits, and gets the GPU once the DRA pod is gone. Nothing fails, nothing is held twice, no claim
  is stuck.
* 1.34 (no such signal) with a short `--split-grace` (what the default avoids, `bridge.node.bindinggrace`): the GPU
  goes to the device plugin and the legacy pod takes it; the allocation lands after that. The claim's pod is told
  (Event) which legacy pod holds its GPU and what to do, `bridge node status` and `migrate-report` show the stuck
  claim, the GPU never reaches both pods, and once the legacy pod is deleted the DRA pod runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bridge.kube import EVENTS, NODES, PODS, KubeAPI
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from bridge.sandbox.cluster.inspect import SideWatch
from bridge.sandbox.scheduler import Scheduler
from bridge.sandbox.scheduler.scheduler import PREBIND_SECONDS_ANNOTATION
from tests.polling import wait_until
from tests.sandbox_cluster import create_gpu_template, create_namespaces, dra_gpu_pod, legacy_gpu_pod

ROOT = Path(__file__).resolve().parents[2]
NODE = "n1"


def _setup(api: KubeAPI) -> None:
    create_namespaces(api, "dra", "legacy")
    create_gpu_template(api, "dra")


def _dra_pod(prebind_seconds: float) -> dict[str, Any]:
    return dra_gpu_pod("trainer", "dra", {PREBIND_SECONDS_ANNOTATION: str(prebind_seconds)})


def _legacy_pod() -> dict[str, Any]:
    return legacy_gpu_pod("old-job", "legacy")


def _scheduler(cluster: SandboxCluster) -> Scheduler:
    return next(c for c in cluster.controllers if isinstance(c, Scheduler))


def _set_split(api: KubeAPI, split: str) -> None:
    api.patch(NODES, NODE, {"metadata": {"annotations": {"dra-bridge.io/dra-devices": split}}})


def _events(api: KubeAPI, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in api.list(EVENTS, namespace)["items"]
            if e["involvedObject"].get("name") == name and e.get("reason") == reason]


def _claim_of(cluster: SandboxCluster, namespace: str, name: str) -> dict[str, Any]:
    statuses = wait_until(lambda: ((cluster.pod(namespace, name) or {}).get("status") or {}).get(
        "resourceClaimStatuses"), 30, "the pod's claim")
    return cluster.api.get(cluster.api.resource_api().claims, statuses[0]["resourceClaimName"], namespace)


def _phase(cluster: SandboxCluster, namespace: str, name: str) -> str | None:
    pod = cluster.pod(namespace, name)
    return None if pod is None else (pod.get("status") or {}).get("phase")


class _BothRunning:
    """Samples whether the two pods ever run at once (one GPU: they would share it)."""

    def __init__(self, check: Callable[[], bool]) -> None:
        self.check, self.seen, self._stop = check, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.seen += self.check()

    def __enter__(self) -> _BothRunning:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.mark.parametrize("version", ["1.35", "1.37"])
def test_with_the_nomination_signal_a_slow_prebind_keeps_the_gpu_on_dra(sandbox_cluster: Any, version: str) -> None:
    """1.35: the claim is not allocated while the pod waits (an incoming pod holds every DRA GPU); 1.37: PreBind
    plugins run in parallel, the claim is allocated at once and holds its GPU through the nominated pod."""
    cluster: SandboxCluster = sandbox_cluster((NodeSpec(NODE, "1xH100-80GB", split="1"),), version=version,
                                              bridge=True)
    api = cluster.api
    cluster.wait_daemons_settled(60)
    _setup(api)
    with SideWatch(cluster) as watch:
        api.create(PODS, _dra_pod(8), "dra")
        wait_until(lambda: (cluster.pod("dra", "trainer") or {}).get("status", {}).get("nominatedNodeName") == NODE,
                   30, "the scheduler nominates the pod to n1 at the start of its binding cycle")
        assert not (cluster.pod("dra", "trainer") or {})["spec"].get("nodeName")
        _set_split(api, "0")
        api.create(PODS, _legacy_pod(), "legacy")
        def allocated() -> bool:
            return bool((_claim_of(cluster, "dra", "trainer").get("status") or {}).get("allocation"))

        if version == "1.37":
            wait_until(allocated, 5, "the allocation, written beside the PreBind wait")
        else:
            assert not allocated()
        assert not (cluster.pod("dra", "trainer") or {})["spec"].get("nodeName"), "the PreBind ended too soon"
        pod = cluster.wait_pod_phase("dra", "trainer", "Running", 60)
        assert pod["spec"]["nodeName"] == NODE and not pod["status"].get("nominatedNodeName")  # cleared on Bind
        assert _phase(cluster, "legacy", "old-job") == "Pending"
        api.delete(PODS, "trainer", "dra")
        cluster.wait_pod_phase("legacy", "old-job", "Running", 90)
        cluster.wait_daemons_settled(30)
    assert watch.samples.clean, watch.samples.describe()
    assert cluster.prepare_failures() == []
    assert not _events(api, "dra", "trainer", "DRAClaimStuck")
    status = _node_status(cluster)
    assert not status.get("stuck")


def _node_status(cluster: SandboxCluster) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "bridge", "node", "status", NODE, "--kubeconfig", str(cluster.kubeconfig),
                        "-o", "json"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout)["status"] or {})


def test_without_the_signal_a_late_allocation_waits_for_the_legacy_pod_and_says_so(sandbox_cluster: Any) -> None:
    # resync scaled down: the stuck pod's kubelet retries its prepare at the pod worker's resync (60-90 s real)
    cluster: SandboxCluster = sandbox_cluster((NodeSpec(NODE, "1xH100-80GB", split="1"),), version="1.34",
                                              bridge=True, split_grace=0.5, resync_interval=2.0)
    api = cluster.api
    cluster.wait_daemons_settled(60)
    _setup(api)

    def both_running() -> bool:
        return _phase(cluster, "dra", "trainer") == "Running" and _phase(cluster, "legacy", "old-job") == "Running"

    with SideWatch(cluster, allocations=False) as watch, _BothRunning(both_running) as both:
        api.create(PODS, _dra_pod(25), "dra")
        wait_until(lambda: _scheduler(cluster).binding("dra", "trainer") == NODE, 30,
                   "the scheduler decides gpu-0 on n1 and holds the binding in PreBind")
        assert not (cluster.pod("dra", "trainer") or {}).get("status", {}).get("nominatedNodeName")  # 1.34: none
        _set_split(api, "0")
        api.create(PODS, _legacy_pod(), "legacy")
        cluster.wait_pod_phase("legacy", "old-job", "Running", 20)  # the GPU moved and the legacy pod took it
        assert _scheduler(cluster).binding("dra", "trainer") == NODE, "the PreBind ended too soon for this test"

        # the allocation lands: the pod is bound, its prepare refused, the claim stuck behind the legacy pod
        wait_until(lambda: _events(api, "dra", "trainer", "DRAClaimStuck"), 60, "a DRAClaimStuck Event on the pod")
        event = _events(api, "dra", "trainer", "DRAClaimStuck")[0]
        message = event["message"]
        assert event["type"] == "Warning"
        assert "gpu-0" in message and "legacy/old-job" in message, message
        assert "delete it to free gpu-0 now" in message and "pod dra/trainer" in message, message
        assert [e["involvedObject"]["kind"] for e in _events(api, "default", NODE, "DRAClaimStuck")] == ["Node"]
        wait_until(lambda: _events(api, "dra", "trainer", "FailedPrepareDynamicResources"), 30,
                   "the kubelet's prepare refused (an Event on the pod)")
        assert _phase(cluster, "dra", "trainer") == "Pending"

        # The daemon writes its split status after the evaluation that recorded the Events, at most once a second.
        status = wait_until(lambda: (st := _node_status(cluster)).get("stuck") and st, 60,
                            "the stuck claim in the status")
        assert [(s["device"], s["holder"].split(" (")[0]) for s in status["stuck"]] == \
            [("gpu-0", "pod legacy/old-job container main")]
        table = subprocess.run([sys.executable, "-m", "bridge", "node", "status", NODE, "--kubeconfig",
                                str(cluster.kubeconfig)], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert "Claims stuck behind a legacy pod" in table.stdout and "legacy/old-job" in table.stdout, table.stdout
        report = subprocess.run([sys.executable, "-m", "bridge", "migrate-report", "--kubeconfig",
                                 str(cluster.kubeconfig), "-o", "json"], cwd=ROOT, capture_output=True, text=True,
                                timeout=120)
        findings = [f for f in json.loads(report.stdout)["findings"]
                    if f["rule"] == "DRB013" and "legacy/old-job" in f["message"]]
        assert findings and findings[0]["severity"] == "warning", report.stdout[-2000:]

        # the legacy pod ends: the GPU goes back to DRA and the claim's pod runs at its kubelet's next resync
        started = time.monotonic()
        api.delete(PODS, "old-job", "legacy")
        cluster.wait_pod_phase("dra", "trainer", "Running", 60)
        took = time.monotonic() - started
    assert watch.samples.clean, watch.samples.describe()  # no GPU ever in two pods' containers
    assert both.seen == 0
    assert took < 30
    # The pod can start (its prepare takes the GPU back) before the daemon's next status write drops the entry.
    wait_until(lambda: not _node_status(cluster).get("stuck"), 60, "the stuck claim gone from the status")
