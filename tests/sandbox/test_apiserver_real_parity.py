"""What the differential test (tests/real/test_differential.py) found kube-apiserver v1.37.2 answering, pinned on
the emulator alone, so a machine without the real binaries still holds the emulator to it."""

from __future__ import annotations

import json
from typing import Any

from bridge.sandbox.apiserver import ApiServer
from tests.sandbox.conftest import http


def call(srv: ApiServer, method: str, path: str, body: Any = None, ctype: str = "application/json",
         ) -> tuple[int, Any, Any]:
    raw = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    code, headers, data = http(srv, method, path, raw, **({"Content-Type": ctype} if raw is not None else {}))
    return code, headers, json.loads(data) if data else None


def causes(status: Any) -> list[tuple[str, str]]:
    return [(c.get("field", ""), c["reason"]) for c in (status.get("details") or {}).get("causes") or []]


def test_a_1_37_server_serves_only_resource_k8s_io_v1_unless_betas_are_asked_for(make_server) -> None:  # type: ignore[no-untyped-def]
    srv = make_server(version="1.37.2")
    assert [v["version"] for v in call(srv, "GET", "/apis/resource.k8s.io")[2]["versions"]] == ["v1"]
    assert call(srv, "GET", "/apis/resource.k8s.io/v1beta2")[0] == 404
    admin = make_server(version="1.37.2", resource_versions=("v1", "v1beta2"))  # --runtime-config
    assert call(admin, "GET", "/apis/resource.k8s.io/v1beta2")[0] == 200


def test_a_lease_or_a_webhook_configuration_needs_a_resource_version_to_be_updated(server) -> None:  # type: ignore[no-untyped-def]
    leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    call(server, "POST", leases, {"metadata": {"name": "l"}, "spec": {}})
    code, _, status = call(server, "PUT", f"{leases}/l", {"metadata": {"name": "l"}, "spec": {"holderIdentity": "x"}})
    assert code == 422 and causes(status) == [("metadata.resourceVersion", "FieldValueInvalid")]
    assert status["message"] == ('leases.coordination.k8s.io "l" is invalid: metadata.resourceVersion: Invalid value: '
                                 '0: must be specified for an update')
    assert status["details"]["kind"] == "leases"
    cms = "/api/v1/namespaces/default/configmaps"
    call(server, "POST", cms, {"metadata": {"name": "c"}})
    assert call(server, "PUT", f"{cms}/c", {"metadata": {"name": "c"}, "data": {"a": "b"}})[0] == 200  # allowed


