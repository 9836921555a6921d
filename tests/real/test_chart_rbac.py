"""The chart's RBAC and ValidatingAdmissionPolicies, enforced by the real kube-apiserver: every bridge component runs
with the token of the ServiceAccount the chart gives it and everything it does is allowed (no 403 anywhere in its
log), while the writes a compromised component could forge are refused by the real admission chain (issue 27
item 5: a node daemon on another node's Node or ResourceSlice, its own Node's ownerReferences, finalizers or labels,
a slice naming another node's pool; the controller beyond its two annotations; the webhook outside its rights)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.kube import connect
from bridge.kube.api import NODES, PODS, KubeAPI
from bridge.kube.errors import Forbidden, Invalid
from bridge.sandbox.cluster import SandboxCluster
from tests.real.conftest import CONTROL_PLANE, REAL_LINE, require_binaries
from tests.real.realnodes import claim_template, ensure_namespace
from tests.sandbox_cluster import spec_for_tests

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

CHART = Path(__file__).resolve().parents[2] / "charts" / "dra-bridge"
DRIVER = "gpu.dra-bridge.io"
Refused = (Forbidden, Invalid)
REFUSAL = re.compile(r"(?<![\d.:])403(?![\dZ])|[Ff]orbidden")  # a 403 in a log line, not in a timestamp  # a policy's Deny is 403 (reason Forbidden), its reason=Invalid 422


@pytest.fixture(scope="module")
def cluster() -> Iterator[SandboxCluster]:
    require_binaries(REAL_LINE, CONTROL_PLANE + ("kubectl", "helm"))
    spec = spec_for_tests(2, backend="real", version=REAL_LINE, bridge=True, webhook=True, controller=True,
                          split="2", chart_rbac=str(CHART))
    with SandboxCluster(spec).start(timeout=300) as c:
        yield c


def as_component(cluster: SandboxCluster, component: str, node: str | None = None) -> KubeAPI:
    assert cluster.credentials is not None
    return connect(str(cluster.credentials.token_kubeconfig(component, node=node)))


def legacy_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def test_every_component_does_its_work_with_exactly_the_charts_rbac(cluster: SandboxCluster) -> None:
    ensure_namespace(cluster, "legacy")
    ensure_namespace(cluster, "team-a", {"dra-bridge.io/mode": "dra"})
    cluster.api.create(PODS, legacy_pod("old"), "legacy")
    translated = cluster.api.create(PODS, legacy_pod("new"), "team-a")
    assert "nvidia.com/gpu" not in translated["spec"]["containers"][0]["resources"]["limits"]
    cluster.wait_pod_phase("legacy", "old", "Running", timeout=120)
    cluster.wait_pod_phase("team-a", "new", "Running", timeout=120)
    cluster.wait_daemons_settled(timeout=60)
    time.sleep(2)  # a controller decision and a daemon status write after the pods
    logs = {f"node daemon {n.name}": n.daemon.log_path for n in cluster.nodes if n.daemon is not None}
    assert cluster.webhook is not None and cluster.webhook.process is not None
    assert cluster.controller is not None and cluster.controller.process is not None
    logs["webhook"] = cluster.webhook.process.log_path
    logs["controller"] = cluster.controller.process.log_path
    refused = {who: [line for line in path.read_text().splitlines() if REFUSAL.search(line)]
               for who, path in logs.items()}
    assert {who: lines[:3] for who, lines in refused.items() if lines} == {}


def test_a_node_daemon_may_write_its_own_nodes_status_annotation_only(cluster: SandboxCluster) -> None:
    daemon = as_component(cluster, "node", node="node-0")
    own = cluster.api.get(NODES, "node-0")["metadata"]["annotations"]["dra-bridge.io/split-status"]
    daemon.patch(NODES, "node-0", {"metadata": {"annotations": {"dra-bridge.io/split-status": own}}})
    forged = {
        "another node's status": ("node-1", {"metadata": {"annotations": {"dra-bridge.io/split-status": own}}}),
        "its own node's split": ("node-0", {"metadata": {"annotations": {"dra-bridge.io/dra-devices": "all"}}}),
        "its own node's labels": ("node-0", {"metadata": {"labels": {"forged": "true"}}}),
        "a finalizer": ("node-0", {"metadata": {"finalizers": ["example.com/hold"]}}),
        "an owner reference": ("node-0", {"metadata": {"ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "00000000-0000-4000-8000-000000000000"}]}}),
        "its own node's spec": ("node-0", {"spec": {"unschedulable": True}}),
    }
    for what, (node, patch) in forged.items():
        with pytest.raises(Refused) as err:
            daemon.patch(NODES, node, patch)
        assert "dra-bridge" in str(err.value), f"{what}: refused by RBAC, not our policy? {err.value}"


def _slice(node: str, pool: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"forged-{node}-{pool}"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": pool, "generation": 1,
                                                                  "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-99"}]}}


def test_a_node_daemon_may_publish_only_its_own_nodes_pool(cluster: SandboxCluster) -> None:
    daemon = as_component(cluster, "node", node="node-0")
    slices = daemon.resource_api().slices
    for node, pool in (("node-1", "node-1"), ("node-0", "node-1")):
        with pytest.raises(Refused) as err:
            daemon.create(slices, _slice(node, pool))
        assert "node-1" in str(err.value)
    other = cluster.api.list(slices, field_selector="spec.nodeName=node-1")["items"][0]
    with pytest.raises(Refused):
        daemon.delete(slices, other["metadata"]["name"])


def test_the_controller_may_set_the_split_but_nothing_else_on_a_node(cluster: SandboxCluster) -> None:
    controller = as_component(cluster, "controller")
    split = cluster.api.get(NODES, "node-0")["metadata"].get("annotations", {}).get("dra-bridge.io/dra-devices", "2")
    controller.patch(NODES, "node-0", {"metadata": {"annotations": {"dra-bridge.io/dra-devices": split}}})
    for patch in ({"metadata": {"finalizers": ["example.com/hold"]}},
                  {"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone",
                                                     "uid": "00000000-0000-4000-8000-000000000000"}]}},
                  {"metadata": {"annotations": {"dra-bridge.io/split-status": "{}"}}},
                  {"metadata": {"labels": {"forged": "true"}}}):
        with pytest.raises(Refused):
            controller.patch(NODES, "node-0", patch)


def test_the_webhook_may_create_claim_templates_but_no_pods_outside_its_dry_run(cluster: SandboxCluster) -> None:
    ensure_namespace(cluster, "team-b")
    webhook = as_component(cluster, "webhook")
    webhook.create(webhook.resource_api().claim_templates, claim_template("made-by-webhook"), "team-b")
    with pytest.raises(Forbidden):
        webhook.create(PODS, legacy_pod("forged"), "team-b")
    with pytest.raises(Forbidden):
        webhook.delete(webhook.resource_api().claim_templates, "made-by-webhook", "team-b")
