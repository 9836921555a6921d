"""The scheduler stand-in against kube-scheduler (v1.37.2; any line with BRIDGE_REAL_LINES): the same refusals, word
for word.

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
  ErrFailedAllocationOnNode);
* a DRA pod asking one device of that driver: the allocator takes none from a pool being updated;
* a DRA pod asking one device of a driver whose only pool on n1 is invalid (two slices name the same device).
The last three meet every pool on n1, whatever its driver: the All request is refused for the first bad pool (the
invalid one), and both one-device pods get "invalid resource pools were encountered" (kube-scheduler says the
same on v1.37.2 and v1.38.0-beta.0).

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
    "dra-one-updating": lambda: dra_gpu_pod("dra-one-updating", NS, template="one-updating"),
    "dra-one-invalid": lambda: dra_gpu_pod("dra-one-invalid", NS, template="one-invalid"),
}
UPDATING = "updating.example.com"  # a driver with a pool of two slices on n1, one of them published
INVALID = "invalid.example.com"  # a driver whose pool on n1 has two slices that both name dev-0


def _refusal(cluster: SandboxCluster, name: str) -> str | None:
    conditions = ((cluster.pod(NS, name) or {}).get("status") or {}).get("conditions") or []
    found = next((f'{c.get("reason")}: {c.get("message")}' for c in conditions
                  if c.get("type") == "PodScheduled" and c.get("reason") in ("Unschedulable", "SchedulerError")), None)
    return found and re.sub(rf"(claim {NS}/[-a-z0-9]+-)[a-z0-9]{{5}}\b", r"\1<suffix>", found)  # generated names


def _odd_pools(cluster: SandboxCluster) -> None:
    """DeviceClasses of the UPDATING and INVALID drivers, their pools on n1 (UPDATING: the first of two slices;
    INVALID: two slices naming the same device) and templates asking all of UPDATING's devices, or one device of
    either driver."""
    api, rapi = cluster.api, cluster.api.resource_api()
    version = f"resource.k8s.io/{rapi.version}"

    def template(name: str, driver: str, mode: str) -> None:
        api.create(rapi.claim_templates, {
            "apiVersion": version, "kind": "ResourceClaimTemplate", "metadata": {"name": name, "namespace": NS},
            "spec": {"spec": {"devices": {"requests": [{"name": "dev", "exactly": {
                "deviceClassName": driver, "allocationMode": mode}}]}}}}, NS)

    for driver, slices in ((UPDATING, (("updating", "dev-0"),)), (INVALID, (("invalid-a", "dev-0"),
                                                                               ("invalid-b", "dev-0")))):
        only = [{"cel": {"expression": f'device.driver == "{driver}"'}}]
        api.create(rapi.device_classes, {"apiVersion": version, "kind": "DeviceClass", "metadata": {"name": driver},
                                         "spec": {"selectors": only}})
        for name, device in slices:
            api.create(rapi.slices, {"apiVersion": version, "kind": "ResourceSlice",
                                     "metadata": {"name": f"{NODE}-{name}"},
                                     "spec": {"driver": driver, "nodeName": NODE, "devices": [{"name": device}],
                                              "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 2}}})
    template("all-updating", UPDATING, "All")
    template("one-updating", UPDATING, "ExactCount")
    template("one-invalid", INVALID, "ExactCount")


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
    _odd_pools(cluster)
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