def test_webhook_configurations_and_policies_come_back_defaulted(server) -> None:  # type: ignore[no-untyped-def]
    hook = {"metadata": {"name": "h"}, "webhooks": [{
        "name": "a.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "clientConfig": {"service": {"namespace": "n", "name": "s"}},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]}]}
    _, _, got = call(server, "POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", hook)
    webhook = got["webhooks"][0]
    assert {k: webhook[k] for k in ("failurePolicy", "matchPolicy", "namespaceSelector", "objectSelector",
                                    "timeoutSeconds", "reinvocationPolicy")} == {
        "failurePolicy": "Fail", "matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {},
        "timeoutSeconds": 10, "reinvocationPolicy": "Never"}
    assert webhook["rules"][0]["scope"] == "*" and webhook["clientConfig"]["service"]["port"] == 443
    policy = {"metadata": {"name": "p"}, "spec": {"matchConstraints": {"resourceRules": [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
        "validations": [{"expression": "true"}]}}
    _, _, got = call(server, "POST", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", policy)
    assert got["metadata"]["generation"] == 1 and got["spec"]["failurePolicy"] == "Fail"
    assert got["spec"]["matchConstraints"]["matchPolicy"] == "Equivalent"


def test_patch_errors_are_worded_as_the_real_handler_words_them(server) -> None:  # type: ignore[no-untyped-def]
    cms = "/api/v1/namespaces/default/configmaps"
    call(server, "POST", cms, {"metadata": {"name": "c"}, "data": {"a": "1"}})
    code, _, status = call(server, "PATCH", f"{cms}/c", [{"op": "test", "path": "/data/a", "value": "2"}],
                           "application/json-patch+json")
    assert (code, status["reason"], status["message"], status["details"]) == (
        422, "Invalid", "the server rejected our request due to an error in our request", {})
    code, _, status = call(server, "PATCH", f"{cms}/c", b"{not json", "application/merge-patch+json")
    assert (code, status["message"]) == (400, "invalid JSON patch")
    code, _, status = call(server, "PATCH", f"{cms}/c", {"data": {}}, "application/x-unknown")
    assert (code, status["reason"], status["message"]) == (415, "UnsupportedMediaType", "415: Unsupported Media Type")


def test_strict_field_validation_of_a_patch_and_an_unknown_directive(server) -> None:  # type: ignore[no-untyped-def]
    cms = "/api/v1/namespaces/default/configmaps"
    call(server, "POST", cms, {"metadata": {"name": "c"}})
    code, _, status = call(server, "PATCH", f"{cms}/c?fieldValidation=Strict", {"bogus": 1},
                           "application/merge-patch+json")
    assert code == 422 and causes(status) == [("patch", "FieldValueInvalid")]
    assert status["message"].endswith('strict decoding error: unknown field "bogus"')
    code, _, status = call(server, "PATCH", f"{cms}/c?fieldValidation=Strict", {"bogus": {"x": 1}},
                           "application/strategic-merge-patch+json")
    assert 'Invalid value: "map[bogus:map[x:1]]": strict decoding error' in status["message"]
    code, _, status = call(server, "POST", f"{cms}?fieldValidation=Loud", {"metadata": {"name": "d"}})
    assert code == 422 and status["details"] == {"group": "meta.k8s.io", "kind": "CreateOptions", "causes": [
        {"reason": "FieldValueNotSupported", "field": "fieldValidation",
         "message": 'Unsupported value: "Loud": supported values: "", "Ignore", "Strict", "Warn"'}]}
    code, headers, _ = call(server, "POST", cms, {"metadata": {"name": "e"}, "bogus": 1})
    assert code == 201 and headers.get_all("Warning") == ['299 - "unknown field \\"bogus\\""']


def test_a_pod_naming_a_missing_service_account_is_forbidden(server) -> None:  # type: ignore[no-untyped-def]
    pod = {"metadata": {"name": "p"}, "spec": {"serviceAccountName": "missing",
                                              "containers": [{"name": "c", "image": "i"}]}}
    code, _, status = call(server, "POST", "/api/v1/namespaces/default/pods", pod)
    assert (code, status["reason"], status["details"]) == (403, "Forbidden", {"name": "p", "kind": "pods"})
    assert status["message"] == ('pods "p" is forbidden: error looking up service account default/missing: '
                                 'serviceaccount "missing" not found')
    call(server, "POST", "/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "missing"}})
    assert call(server, "POST", "/api/v1/namespaces/default/pods", pod)[0] == 201
    default = dict(pod, metadata={"name": "q"}, spec=dict(pod["spec"], serviceAccountName="default"))
    assert call(server, "POST", "/api/v1/namespaces/default/pods", default)[0] == 201


def test_the_priority_admission_sets_a_pods_priority_from_its_class_or_the_global_default(server) -> None:  # type: ignore[no-untyped-def]
    pods, classes = "/api/v1/namespaces/default/pods", "/apis/scheduling.k8s.io/v1/priorityclasses"

    def pod(name: str, **spec: Any) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}], **spec}}

    code, _, plain = call(server, "POST", pods, pod("plain"))
    assert code == 201 and (plain["spec"]["priority"], plain["spec"]["preemptionPolicy"]) == (0, "PreemptLowerPriority")
    assert "priorityClassName" not in plain["spec"]
    call(server, "POST", classes, {"metadata": {"name": "high"}, "value": 1000})
    call(server, "POST", classes, {"metadata": {"name": "batch"}, "value": 10, "globalDefault": True,
                                   "preemptionPolicy": "Never"})
    _, _, high = call(server, "POST", pods, pod("high", priorityClassName="high"))
    assert (high["spec"]["priority"], high["spec"]["preemptionPolicy"]) == (1000, "PreemptLowerPriority")
    _, _, default = call(server, "POST", pods, pod("default"))
    assert (default["spec"]["priorityClassName"], default["spec"]["priority"], default["spec"]["preemptionPolicy"]) \
        == ("batch", 10, "Never")
    # The classes kube-apiserver creates at start are there (a DaemonSet's pods name system-node-critical).
    _, _, critical = call(server, "POST", pods, pod("node-agent", priorityClassName="system-node-critical"))
    assert critical["spec"]["priority"] == 2000001000
    code, _, status = call(server, "POST", pods, pod("typo", priorityClassName="hihg"))
    assert (code, status["message"]) == (403, 'pods "typo" is forbidden: no PriorityClass with name hihg was found')
    code, _, status = call(server, "POST", pods, pod("own", priorityClassName="high", priority=5))
    assert (code, status["message"]) == (403, 'pods "own" is forbidden: the integer value of priority (5) must not '
                                              "be provided in pod spec; priority admission controller computed 1000 "
                                              "from the given PriorityClass name")
    code, _, _ = call(server, "POST", pods, pod("same", priorityClassName="high", priority=1000))
    assert code == 201


def test_resourceslices_are_selectable_by_pool_from_1_37(make_server) -> None:  # type: ignore[no-untyped-def]
    path = "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.pool.name%3Dp"
    assert call(make_server(version="1.37.2"), "GET", path)[0] == 200
    code, _, status = call(make_server(version="1.36.0"), "GET", path)
    assert (code, status["message"]) == (
        400, "field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: spec.pool.name")


def test_dra_validation_reports_each_cause_once_where_the_real_server_does(server) -> None:  # type: ignore[no-untyped-def]
    slices = "/apis/resource.k8s.io/v1/resourceslices"
    spec = {"driver": "gpu.example.com", "nodeName": "n", "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}, {"name": "gpu-0"}]}
    assert causes(call(server, "POST", slices, {"metadata": {"name": "s"}, "spec": spec})[2]) == [
        ("spec.devices[1]", "FieldValueDuplicate")]
    no_pool = {k: v for k, v in spec.items() if k != "pool"} | {"devices": [{"name": "gpu-0"}]}
    assert causes(call(server, "POST", slices, {"metadata": {"name": "s"}, "spec": no_pool})[2]) == [
        ("spec.pool.name", "FieldValueRequired"), ("spec.pool.resourceSliceCount", "FieldValueInvalid")]
    no_generation = dict(spec, devices=[{"name": "gpu-0"}], pool={"name": "n", "resourceSliceCount": 1})
    assert call(server, "POST", slices, {"metadata": {"name": "s"}, "spec": no_generation})[0] == 201  # 0 is valid
    claims = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
    no_class = {"devices": {"requests": [{"name": "gpu", "exactly": {"count": 1}}]}}
    assert causes(call(server, "POST", claims, {"metadata": {"name": "c"}, "spec": no_class})[2]) == [
        ("spec.devices.requests[0].exactly.deviceClassName", "FieldValueRequired")]


def test_deleting_a_namespace_answers_it_terminating_with_its_finalizers(server) -> None:  # type: ignore[no-untyped-def]
    call(server, "POST", "/api/v1/namespaces", {"metadata": {"name": "gone"}})
    code, _, ns = call(server, "DELETE", "/api/v1/namespaces/gone")
    assert code == 200 and ns["status"]["phase"] == "Terminating" and ns["spec"]["finalizers"] == ["kubernetes"]
    assert "deletionTimestamp" in ns["metadata"] and "deletionGracePeriodSeconds" not in ns["metadata"]
