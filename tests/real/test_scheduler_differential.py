"""The scheduler stand-in against kube-scheduler v1.37.2: the same refusals, word for word.

One scenario runs twice, on the API emulator with the scheduler and claim-controller stand-ins, and on a real
control plane (kube-apiserver, kube-scheduler, kube-controller-manager v1.37.2); both with kubelet simulators and
the real `bridge node` on two nodes: `n1` with 2 GPUs, one per side, and `n2` with 1 legacy GPU and a NoSchedule
taint no pod tolerates. Two pods take n1's GPUs (one per API), then pods that cannot fit arrive, each refused for
another reason on n1 and for the taint on n2; the message each scheduler writes into the pod's PodScheduled
condition (reason Unschedulable) must be the same:

* a legacy pod asking 2 GPUs where n1 has 1 (unresolvable: preemption "not helpful");
* a legacy pod asking 1 GPU, taken by a pod of the same priority (resolvable, but "No preemption victims");
* a DRA pod when the one DRA GPU is allocated ("cannot allocate all claims");
* a DRA pod whose CEL selector matches no device;
* a pod whose nodeSelector matches no node;
* a DRA pod asking all devices of a driver whose pool on n1 is being updated (one of its two slices published):
  through 1.37 an error for the pod (reason SchedulerError), from 1.38 n1's reason (the allocator's
  ErrFailedAllocationOnNode).

A difference fails with both texts side by side: fix the stand-in (`bridge/sandbox/scheduler/cycle.py`), the real
one is right. About 40 s.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from bridge.kube import NODES, PODS
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from tests.polling import wait_until
from tests.real.conftest import CONTROL_PLANE, REAL_LINE, require_binaries
from tests.sandbox_cluster import (
    GPU_CLASS,
    create_gpu_template,
    create_pod_namespaces,
    dra_gpu_pod,
    legacy_gpu_pod,
    spec_for_tests,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

NODE, TAINTED = "n1", "n2"
NS = "team"
Obj = dict[str, Any]


def _two_gpus(pod: Obj) -> Obj:
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    return pod


def _nowhere(pod: Obj) -> Obj:
    pod["spec"]["nodeSelector"] = {"pool": "does-not-exist"}
    return pod


REFUSED: dict[str, Callable[[], Obj]] = {
    "legacy-two": lambda: _two_gpus(legacy_gpu_pod("legacy-two", NS)),
    "legacy-taken": lambda: legacy_gpu_pod("legacy-taken", NS),
    "dra-taken": lambda: dra_gpu_pod("dra-taken", NS),
    "dra-b200": lambda: dra_gpu_pod("dra-b200", NS, template="b200"),
    "nowhere": lambda: _nowhere(legacy_gpu_pod("nowhere", NS)),
    "dra-all-updating": lambda: dra_gpu_pod("dra-all-updating", NS, template="all-updating"),
}
UPDATING = "updating.example.com"  # a driver with a pool of two slices on n1, one of them published


def _refusal(cluster: SandboxCluster, name: str) -> str | None:
    conditions = ((cluster.pod(NS, name) or {}).get("status") or {}).get("conditions") or []
    found = next((f'{c.get("reason")}: {c.get("message")}' for c in conditions
                  if c.get("type") == "PodScheduled" and c.get("reason") in ("Unschedulable", "SchedulerError")), None)
    return found and re.sub(rf"(claim {NS}/[-a-z0-9]+-)[a-z0-9]{{5}}\b", r"\1<suffix>", found)  # generated names


def _updating_pool(cluster: SandboxCluster) -> None:
    """A DeviceClass of the UPDATING driver, the first of its pool's two slices on n1, and a template asking all."""
    api, rapi = cluster.api, cluster.api.resource_api()
    version = f"resource.k8s.io/{rapi.version}"
    only_updating = [{"cel": {"expression": f'device.driver == "{UPDATING}"'}}]
    api.create(rapi.device_classes, {"apiVersion": version, "kind": "DeviceClass", "metadata": {"name": UPDATING},
                                     "spec": {"selectors": only_updating}})
    api.create(rapi.slices, {"apiVersion": version, "kind": "ResourceSlice", "metadata": {"name": f"{NODE}-updating"},
                             "spec": {"driver": UPDATING, "nodeName": NODE, "devices": [{"name": "dev-0"}],
                                      "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 2}}})
    api.create(rapi.claim_templates, {
        "apiVersion": version, "kind": "ResourceClaimTemplate", "metadata": {"name": "all-updating", "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [{"name": "all", "exactly": {
            "deviceClassName": UPDATING, "allocationMode": "All"}}]}}}}, NS)


def _run(cluster: SandboxCluster) -> dict[str, str]:
    api = cluster.api
    cluster.wait_daemons_settled(90)
    api.patch(NODES, TAINTED, {"spec": {"taints": [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]}})
    create_pod_namespaces(cluster, NS)
    create_gpu_template(api, NS)
    rapi = api.resource_api()
    api.create(rapi.claim_templates, {
        "apiVersion": f"resource.k8s.io/{rapi.version}", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "b200", "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": GPU_CLASS,
            "selectors": [{"cel": {"expression": f'device.attributes["{GPU_CLASS}"].productName == "B200"'}}]}}]}}}},
        NS)
    _updating_pool(cluster)
    for pod in (legacy_gpu_pod("holder-legacy", NS), dra_gpu_pod("holder-dra", NS)):
        api.create(PODS, pod, NS)
    for name in ("holder-legacy", "holder-dra"):
        cluster.wait_pod_phase(NS, name, "Running", 90)
    for make in REFUSED.values():
        api.create(PODS, make(), NS)
    return {name: wait_until(lambda: _refusal(cluster, name), 90, f"{name} refused") for name in REFUSED}


def test_the_stand_in_refuses_each_pod_in_the_real_schedulers_words() -> None:
    require_binaries(REAL_LINE, CONTROL_PLANE)
    nodes = (NodeSpec(NODE, "2xH100-80GB", split="1"), NodeSpec(TAINTED, "1xH100-80GB", split="0"))
    with SandboxCluster(spec_for_tests(nodes, version=REAL_LINE, bridge=True)) as emulated:
        stand_in = _run(emulated)
    with SandboxCluster(spec_for_tests(nodes, backend="real", version=REAL_LINE, bridge=True)) as real:
        kube_scheduler = _run(real)
    differences = {name: (stand_in[name], kube_scheduler[name]) for name in REFUSED
                   if stand_in[name] != kube_scheduler[name]}
    assert not differences, "\n".join(f"{name}:\n  stand-in:       {ours}\n  kube-scheduler: {theirs}"
                                      for name, (ours, theirs) in differences.items())
