"""422 Invalid answers with the real server's message shape: schema errors, metadata rules and the resource.k8s.io
rules the published schemas do not carry."""

from __future__ import annotations

import json

import kubernetes
import pytest
from kubernetes.client import ApiException

from .conftest import client_for, resource_slice


def rejected(call, *args, **kwargs) -> dict:
    with pytest.raises(ApiException) as err:
        call(*args, **kwargs)
    assert err.value.status == 422, err.value.body
    body = json.loads(err.value.body)
    assert body["kind"] == "Status" and body["reason"] == "Invalid" and body["code"] == 422
    return body


def test_slice_with_129_devices_is_rejected_like_the_real_server(dra):
    body = rejected(dra.create_resource_slice, resource_slice("big", devices=129))
    assert body["message"] == 'ResourceSlice.resource.k8s.io "big" is invalid: spec.devices: Too many: 129: must have at most 128 items'
    assert body["details"]["causes"] == [
        {"reason": "FieldValueTooMany", "message": "Too many: 129: must have at most 128 items", "field": "spec.devices"}
    ]
    assert body["details"]["name"] == "big" and body["details"]["group"] == "resource.k8s.io"
    assert body["details"]["kind"] == "ResourceSlice"
    assert dra.create_resource_slice(resource_slice("ok", devices=128)).metadata.name == "ok"


def test_slice_with_taints_allows_only_64_devices(make_server, tmp_path):
    # Device taints are kept from 1.36 (DRADeviceTaints beta); on 1.34 they would be dropped before validation.
    client = client_for(make_server(version="1.36.0"), tmp_path)
    dra = kubernetes.client.ResourceV1Api(client)
    s = resource_slice("tainted", devices=65)
    s["spec"]["devices"][0]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    body = rejected(dra.create_resource_slice, s)
    assert "spec.devices: Too many: 65: must have at most 64 items" in body["message"]
    client.close()


def test_bad_attribute_name_is_rejected_with_the_path_of_the_map(dra):
    """A key's errors name the map (validation.go `validateMap`: `validateKey(key, fldPath)`), not the entry: seen on
    kube-apiserver v1.37.2 and v1.38.0-beta.0 (tests/real/test_differential.py, `attribute name with two slashes`)."""
    s = resource_slice("s")
    s["spec"]["devices"][0]["attributes"]["bad name!"] = {"string": "x"}
    body = rejected(dra.create_resource_slice, s)
    assert body["message"].startswith(
        'ResourceSlice.resource.k8s.io "s" is invalid: spec.devices[0].attributes: Invalid value: "bad name!": '
        "a valid C identifier must start with alphabetic character or '_'"
    )
    assert body["details"]["causes"][0]["field"] == "spec.devices[0].attributes"


def test_several_device_errors_are_reported_together(dra):
    s = resource_slice("s", devices=2)
    devs = s["spec"]["devices"]
    devs[1]["name"] = devs[0]["name"]
    devs[0]["attributes"] = {f"a{i}": {"int": i} for i in range(33)}
    devs[1]["attributes"] = {"dup": {"int": 1, "string": "x"}, "v": {"version": "not-semver"}, "long": {"string": "x" * 65}}
    body = rejected(dra.create_resource_slice, s)
    fields = {c["field"] for c in body["details"]["causes"]}
    assert {
        "spec.devices[0]",
        "spec.devices[1]",  # the duplicate name, reported on the element as kube-apiserver v1.37.2 does
        "spec.devices[1].attributes[dup]",
        "spec.devices[1].attributes[v].version",
        "spec.devices[1].attributes[long].string",
    } <= fields
    assert body["message"].startswith('ResourceSlice.resource.k8s.io "s" is invalid: [')


def test_slice_needs_exactly_one_node_selection_and_a_valid_driver(dra):
    s = resource_slice("s", driver="Not_A_Domain")
    s["spec"]["allNodes"] = True
    body = rejected(dra.create_resource_slice, s)
    fields = {c["field"] for c in body["details"]["causes"]}
    assert {"spec", "spec.driver"} <= fields


def test_slice_driver_node_and_pool_are_immutable(dra):
    dra.create_resource_slice(resource_slice("s", node="node-a"))
    body = rejected(dra.patch_resource_slice, "s", {"spec": {"nodeName": "node-b"}})
    assert 'spec.nodeName: Invalid value: "node-b": field is immutable' in body["message"]
    body = rejected(dra.patch_resource_slice, "s", {"spec": {"driver": "other.dev"}})
    assert "spec.driver" in body["message"]
    # devices may change
    patched = dra.patch_resource_slice("s", {"spec": {"devices": [{"name": "gpu-9"}]}})
    assert [d.name for d in patched.spec.devices] == ["gpu-9"]


def claim(name: str, requests: list[dict]) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}, "spec": {"devices": {"requests": requests}}}


def test_claim_request_limits(dra):
    many = [{"name": f"r{i}", "exactly": {"deviceClassName": "gpu.bridge.dev"}} for i in range(33)]
    body = rejected(dra.create_namespaced_resource_claim, "default", claim("c", many))
    assert "spec.devices.requests: Too many: 33: must have at most 32 items" in body["message"]
    negative = [{"name": "r", "exactly": {"deviceClassName": "gpu.bridge.dev", "count": -1}}]
    body = rejected(dra.create_namespaced_resource_claim, "default", claim("c", negative))
    assert "spec.devices.requests[0].exactly.count: Invalid value: -1: must be greater than zero" in body["message"]
    long_cel = [{"name": "r", "exactly": {"deviceClassName": "gpu.bridge.dev", "selectors": [{"cel": {"expression": "true || " * 1400 + "true"}}]}}]
    body = rejected(dra.create_namespaced_resource_claim, "default", claim("c", long_cel))
    assert "spec.devices.requests[0].exactly.selectors[0].cel.expression: Too long: may not be more than 10240 bytes" in body["message"]


