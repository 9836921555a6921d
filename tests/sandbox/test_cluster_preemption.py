"""A higher-priority GPU pod preempts the lower-priority one holding the only GPU, as on kube-scheduler v1.37.2.

Observed on a real control plane v1.37.2 (one node, one legacy GPU; `low`, priority 0, running with it; `high`,
PriorityClass `high` = 1000, asking for it): `high` is nominated to the node at once with the condition and a
FailedScheduling Event "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: found a potential
placement for pod on node n1, preempting 1 victims"; `low` gets DisruptionTarget=True (PreemptionByScheduler,
"default-scheduler: preempting to accommodate a higher priority pod"), a plain DELETE (its own grace period) and a
Normal Event "Preempted" ("Preempted by pod <high's uid> on node n1"); `high` binds once `low` is gone and runs.

Here on a sandbox cluster with the stand-ins, the kubelet simulator and the real `bridge node`: the victim takes
`STOP_S` to stop after SIGTERM (`sandbox.dra-bridge.io/stop-seconds`), so the test also sees the window in which
the GPU still belongs to the terminating victim: a lower-priority pod created then does not take the room kept for
the nominated pod, and the preemptor never runs beside its victim. The pods name their PriorityClass only: the API
emulator's Priority admission writes `spec.priority`, as kube-apiserver's does.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from bridge.kube import EVENTS, PODS, PRIORITY_CLASSES, Obj
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from bridge.sandbox.kubelet import STOP_SECONDS_ANNOTATION
from tests.polling import wait_until
from tests.sandbox_cluster import create_namespaces, legacy_gpu_pod

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NODE = "n1"
NS = "team"
STOP_S = 3.0
NOMINATED = ("0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: found a potential placement for "
             "pod on node n1, preempting 1 victims")
KEPT_FOR_HIGH = ("0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are available: 1 No "
                 "preemption victims found for incoming pod.")


def _pod(name: str, priority_class: str | None = None, annotations: dict[str, str] | None = None) -> Obj:
    body = legacy_gpu_pod(name, NS, annotations)
    if priority_class:
        body["spec"]["priorityClassName"] = priority_class
    return body


def _condition(pod: Obj | None, kind: str) -> Obj | None:
    return next((c for c in ((pod or {}).get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def _events(cluster: SandboxCluster, name: str, reason: str) -> list[Obj]:
    return [e for e in cluster.api.list(EVENTS, NS)["items"]
            if e["involvedObject"]["name"] == name and e.get("reason") == reason]


def test_a_higher_priority_pod_preempts_the_gpu_holder_and_runs_once_it_has_stopped(sandbox_cluster: Any) -> None:
    cluster: SandboxCluster = sandbox_cluster((NodeSpec(NODE, "1xH100-80GB", split="0"),), version="1.37",
                                              bridge=True)
    api = cluster.api
    cluster.wait_daemons_settled(60)
    create_namespaces(api, NS)
    api.create(PRIORITY_CLASSES, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                  "metadata": {"name": "high"}, "value": 1000})
    api.create(PODS, _pod("low", annotations={STOP_SECONDS_ANNOTATION: str(STOP_S)}), NS)
    cluster.wait_pod_phase(NS, "low", "Running", 60)

    both, stop = [], threading.Event()

    def sample() -> None:  # one GPU: the preemptor must never run beside its victim
        while not stop.wait(0.1):
            high, low = cluster.pod(NS, "high"), cluster.pod(NS, "low")
            if all(p is not None and (p.get("status") or {}).get("phase") == "Running" for p in (high, low)):
                both.append(time.monotonic())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    created = time.monotonic()
    high = api.create(PODS, _pod("high", "high"), NS)

    nominated = wait_until(lambda: (p := cluster.pod(NS, "high")) and p["status"].get("nominatedNodeName") and p,
                           30, "high nominated")
    assert nominated["status"]["nominatedNodeName"] == NODE
    scheduled = _condition(nominated, "PodScheduled")
    assert scheduled is not None and (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    assert scheduled["message"] == NOMINATED
    (failed,) = wait_until(lambda: _events(cluster, "high", "FailedScheduling"), 10, "high's FailedScheduling")
    assert failed["message"] == NOMINATED and failed["type"] == "Warning"

    victim = wait_until(lambda: (p := cluster.pod(NS, "low")) and _condition(p, "DisruptionTarget") and p, 10,
                        "low's DisruptionTarget")
    target = _condition(victim, "DisruptionTarget")
    assert target is not None
    assert (target["status"], target["reason"], target["message"]) == (
        "True", "PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod")
    (preempted,) = wait_until(lambda: _events(cluster, "low", "Preempted"), 10, "low's Preempted Event")
    assert preempted["type"] == "Normal"
    assert preempted["message"] == f"Preempted by pod {high['metadata']['uid']} on node {NODE}"
    assert preempted["related"]["name"] == "high"
    terminating = wait_until(lambda: (p := cluster.pod(NS, "low")) and p["metadata"].get("deletionTimestamp") and p,
                             10, "low being deleted")
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 30  # a plain DELETE: the pod's own grace

    # While the victim stops, a pod of lower priority finds the GPU kept for the nominated one and evicts nothing.
    api.create(PODS, _pod("late"), NS)
    refused = wait_until(lambda: (c := _condition(cluster.pod(NS, "late"), "PodScheduled")) and c["message"], 10,
                         "late refused")
    assert refused == KEPT_FOR_HIGH
    assert cluster.pod(NS, "low") is not None, f"the victim stopped within {STOP_S} s: the window was missed"
    # Nothing retries the preemptor before its victim is gone (no heartbeat or annotation counts), so it keeps its
    # first answer, as kube-scheduler does; retried, it would say it is not eligible while its victim terminates.
    assert (_condition(cluster.pod(NS, "high"), "PodScheduled") or {}).get("message") == NOMINATED

    cluster.wait_pod_phase(NS, "high", "Running", 60)
    waited = time.monotonic() - created
    stop.set()
    sampler.join(5)
    assert cluster.pod(NS, "low") is None  # stopped, then removed by its kubelet
    bound = cluster.pod(NS, "high") or {}
    assert bound["spec"]["nodeName"] == NODE and not bound["status"].get("nominatedNodeName")  # cleared on binding
    assert not both, f"the preemptor ran while its victim still did ({len(both)} samples)"
    assert waited >= STOP_S - 0.5, f"the preemptor ran {waited:.1f} s after it was created, before its victim stopped"
    late = cluster.pod(NS, "late") or {}
    assert not late["spec"].get("nodeName") and late["status"].get("phase") == "Pending"
    assert _events(cluster, "late", "Preempted") == [] and _events(cluster, "high", "Preempted") == []
    assert [e["message"] for e in _events(cluster, "high", "FailedScheduling")] == [NOMINATED]
    (bound_event,) = _events(cluster, "high", "Scheduled")
    assert bound_event["message"] == f"Successfully assigned {NS}/high to {NODE}"
