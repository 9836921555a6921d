"""Priority preemption of a legacy GPU pod, as kube-scheduler v1.37.2 does it, with the controller running: the
preemptor waits for its victim's GPU, and no GPU moves for it.

One node `n1` with 2 GPUs, one per side; the real `bridge node` and `bridge controller` (a decision every 0.5 s).
`low` (priority 0) holds the legacy GPU and takes 6 s to stop after SIGTERM; `high` (PriorityClass value 1000) asks
for one legacy GPU. kube-scheduler preempts: `high` is nominated to n1 (`status.nominatedNodeName`) with "preemption:
found a potential placement for pod on node n1, preempting 1 victims", `low` gets a DisruptionTarget condition, a
`Preempted` event and a graceful delete; `high` binds once `low` is gone.

Before the controller knew nominations (bridge/controller/demand.py), it took the nominated `high` for pending
demand and moved n1's free DRA GPU to the legacy side 1.7 s after the preemption: `high` ran on it, the victim died
anyway, and its GPU then sat idle on the legacy side while the DRA side had none. Here the split must not change
from the preemption to `high` running, and a DRA pod created afterwards runs on the DRA GPU that stayed.

The scenario runs on the real control plane (kube-apiserver, kube-scheduler, kube-controller-manager v1.37.2) and on
the API emulator with the scheduler stand-in, both with kubelet simulators; both must show exactly `PREEMPTED`.
About 40 s.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from bridge.kube import EVENTS, NODES, PODS, PRIORITY_CLASSES
from bridge.kube.watch import Informer
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from tests.polling import wait_until
from tests.real.conftest import CONTROL_PLANE, REAL_LINE, require_binaries
from tests.sandbox_cluster import (
    create_gpu_template,
    create_pod_namespaces,
    dra_gpu_pod,
    legacy_gpu_pod,
    spec_for_tests,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

NODE, NS = "n1", "team"
STOP_SECONDS = 6
Obj = dict[str, Any]


@dataclass
class Seen:
    message: str = ""  # high's PodScheduled message while it waited
    nominated: str = ""  # high's status.nominatedNodeName while it waited
    victim_condition: tuple[str, str, str] = ("", "", "")  # low's DisruptionTarget (status, reason, message)
    victim_conditions: tuple[str, ...] = ()  # the condition types of low's last version, in order
    victim_event: str = ""  # low's Preempted event, the preemptor's UID as <uid>
    splits: tuple[tuple[str, tuple[str, ...]], ...] = ()  # each distinct (allocatable, DRA devices) seen
    both_running: bool = False  # low and high Running at once (each holds a GPU)
    dra_pod_ran: bool = False


def _split(cluster: SandboxCluster) -> tuple[str, tuple[str, ...]]:
    node = cluster.api.get(NODES, NODE)
    status = json.loads((node["metadata"].get("annotations") or {}).get("dra-bridge.io/split-status") or "{}")
    return ((node.get("status") or {}).get("allocatable", {}).get("nvidia.com/gpu", ""),
            tuple(d["name"] for d in status.get("devices", ()) if d.get("side") == "dra"))


def _phase(cluster: SandboxCluster, name: str) -> str:
    return ((cluster.pod(NS, name) or {}).get("status") or {}).get("phase", "")


def _run(cluster: SandboxCluster) -> Seen:
    api = cluster.api
    cluster.wait_daemons_settled(90)
    create_pod_namespaces(cluster, NS)
    create_gpu_template(api, NS)
    api.create(PRIORITY_CLASSES, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                  "metadata": {"name": "high"}, "value": 1000})
    api.create(PODS, legacy_gpu_pod("low", NS, {"sandbox.dra-bridge.io/stop-seconds": str(STOP_SECONDS)}), NS)
    cluster.wait_pod_phase(NS, "low", "Running", 90)
    wait_until(lambda: _split(cluster) == ("1", ("gpu-1",)), 30, "1 GPU per side")
    seen = Seen()
    splits = [_split(cluster)]
    victim: list[Obj] = []  # every version of `low` from here on
    stop = threading.Event()
    Informer(api, PODS, namespace=NS, field_selector="metadata.name=low",
             on_event=lambda ev: victim.append(ev.object)).start(stop)
    high = legacy_gpu_pod("high", NS)
    high["spec"]["priorityClassName"] = "high"
    uid = api.create(PODS, high, NS)["metadata"]["uid"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pod = cluster.pod(NS, "high") or {}
        status = pod.get("status") or {}
        if status.get("nominatedNodeName"):
            seen.nominated = status["nominatedNodeName"]
            seen.message = next((c.get("message", "") for c in status.get("conditions") or ()
                                 if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"), "")
        low = cluster.pod(NS, "low")
        seen.both_running |= _phase(cluster, "low") == "Running" and status.get("phase") == "Running"
        if _split(cluster) != splits[-1]:
            splits.append(_split(cluster))
        if status.get("phase") == "Running" and low is None:
            break
        time.sleep(0.1)
    stop.set()
    seen.splits = tuple(splits)
    # The victim's conditions as its last version (the one deleted) has them: the kubelet's writes must keep the
    # scheduler's.
    conditions = (victim[-1].get("status") or {}).get("conditions") or () if victim else ()
    seen.victim_conditions = tuple(c.get("type", "") for c in conditions)
    seen.victim_condition = next(((c.get("status", ""), c.get("reason", ""), c.get("message", ""))
                                  for c in conditions if c.get("type") == "DisruptionTarget"), ("", "", ""))
    seen.victim_event = next((e.get("message", "").replace(uid, "<uid>") for e in api.list(EVENTS, NS)["items"]
                              if e.get("reason") == "Preempted" and e["involvedObject"].get("name") == "low"), "")
    api.create(PODS, dra_gpu_pod("after", NS), NS)
    seen.dra_pod_ran = bool(cluster.wait_pod_phase(NS, "after", "Running", 60))
    return seen


PREEMPTED = Seen(
    message="0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: found a potential placement for pod "
            "on node n1, preempting 1 victims",
    nominated=NODE,
    victim_condition=("True", "PreemptionByScheduler",
                      "default-scheduler: preempting to accommodate a higher priority pod"),
    # first: the kubelet keeps the conditions it does not own before its own (status_manager.go `mergePodStatus`)
    victim_conditions=("DisruptionTarget", "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                       "PodScheduled"),
    victim_event="Preempted by pod <uid> on node n1",
    splits=(("1", ("gpu-1",)),),  # never changed: no GPU moved for the preemptor
    both_running=False,
    dra_pod_ran=True,
)


def _cluster(backend: str) -> SandboxCluster:
    nodes = (NodeSpec(NODE, "2xH100-80GB", split="1"),)
    return SandboxCluster(spec_for_tests(nodes, backend=backend, version=REAL_LINE, bridge=True, controller=True))


def test_kube_scheduler_preempts_for_a_legacy_pod_and_the_controller_moves_no_gpu_for_it() -> None:
    require_binaries(REAL_LINE, CONTROL_PLANE)
    with _cluster("real") as real:
        assert _run(real) == PREEMPTED


def test_the_stand_ins_preempt_as_kube_scheduler_does_and_the_controller_moves_no_gpu_either() -> None:
    # The same scenario on the API emulator with its Priority admission and the scheduler stand-in's DefaultPreemption
    # (bridge/sandbox/scheduler/preemption.py): what a user sees must equal what kube-scheduler v1.37.2 showed above.
    with _cluster("standin") as emulated:
        assert _run(emulated) == PREEMPTED
