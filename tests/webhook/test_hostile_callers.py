"""Callers the webhook must not trust: forged AdmissionReviews from anyone who can reach it create a bounded number of
ResourceClaimTemplates, and with a client CA only the API server's certificate gets a review at all (issue 16 item 6).
Real HTTPS against the API emulator throughout."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest

from bridge.kube import connect
from bridge.kube.api import MUTATING_WEBHOOKS, NAMESPACES, PODS, ResourceAPI
from bridge.sandbox.apiserver import ApiServer
from bridge.webhook.app import WebhookOptions, build
from bridge.webhook.facts import facts_from_discovery
from bridge.webhook.metrics import WebhookMetrics
from bridge.webhook.selfsigned import registration
from tests.polling import wait_until
from tests.webhook.pki import Pki
from tests.webhook.pods import admission_review, container, deployment_pod
from tests.webhook.test_e2e import EXAMPLES

API_SERVER_CN = "kube-apiserver-webhook-client"


class Webhook:
    """The real webhook (`build`) against an emulator, started; `post` sends an AdmissionReview over TLS."""

    def __init__(self, srv: ApiServer, tmp: Path, **options: Any) -> None:
        self.pki = Pki(tmp)
        self.pki.issue()
        self.api = connect(str(srv.write_kubeconfig(tmp / "kubeconfig")))
        self.metrics = WebhookMetrics()
        self.server, self.cache, self.events = build(
            WebhookOptions(str(self.pki.cert_file), str(self.pki.key_file), port=0, target="claims",
                           namespace="dra-bridge", **options),
            self.api, facts_from_discovery(self.api.discovery()), self.metrics)
        self.stop = threading.Event()
        self.cache.start(self.stop)
        self.events.start()
        self.server.start()
        assert self.cache.wait_synced(20)
        self.templates = ResourceAPI(self.api.resource_api().version).claim_templates

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.events.stop()

    def dra_namespace(self, name: str) -> None:
        self.api.create(NAMESPACES, {"metadata": {"name": name, "labels": {"dra-bridge.io/mode": "dra"}}})
        wait_until(lambda: (self.cache.labels(name) or {}).get("dra-bridge.io/mode") == "dra", 30, "cache sees it")

    def post(self, review: dict[str, Any], client: tuple[Path, Path] | None = None) -> tuple[int, dict[str, Any]]:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_file))
        if client is not None:
            ctx.load_cert_chain(*client)
        conn = http.client.HTTPSConnection("127.0.0.1", self.server.port, context=ctx, timeout=20)
        try:
            conn.request("POST", "/mutate", body=json.dumps(review).encode(),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        finally:
            conn.close()

    def sample(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[Callable[..., Webhook]]:
    made: list[Webhook] = []
    srv = ApiServer(version="1.35.0").start()

    def make(**options: Any) -> Webhook:
        directory = tmp_path / f"w{len(made)}"
        directory.mkdir()
        w = Webhook(srv, directory, **options)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()
    srv.stop()


def forged(n: int, namespace: str = "team-f") -> dict[str, Any]:
    """A review whose pod needs its own template: 1 GPU of a made-up product (a GFD selector becomes the CEL)."""
    return admission_review(deployment_pod(container("main", 1),
                                           node_selector={"nvidia.com/gpu.product": f"FORGED-{n}"}), namespace)


def test_sixty_forged_reviews_create_no_more_templates_than_the_namespace_cap(
        webhook: Callable[..., Webhook]) -> None:
    w = webhook(max_templates_per_namespace=10)
    w.dra_namespace("team-f")
    answers = [w.post(forged(n)) for n in range(60)]  # 60 distinct selectors: 60 distinct templates asked for
    assert all(code == 200 and body["response"]["allowed"] for code, body in answers)
    assert len(w.api.list(w.templates, "team-f")["items"]) == 10
    translated = [body for _, body in answers if "patch" in body["response"]]
    untranslated = [body for _, body in answers if "patch" not in body["response"]]
    assert len(translated) == 10 and len(untranslated) == 50
    assert all("template limit reached in team-f: 10 of --max-templates-per-namespace 10"
               in " ".join(b["response"]["warnings"]) for b in untranslated)
    assert all(len(w) <= 120 for b in untranslated for w in b["response"]["warnings"])
    assert w.sample("dra_bridge_webhook_template_ensures_total", result="capped") == 50
    # At the cap, a pod whose template already exists is still translated: the cap limits new names only.
    code, again = w.post(forged(3))
    assert code == 200 and "patch" in again["response"]
    assert len(w.api.list(w.templates, "team-f")["items"]) == 10


def test_the_cap_counts_templates_made_before_this_replica_started(webhook: Callable[..., Webhook]) -> None:
    first = webhook(max_templates_per_namespace=4)
    first.dra_namespace("team-f")
    for n in range(1, 4):
        assert "patch" in first.post(forged(n))[1]["response"]
    second = webhook(max_templates_per_namespace=4)  # a restart, or the other replica: it lists, it does not guess
    assert "patch" in second.post(forged(4))[1]["response"]
    assert "patch" not in second.post(forged(5))[1]["response"]
    assert len(second.api.list(second.templates, "team-f")["items"]) == 4


def test_with_a_client_ca_only_the_api_servers_certificate_gets_a_review(
        webhook: Callable[..., Webhook], tmp_path: Path) -> None:
    (tmp_path / "clients-ca").mkdir()
    clients = Pki(tmp_path / "clients-ca")
    w = webhook(client_ca_file=str(clients.ca_file), client_names=(API_SERVER_CN,))
    w.dra_namespace("team-f")
    apiserver = clients.issue_client(API_SERVER_CN, "apiserver")
    other_name = clients.issue_client("some-pod", "other")
    code, body = w.post(forged(1))
    assert code == 403 and "accepts AdmissionReviews only from the API server: no client certificate" in body["message"]
    code, body = w.post(forged(1), other_name)
    assert code == 403 and "client certificate some-pod is not one of the accepted API server identities" in body[
        "message"]
    assert w.api.list(w.templates, "team-f")["items"] == []  # refused before any review or side effect
    code, body = w.post(forged(1), apiserver)
    assert code == 200 and "patch" in body["response"]
    # A certificate from another CA does not even complete the handshake.
    (tmp_path / "rogue").mkdir()
    rogue = Pki(tmp_path / "rogue").issue_client(API_SERVER_CN, "rogue")
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        w.post(forged(2), rogue)
    # Probes carry no client certificate and still work.
    conn = http.client.HTTPSConnection("127.0.0.1", w.server.port, timeout=10,
                                       context=ssl.create_default_context(cafile=str(w.pki.ca_file)))
    conn.request("GET", "/healthz")
    assert conn.getresponse().status == 200
    conn.close()
    text = generate_latest(w.metrics.registry).decode()
    assert 'dra_bridge_webhook_http_requests_total{code="403",path="/mutate"} 2.0' in text


def test_the_api_server_presents_the_client_certificate_its_admission_config_names(tmp_path: Path) -> None:
    """End to end: the emulator reads an AdmissionConfiguration like kube-apiserver, presents the kubeconfig's client
    certificate to the webhook, and pods it admits are translated; a forged review is refused."""
    (tmp_path / "ca").mkdir()
    clients = Pki(tmp_path / "ca")
    cert, key = clients.issue_client(API_SERVER_CN, "apiserver")
    kubeconfig = tmp_path / "admission-kubeconfig.yaml"
    kubeconfig.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "users": [
        {"name": "*", "user": {"client-certificate": str(cert), "client-key": str(key)}}]}))
    config = tmp_path / "admission.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
        "plugins": [{"name": "MutatingAdmissionWebhook", "configuration": {
            "apiVersion": "apiserver.config.k8s.io/v1", "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": str(kubeconfig)}}]}))
    (tmp_path / "w").mkdir()
    with ApiServer(version="1.35.0", admission_config=config) as srv:
        w = Webhook(srv, tmp_path / "w", client_ca_file=str(clients.ca_file), client_names=(API_SERVER_CN,))
        try:
            w.api.create(MUTATING_WEBHOOKS, registration(f"https://127.0.0.1:{w.server.port}/mutate", w.pki.ca_pem))
            w.dra_namespace("team-a")
            pod = yaml.safe_load((EXAMPLES / "gpu-deployment.yaml").read_text())["spec"]["template"]
            pod["metadata"]["name"] = "trainer-0"
            created = w.api.create(PODS, pod, "team-a")
            assert created["metadata"]["annotations"]["dra-bridge.io/translated"] == "claims"
            assert len(w.api.list(w.templates, "team-a")["items"]) == 1
            assert w.post(forged(3, "team-a"))[0] == 403
        finally:
            w.close()


def test_the_webhook_listens_on_loopback_unless_told_otherwise() -> None:
    from click.testing import CliRunner

    from bridge.cli import main

    assert WebhookOptions("c", "k").host == "127.0.0.1"
    text = " ".join(CliRunner().invoke(main, ["webhook", "--help"], terminal_width=200).output.split())
    assert "default: 127.0.0.1]" in text


# What kube-apiserver puts in the AdmissionReview for a pod created with these GPU values (issue 27 item 1). It
# decodes the pod (k8s.io/apimachinery pkg/api/resource/quantity.go, Quantity.UnmarshalJSON -> ParseQuantity) before
# admission and encodes it again for the webhook (MarshalJSON): "1e30000000" fits the int64 fast path (mantissa 1,
# scale 3e7, a multiple of 3, canonical) and keeps its own text; "1e400"/"1e5000" fit it too but are re-emitted in
# canonical form, the exponent a multiple of 3 (amount.go int64Amount.AsCanonicalBytes); a value finer than nano is
# rounded up to 1n and emitted in its format, DecimalExponent ("1e-9").
AS_THE_API_SERVER_SENDS = {"1e30000000": "1e30000000", "1e400": "10e399", "1e5000": "100e4998",
                           "1e-2000000": "1e-9"}


@pytest.mark.parametrize("written", sorted(AS_THE_API_SERVER_SENDS))
def test_a_gpu_count_with_a_huge_exponent_is_left_untranslated_with_a_warning_and_costs_nothing(
        webhook: Callable[..., Webhook], written: str) -> None:
    w = webhook()
    w.dra_namespace("team-h")
    for value in {written, AS_THE_API_SERVER_SENDS[written]}:  # the server's form, and the raw text a caller forges
        code, body = w.post(admission_review(deployment_pod(container("main", value)), "team-h"))
        assert code == 200 and body["response"]["allowed"] and "patch" not in body["response"]
        warnings = " ".join(body["response"]["warnings"])
        assert "container main: nvidia.com/gpu is not a valid GPU count" in warnings, warnings
    # 100 containers of the sub-nano value (57 s before the parser was bounded), then an ordinary pod: translated
    code, body = w.post(admission_review(deployment_pod(*[container(f"c{i}", written) for i in range(100)]),
                                         "team-h"))
    assert code == 200 and "patch" not in body["response"]
    code, body = w.post(admission_review(deployment_pod(container("main", 2)), "team-h"))
    assert code == 200 and "patch" in body["response"]
    assert w.api.list(w.templates, "team-h")["items"][0]["spec"]["spec"]["devices"]["requests"][0]["exactly"][
        "count"] == 2


def test_a_deleted_template_is_created_again_before_a_pod_references_it_and_the_cap_counts_what_exists(
        webhook: Callable[..., Webhook]) -> None:
    """Issue 27 item 8: with the cap full and every template deleted, the next pod was translated to point at a
    template that no longer existed (trusted for the 60 s TTL), while a new shape was still refused as capped."""
    w = webhook(max_templates_per_namespace=3)
    w.dra_namespace("team-f")
    for n in range(3):
        assert "patch" in w.post(forged(n))[1]["response"]
    assert "patch" not in w.post(forged(9))[1]["response"]  # capped
    for t in w.api.list(w.templates, "team-f")["items"]:
        w.api.delete(w.templates, t["metadata"]["name"], "team-f")

    def referenced_and_exists() -> bool:  # a shape whose template was deleted: created again, then referenced
        code, body = w.post(forged(0))
        assert code == 200 and "patch" in body["response"]
        names = {t["metadata"]["name"] for t in w.api.list(w.templates, "team-f")["items"]}
        return bool(referenced_templates(body)) and referenced_templates(body) <= names

    wait_until(referenced_and_exists, 30, "a pod referencing a template that exists (the watch saw the deletions; "
                                          "the TTL alone trusted them for 60 s)")
    assert len(w.api.list(w.templates, "team-f")["items"]) == 1
    code, body = w.post(forged(9))  # a new shape: the cap counts what exists (1 of 3), not what was listed before
    assert code == 200 and "patch" in body["response"]
    assert len(w.api.list(w.templates, "team-f")["items"]) == 2


def referenced_templates(body: dict[str, Any]) -> set[str]:
    import base64

    ops = json.loads(base64.b64decode(body["response"]["patch"]))
    claims = [op["value"] for op in ops if op["path"].startswith("/spec/resourceClaims")]
    flat = [c for v in claims for c in (v if isinstance(v, list) else [v])]
    return {c["resourceClaimTemplateName"] for c in flat if "resourceClaimTemplateName" in c}