def test_an_exact_request_defaults_to_one_device_even_when_count_is_zero(dra):
    # pkg/apis/resource/v1/defaults.go: allocationMode defaults to ExactCount, then a zero count to 1.
    zero = [{"name": "r", "exactly": {"deviceClassName": "gpu.bridge.dev", "count": 0}},
            {"name": "s", "exactly": {"deviceClassName": "gpu.bridge.dev"}}]
    made = dra.create_namespaced_resource_claim("default", claim("c", zero))
    assert [(r.exactly.allocation_mode, r.exactly.count) for r in made.spec.devices.requests] == [
        ("ExactCount", 1), ("ExactCount", 1)]


def test_claim_spec_is_immutable_but_status_is_writable(dra):
    ok = [{"name": "gpu", "exactly": {"deviceClassName": "gpu.bridge.dev", "count": 1}}]
    dra.create_namespaced_resource_claim("default", claim("c", ok))
    body = rejected(dra.patch_namespaced_resource_claim, "c", "default", {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.bridge.dev", "count": 2}}]}}})
    assert "spec: Invalid value" in body["message"] and "field is immutable" in body["message"]
    status = {"status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.bridge.dev", "pool": "node-a", "device": "gpu-0"}]}}}}
    updated = dra.patch_namespaced_resource_claim_status("c", "default", status)
    assert updated.status.allocation.devices.results[0].device == "gpu-0"


def test_schema_errors_name_the_field(custom):
    # CustomObjectsApi sends the dict untouched (the typed APIs would refuse it client-side).
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"replicas": "three", "selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }
    body = rejected(custom.create_namespaced_custom_object, "apps", "v1", "default", "deployments", deployment)
    assert body["details"]["causes"][0]["field"] == "spec.replicas"
    assert body["message"].startswith('Deployment.apps "d" is invalid: spec.replicas: Invalid value: "three"')


def test_missing_required_field_is_required_value(dra):
    body = rejected(dra.create_device_class, {"metadata": {"name": "x"}})
    assert body["details"]["causes"][0] == {"reason": "FieldValueRequired", "message": "Required value", "field": "spec"}


def test_object_and_namespace_names_must_be_dns_names(core):
    body = rejected(core.create_namespaced_config_map, "default", {"metadata": {"name": "Bad_Name"}})
    assert body["message"].startswith('ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain')
    body = rejected(core.create_namespace, {"metadata": {"name": "a.b"}})
    assert "a lowercase RFC 1123 label" in body["message"]
    body = rejected(core.create_namespaced_config_map, "default", {"metadata": {"name": "ok", "labels": {"bad key!": "v"}}})
    assert body["details"]["causes"][0]["field"] == "metadata.labels"


def test_v1beta1_objects_are_converted_and_visible_in_every_version(make_server, tmp_path):
    srv = make_server(resource_versions=("v1", "v1beta1"))
    client = client_for(srv, tmp_path)
    beta = kubernetes.client.ResourceV1beta1Api(client)
    v1 = kubernetes.client.ResourceV1Api(client)
    beta.create_resource_slice({
        "metadata": {"name": "s"},
        "spec": {"driver": "gpu.bridge.dev", "nodeName": "n", "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "gpu-0", "basic": {"attributes": {"index": {"int": 0}}}}]},
    })
    as_v1 = v1.read_resource_slice("s")
    assert as_v1.api_version == "resource.k8s.io/v1"
    assert as_v1.spec.devices[0].attributes["index"].int == 0
    as_beta = beta.read_resource_slice("s")
    assert as_beta.spec.devices[0].basic.attributes["index"].int == 0
    claim_v1 = claim("c", [{"name": "gpu", "exactly": {"deviceClassName": "gpu.bridge.dev", "count": 2}}])
    v1.create_namespaced_resource_claim("default", claim_v1)
    assert beta.read_namespaced_resource_claim("c", "default").spec.devices.requests[0].count == 2
    client.close()


def test_validation_can_be_switched_off(make_server, tmp_path):
    srv = make_server(validate=False)
    client = client_for(srv, tmp_path)
    dra = kubernetes.client.ResourceV1Api(client)
    assert dra.create_resource_slice(resource_slice("big", devices=129)).metadata.name == "big"
    client.close()


def test_a_network_policy_is_stored_with_a_generation_and_schema_validated(api_client, custom):
    # Served for the chart's webhook.networkPolicy: stored and validated, not enforced (there is no pod network).
    net = kubernetes.client.NetworkingV1Api(api_client)
    policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "webhook"},
              "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/component": "webhook"}},
                       "policyTypes": ["Ingress"],
                       "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.10/32"}}],
                                    "ports": [{"port": 8443, "protocol": "TCP"}]}]}}
    created = net.create_namespaced_network_policy("default", policy)
    assert created.metadata.generation == 1
    assert created.spec.ingress[0]._from[0].ip_block.cidr == "10.0.0.10/32"
    assert [p.metadata.name for p in net.list_namespaced_network_policy("default").items] == ["webhook"]
    bad = {**policy, "metadata": {"name": "bad"},
           "spec": {**policy["spec"], "ingress": [{"from": [{"ipBlock": {"cidr": 10}}]}]}}
    body = rejected(custom.create_namespaced_custom_object, "networking.k8s.io", "v1", "default", "networkpolicies",
                    bad)
    assert body["details"]["causes"][0]["field"] == "spec.ingress[0].from[0].ipBlock.cidr"
    assert body["message"].startswith('NetworkPolicy.networking.k8s.io "bad" is invalid')
