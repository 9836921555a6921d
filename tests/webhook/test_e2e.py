"""End to end: the API emulator calls the webhook over real HTTPS (MutatingWebhookConfiguration with url +
caBundle, from examples/webhook), pods are created through the official client, and the namespace flips
legacy -> shadow -> dra -> legacy."""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from bridge.kube import connect
from bridge.kube.api import MUTATING_WEBHOOKS, KubeAPI, ResourceAPI
from bridge.sandbox.apiserver import ApiServer
from bridge.kube.api import NAMESPACES
from bridge.webhook.app import WebhookOptions, build, live_facts
from bridge.webhook.effects import NamespaceCache
from bridge.webhook.facts import facts_from_discovery
from bridge.webhook.metrics import WebhookMetrics
from bridge.webhook import cel
from bridge.webhook.namespaces import read_status, set_mode
from bridge.webhook.policy import Mode
from tests.kubenodes import register_node
from tests.webhook.pki import Pki
from tests.polling import wait_until as wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "webhook"


def gpu_node(name: str, kubelet: str = "v1.36.0", labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A GPU node as the API server holds it: nvidia.com/gpu capacity, the kubelet's version, GFD labels."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"},
                       "nodeInfo": {"kubeletVersion": kubelet, "kubeProxyVersion": "", "machineID": name,
                                    "systemUUID": name, "bootID": "b", "kernelVersion": "6.8.0",
                                    "osImage": "Ubuntu 24.04", "containerRuntimeVersion": "containerd://2.1.0",
                                    "operatingSystem": "linux", "architecture": "amd64"}}}


