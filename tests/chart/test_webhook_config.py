"""The webhook as the chart installs it: which pods the API server sends to it (namespaceSelector with the
emulator's label-selector code, matchConditions with CEL), TLS the API server can verify (a real handshake against
the caBundle, to the Service's DNS name, with the certificate loaded the way `bridge webhook` loads it), certificates
kept on upgrade, cert-manager wiring, restricted pod security, and 2 replicas under a PodDisruptionBudget."""

from __future__ import annotations

import base64
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest

from bridge.sandbox.apiserver.selectors import match_label_selector_object
from bridge.webhook.tls import server_context
from bridge.webhook.registration import MATCH_CONDITIONS
from bridge.webhook.translate import scan
from tests.chart import helm
from tests.chart.conftest import NAMESPACE, Cluster, find, one
from tests.chart.vap import match_condition

SELF_SIGNED = {"webhook": {"tls": {"mode": "selfSigned"}}}
# One release for the non-default registration values (each install costs a second).
VARIANT = {"webhook": {"excludeNamespaces": ["gpu-operator"], "onlyGpuPods": False, "failurePolicy": "Fail",
                       "timeoutSeconds": 3, "replicas": 3}}


def hook(objects: list[dict[str, Any]]) -> dict[str, Any]:
    webhooks = one(objects, "MutatingWebhookConfiguration")["webhooks"]
    assert len(webhooks) == 1
    return webhooks[0]


def ns_labels(name: str, **labels: str) -> dict[str, str]:
    return {"kubernetes.io/metadata.name": name, **labels}


def test_only_opted_in_namespaces_reach_the_webhook_never_kube_system_or_its_own(installed: Any) -> None:
    selector = hook(installed(VARIANT))["namespaceSelector"]
    sent = {name: match_label_selector_object(selector, labels) for name, labels in {
        "team-a (shadow)": ns_labels("team-a", **{"dra-bridge.io/mode": "shadow"}),
        "team-b (dra)": ns_labels("team-b", **{"dra-bridge.io/mode": "dra"}),
        "team-c (legacy)": ns_labels("team-c", **{"dra-bridge.io/mode": "legacy"}),
        "unlabeled": ns_labels("default"),
        "kube-system (dra)": ns_labels("kube-system", **{"dra-bridge.io/mode": "dra"}),
        "release namespace (dra)": ns_labels(NAMESPACE, **{"dra-bridge.io/mode": "dra"}),
        "excluded (dra)": ns_labels("gpu-operator", **{"dra-bridge.io/mode": "dra"}),
    }.items()}
    assert sent == {"team-a (shadow)": True, "team-b (dra)": True, "team-c (legacy)": False, "unlabeled": False,
                    "kube-system (dra)": False, "release namespace (dra)": False, "excluded (dra)": False}


def pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}, "spec": spec}


