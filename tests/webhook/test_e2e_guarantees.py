"""End to end through the API emulator, the guarantees the issue names one by one: two webhook replicas creating
the same template at once, reinvocation after another webhook, system namespaces, dry runs and Events for pods
left on the device plugin, the shipped MutatingWebhookConfiguration, and `bridge namespace` on a real API."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from kubernetes import client as k8s

from bridge.cli import main as cli
from bridge.kube.api import EVENTS, MUTATING_WEBHOOKS, PODS
from bridge.webhook.app import WebhookOptions, build
from bridge.webhook.metrics import WebhookMetrics
from bridge.webhook.server import WebhookServer
from bridge.webhook.tls import ReloadingContext
from tests.polling import wait_until
from tests.webhook.conftest import decode_patch
from tests.webhook.pki import Pki
from tests.webhook.pods import admission_review, container, deployment_pod
from tests.webhook.test_e2e import EXAMPLES, Cluster, cluster_factory, wait_for  # noqa: F401 (fixture)


def post(port: int, ca: Path, body: bytes) -> dict[str, Any]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ssl.create_default_context(cafile=str(ca)), timeout=20)
    try:
        conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        assert resp.status == 200, data
        return json.loads(data)
    finally:
        conn.close()


def test_two_replicas_creating_the_same_templates_at_once_leave_each_exactly_once(
        cluster_factory: Callable[[str, str], Cluster]) -> None:
    c = cluster_factory("1.35.0", "claims")
    c.namespace("team-r", "dra")
    pki = c.pki  # both replicas serve the Service's certificate
    second, cache, events = build(WebhookOptions(str(pki.cert_file), str(pki.key_file), port=0, host="127.0.0.1",
                                                 target="claims", namespace="dra-bridge"), c.api, c.facts, WebhookMetrics())
    stop = threading.Event()
    cache.start(stop)
    second.start()
    try:
        assert cache.wait_synced(20)
        wait_for(lambda: (cache.labels("team-r") or {}).get("dra-bridge.io/mode") == "dra", what="replica cache")
        replicas = [(c.server.port, c.pki.ca_file), (second.port, pki.ca_file)]
        # 3 GPU counts x 12 pods each, spread over both replicas, all at once
        jobs = [(replicas[i % 2], json.dumps(admission_review(deployment_pod(container("main", n)), "team-r")).encode())
                for n in (1, 2, 8) for i in range(12)]
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda job: post(job[0][0], job[0][1], job[1]), jobs))
    finally:
        stop.set()
        second.shutdown()
        events.stop()
    used = {p["value"][0]["resourceClaimTemplateName"] for a in answers for p in decode_patch(a)
            if p["path"] == "/spec/resourceClaims"}
    assert len(answers) == 36 and all("warnings" not in a["response"] for a in answers)  # none fell back to legacy
    names = sorted(t["metadata"]["name"] for t in c.api.list(c.templates, "team-r")["items"])
    assert len(names) == 3 and sorted(used) == names


def labeler(pki: Pki) -> WebhookServer:
    """Another mutating webhook, later in the chain than ours, that adds a label: the API server then calls ours
    again (reinvocationPolicy IfNeeded) with our own output."""
    def handle(body: bytes) -> tuple[int, bytes]:
        uid = json.loads(body)["request"]["uid"]
        import base64
        patch = base64.b64encode(json.dumps([{"op": "add", "path": "/metadata/labels/labeled", "value": "yes"}]).encode())
        return 200, json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
            "uid": uid, "allowed": True, "patchType": "JSONPatch", "patch": patch.decode()}}).encode()
    return WebhookServer({"/label": handle}, ReloadingContext(str(pki.cert_file), str(pki.key_file)),
                         host="127.0.0.1", port=0)


def test_reinvocation_after_another_webhook_changes_nothing_more(cluster_factory: Callable[[str, str], Cluster]) -> None:
    c = cluster_factory("1.35.0", "claims")
    c.namespace("team-i", "dra")
    with labeler(c.pki) as other:
        import base64
        c.api.create(MUTATING_WEBHOOKS, {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "zz-labeler"},  # sorts after dra-bridge: runs after ours
            "webhooks": [{"name": "labeler.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                          "clientConfig": {"url": f"https://127.0.0.1:{other.port}/label",
                                           "caBundle": base64.b64encode(c.pki.ca_pem).decode()},
                          "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                     "resources": ["pods"]}], "failurePolicy": "Fail"}]})
        before = {o: c.metrics.reviews.value(o, "dra", "claims") for o in ("skipped", "translated")}
        pod = c.create_pod("team-i", 2)
    assert pod["metadata"]["labels"]["labeled"] == "yes"
    assert [rc["name"] for rc in pod["spec"]["resourceClaims"]] == ["gpu-trainer"]
    assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu-trainer"}]
    # the API server reinvokes ours only if its matchConditions still select the pod: the translation record says
    # it is done, so ours is not called again (and, were it called, it would answer "nothing to do")
    assert c.metrics.reviews.value("translated", "dra", "claims") == before["translated"] + 1
    assert c.metrics.reviews.value("skipped", "dra", "claims") == before["skipped"]
    assert len(c.api.list(c.templates, "team-i")["items"]) == 1


def test_kube_system_is_never_mutated_even_when_labeled(cluster_factory: Callable[[str, str], Cluster]) -> None:
    c = cluster_factory("1.35.0", "claims")
    c.namespace("kube-system", "dra")
    pod = c.create_pod("kube-system", 1)
    assert "resourceClaims" not in pod["spec"]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] in ("1", 1)
    assert c.api.list(c.templates, "kube-system")["items"] == []


def mig_manifest(name: str) -> dict[str, Any]:
    manifest = yaml.safe_load((EXAMPLES / "gpu-deployment.yaml").read_text())["spec"]["template"]
    manifest["metadata"]["name"] = name
    limits = manifest["spec"]["containers"][0]["resources"]["limits"]
    del limits["nvidia.com/gpu"]
    limits["nvidia.com/mig-1g.10gb"] = "1"
    return manifest


def test_a_pod_left_on_the_device_plugin_gets_an_event_saying_why_and_a_dry_run_gets_none(
        cluster_factory: Callable[[str, str], Cluster]) -> None:
    c = cluster_factory("1.35.0", "claims")
    c.namespace("team-m", "dra")
    c.core.create_namespaced_pod("team-m", mig_manifest("dry-mig"), dry_run="All")
    c.core.create_namespaced_pod("team-m", mig_manifest("mig"))
    pod = c.api.get(PODS, "mig", "team-m")
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-1g.10gb"] in ("1", 1)
    (event,) = wait_for(lambda: c.api.list(EVENTS, "team-m")["items"], what="the Event")
    assert event["involvedObject"]["name"] == "mig" and event["reason"] == "DRABridgeUntranslatable"
    assert "MIG slice" in event["message"] and "request a MIG DeviceClass" in event["message"]
    c.events.stop()  # drains the queue: had the dry run queued an Event, it would be there now
    assert [e["involvedObject"]["name"] for e in c.api.list(EVENTS, "team-m")["items"]] == ["mig"]


def test_the_shipped_webhook_configuration_is_the_recommended_one() -> None:
    text = (EXAMPLES / "mutatingwebhookconfiguration.yaml").read_text()
    (hook,) = yaml.safe_load(text)["webhooks"]
    assert hook["sideEffects"] == "NoneOnDryRun" and hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["failurePolicy"] == "Ignore" and 1 <= hook["timeoutSeconds"] <= 30
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                              "scope": "Namespaced"}]
    # opt-in: only namespaces labeled shadow or dra, never kube-system or the webhook's own
    (mode, name) = hook["namespaceSelector"]["matchExpressions"]
    assert mode == {"key": "dra-bridge.io/mode", "operator": "In", "values": ["shadow", "dra"]}
    assert name["operator"] == "NotIn" and {"kube-system", "dra-bridge"} <= set(name["values"])
    # the trade-off is written down next to the values
    assert "failurePolicy: Ignore - fail OPEN" in text and "The trade-off" in text and "timeoutSeconds: 5" in text


def test_an_unlabeled_namespace_is_not_even_sent_to_the_webhook(cluster_factory: Callable[[str, str], Cluster]) -> None:
    c = cluster_factory("1.35.0", "claims")
    c.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="team-u")))
    wait_for(lambda: c.cache.labels("team-u") is not None, what="cache sees the namespace")
    c.create_pod("team-u", 1)
    assert sum(s.value for m in c.metrics.reviews.collect() for s in m.samples if s.name.endswith("_total")) == 0


@pytest.fixture
def kubeconfig(cluster_factory: Callable[[str, str], Cluster]) -> Iterator[tuple[Cluster, str]]:
    c = cluster_factory("1.35.0", "claims")
    yield c, c.kubeconfig


def test_namespace_cli_sets_modes_and_reports_translated_legacy_and_shadow_pods(
        kubeconfig: tuple[Cluster, str]) -> None:
    c, path = kubeconfig
    runner = CliRunner()
    c.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="team-s")))
    legacy = c.create_pod("team-s", 1)
    out = runner.invoke(cli, ["namespace", "set", "team-s", "shadow", "--kubeconfig", path])
    assert out.exit_code == 0, out.output
    assert "legacy -> shadow" in out.output and "1 GPU pod(s) keep their current API" in out.output
    c.create_pod("team-s", 2)  # no waiting for the webhook's cache here: `set` returned once the webhook applied it
    c.core.create_namespaced_pod("team-s", mig_manifest("mig"))
    # A pod created in the flip's own second counts as after it (creationTimestamp has whole seconds): the MIG pod,
    # created before the flip, goes a second earlier.
    start = int(time.time())
    wait_until(lambda: int(time.time()) > start, timeout=3, what="the next second")
    assert runner.invoke(cli, ["namespace", "set", "team-s", "dra", "--kubeconfig", path]).exit_code == 0
    c.create_pod("team-s", 4)

    table = runner.invoke(cli, ["namespace", "status", "team-s", "--kubeconfig", path])
    assert table.exit_code == 0, table.output
    header, row, *notes = table.output.splitlines()
    assert header.split() == ["NAMESPACE", "MODE", "TARGET", "LEGACY-GPU-PODS", "TRANSLATED", "OPTED-OUT",
                              "SHADOW-OK", "SHADOW-BLOCKED"]
    # legacy: the pod from before + the shadowed 2-GPU pod + the MIG pod; translated: the 4-GPU pod
    assert row.split() == ["team-s", "dra", "default", "3", "1", "0", "1", "1"]
    assert notes[0] == ("  team-s: 1 pod(s) would stay legacy: nvidia.com/mig-1g.10gb is a MIG slice; the bridge "
                        "serves whole GPUs: request a MIG DeviceClass through a ResourceClaim, or keep this workload "
                        "legacy (opt out with dra-bridge.io/translate=false)")
    # then the webhook's registration and the GPU pods since the flip (counted: tests/webhook/test_namespace_flip.py)
    assert notes[1].startswith("  team-s: webhook pods.dra-bridge.io: registered, reachable, covers this namespace")
    assert any("since the flip to dra" in n and "0 never reached the webhook" in n for n in notes), notes
    as_json = json.loads(runner.invoke(cli, ["namespace", "status", "team-s", "-o", "json", "--kubeconfig", path]).output)
    assert as_json[0]["translatedPods"] == 1 and as_json[0]["legacyGpuPods"] == 3
    assert legacy["metadata"]["name"]


def test_namespace_cli_errors_name_the_problem_and_change_nothing(kubeconfig: tuple[Cluster, str]) -> None:
    c, path = kubeconfig
    runner = CliRunner()
    missing = runner.invoke(cli, ["namespace", "set", "nope", "dra", "--kubeconfig", path])
    assert missing.exit_code == 2 and "nope" in missing.output and "not found" in missing.output.lower()
    bad = runner.invoke(cli, ["namespace", "set", "team-x", "DRA", "--kubeconfig", path])
    assert bad.exit_code == 2 and "'DRA' is not one of 'legacy', 'shadow', 'dra'" in bad.output
    assert runner.invoke(cli, ["namespace", "status", "nope", "--kubeconfig", path]).exit_code == 2