class Cluster:
    def __init__(self, srv: ApiServer, kubeconfig: Path, pki: Pki, target: str,
                 nodes: tuple[dict[str, Any], ...] = (),
                 namespace_cache: Callable[[KubeAPI, WebhookMetrics], NamespaceCache] | None = None) -> None:
        self.pki = pki
        self.kubeconfig = str(kubeconfig)
        self.api = connect(str(kubeconfig))
        self.facts = facts_from_discovery(self.api.discovery())
        self.metrics = WebhookMetrics()
        options = WebhookOptions(str(pki.cert_file), str(pki.key_file), port=0, host="127.0.0.1", target=target,
                                 namespace="dra-bridge", serve_check_interval=3600)
        self.api.create(NAMESPACES, {"metadata": {"name": "dra-bridge"}})  # where the serve check dry-runs its pod
        for node in nodes:
            register_node(self.api, node)
        dc = yaml.safe_load((EXAMPLES.parent / "deviceclass.yaml").read_text())  # the one DeviceClass manifest
        rapi = self.api.resource_api()
        dc["apiVersion"] = rapi.device_classes.api_version
        self.api.create(rapi.device_classes, dc)
        self.live = live_facts(options, self.api, self.facts, self.metrics)
        cache = namespace_cache(self.api, self.metrics) if namespace_cache is not None else None
        self.server, self.cache, self.events = build(options, self.api, self.facts, self.metrics, live=self.live,
                                                     namespace_cache=cache)
        self.stop = threading.Event()
        self.cache.start(self.stop)
        self.live.start(self.stop)
        self.events.start()
        self.server.start()
        assert self.cache.wait_synced(20) and self.live.wait_ready(20)
        k8s_config.load_kube_config(str(kubeconfig))
        self.core = k8s.CoreV1Api()
        hook = yaml.safe_load((EXAMPLES / "mutatingwebhookconfiguration.yaml").read_text())
        hook["webhooks"][0]["clientConfig"] = {"url": f"https://127.0.0.1:{self.server.port}/mutate",
                                               "caBundle": base64.b64encode(pki.ca_pem).decode()}
        self.api.create(MUTATING_WEBHOOKS, hook)
        self.templates = ResourceAPI(rapi.version).claim_templates

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.events.stop()

    def namespace(self, name: str, mode: str) -> None:
        try:
            self.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
        except k8s.ApiException as err:
            assert err.status == 409
        set_mode(self.api, name, Mode(mode))
        wait_for(lambda: (self.cache.labels(name) or {}).get("dra-bridge.io/mode") == mode, what="cache sees mode")

    def create_pod(self, ns: str, gpus: int, app: str = "trainer") -> dict[str, Any]:
        manifest = yaml.safe_load((EXAMPLES / "gpu-deployment.yaml").read_text())["spec"]["template"]
        manifest["metadata"]["generateName"] = f"{app}-"
        manifest["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
        created = self.core.create_namespaced_pod(ns, manifest)
        return self.api.get(k8s_pod_resource(), created.metadata.name, ns)


def k8s_pod_resource():  # type: ignore[no-untyped-def]
    from bridge.kube.api import PODS

    return PODS


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    made: list[tuple[ApiServer, Cluster]] = []

    def make(version: str, target: str, nodes: tuple[dict[str, Any], ...] = (),
             gates: dict[str, bool] | None = None,
             namespace_cache: Callable[[KubeAPI, WebhookMetrics], NamespaceCache] | None = None) -> Cluster:
        srv = ApiServer(version=version, feature_gates=gates).start()
        kubeconfig = srv.write_kubeconfig(tmp_path / f"kubeconfig-{len(made)}")
        pki = Pki(tmp_path)
        pki.issue()
        c = Cluster(srv, kubeconfig, pki, target, nodes, namespace_cache)
        made.append((srv, c))
        return c

    yield make
    for srv, c in made:
        c.close()
        srv.stop()


def test_namespace_flips_shadow_then_dra_then_back_to_legacy(cluster_factory: Callable[[str, str], Cluster]) -> None:
    c = cluster_factory("1.35.0", "auto")  # 1.35: auto picks claims
    c.namespace("team-a", "shadow")
    shadow_pod = c.create_pod("team-a", 2)
    ann = shadow_pod["metadata"]["annotations"]
    assert '"ok":true' in ann["dra-bridge.io/shadow-translation"]
    assert shadow_pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] in ("2", 2)
    assert c.api.list(c.templates, "team-a")["items"] == []

    c.namespace("team-a", "dra")
    first = c.create_pod("team-a", 2)
    second = c.create_pod("team-a", 2)
    for pod in (first, second):
        assert pod["metadata"]["annotations"]["dra-bridge.io/translated"] == "claims"
        assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"].get("limits", {})
        assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu-trainer"}]
        assert "nodeSelector" not in pod["spec"]  # the GFD product label moved into the claim's CEL
    (template,) = c.api.list(c.templates, "team-a")["items"]  # created once, shared by both pods
    assert first["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == template["metadata"]["name"]
    exactly = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    expression = exactly["selectors"][0]["cel"]["expression"]
    assert exactly["count"] == 2
    assert cel.evaluate(expression, {"productName": "NVIDIA H100 80GB HBM3"}, {"memory": "80Gi"})
    assert not cel.evaluate(expression, {"productName": "NVIDIA H200"}, {"memory": "141Gi"})

    c.namespace("team-a", "legacy")
    legacy = c.create_pod("team-a", 1)
    assert "dra-bridge.io/translated" not in (legacy["metadata"].get("annotations") or {})
    assert legacy["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] in ("1", 1)
    # pods admitted earlier are as they were
    again = c.api.get(k8s_pod_resource(), first["metadata"]["name"], "team-a")
    assert again["metadata"]["annotations"]["dra-bridge.io/translated"] == "claims"

    (status,) = read_status(c.api, "team-a")
    assert (status.mode, status.translated_pods, status.legacy_gpu_pods, status.shadow_ok) == ("legacy", 2, 2, 1)


def test_auto_target_on_1_36_uses_the_device_class_extended_resource(
        cluster_factory: Callable[..., Cluster]) -> None:
    c = cluster_factory("1.36.0", "auto", (gpu_node("gpu-1"),))
    c.namespace("team-b", "dra")
    pod = c.create_pod("team-b", 4)
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["deviceclass.resource.kubernetes.io/gpu.dra-bridge.io"] in ("4", 4)
    assert "nvidia.com/gpu" not in limits
    assert c.api.list(c.templates, "team-b")["items"] == []


def test_dry_run_creates_no_template_and_own_namespace_is_untouched(
        cluster_factory: Callable[[str, str], Cluster]) -> None:
    c = cluster_factory("1.35.0", "claims")
    c.namespace("team-c", "dra")
    manifest = yaml.safe_load((EXAMPLES / "gpu-deployment.yaml").read_text())["spec"]["template"]
    manifest["metadata"]["name"] = "dry"
    manifest["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    out = c.core.create_namespaced_pod("team-c", manifest, dry_run="All")
    assert out.spec.resource_claims[0].resource_claim_template_name.startswith("dra-bridge-gpu-2-")
    assert c.api.list(c.templates, "team-c")["items"] == []
    c.namespace("dra-bridge", "dra")
    own = c.create_pod("dra-bridge", 1)
    assert "resourceClaims" not in own["spec"]
