"""The product's story end to end on a sandbox cluster (issue 10, "What it must show"): 2 nodes x 8 GPUs with real
`bridge node`s at split 4 serve legacy and DRA pods side by side, no GPU is held twice (PodResources and the
claims agree), an unsatisfiable claim stays Pending with FailedScheduling, a deleted DRA pod frees its device; and on
1.37 legacy pods and extended-resource pods (scheduler-made claims) share a node.

The scheduler and claim-controller stand-ins (`bridge.sandbox.scheduler`, `bridge.sandbox.claimcontroller`) place
the pods and allocate the claims; everything else is the real bridge.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bridge.kube import EVENTS, NAMESPACES, PODS, KubeAPI
from bridge.sandbox.cluster import SandboxCluster
from bridge.sandbox.cluster.inspect import holders, shared
from tests.polling import wait_until
from tests.sandbox_cluster import spec_for_tests

CLASS = "gpu.dra-bridge.io"
H100 = "NVIDIA H100 80GB HBM3"


def namespace(api: KubeAPI, name: str) -> None:
    api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def legacy_pod(name: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "legacy"},
            "spec": {"containers": [{"name": "main", "image": "cuda:12",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def template(api: KubeAPI, name: str, selector: str | None) -> None:
    rapi = api.resource_api()
    exactly: dict[str, Any] = {"deviceClassName": CLASS, "count": 1}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    api.create(rapi.claim_templates, {
        "apiVersion": f"resource.k8s.io/{rapi.version}", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "dra"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}}, "dra")


def dra_pod(name: str, template_name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "dra"},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template_name}],
                     "containers": [{"name": "main", "image": "cuda:12", "resources": {"claims": [{"name": "gpu"}]}}]}}


@pytest.fixture(scope="module")
def cluster() -> Iterator[SandboxCluster]:
    with SandboxCluster(spec_for_tests(2, "8xH100-80GB", version="1.36", bridge=True, split="4")) as c:
        c.wait_daemons_settled(60)
        namespace(c.api, "legacy")
        namespace(c.api, "dra")
        yield c


def test_legacy_and_dra_pods_run_side_by_side_and_no_gpu_is_held_twice(cluster: SandboxCluster) -> None:
    api = cluster.api
    for i, gpus in enumerate([1, 2, 1, 2, 1, 1]):  # 8 legacy GPUs: all of both nodes' legacy sides
        api.create(PODS, legacy_pod(f"legacy-{i}", gpus), "legacy")
    template(api, "any-gpu", None)
    template(api, "h100", f'device.attributes["{CLASS}"].productName == "{H100}"')
    template(api, "big-memory", f'device.capacity["{CLASS}"].memory.compareTo(quantity("79Gi")) >= 0')
    for i, name in enumerate(["any-gpu", "any-gpu", "h100", "h100", "big-memory", "big-memory"]):
        api.create(PODS, dra_pod(f"dra-{i}", name), "dra")
    for i in range(6):
        cluster.wait_pod_phase("legacy", f"legacy-{i}", "Running", 90)
        cluster.wait_pod_phase("dra", f"dra-{i}", "Running", 90)
    held = holders(cluster)
    assert shared(cluster) == {}
    legacy = {k for k, v in held.items() if any(h.startswith("legacy ") for h in v)}
    claimed = {k for k, v in held.items() if any(h.startswith("claim ") for h in v)}
    assert len(legacy) == 8 and len(claimed) == 6 and not legacy & claimed


def test_a_claim_that_matches_no_device_stays_pending_with_failed_scheduling(cluster: SandboxCluster) -> None:
    api = cluster.api
    template(api, "b200", f'device.attributes["{CLASS}"].productName == "NVIDIA B200"')
    api.create(PODS, dra_pod("never", "b200"), "dra")
    wait_until(lambda: [e for e in api.list(EVENTS, "dra")["items"]
                        if e.get("reason") == "FailedScheduling" and e["involvedObject"]["name"] == "never"], 60,
               "a FailedScheduling event")
    pod = api.get(PODS, "never", "dra")
    assert not pod["spec"].get("nodeName") and (pod.get("status") or {}).get("phase") == "Pending"


def test_deleting_a_dra_pod_unprepares_and_deletes_its_claim(cluster: SandboxCluster) -> None:
    api = cluster.api
    template(api, "solo", None)
    api.create(PODS, dra_pod("short-lived", "solo"), "dra")
    pod = cluster.wait_pod_phase("dra", "short-lived", "Running", 90)
    (status,) = pod["status"]["resourceClaimStatuses"]
    claim_name = status["resourceClaimName"]
    rapi = api.resource_api()
    uid = api.get(rapi.claims, claim_name, "dra")["metadata"]["uid"]
    node = cluster.node(pod["spec"]["nodeName"])
    assert node.kubelet.dra is not None and node.kubelet.dra.claim(uid) is not None
    api.delete(PODS, "short-lived", "dra")
    cluster.wait_pod_phase("dra", "short-lived", "Gone", 60)
    wait_until(lambda: node.kubelet.dra.claim(uid) is None, 30, "the claim to be unprepared")  # type: ignore[union-attr]
    wait_until(lambda: claim_name not in {c["metadata"]["name"] for c in api.list(rapi.claims, "dra")["items"]},
               60, "the generated claim to be deleted with its pod")


def test_on_1_37_legacy_pods_and_extended_resource_pods_share_the_nodes_and_get_scheduler_made_claims() -> None:
    """The same story on 1.37 with the extended-resource path (KEP-5004): two nodes at split 4, six legacy pods fill
    the device plugins' 8 GPUs while six DRA pods - four asking `deviceclass.resource.kubernetes.io/<class>`, which
    get claims the scheduler makes itself, and two with ordinary claims - take 7 of the 8 DRA GPUs; no GPU is held
    twice."""
    ext = f"deviceclass.resource.kubernetes.io/{CLASS}"
    legacy_gpus = [2, 1, 1, 2, 1, 1]
    ext_gpus = [2, 1, 1, 1]
    with SandboxCluster(spec_for_tests(2, "8xH100-80GB", version="1.37", bridge=True, split="4")) as c:
        c.wait_daemons_settled(60)
        namespace(c.api, "legacy")
        namespace(c.api, "dra")
        for i, gpus in enumerate(legacy_gpus):
            c.api.create(PODS, legacy_pod(f"legacy-{i}", gpus), "legacy")
        for i, gpus in enumerate(ext_gpus):
            c.api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"ext-{i}", "namespace": "dra"},
                                "spec": {"containers": [{"name": "main", "image": "cuda:12",
                                                         "resources": {"limits": {ext: str(gpus)}}}]}}, "dra")
        template(c.api, "any-gpu", None)
        for i in range(2):
            c.api.create(PODS, dra_pod(f"claimed-{i}", "any-gpu"), "dra")
        nodes = set()
        for i in range(len(legacy_gpus)):
            nodes.add(c.wait_pod_phase("legacy", f"legacy-{i}", "Running", 90)["spec"]["nodeName"])
        extended: dict[str, int] = {}
        for i in range(len(ext_gpus)):
            pod = c.wait_pod_phase("dra", f"ext-{i}", "Running", 90)
            nodes.add(pod["spec"]["nodeName"])
            claim_name = pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
            claim = c.api.get(c.api.resource_api().claims, claim_name, "dra")
            results = claim["status"]["allocation"]["devices"]["results"]
            assert {r["driver"] for r in results} == {CLASS}
            extended[f"ext-{i}"] = len(results)
        for i in range(2):
            c.wait_pod_phase("dra", f"claimed-{i}", "Running", 90)
        assert extended == {f"ext-{i}": n for i, n in enumerate(ext_gpus)}
        assert len(nodes) == 2, "both nodes run pods"
        held = holders(c)
        assert shared(c) == {}
        legacy = {k for k, v in held.items() if any(h.startswith("legacy ") for h in v)}
        claimed = {k for k, v in held.items() if any(h.startswith("claim ") for h in v)}
        assert len(legacy) == sum(legacy_gpus) and len(claimed) == sum(ext_gpus) + 2 and not legacy & claimed
