"""The chart with real Helm: `helm lint` clean with the defaults and each documented values file; installed into the
API emulator, every rendered object is accepted (schema and metadata validation on create) and is also valid under
the strict published schema (no unknown fields); inconsistent values fail the install with a message that says what
to change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import kubernetes_validate

from bridge.kube.api import Resource
from bridge.sandbox.apiserver.profiles import profile_for

from tests.chart import helm
from tests.chart.conftest import NAMESPACE, Cluster, emulated_cluster, one, remember

EXAMPLES = helm.example_files()
INFO = 1  # Helm's support.InfoSev; WarningSev = 2, ErrorSev = 3 (helm.sh/helm/v4 pkg/chart/v2/lint/support)


def test_the_documented_values_files_are_the_ones_tested() -> None:
    assert {p.name for p in EXAMPLES} == {"gpu-operator.yaml", "standalone-device-plugin.yaml", "controller.yaml",
                                          "sandbox.yaml", "existing-secret.yaml", "api-server-only.yaml"}
    readme = (helm.CHART / "README.md").read_text()
    for p in EXAMPLES:
        assert f"examples/{p.name}" in readme, f"{p.name} is not documented in the chart README"


BAD = "bad-values"


@pytest.fixture(scope="module")
def lints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    workdir = tmp_path_factory.mktemp("lint")
    bad = workdir / "bad.yaml"
    bad.write_text("webhook:\n  failurePolicy: Sometimes\n")
    files: list[Path | None] = [None, *EXAMPLES, bad]
    names = ["defaults", *(p.name for p in EXAMPLES), BAD]
    return dict(zip(names, helm.lint_all(files, workdir)))


@pytest.mark.parametrize("name", ["defaults", *(p.name for p in EXAMPLES)])
def test_helm_lint_is_clean(name: str, lints: dict[str, dict[str, Any]]) -> None:
    assert lints[name]["ok"], lints[name]
    result = lints[name]["result"]
    problems = [m for m in result["Messages"] if m["Severity"] > INFO]
    assert result["TotalChartsLinted"] == 1
    assert not problems and not result["Errors"], problems


def test_helm_lint_reports_a_value_the_schema_refuses(lints: dict[str, dict[str, Any]]) -> None:
    result = lints[BAD]["result"]
    assert [m["Path"] for m in result["Messages"] if m["Severity"] == 3] == ["values.yaml", "templates/"]


def _strict_problems(obj: dict[str, Any], k8s_version: str) -> list[str]:
    try:
        kubernetes_validate.validate(obj, k8s_version, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return []  # custom resources (cert-manager, Prometheus Operator): no published schema
    except kubernetes_validate.ValidationError as err:
        return [f"{obj['kind']} {obj['metadata']['name']}: {err.message} at {list(err.path)}"]
    return []


@pytest.mark.parametrize("values_file", [None, *EXAMPLES], ids=lambda p: "defaults" if p is None else p.name)
def test_every_rendered_object_is_accepted_by_the_emulator_and_strictly_schema_valid(
        values_file: Path | None, cluster: Cluster) -> None:
    values = helm.load_values(values_file)
    release = cluster.install(values)
    objects = helm.manifests(release)
    remember(objects, values)
    assert release["info"]["status"] == "deployed"
    assert objects
    for obj in objects:
        stored = _read_back(cluster, obj)
        assert stored["metadata"].get("labels") == obj["metadata"].get("labels")
        if stored["metadata"].get("namespace"):
            assert stored["metadata"]["namespace"] == NAMESPACE, f"{obj['kind']} is outside the release namespace"
    problems = [p for obj in objects for p in _strict_problems(obj, "1.34")]
    assert not problems, "\n".join(problems)


def _read_back(cluster: Cluster, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the emulator stored it, read through the official client."""
    res = _resource(cluster, obj["apiVersion"], obj["kind"])
    return cluster.api.get(res, obj["metadata"]["name"], NAMESPACE if res.namespaced else None)