def c(name: str, limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": "x"}
    if limits is not None or requests is not None:
        out["resources"] = {k: v for k, v in (("limits", limits), ("requests", requests)) if v is not None}
    return out


PODS = {
    "gpu limit": pod([c("a", {"nvidia.com/gpu": 2})]),
    "gpu request and limit": pod([c("a", {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "1", "cpu": "1"})]),
    "gpu in an init container only": pod([c("a", {"cpu": "1"})], init=[c("i", {"nvidia.com/gpu": 1})]),
    "gpu in the second container": pod([c("a"), c("b", {"nvidia.com/gpu": 4})]),
    "MIG slice (left alone with an Event)": pod([c("a", {"nvidia.com/mig-1g.10gb": 1})]),
    "time-sliced (left alone with an Event)": pod([c("a", {"nvidia.com/gpu.shared": 1})]),
    "request without limit (refused by the server)": pod([c("a", requests={"nvidia.com/gpu": 1})]),
    "cpu only": pod([c("a", {"cpu": "2", "memory": "1Gi"})]),
    "no resources": pod([c("a")]),
    "empty resources": pod([{"name": "a", "image": "x", "resources": {}}], init=[]),
    "another vendor": pod([c("a", {"amd.com/gpu": 1})]),
}


def test_the_match_conditions_send_every_pod_the_webhook_acts_on_and_no_other(installed: Any) -> None:
    conditions = hook(installed())["matchConditions"]
    assert conditions == [dict(c) for c in MATCH_CONDITIONS]  # the webhook's own, word for word

    def sent(p: dict[str, Any]) -> bool:
        return all(match_condition(c["expression"], p) for c in conditions)

    verdicts = {name: sent(p) for name, p in PODS.items()}
    assert {n for n, s in verdicts.items() if not s} == {"cpu only", "no resources", "empty resources",
                                                         "another vendor"}
    for name, p in PODS.items():
        found, reasons = scan(p)
        if found or reasons:  # the webhook would translate the pod, or leave it alone with a warning and an Event
            assert verdicts[name], f"{name}: the webhook acts on it but the API server would not call it"
    translated = pod([c("a", {"nvidia.com/gpu": 2})])
    translated["metadata"] = {"annotations": {"dra-bridge.io/translated": "claims"}}
    shadowed = pod([c("a", {"nvidia.com/gpu": 2})])
    shadowed["metadata"] = {"annotations": {"dra-bridge.io/shadow-translation": "{}", "team": "x"}}
    assert not sent(translated) and not sent(shadowed)  # reinvocation on its own output: no call


def test_without_only_gpu_pods_every_pod_in_an_opted_in_namespace_is_sent(installed: Any) -> None:
    assert "matchConditions" not in hook(installed(VARIANT))


def test_registration_follows_the_values(installed: Any) -> None:
    h = hook(installed(VARIANT))
    assert (h["failurePolicy"], h["timeoutSeconds"], h["reinvocationPolicy"], h["sideEffects"]) == \
        ("Fail", 3, "IfNeeded", "NoneOnDryRun")
    assert h["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["pods"], "scope": "Namespaced"}]
    assert h["clientConfig"]["service"] == {"name": "dra-bridge-webhook", "namespace": NAMESPACE, "path": "/mutate",
                                            "port": 443}
    assert hook(installed())["failurePolicy"] == "Ignore"


def _handshake(cert_pem: bytes, key_pem: bytes, ca_pem: bytes, server_name: str, tmp: Path) -> str:
    """A TLS handshake as the API server makes it: trust only the caBundle, verify the Service DNS name."""
    (tmp / "tls.crt").write_bytes(cert_pem)
    (tmp / "tls.key").write_bytes(key_pem)
    server_ctx = server_context(str(tmp / "tls.crt"), str(tmp / "tls.key"))
    client_ctx = ssl.create_default_context(cadata=ca_pem.decode())
    a, b = socket.socketpair()
    server_error: list[BaseException] = []

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(a, server_side=True) as s:
                s.sendall(b"ok")
        except (ssl.SSLError, OSError) as err:
            server_error.append(err)

    t = threading.Thread(target=serve)
    t.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname=server_name) as s:
            return s.recv(2).decode()
    finally:
        t.join(5)


def test_a_generated_certificate_verifies_against_the_ca_bundle_for_the_service_name(cluster: Cluster,
                                                                                       tmp_path: Path) -> None:
    objects = helm.manifests(cluster.install(SELF_SIGNED))
    secret = one(objects, "Secret", "dra-bridge-webhook-tls")
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    ca_bundle = base64.b64decode(hook(objects)["clientConfig"]["caBundle"])
    assert ca_bundle == data["ca.crt"]
    assert _handshake(data["tls.crt"], data["tls.key"], ca_bundle, f"dra-bridge-webhook.{NAMESPACE}.svc",
                      tmp_path) == "ok"
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(data["tls.crt"], data["tls.key"], ca_bundle, "dra-bridge-webhook.elsewhere.svc", tmp_path)


def test_an_upgrade_keeps_the_generated_certificate(cluster: Cluster) -> None:
    first, second = (helm.manifests(r) for r in cluster.install_then_upgrade(SELF_SIGNED))
    assert one(second, "Secret")["data"] == one(first, "Secret")["data"]
    assert hook(second)["clientConfig"]["caBundle"] == hook(first)["clientConfig"]["caBundle"]


def test_cert_manager_issues_the_serving_certificate_from_a_ca_and_injects_it(installed: Any) -> None:
    objects = installed()
    mwc = one(objects, "MutatingWebhookConfiguration")
    assert mwc["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/dra-bridge-webhook"}
    assert "caBundle" not in hook(objects)["clientConfig"]
    serving = one(objects, "Certificate", "dra-bridge-webhook")["spec"]
    assert serving["secretName"] == "dra-bridge-webhook-tls"
    assert serving["issuerRef"] == {"kind": "Issuer", "name": "dra-bridge-webhook-ca", "group": "cert-manager.io"}
    assert set(serving["dnsNames"]) >= {f"dra-bridge-webhook.{NAMESPACE}.svc"}
    assert one(objects, "Certificate", "dra-bridge-webhook-ca")["spec"]["isCA"] is True
    assert one(objects, "Issuer", "dra-bridge-webhook-ca")["spec"] == {"ca": {"secretName": "dra-bridge-webhook-ca"}}
    theirs = installed(helm.load_values(helm.EXAMPLES / "standalone-device-plugin.yaml"))
    assert not find(theirs, "Issuer")
    assert one(theirs, "Certificate")["spec"]["issuerRef"]["kind"] == "ClusterIssuer"


def test_the_deployment_runs_restricted_with_two_replicas_a_pdb_and_the_certificate_mounted(installed: Any) -> None:
    objects = installed()
    dep = one(objects, "Deployment", "dra-bridge-webhook")
    pod_spec = dep["spec"]["template"]["spec"]
    (container,) = pod_spec["containers"]
    assert dep["spec"]["replicas"] == 2
    assert one(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    # Pod Security Standards "restricted" (k8s.io/pod-security-admission policy/check_*.go)
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    assert pod_spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert not any("hostPath" in v for v in pod_spec["volumes"])
    assert pod_spec["volumes"] == [{"name": "tls", "secret": {"secretName": "dra-bridge-webhook-tls"}}]
    assert "--tls-cert-file=/tls/tls.crt" in container["args"] and "--tls-key-file=/tls/tls.key" in container["args"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"


# -- who can reach the webhook ----------------------------------------------------------------------------------------

API_SERVER_ONLY = helm.EXAMPLES / "api-server-only.yaml"
PROMETHEUS = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}


def test_by_default_any_client_is_served_capped_at_100_templates_per_namespace(installed: Any) -> None:
    objects = installed()
    (container,) = one(objects, "Deployment", "dra-bridge-webhook")["spec"]["template"]["spec"]["containers"]
    assert "--max-templates-per-namespace=100" in container["args"]
    assert not [a for a in container["args"] if a.startswith(("--client-ca-file", "--client-name"))]
    assert [m["name"] for m in container["volumeMounts"]] == ["tls"]
    assert not find(objects, "NetworkPolicy")


def test_client_auth_mounts_the_ca_from_its_config_map_and_passes_the_file_and_names(installed: Any) -> None:
    values = {"webhook": {"maxTemplatesPerNamespace": 7,
                          "clientAuth": {"caConfigMap": "apiserver-client-ca", "caKey": "client-ca.pem",
                                         "names": ["kube-apiserver-webhook-client", "apiserver.example.com"]}}}
    pod_spec = one(installed(values), "Deployment", "dra-bridge-webhook")["spec"]["template"]["spec"]
    (container,) = pod_spec["containers"]
    volume = next(v for v in pod_spec["volumes"] if v["name"] == "client-ca")
    assert volume["configMap"]["name"] == "apiserver-client-ca"
    (item,) = volume["configMap"]["items"]
    assert item["key"] == "client-ca.pem"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "client-ca")
    assert mount["readOnly"] is True
    # The file the binary is told to read is the ConfigMap key as the volume lays it out.
    assert f"--client-ca-file={mount['mountPath']}/{item['path']}" in container["args"]
    assert "--client-name=kube-apiserver-webhook-client,apiserver.example.com" in container["args"]
    assert "--max-templates-per-namespace=7" in container["args"]
    # The probes stay plain HTTPS GETs: the webhook asks no certificate of them.
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_the_network_policy_admits_only_the_api_server_and_the_given_peers_to_the_webhook_port(installed: Any) -> None:
    values = helm.load_values(API_SERVER_ONLY)
    objects = installed(values)
    dep = one(objects, "Deployment", "dra-bridge-webhook")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    policy = one(objects, "NetworkPolicy", "dra-bridge-webhook")  # installed: the emulator accepted it
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    assert match_label_selector_object(spec["podSelector"], dep["spec"]["template"]["metadata"]["labels"])
    assert not match_label_selector_object(spec["podSelector"], {"app.kubernetes.io/component": "node",
                                                                 "app.kubernetes.io/instance": "dra-bridge"})
    (rule,) = spec["ingress"]
    assert rule["from"] == [{"ipBlock": {"cidr": c}} for c in ("10.0.0.10/32", "10.0.0.11/32", "10.0.0.12/32")]
    assert rule["ports"] == [{"port": container["ports"][0]["containerPort"], "protocol": "TCP"}]
    with_prometheus = {"webhook": {"port": 9443, "networkPolicy": {
        "enabled": True, "apiServerCIDRs": ["fd00::10/128"], "additionalFrom": [PROMETHEUS]}}}
    (rule,) = one(installed(with_prometheus), "NetworkPolicy")["spec"]["ingress"]
    assert rule["from"] == [{"ipBlock": {"cidr": "fd00::10/128"}}, PROMETHEUS]
    assert rule["ports"] == [{"port": 9443, "protocol": "TCP"}]
