"""Mutating admission webhooks called over real HTTPS by the emulator, observed through the official client."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import ssl
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes.client import ApiException

from .conftest import pod

Review = dict[str, Any]


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca_and_cert(directory: Path) -> tuple[bytes, Path, Path]:
    """A CA and a serving certificate for 127.0.0.1 signed by it; returns (CA PEM, cert path, key path)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder().subject_name(_name("test-ca")).issuer_name(_name("test-ca"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1)).not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder().subject_name(_name("webhook")).issuer_name(ca.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1)).not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = directory / "hook.crt", directory / "hook.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return ca.public_bytes(serialization.Encoding.PEM), cert_path, key_path


class Webhook:
    """A tiny HTTPS admission webhook; `respond(review) -> response dict` decides each answer."""

    def __init__(self, directory: Path) -> None:
        self.ca_pem, cert, key = make_ca_and_cert(directory)
        self.reviews: list[Review] = []
        self.respond: Callable[[Review], dict[str, Any]] = lambda r: {"allowed": True}
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hook.reviews.append(review)
                response = {"uid": review["request"]["uid"], **hook.respond(review)}
                body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}/mutate"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        if self.thread.is_alive():
            self.httpd.shutdown()
            self.httpd.server_close()
            self.thread.join()

    def config(self, name: str = "bridge", **overrides: Any) -> dict[str, Any]:
        webhook = {
            "name": f"{name}.bridge.dev",
            "clientConfig": {"url": self.url, "caBundle": base64.b64encode(self.ca_pem).decode()},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Namespaced"}],
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
            **overrides,
        }
        return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": name}, "webhooks": [webhook]}


def label_patch(key: str, value: str) -> Callable[[Review], dict[str, Any]]:
    def respond(review: Review) -> dict[str, Any]:
        labels = review["request"]["object"]["metadata"].get("labels")
        op = [{"op": "add", "path": f"/metadata/labels/{key}", "value": value}] if labels else [
            {"op": "add", "path": "/metadata/labels", "value": {key: value}}]
        return {"allowed": True, "patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(op).encode()).decode(),
                "warnings": [f"labelled {key}"]}
    return respond


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[Webhook]:
    hook = Webhook(tmp_path)
    yield hook
    hook.stop()


@pytest.fixture
def admission(api_client):
    import kubernetes

    return kubernetes.client.AdmissionregistrationV1Api(api_client)


def test_webhook_patch_is_applied_and_warnings_are_returned(core, admission, webhook):
    webhook.respond = label_patch("mutated", "yes")
    admission.create_mutating_webhook_configuration(webhook.config())
    created, status, headers = core.create_namespaced_pod_with_http_info("default", pod("p", labels={"app": "x"}))
    assert status == 201
    assert created.metadata.labels == {"app": "x", "mutated": "yes"}
    assert core.read_namespaced_pod("p", "default").metadata.labels["mutated"] == "yes"
    assert '299 - "labelled mutated"' in headers.get("Warning", "")
    request = webhook.reviews[0]["request"]
    assert webhook.reviews[0]["apiVersion"] == "admission.k8s.io/v1"
    assert request["operation"] == "CREATE" and request["namespace"] == "default" and request["name"] == "p"
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert request["dryRun"] is False and request["userInfo"]["username"]


def test_webhook_denial_is_returned_to_the_client(core, admission, webhook):
    webhook.respond = lambda r: {"allowed": False, "status": {"code": 403, "reason": "Forbidden", "message": "no GPUs here"}}
    admission.create_mutating_webhook_configuration(webhook.config())
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", pod("p"))
    assert err.value.status == 403
    assert json.loads(err.value.body)["message"] == 'admission webhook "bridge.bridge.dev" denied the request: no GPUs here'
    assert core.list_namespaced_pod("default").items == []


def test_unreachable_webhook_with_fail_policy_rejects_and_with_ignore_admits(core, admission, webhook):
    config = webhook.config()
    webhook.stop()  # nothing listens any more
    admission.create_mutating_webhook_configuration(config)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", pod("p"))
    assert err.value.status == 500
    body = json.loads(err.value.body)
    assert body["reason"] == "InternalError"
    assert 'failed calling webhook "bridge.bridge.dev"' in body["message"]
    admission.patch_mutating_webhook_configuration("bridge", {"webhooks": [dict(config["webhooks"][0], failurePolicy="Ignore")]})
    assert core.create_namespaced_pod("default", pod("p")).metadata.name == "p"


