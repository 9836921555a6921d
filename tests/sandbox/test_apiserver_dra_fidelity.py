"""The API emulator behaves like the real server where the DRA stand-ins and the bridge depend on it: DELETE answers,
gate-dependent field dropping, taint and toleration validation, CEL selectors checked at admission time, pod DRA
validation, pods/binding, events.k8s.io stored as core Events, server-side defaults."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.kube import EVENTS, PODS, Conflict, Invalid, KubeAPI, connect
from bridge.kvalues import gfd
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.apiserver.strategy import drop_disabled_fields
from bridge.sandbox.scheduler.recorder import EVENTS_V1

Obj = dict[str, Any]
DRIVER = "gpu.dra-bridge.io"


@pytest.fixture
def kube(make_server: Callable[..., ApiServer], tmp_path: Path) -> Iterator[Callable[..., tuple[ApiServer, KubeAPI]]]:
    def make(version: str = "1.37.0", **kw: Any) -> tuple[ApiServer, KubeAPI]:
        srv = make_server(version=version, **kw)
        path = tmp_path / f"kc-{srv.port}"
        srv.write_kubeconfig(path)
        return srv, connect(path, timeout=5.0)
    yield make


def slice_obj(name: str = "s", taints: list[Obj] | None = None, **device: Any) -> Obj:
    dev: Obj = {"name": "gpu-0", "attributes": {"productName": {"string": "H100"}}, **device}
    if taints is not None:
        dev["taints"] = taints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": {"driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                     "devices": [dev]}}


def template(name: str, *requests: Obj) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": list(requests)}}}}


def exact(selector: str | None = None, **extra: Any) -> Obj:
    body: Obj = {"deviceClassName": DRIVER, **extra}
    if selector is not None:
        body["selectors"] = [{"cel": {"expression": selector}}]
    return {"name": "gpu", "exactly": body}


def invalid(call: Callable[[], Any]) -> Invalid:
    with pytest.raises(Invalid) as err:
        call()
    return err.value


# -- DELETE -----------------------------------------------------------------------------------------------------------

def _delete_raw(srv: ApiServer, path: str) -> Obj:
    import urllib.request

    req = urllib.request.Request(srv.url + path, method="DELETE")
    with urllib.request.urlopen(req) as resp:  # noqa: S310 - loopback emulator
        return json.loads(resp.read())


@pytest.mark.parametrize(("create_path", "body", "returns_object"), [
    ("/apis/resource.k8s.io/v1/resourceslices", slice_obj("gone"), True),
    ("/apis/resource.k8s.io/v1/deviceclasses", {"metadata": {"name": "gone"}, "spec": {}}, True),
    ("/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
     {"metadata": {"name": "gone"}, "spec": {"devices": {"requests": [exact()]}}}, True),
    ("/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates",
     {"metadata": {"name": "gone"}, "spec": {"spec": {"devices": {"requests": [exact()]}}}}, True),
    ("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "gone"}}, True),
    ("/api/v1/namespaces/default/resourcequotas", {"metadata": {"name": "gone"}, "spec": {}}, True),
    ("/api/v1/nodes", {"metadata": {"name": "gone"}}, False),
    ("/api/v1/namespaces/default/secrets", {"metadata": {"name": "gone"}}, False),
    ("/apis/coordination.k8s.io/v1/namespaces/default/leases", {"metadata": {"name": "gone"}, "spec": {}}, False),
])
def test_delete_answers_the_object_only_where_the_real_storage_sets_return_deleted_object(kube, create_path, body, returns_object):
    srv, _ = kube("1.34.2")
    import urllib.request

    req = urllib.request.Request(srv.url + create_path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as resp:  # noqa: S310
        made = json.loads(resp.read())
    answer = _delete_raw(srv, f"{create_path}/gone")
    if returns_object:
        assert answer["kind"] == made["kind"] and answer["metadata"]["uid"] == made["metadata"]["uid"]
    else:
        assert answer["kind"] == "Status" and answer["status"] == "Success"
        assert answer["details"]["name"] == "gone"


# -- gates: dropDisabledFields ------------------------------------------------------------------------------------

TAINT = {"key": "gpu.dra-bridge.io/unhealthy", "value": "xid-79", "effect": "NoSchedule"}


def test_device_taints_are_dropped_silently_where_dra_device_taints_is_off(kube):
    _, api = kube("1.34.2")
    made = api.create(api.resource_api().slices, slice_obj(taints=[TAINT]))
    assert "taints" not in made["spec"]["devices"][0]


def test_device_taints_are_kept_and_default_their_time_added_where_the_gate_is_on(kube):
    _, api = kube("1.36.0")
    made = api.create(api.resource_api().slices, slice_obj(taints=[TAINT]))
    (taint,) = made["spec"]["devices"][0]["taints"]
    assert {k: taint[k] for k in ("key", "value", "effect")} == TAINT and taint["timeAdded"]


def test_an_admin_can_turn_a_gate_off_and_taints_already_stored_survive_updates(kube):
    _, api = kube("1.36.0")
    rapi = api.resource_api()
    stored = api.create(rapi.slices, slice_obj(taints=[TAINT]))
    srv_off, api_off = kube("1.36.0", feature_gates={"DRADeviceTaints": False})
    assert "taints" not in api_off.create(api_off.resource_api().slices, slice_obj(taints=[TAINT]))["spec"]["devices"][0]
    # An update of the slice stored while the gate was on keeps its taints (dropDisabledFields looks at the old
    # object: resourceslice/strategy.go); an old object without taints does not let the update add them.
    rt = srv_off.registry.get("resource.k8s.io", "v1", "resourceslices")
    updated = copy.deepcopy(stored)
    updated["spec"]["devices"][0]["attributes"]["note"] = {"string": "updated"}
    kept = drop_disabled_fields(rt, copy.deepcopy(updated), stored, srv_off.profile)
    assert kept["spec"]["devices"][0]["taints"] == stored["spec"]["devices"][0]["taints"]
    untainted = copy.deepcopy(stored)
    del untainted["spec"]["devices"][0]["taints"]
    assert "taints" not in drop_disabled_fields(rt, updated, untainted, srv_off.profile)["spec"]["devices"][0]


def test_first_available_is_dropped_where_prioritized_list_is_off_so_the_request_is_invalid(kube):
    _, api = kube("1.33.0")  # DRAPrioritizedList alpha: off
    rapi = api.resource_api()
    sub = {"name": "big", "deviceClassName": DRIVER}
    err = invalid(lambda: api.create(rapi.claim_templates, {
        "apiVersion": f"resource.k8s.io/{rapi.version}", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": [sub]}]}}}}))
    assert "spec.spec.devices.requests[0]: Required value: exactly one of `exactly` or `firstAvailable` is required" in err.message


def test_extended_resource_name_exists_only_where_dra_extended_resource_is_on(kube):
    cls = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
           "spec": {"extendedResourceName": "nvidia.com/gpu"}}
    _, api = kube("1.35.0")
    assert "extendedResourceName" not in api.create(api.resource_api().device_classes, dict(cls))["spec"]
    _, api = kube("1.36.0")
    assert api.create(api.resource_api().device_classes, dict(cls))["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    bad = dict(cls, metadata={"name": "bad"}, spec={"extendedResourceName": "gpu"})
    err = invalid(lambda: api.create(api.resource_api().device_classes, bad))
    assert 'spec.extendedResourceName: Invalid value: "gpu": must be a valid extended resource name' in err.message


def test_pod_extended_resource_claim_status_is_dropped_where_the_gate_is_off(kube):
    _, api = kube("1.35.0")
    api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                      "spec": {"containers": [{"name": "c", "image": "x"}]}}, "default")
    out = api.patch(PODS, "p", {"status": {"extendedResourceClaimStatus": {"resourceClaimName": "x", "requestMappings": [
        {"containerName": "c", "resourceName": "nvidia.com/gpu", "requestName": "r"}]}}}, "default",
        subresource="status")
    assert "extendedResourceClaimStatus" not in out["status"]


# -- taints and tolerations validation ------------------------------------------------------------------------------

@pytest.mark.parametrize(("taint", "message"), [
    ({"key": "bad key!", "effect": "NoSchedule"}, 'spec.devices[0].taints[0].key: Invalid value: "bad key!"'),
    ({"key": "k", "value": "not a label value", "effect": "NoSchedule"},
     'spec.devices[0].taints[0].value: Invalid value: "not a label value"'),
    ({"key": "k"}, "spec.devices[0].taints[0].effect: Required value"),
    ({"key": "k", "effect": "PreferNoSchedule"},
     'spec.devices[0].taints[0].effect: Unsupported value: "PreferNoSchedule": supported values: "NoExecute", "NoSchedule", "None"'),
    ({"effect": "NoSchedule"}, 'spec.devices[0].taints[0].key: Invalid value: "": name part must be non-empty'),
])
def test_device_taints_are_validated_like_the_real_server(kube, taint, message):
    _, api = kube("1.37.0")
    err = invalid(lambda: api.create(api.resource_api().slices, slice_obj(taints=[taint])))
    assert message in err.message


def test_the_none_taint_effect_arrived_with_1_35(kube):
    _, api = kube("1.34.2", feature_gates={"DRADeviceTaints": True})
    err = invalid(lambda: api.create(api.resource_api().slices, slice_obj(taints=[{"key": "k", "effect": "None"}])))
    assert 'Unsupported value: "None": supported values: "NoExecute", "NoSchedule"' in err.message


def test_a_version_attribute_number_of_19_digits_is_refused_from_1_38_with_its_message(kube):
    """pkg/apis/resource/validation/validation.go `numericIdentifier`: unbounded through 1.37, 18 digits from 1.38."""
    attrs = {"attributes": {"driverVersion": {"version": "1234567890123456789.0.0"}}}
    _, api37 = kube("1.37.2")
    assert api37.create(api37.resource_api().slices, slice_obj(**attrs))["metadata"]["name"] == "s"
    _, api38 = kube("1.38.0-beta.0")
    err = invalid(lambda: api38.create(api38.resource_api().slices, slice_obj(**attrs)))
    assert ('spec.devices[0].attributes[driverVersion].version: Invalid value: "1234567890123456789.0.0": must be a '
            'string compatible with semver.org spec 2.0.0, with at most 18 digits in numbers') in err.message


def test_an_attribute_name_with_two_slashes_is_stored_until_1_37_and_refused_from_1_38(kube):
    """Seen on kube-apiserver v1.37.2 (tests/real/test_differential.py): `strings.Split` gives three parts, which
    `validateQualifiedName`'s switch has no case for. 1.38 adds one. A key's error names the map."""
    attrs = {"attributes": {"example.com/a/b": {"int": 1}}}
    _, api37 = kube("1.37.2")
    api37.create(api37.resource_api().slices, slice_obj(**attrs))
    _, api38 = kube("1.38.0-beta.0")
    err = invalid(lambda: api38.create(api38.resource_api().slices, slice_obj(**attrs)))
    assert 'spec.devices[0].attributes: Invalid value: "example.com/a/b": must not contain more than one slash' in (
        err.message)


def test_from_1_38_a_forbidden_pod_update_lists_what_a_gated_pod_may_change(kube):
    """pkg/apis/core/validation/validation.go `updatablePodSpecFields`: three entries more in v1.38.0-beta.0."""
    gated = "`spec.schedulingGates` (only deletions of existing scheduling gates)"
    for version, listed in (("1.37.2", False), ("1.38.0-beta.0", True)):
        _, api = kube(version)
        api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                          "spec": {"containers": [{"name": "c", "image": "x"}]}}, "default")
        err = invalid(lambda: api.patch(PODS, "p", {"spec": {"restartPolicy": "Never"}}, "default"))
        assert "pod updates may not change fields other than `spec.containers[*].image`" in err.message
        assert (gated in err.message) is listed
        assert err.message.endswith("(only while the pod has scheduling gates)") is listed


def test_capacity_requests_are_validated_from_1_38_and_not_before(kube):
    """v1.38.0-beta.0: key names (validateCapacityNames), at most 32 entries and values >= 0 (declarative);
    1.37.2 stores anything (both seen by tests/real/test_differential.py)."""
    negative = template("neg", exact(capacity={"requests": {"memory": "-1"}}))
    many = template("many", exact(capacity={"requests": {f"c{i}": "1" for i in range(33)}}))
    _, api37 = kube("1.37.2")
    for body in (negative, many):
        api37.create(api37.resource_api().claim_templates, body, "default")
    _, api38 = kube("1.38.0-beta.0")
    err = invalid(lambda: api38.create(api38.resource_api().claim_templates, negative, "default"))
    assert ('spec.spec.devices.requests[0].exactly.capacity.requests[memory]: Invalid value: "-1": must be greater '
            'than or equal to 0') in err.message
    err = invalid(lambda: api38.create(api38.resource_api().claim_templates, many, "default"))
    assert "spec.spec.devices.requests[0].exactly.capacity.requests: Too many: 33: must have at most 32 items" in (
        err.message)


def test_tolerations_are_validated_and_default_to_the_equal_operator(kube):
    _, api = kube("1.37.0")
    rapi = api.resource_api()
    made = api.create(rapi.claim_templates, template("ok", exact(tolerations=[{"key": "k", "value": "v"}])))
    tol = made["spec"]["spec"]["devices"]["requests"][0]["exactly"]["tolerations"][0]
    assert tol["operator"] == "Equal"
    err = invalid(lambda: api.create(rapi.claim_templates, template(
        "bad", exact(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]))))
    assert ("spec.spec.devices.requests[0].exactly.tolerations[0].value: Invalid value: \"v\": must be empty for "
            "operator `Exists`") in err.message


# -- CEL selectors -------------------------------------------------------------------------------------------------

def test_an_invalid_cel_selector_is_a_422_with_the_real_message_shape(kube):
    _, api = kube("1.37.0")
    err = invalid(lambda: api.create(api.resource_api().claim_templates, template("t", exact("device.driver =="))))
    assert err.message.startswith(
        'ResourceClaimTemplate.resource.k8s.io "t" is invalid: spec.spec.devices.requests[0].exactly.selectors[0]'
        '.cel.expression: Invalid value: "device.driver ==": compilation failed: ERROR: <input>:1:17: Syntax error: ')
    assert "\n | device.driver ==\n | ................^" in err.message
    (cause,) = err.causes
    assert cause.field == "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression"
    assert cause.reason == "FieldValueInvalid"


@pytest.mark.parametrize(("expression", "detail"), [
    ("device.attribute['x'] == 1", "undefined field 'attribute'"),
    ("devices.driver == 'x'", "undeclared reference to 'devices' (in container '')"),
    ("device.driver", "must evaluate to bool or the unknown type, not string"),
    ("device.driver == 1", "found no matching overload for '_==_' applied to '(string, int)'"),
    ("device.allowMultipleAllocations", "undefined field 'allowMultipleAllocations'"),
])
def test_selectors_are_type_checked_in_the_dra_environment(kube, expression, detail):
    _, api = kube("1.35.0")  # DRAConsumableCapacity off: no device.allowMultipleAllocations
    err = invalid(lambda: api.create(api.resource_api().claim_templates, template("t", exact(expression))))
    assert detail in err.message


def test_selectors_using_the_dra_libraries_compile(kube):
    _, api = kube("1.37.0")
    ok = (f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].productName.startsWith("H1") && '
          f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0 && device.allowMultipleAllocations == false'
          f' && cel.bind(g, device.attributes["{DRIVER}"], g.index >= 0)')
    api.create(api.resource_api().claim_templates, template("t", exact(ok)))


def test_a_selector_over_the_cost_limit_is_forbidden(kube):
    _, api = kube("1.37.0")
    big = "[" + ",".join(str(i) for i in range(100)) + "]"
    expr = f"{big}.all(a, {big}.all(b, {big}.all(c, a + b + c >= 0)))"
    err = invalid(lambda: api.create(api.resource_api().claim_templates, template("t", exact(expr))))
    assert "selectors[0].cel.expression: Forbidden: too complex, exceeds cost limit" in err.message


@pytest.mark.parametrize(("expression", "refused"), [
    # kube-apiserver v1.37.2 refused these (cel-go cannot bound a string joined from a list an expression computed)
    (f'cel.bind(p, device.attributes["{DRIVER}"].productName.findAll("[A-Za-z0-9_. -]").join("").split(" ")'
     f'.filter(w, w != "").join("-"), p == "NVIDIA-H100-80GB-HBM3")', True),
    ('["a", "b"].join("-") == "a-b"', True),
    # ... and accepted these: join on a dyn attribute value, a regular expression (estimated at 823)
    (f'device.attributes["{DRIVER}"].tags.join(",") == "a"', False),
    (gfd.map_requirement(gfd.Requirement(gfd.PRODUCT, "In", ("NVIDIA-H100-80GB-HBM3",))).expression, False),
])
def test_joining_a_computed_list_is_too_complex_as_on_the_real_api_server(kube, expression, refused):
    _, api = kube("1.37.0")
    create = lambda: api.create(api.resource_api().claim_templates, template("t", exact(expression)))  # noqa: E731
    if refused:
        assert "Forbidden: too complex, exceeds cost limit" in invalid(create).message
    else:
        create()


def test_unchanged_device_class_selectors_are_checked_as_stored_expressions(kube):
    _, api = kube("1.37.0")
    rapi = api.resource_api()
    cls = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "c"},
           "spec": {"selectors": [{"cel": {"expression": "device.allowMultipleAllocations"}}]}}
    api.create(rapi.device_classes, cls)
    _, api_off = kube("1.37.0", feature_gates={"DRAConsumableCapacity": False})
    rapi_off = api_off.resource_api()
    api_off.create(rapi_off.device_classes, dict(cls, metadata={"name": "c", "labels": {"a": "b"}},
                                                  spec={"selectors": [{"cel": {"expression": "true"}}]}))
    stored = api_off.get(rapi_off.device_classes, "c")
    stored["spec"]["selectors"] = [{"cel": {"expression": "device.allowMultipleAllocations"}}]
    err = invalid(lambda: api_off.update(rapi_off.device_classes, stored))
    assert "undefined field 'allowMultipleAllocations'" in err.message
    fresh = api_off.get(rapi_off.device_classes, "c")
    fresh["metadata"]["labels"] = {"a": "c"}  # selectors unchanged: stored environment, no re-check failure
    api_off.update(rapi_off.device_classes, fresh)


# -- pods ----------------------------------------------------------------------------------------------------------

def pod(name: str = "p", claims: list[Obj] | None = None, container_claims: list[Obj] | None = None, **spec: Any) -> Obj:
    container: Obj = {"name": "c", "image": "x"}
    if container_claims is not None:
        container["resources"] = {"claims": container_claims}
    body: Obj = {"containers": [container], **spec}
    if claims is not None:
        body["resourceClaims"] = claims
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": body}


@pytest.mark.parametrize(("claims", "container_claims", "message"), [
    ([{"name": "gpu", "resourceClaimName": "a"}, {"name": "gpu", "resourceClaimName": "b"}], None,
     'spec.resourceClaims[1].name: Duplicate value: "gpu"'),
    ([{"name": "GPU", "resourceClaimName": "a"}], None, 'spec.resourceClaims[0].name: Invalid value: "GPU"'),
    ([{"name": "gpu", "resourceClaimName": "a", "resourceClaimTemplateName": "t"}], None,
     "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified"),
    ([{"name": "gpu"}], None, "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`"),
    ([{"name": "gpu", "resourceClaimName": "a"}], [{"name": "tpu"}],
     'spec.containers[0].resources.claims[0]: Not found: "tpu": must be one of the names in pod.spec.resourceClaims: gpu'),
    (None, [{"name": "gpu"}],
     'spec.containers[0].resources.claims[0]: Not found: "gpu": must be one of the names in pod.spec.resourceClaims which is empty'),
    ([{"name": "gpu", "resourceClaimName": "a"}], [{"name": "gpu"}, {"name": "gpu"}],
     'spec.containers[0].resources.claims[1]: Duplicate value: "gpu"'),
])
def test_pod_resource_claims_are_validated_like_the_real_server(kube, claims, container_claims, message):
    _, api = kube()
    err = invalid(lambda: api.create(PODS, pod(claims=claims, container_claims=container_claims), "default"))
    assert message in err.message


def test_the_same_claim_twice_in_a_container_is_allowed_for_different_requests(kube):
    _, api = kube()
    api.create(PODS, pod(claims=[{"name": "gpu", "resourceClaimName": "a"}],
                         container_claims=[{"name": "gpu", "request": "a"}, {"name": "gpu", "request": "b"}]), "default")


def test_ephemeral_containers_cannot_set_resources(kube):
    _, api = kube()
    body = pod(ephemeralContainers=[{"name": "debug", "image": "x", "resources": {"limits": {"cpu": "1"}}}])
    err = invalid(lambda: api.create(PODS, body, "default"))
    assert "spec.ephemeralContainers[0].resources: Forbidden: cannot be set for an Ephemeral Container" in err.message


def test_a_limit_without_a_request_becomes_the_request_before_mutating_webhooks_see_the_pod(kube):
    _, api = kube()
    body = pod()
    body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
    made = api.create(PODS, body, "default")
    assert made["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "2"}


def test_defaults_fill_allocation_mode_and_count(kube):
    _, api = kube()
    made = api.create(api.resource_api().claim_templates, template("t", exact()))
    assert made["spec"]["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}


# -- pods/binding --------------------------------------------------------------------------------------------------

def bind(api: KubeAPI, name: str, node: str | None, **meta: Any) -> Obj:
    target: Obj = {"kind": "Node"} if node is None else {"kind": "Node", "name": node}
    return api.create(PODS, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, **meta},
                             "target": target}, "default", subresource="binding")


def test_binding_sets_the_node_and_the_pod_scheduled_condition_even_for_a_node_that_does_not_exist(kube):
    _, api = kube()
    made = api.create(PODS, pod(), "default")
    answer = bind(api, "p", "no-such-node", uid=made["metadata"]["uid"], annotations={"a": "b"})
    assert answer == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    bound = api.get(PODS, "p", "default")
    assert bound["spec"]["nodeName"] == "no-such-node" and bound["metadata"]["annotations"] == {"a": "b"}
    (cond,) = bound["status"]["conditions"]
    assert cond["type"] == "PodScheduled" and cond["status"] == "True"


def test_binding_an_assigned_or_replaced_pod_is_a_conflict(kube):
    _, api = kube()
    api.create(PODS, pod(), "default")
    with pytest.raises(Conflict, match="Precondition failed: UID in precondition"):
        bind(api, "p", "n1", uid="6a7c3b44-0000-0000-0000-000000000000")
    bind(api, "p", "n1")
    with pytest.raises(Conflict, match='on pods/binding "p": pod p is already assigned to node "n1"'):
        bind(api, "p", "n2")


def _post_binding(srv: ApiServer, body: Obj) -> tuple[int, Obj]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(f"{srv.url}/api/v1/namespaces/default/pods/p/binding", method="POST",
                                 data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req)  # noqa: S310
    return err.value.code, json.loads(err.value.read())


def test_binding_errors_have_the_real_status_codes(kube):
    srv, api = kube()
    api.create(PODS, pod(), "default")
    code, body = _post_binding(srv, {"metadata": {"name": "other"}, "target": {"name": "n1"}})
    assert code == 400 and body["message"] == "name in URL does not match name in Binding object"
    # ValidatePodBinding fails as a plain error: the handler answers 500, reason unknown.
    code, body = _post_binding(srv, {"metadata": {"name": "p"}, "target": {"kind": "Pod"}})
    assert code == 500 and body["reason"] == ""
    assert body["message"] == ('[target.kind: Unsupported value: "Pod": supported values: "<empty>", "Node", '
                               "target.name: Required value]")


# -- events ------------------------------------------------------------------------------------------------------

def test_events_written_through_the_events_api_are_core_events(kube):
    _, api = kube()
    api.create(EVENTS_V1, {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                           "metadata": {"name": "p.1", "namespace": "default"},
                           "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "default-scheduler",
                           "reportingInstance": "default-scheduler-h", "action": "Scheduling",
                           "reason": "FailedScheduling", "type": "Warning", "note": "0/1 nodes are available",
                           "regarding": {"kind": "Pod", "namespace": "default", "name": "p"}}, "default")
    (core,) = api.list(EVENTS, "default")["items"]
    assert core["message"] == "0/1 nodes are available" and core["involvedObject"]["name"] == "p"
    assert core["reportingComponent"] == "default-scheduler" and core["apiVersion"] == "v1"
    back = api.get(EVENTS_V1, "p.1", "default")
    assert back["note"] == "0/1 nodes are available" and back["regarding"]["name"] == "p"


def test_long_generated_names_are_cut_before_the_random_suffix(kube):
    _, api = kube()
    base = "x" * 70
    made = api.create(api.resource_api().claims, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                                                    "metadata": {"generateName": base, "namespace": "default"},
                                                    "spec": {"devices": {"requests": [exact()]}}})
    assert len(made["metadata"]["name"]) == 63 and made["metadata"]["name"].startswith("x" * 58)


def claim_pod(name: str = "p") -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
                     "initContainers": [{"name": "init", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
                     "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]}}


@pytest.mark.parametrize("version", ["1.32.0", "1.33.1", "1.34.0"])
def test_with_dra_gated_off_the_server_drops_pod_claims_silently(kube: Any, version: str) -> None:
    """pkg/api/pod/util.go dropDisabledDynamicResourceAllocationFields, while resource.k8s.io is still served."""
    srv, api = kube(version, feature_gates={"DynamicResourceAllocation": False})
    assert api.discovery().serves(f"resource.k8s.io/{srv.resource_versions[0]}", "resourceclaims")
    probe = api.create(PODS, claim_pod("dry"), "default", dry_run=True)
    stored = api.create(PODS, claim_pod(), "default")
    for pod in (probe, stored):
        assert "resourceClaims" not in pod["spec"]
        assert all("claims" not in c["resources"] for c in pod["spec"]["containers"] + pod["spec"]["initContainers"])


def test_with_dra_on_the_pod_keeps_its_claims(kube: Any) -> None:
    _, api = kube("1.33.1")
    pod = api.create(PODS, claim_pod(), "default", dry_run=True)
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu"}]
