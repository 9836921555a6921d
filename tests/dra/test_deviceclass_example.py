"""examples/deviceclass*.yaml: schema-valid for the versions they target, and selecting exactly the bridge's
devices as the node daemon publishes them (and what the webhook's GFD-label CEL expects of those devices)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from bridge.dra.slices import NodeRef, SliceInputs, desired_slices
from bridge.inventory.simulated import devices_from_spec
from bridge.kube import connect
from bridge.kube.api import ResourceAPI
from bridge.sandbox.apiserver import ApiServer
from bridge.webhook.cel import GFD_MEMORY, GFD_PRODUCT, Requirement, Semver, evaluate, map_requirement

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
V1 = EXAMPLES / "deviceclass.yaml"
V1BETA1 = EXAMPLES / "deviceclass-v1beta1.yaml"


def load(path: Path) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert len(docs) == 1
    return docs[0]


@pytest.mark.parametrize(("path", "k8s"), [(V1, "1.34.0"), (V1, "1.35.0"), (V1, "1.36.0"), (V1BETA1, "1.32.0"),
                                           (V1BETA1, "1.33.0")])
def test_example_deviceclass_is_valid_for_its_kubernetes_versions(path, k8s):
    kubernetes_validate.validate(load(path), k8s, strict=True)


def test_v1_example_is_not_valid_where_resource_v1_is_not_served():
    with pytest.raises((kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError)):
        kubernetes_validate.validate(load(V1), "1.33.0", strict=True)


def test_both_examples_describe_the_same_class():
    assert load(V1)["metadata"] == load(V1BETA1)["metadata"]
    assert load(V1)["spec"] == load(V1BETA1)["spec"]


def test_class_is_named_like_the_driver_and_has_no_extended_resource_name():
    cls = load(V1)
    assert cls["metadata"]["name"] == "gpu.dra-bridge.io"
    assert "extendedResourceName" not in cls["spec"]


def device_view(entry: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    attrs = {}
    for name, value in entry["attributes"].items():
        ((kind, v),) = value.items()
        attrs[name] = Semver(v) if kind == "version" else v
    return attrs, {k: c["value"] for k, c in entry["capacity"].items()}


def published_device(spec: str = "1xH100-80GB") -> dict[str, Any]:
    dev = devices_from_spec(spec, "node-a")[0]
    return desired_slices(SliceInputs(node=NodeRef("node-a", "uid-1"), dra_devices=(dev,)))[0]["spec"]["devices"][0]


def test_class_selector_selects_the_bridges_devices_and_not_another_drivers():
    expression = load(V1)["spec"]["selectors"][0]["cel"]["expression"]
    attrs, caps = device_view(published_device())
    assert evaluate(expression, attrs, caps, driver="gpu.dra-bridge.io") is True
    assert evaluate(expression, attrs, caps, driver="gpu.nvidia.com") is False


def test_published_attributes_satisfy_the_webhooks_gfd_label_selectors():
    # GFD labels of an H100 node: product with spaces as dashes, memory in MiB.
    attrs, caps = device_view(published_device("1xH100-80GB"))
    product = map_requirement(Requirement(GFD_PRODUCT, "In", ("NVIDIA-H100-80GB-HBM3",)))
    memory = map_requirement(Requirement(GFD_MEMORY, "In", ("81559",)))
    assert product.expression and memory.expression
    assert evaluate(product.expression, attrs, caps) is True
    assert evaluate(memory.expression, attrs, caps) is True
    other_attrs, other_caps = device_view(published_device("1xA100-40GB"))
    assert evaluate(product.expression, other_attrs, other_caps) is False


@pytest.mark.parametrize(("path", "k8s", "served", "version"), [
    (V1, "1.34.2", ("v1", "v1beta2", "v1beta1"), "v1"),
    (V1BETA1, "1.33.1", ("v1beta2", "v1beta1"), "v1beta1"),
])
def test_example_deviceclass_is_accepted_by_the_api_server(tmp_path, path, k8s, served, version):
    with ApiServer(version=k8s, resource_versions=served) as srv:
        srv.write_kubeconfig(tmp_path / "kc")
        api = connect(tmp_path / "kc")
        stored = api.create(ResourceAPI(version).device_classes, load(path))
        assert stored["metadata"]["name"] == "gpu.dra-bridge.io"
        assert stored["spec"]["selectors"] == load(path)["spec"]["selectors"]