def test_webhook_with_wrong_ca_bundle_is_a_failed_call(core, admission, webhook, tmp_path):
    (tmp_path / "other").mkdir()
    other_ca, _, _ = make_ca_and_cert(tmp_path / "other")
    config = webhook.config()
    config["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(other_ca).decode()
    admission.create_mutating_webhook_configuration(config)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", pod("p"))
    assert err.value.status == 500 and "CERTIFICATE_VERIFY_FAILED" in json.loads(err.value.body)["message"]
    assert webhook.reviews == []


def test_namespace_selector_limits_which_namespaces_are_mutated(core, admission, webhook):
    webhook.respond = label_patch("mutated", "yes")
    core.create_namespace({"metadata": {"name": "gpu-team", "labels": {"dra-bridge.io/mode": "dra"}}})
    core.create_namespace({"metadata": {"name": "legacy-team"}})
    admission.create_mutating_webhook_configuration(
        webhook.config(namespaceSelector={"matchExpressions": [{"key": "dra-bridge.io/mode", "operator": "In", "values": ["dra", "shadow"]}]})
    )
    assert core.create_namespaced_pod("gpu-team", pod("a", "gpu-team")).metadata.labels == {"mutated": "yes"}
    assert not core.create_namespaced_pod("legacy-team", pod("b", "legacy-team")).metadata.labels
    assert [r["request"]["namespace"] for r in webhook.reviews] == ["gpu-team"]


def test_object_selector_and_rules_limit_what_is_sent(core, admission, webhook):
    webhook.respond = label_patch("mutated", "yes")
    admission.create_mutating_webhook_configuration(
        webhook.config(objectSelector={"matchLabels": {"gpu": "true"}})
    )
    assert not core.create_namespaced_pod("default", pod("plain")).metadata.labels
    assert core.create_namespaced_pod("default", pod("g", labels={"gpu": "true"})).metadata.labels["mutated"] == "yes"
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm", "labels": {"gpu": "true"}}})
    assert len(webhook.reviews) == 1


def test_dry_run_is_passed_to_the_webhook(core, admission, webhook):
    webhook.respond = label_patch("mutated", "yes")
    admission.create_mutating_webhook_configuration(webhook.config())
    created = core.create_namespaced_pod("default", pod("p"), dry_run="All")
    assert created.metadata.labels == {"mutated": "yes"}
    assert webhook.reviews[0]["request"]["dryRun"] is True
    assert core.list_namespaced_pod("default").items == []


def test_if_needed_webhooks_are_reinvoked_after_a_later_change(core, admission, webhook, tmp_path):
    calls: list[str] = []

    def respond(review: Review) -> dict[str, Any]:
        labels = review["request"]["object"]["metadata"].get("labels") or {}
        calls.append(",".join(sorted(labels)))
        return {"allowed": True}

    webhook.respond = respond
    first = webhook.config("a-first", reinvocationPolicy="IfNeeded")
    admission.create_mutating_webhook_configuration(first)
    (tmp_path / "second").mkdir()
    second_hook = Webhook(tmp_path / "second")
    second_hook.respond = label_patch("late", "1")
    try:
        admission.create_mutating_webhook_configuration(second_hook.config("b-second"))
        created = core.create_namespaced_pod("default", pod("p"))
    finally:
        second_hook.stop()
    assert created.metadata.labels == {"late": "1"}
    assert calls == ["", "late"]  # the first webhook saw the second one's change on its reinvocation


def gpu_pod(name: str, gpus: int | None = 1, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    res = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "image": "x", "resources": res}]}}


def conditions(*exprs: str) -> list[dict[str, str]]:
    return [{"name": f"c{i}", "expression": e} for i, e in enumerate(exprs)]


def test_match_conditions_decide_whether_the_webhook_is_called(core, admission, webhook):
    """webhook/generic/webhook.go ShouldCallHook + matchconditions/matcher.go: all true -> called."""
    webhook.respond = label_patch("mutated", "yes")
    admission.create_mutating_webhook_configuration(webhook.config(matchConditions=conditions(
        "object.spec.containers.exists(c, has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits)",
        "request.operation == 'CREATE' && oldObject == null")))
    assert core.create_namespaced_pod("default", gpu_pod("gpu")).metadata.labels == {"mutated": "yes"}
    assert not core.create_namespaced_pod("default", gpu_pod("plain", None)).metadata.labels
    assert [r["request"]["name"] for r in webhook.reviews] == ["gpu"]


def test_a_false_condition_skips_the_webhook_even_when_another_fails_to_evaluate(core, admission, webhook):
    admission.create_mutating_webhook_configuration(webhook.config(matchConditions=conditions(
        "object.spec.nosuchfield == 1", "false")))
    core.create_namespaced_pod("default", gpu_pod("p"))
    assert webhook.reviews == []


def test_an_evaluation_error_follows_the_failure_policy(core, admission, webhook):
    config = webhook.config(matchConditions=conditions("object.spec.nosuchfield == 1", "true"))
    admission.create_mutating_webhook_configuration(config)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", gpu_pod("p"))
    body = json.loads(err.value.body)
    assert err.value.status == 403 and body["reason"] == "Forbidden"
    assert body["message"].startswith('pods "p" is forbidden: expression \'object.spec.nosuchfield == 1\' '
                                      "resulted in error: ")
    admission.patch_mutating_webhook_configuration("bridge", {"webhooks": [dict(config["webhooks"][0],
                                                                                 failurePolicy="Ignore")]})
    assert core.create_namespaced_pod("default", gpu_pod("p")).metadata.name == "p"
    assert webhook.reviews == []  # Ignore: skipped, not called


def test_the_bridges_own_conditions_send_untranslated_gpu_pods_only(core, admission, webhook):
    from bridge.webhook.registration import MATCH_CONDITIONS

    admission.create_mutating_webhook_configuration(webhook.config(matchConditions=[dict(c) for c in MATCH_CONDITIONS]))
    core.create_namespaced_pod("default", gpu_pod("gpu"))
    core.create_namespaced_pod("default", gpu_pod("cpu", None))
    core.create_namespaced_pod("default", gpu_pod("done", annotations={"dra-bridge.io/translated": "claims"}))
    mig = gpu_pod("mig", None)
    mig["spec"]["initContainers"] = [{"name": "i", "image": "x", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"},
                                                                            "limits": {"nvidia.com/mig-1g.10gb": "1"}}}]
    core.create_namespaced_pod("default", mig)
    assert [r["request"]["name"] for r in webhook.reviews] == ["gpu", "mig"]