FAIL_FAST = {
    "no-progress": ({"node": {"updateStrategy": {"type": "RollingUpdate",
                                                 "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}}},
                    "has maxUnavailable 0 and maxSurge 0: the DaemonSet could never roll"),
    "no-progress-percent": ({"node": {"updateStrategy": {"type": "RollingUpdate",
                                                         "rollingUpdate": {"maxUnavailable": "0%", "maxSurge": 0}}}},
                            "has maxUnavailable 0 and maxSurge 0: the DaemonSet could never roll"),
    "secret-name": ({"webhook": {"tls": {"mode": "secret"}}},
                    "set webhook.tls.secretName to an existing kubernetes.io/tls Secret"),
    "secret-ca": ({"webhook": {"tls": {"mode": "secret", "secretName": "tls"}}}, "set webhook.tls.caBundle"),
    "ca-without-secret": ({"webhook": {"tls": {"caBundle": "Zm9v"}}}, "set mode to secret to use them"),
    "issuer-name": ({"webhook": {"tls": {"certManager": {"issuerRef": {"kind": "ClusterIssuer"}}}}},
                    "webhook.tls.certManager.issuerRef needs a name"),
    "fail-closed-1-replica": ({"webhook": {"failurePolicy": "Fail", "replicas": 1}}, "Use webhook.replicas >= 2"),
    "pdb-blocks-drain": ({"webhook": {"podDisruptionBudget": {"minAvailable": 2}}},
                         "must be below webhook.replicas (2)"),
    "extended-on-1.34": ({"webhook": {"target": "extended"}}, "needs Kubernetes 1.36+"),
    "client-names-without-ca": ({"webhook": {"clientAuth": {"names": ["kube-apiserver-webhook-client"]}}},
                                "webhook.clientAuth.names needs webhook.clientAuth.caConfigMap"),
    "network-policy-without-sources": ({"webhook": {"networkPolicy": {"enabled": True}}},
                                       "an ingress rule without sources would admit every client"),
    "controller-without-daemons": ({"controller": {"enabled": True}, "node": {"enabled": False}},
                                   "controller.enabled needs node.enabled"),
}
SCHEMA_REFUSES = {
    "timeout-over-30": ({"webhook": {"timeoutSeconds": 31}}, "timeoutSeconds"),
    "relative-path": ({"node": {"kubeletRoot": "var/lib/kubelet"}}, "kubeletRoot"),
    "bad-split": ({"node": {"draDevices": "half"}}, "draDevices"),
    "no-such-strategy": ({"node": {"updateStrategy": {"type": "Recreate"}}}, "type"),
    "misspelt-key": ({"webhook": {"replica": 3}}, "replica"),
    "no-templates": ({"webhook": {"maxTemplatesPerNamespace": 0}}, "maxTemplatesPerNamespace"),
    "no-moves-per-decision": ({"controller": {"maxMovesPerDecision": 0}}, "maxMovesPerDecision"),
    "address-not-cidr": ({"webhook": {"networkPolicy": {"enabled": True, "apiServerCIDRs": ["10.0.0.10"]}}},
                         "apiServerCIDRs"),
    "names-in-one-string": ({"webhook": {"clientAuth": {"caConfigMap": "ca", "names": ["a,b"]}}}, "names"),
    "misspelt-client-auth-key": ({"webhook": {"clientAuth": {"configMap": "ca"}}}, "configMap"),
}


@pytest.fixture(scope="module")
def refused() -> dict[str, dict[str, Any]]:
    """Every bad-values install attempted once, in one emulator and one Helm process (each fails before creating
    anything, so they cannot disturb one another)."""
    helm.require_helm()
    cases = {**FAIL_FAST, **SCHEMA_REFUSES}
    with emulated_cluster() as c:
        answers = helm.helm_action({"action": "each", "chart": str(helm.CHART), "namespace": NAMESPACE,
                                    "kubeconfig": str(c.kubeconfig), "home": str(c.workdir),
                                    "steps": [{"action": "install", "release": f"r{i}", "values": values}
                                              for i, (values, _) in enumerate(cases.values())]})
        leftovers = c.api.list(_resource(c, "apps/v1", "DaemonSet"), NAMESPACE)["items"]
    assert not leftovers, "a refused install created objects"
    return dict(zip(cases, answers))


@pytest.mark.parametrize("case", FAIL_FAST)
def test_inconsistent_values_fail_the_install_saying_what_to_change(case: str,
                                                                     refused: dict[str, dict[str, Any]]) -> None:
    answer = refused[case]
    assert not answer["ok"]
    assert FAIL_FAST[case][1] in answer["error"]


@pytest.mark.parametrize("case", SCHEMA_REFUSES)
def test_values_the_schema_refuses_fail_the_install_naming_the_field(case: str,
                                                                     refused: dict[str, dict[str, Any]]) -> None:
    answer = refused[case]
    assert not answer["ok"]
    assert "values don't meet the specifications of the schema" in answer["error"]
    assert SCHEMA_REFUSES[case][1] in answer["error"]


def test_on_1_32_the_device_class_is_v1beta1_and_every_object_is_accepted(installed: Any) -> None:
    objects = installed(version="1.32.4", resource_versions=("v1beta1",))
    assert one(objects, "DeviceClass")["apiVersion"] == "resource.k8s.io/v1beta1"
    assert one(installed(), "DeviceClass")["apiVersion"] == "resource.k8s.io/v1"


def test_helm_refuses_a_cluster_older_than_the_charts_floor() -> None:
    helm.require_helm()
    # The emulator plays 1.32 (its oldest release) but reports 1.31.5: Helm refuses on the reported version alone.
    with emulated_cluster(version="1.31.5", resource_versions=("v1beta1",), profile=profile_for("1.32")) as c:
        with pytest.raises(helm.HelmFailed) as failed:
            c.install({})
    assert "chart requires kubeVersion: >=1.32.0-0 which is incompatible with Kubernetes v1.31.5" \
        in failed.value.message


def _resource(cluster: Cluster, api_version: str, kind: str) -> Resource:
    rt = cluster.server.registry.by_kind(api_version, kind)
    assert rt is not None
    return Resource(rt.group, rt.version, rt.plural, rt.kind, rt.namespaced)


def test_a_device_class_applied_by_hand_before_the_chart_is_used_not_fought_over(cluster: Cluster) -> None:
    """The README's node-daemon section has you apply examples/deviceclass.yaml; installing the chart after it used to
    fail ("cannot be imported into the current release"). The chart now leaves that class alone and uses it."""
    import yaml

    by_hand = yaml.safe_load((helm.REPO / "examples" / "deviceclass.yaml").read_text())
    classes = _resource(cluster, "resource.k8s.io/v1", "DeviceClass")
    cluster.api.create(classes, by_hand)
    release = cluster.install({})
    assert release["info"]["status"] == "deployed"
    assert not [o for o in helm.manifests(release) if o["kind"] == "DeviceClass"]
    kept = cluster.api.get(classes, by_hand["metadata"]["name"])
    assert kept["spec"] == by_hand["spec"] and "meta.helm.sh/release-name" not in (
        kept["metadata"].get("annotations") or {})


def test_the_class_the_release_created_stays_the_releases_on_upgrade(cluster: Cluster) -> None:
    first, second = (helm.manifests(r) for r in cluster.install_then_upgrade({}))
    assert one(first, "DeviceClass") == one(second, "DeviceClass")
