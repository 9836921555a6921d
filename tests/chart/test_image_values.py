"""The chart's image values: the default names the image `scripts/build_image.py` builds (tests/image checks the
archive's name against these values), one image for every component, an optional digest, and who runs as what:
the node daemon as root (device nodes, the kubelet's sockets), the webhook and the controller as the image's
non-root user."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart import helm
from tests.chart.conftest import emulated_cluster, one

DIGEST = "sha256:" + "0123456789abcdef" * 4
WITH_CONTROLLER = {"controller": {"enabled": True}}


def _containers(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for kind, name in (("DaemonSet", "dra-bridge-node"), ("Deployment", "dra-bridge-webhook"),
                       ("Deployment", "dra-bridge-controller")):
        spec = one(objects, kind, name)["spec"]["template"]["spec"]
        [container] = spec["containers"]
        out[name.removeprefix("dra-bridge-")] = {**container, "podSecurityContext": spec.get("securityContext") or {}}
    return out


def test_every_component_runs_the_built_image_by_default_pulled_only_if_not_present(installed: Any) -> None:
    chart = helm.default_values()
    for component, container in _containers(installed(WITH_CONTROLLER)).items():
        assert container["image"] == f"{chart['image']['repository']}:0.1.0", component
        assert container["imagePullPolicy"] == "IfNotPresent", component


def test_a_digest_pins_the_image_in_every_component(installed: Any) -> None:
    values = {**WITH_CONTROLLER, "image": {"digest": DIGEST, "pullPolicy": "Never"}}
    for component, container in _containers(installed(values)).items():
        assert container["image"] == f"ghcr.io/dra-bridge/dra-bridge:0.1.0@{DIGEST}", component
        assert container["imagePullPolicy"] == "Never"


def test_the_schema_refuses_a_digest_that_is_not_sha256() -> None:
    helm.require_helm()
    with emulated_cluster() as c:
        with pytest.raises(helm.HelmFailed) as failed:
            c.install({"image": {"digest": "latest"}})
    assert "values don't meet the specifications of the schema" in failed.value.message
    assert "digest" in failed.value.message


def test_the_node_daemon_runs_as_root_the_webhook_and_controller_as_the_images_non_root_user(installed: Any) -> None:
    containers = _containers(installed(WITH_CONTROLLER))
    node = containers["node"]["securityContext"]
    assert (node["runAsUser"], node["runAsGroup"], node["privileged"]) == (0, 0, True)
    for component in ("webhook", "controller"):
        pod = containers[component]["podSecurityContext"]
        assert (pod["runAsNonRoot"], pod["runAsUser"], pod["runAsGroup"]) == (True, 65532, 65532), component
        assert containers[component]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
