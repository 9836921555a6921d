"""`helm install` with the chart's defaults works on a cluster without cert-manager, and every prerequisite the values
need is checked at render time: a cluster that lacks it refuses the install with one sentence naming the value to
set, before anything is created; with that value set, the same cluster takes the install.

The clusters differ the way Helm's `.Capabilities` sees them (what `helm template --kube-version/--api-versions`
would give): the API emulator's discovery, with or without cert-manager's and the Prometheus Operator's CRDs, with
no or older `resource.k8s.io` versions, with ValidatingAdmissionPolicy turned off (an API server's
`--runtime-config=admissionregistration.k8s.io/v1/validatingadmissionpolicies=false`). The Kubernetes version floor
is Chart.yaml's kubeVersion, which Helm enforces (test_lint_and_install.py); offline renders (`helm lint`) of values
that name cert-manager stay clean (the documented values files are linted there)."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from bridge.sandbox.apiserver.profiles import profile_for

from tests.chart import helm
from tests.chart.conftest import NAMESPACE, Cluster, emulated_cluster, find, one

TLS_NOTE_SELF_SIGNED = ("Webhook TLS: a CA and certificate the chart generated (webhook.tls.mode auto, and this "
                        "cluster does not serve\ncert-manager.io/v1)")
TLS_NOTE_CERT_MANAGER = "Webhook TLS: cert-manager (webhook.tls.mode auto, and this cluster serves cert-manager.io/v1)"
NO_DRA = {"deviceClass": {"create": False}, "node": {"dra": "off"}}


def _without_vap(c: Cluster) -> None:
    for plural in ("validatingadmissionpolicies", "validatingadmissionpolicybindings"):
        c.server.registry.types.pop(("admissionregistration.k8s.io", "v1", plural))


@dataclass(frozen=True)
class Shape:
    """A cluster missing one prerequisite."""

    version: str = "1.34.2"
    resource_versions: tuple[str, ...] = ("v1", "v1beta2", "v1beta1")
    crds: bool = True
    tweak: Callable[[Cluster], None] | None = None


# case -> (cluster, values that need what it lacks, the value the message must name, values that make it install)
REFUSED: dict[str, tuple[Shape, dict[str, Any], str, dict[str, Any]]] = {
    "dra-off-1.33": (Shape("1.33.5", ()), {}, "set deviceClass.create=false, node.dra=off and controller.enabled=false",
                     NO_DRA),
    "dra-off-controller": (Shape("1.33.5", ()), {**NO_DRA, "controller": {"enabled": True}},
                           "controller.enabled=false", NO_DRA),
    "device-class-v1-on-1.33": (Shape("1.33.5", ("v1beta2", "v1beta1")), {"resourceApiVersion": "v1"},
                                "set resourceApiVersion to auto", {"resourceApiVersion": "v1beta1"}),
    "no-validating-admission-policy": (Shape(tweak=_without_vap), {}, "set nodeRestriction.enabled=false",
                                       {"nodeRestriction": {"enabled": False}}),
    "cert-manager-asked-for": (Shape(crds=False), {"webhook": {"tls": {"mode": "certManager"}}},
                               "set webhook.tls.mode to auto or selfSigned", {"webhook": {"tls": {"mode": "auto"}}}),
    "issuer-without-cert-manager": (Shape(crds=False),
                                    {"webhook": {"tls": {"certManager": {"issuerRef": {
                                        "kind": "ClusterIssuer", "name": "ca", "group": "cert-manager.io"}}}}},
                                    "remove webhook.tls.certManager.issuerRef", {}),
    "service-monitor-without-prometheus-operator": (Shape(crds=False),
                                                    {"metrics": {"serviceMonitor": {"enabled": True}}},
                                                    "set metrics.serviceMonitor.enabled=false", {}),
}


def _one_sentence(error: str) -> str:
    """The chart's own message out of Helm's `execution error at (<template>): <message>`."""
    message = error.split("): ", 1)[1] if "execution error at (" in error else error
    assert not re.search(r"[.!?]\s+[A-Z]", message), f"more than one sentence: {message}"
    return message


@pytest.fixture(scope="module")
def attempts() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Each case on its own cluster: the refused install's answer, then the answer to the same install with the
    value the message names."""
    helm.require_helm()
    out = {}
    for case, (shape, values, _, fixed) in REFUSED.items():
        with emulated_cluster(shape.version, shape.resource_versions, crds=shape.crds,
                              profile=profile_for(shape.version)) as c:
            if shape.tweak:
                shape.tweak(c)
            refused, accepted = helm.helm_action({
                "action": "each", "chart": str(helm.CHART), "namespace": NAMESPACE, "kubeconfig": str(c.kubeconfig),
                "home": str(c.workdir), "steps": [{"action": "install", "release": "refused", "values": values},
                                                  {"action": "install", "release": "fixed", "values": fixed}]})
        out[case] = (refused, accepted)
    return out


@pytest.mark.parametrize("case", REFUSED)
def test_a_missing_prerequisite_refuses_the_install_in_one_sentence_naming_the_value_to_set(
        case: str, attempts: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    refused, accepted = attempts[case]
    assert not refused["ok"], f"{case}: the install went through"
    assert REFUSED[case][2] in _one_sentence(refused["error"])
    assert accepted["ok"], f"{case}: setting what the message names did not help: {accepted.get('error')}"
    assert accepted["result"]["info"]["status"] == "deployed"


def test_defaults_without_cert_manager_install_with_a_generated_certificate_and_the_notes_say_why(
        cluster_without_cert_manager: Cluster) -> None:
    release = cluster_without_cert_manager.install({})
    objects = helm.manifests(release)
    assert release["info"]["status"] == "deployed"
    assert not find(objects, "Certificate") and not find(objects, "Issuer")
    secret = one(objects, "Secret", "dra-bridge-webhook-tls")
    [hook] = one(objects, "MutatingWebhookConfiguration")["webhooks"]
    assert base64.b64decode(hook["clientConfig"]["caBundle"]) == base64.b64decode(secret["data"]["ca.crt"])
    assert TLS_NOTE_SELF_SIGNED in release["info"]["notes"]
    assert "Install cert-manager and run helm upgrade" in release["info"]["notes"]


def test_defaults_with_cert_manager_get_a_cert_manager_certificate_and_the_notes_say_why(
        installed: Any, installed_notes: Any) -> None:
    objects = installed()
    assert one(objects, "Certificate", "dra-bridge-webhook")
    assert not find(objects, "Secret")
    assert TLS_NOTE_CERT_MANAGER in installed_notes()


def test_an_explicit_mode_is_kept_and_named_in_the_notes(installed: Any, installed_notes: Any) -> None:
    values = {"webhook": {"tls": {"mode": "selfSigned"}}}
    assert one(installed(values), "Secret", "dra-bridge-webhook-tls") and not find(installed(values), "Certificate")
    assert "Webhook TLS: a CA and certificate the chart generated (webhook.tls.mode selfSigned)" in \
        installed_notes(values)


def test_on_1_33_without_dra_the_device_plugin_half_installs_without_a_device_class() -> None:
    helm.require_helm()
    with emulated_cluster("1.33.5", (), profile=profile_for("1.33.5")) as c:
        objects = helm.manifests(c.install(NO_DRA))
    assert not find(objects, "DeviceClass")
    [container] = one(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert "--dra=off" in container["args"]


@pytest.fixture
def cluster_without_cert_manager() -> Any:
    helm.require_helm()
    with emulated_cluster(crds=False) as c:
        yield c
