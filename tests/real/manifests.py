"""Objects of every kind the bridge touches, for the differential test: one valid object per kind (named with the
test run's suffix, so one real API server can take several runs) and where it lives on the wire."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
DRIVER = "gpu.dra-bridge.io"


@dataclass(frozen=True)
class Kind:
    path: str  # the collection, e.g. /api/v1/namespaces/{ns}/pods ({ns} filled in by `at`)
    body: Obj

    def at(self, ns: str) -> str:
        return self.path.format(ns=ns)

    def body_in(self, ns: str) -> Obj:
        """The body with `{ns}` filled in (an Event's involved object names the namespace)."""
        body: Obj = json.loads(json.dumps(self.body).replace("{ns}", ns))
        return body

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


def pod(name: str, node: str | None = None, **spec: Any) -> Obj:
    body: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "diff"}},
                 "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}], **spec}}
    if node:
        body["spec"]["nodeName"] = node
    return body


def claim_spec(count: int = 1, cls: str = "gpu.dra-bridge.io") -> Obj:
    return {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cls, "count": count}}]}}


def slice_body(name: str, node: str, driver: str = DRIVER, devices: int = 1) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(devices)]}}


def kinds(sfx: str) -> dict[str, Kind]:
    """One object per kind the bridge reads or writes (names carry `sfx`: cluster-scoped objects share a server)."""
    adm = "/apis/admissionregistration.k8s.io/v1"
    res = "/apis/resource.k8s.io/v1"
    return {
        "pods": Kind("/api/v1/namespaces/{ns}/pods", pod("p")),
        "nodes": Kind("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                       "metadata": {"name": f"node-{sfx}", "labels": {"app": "diff"}}}),
        "namespaces": Kind("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": f"extra-{sfx}"}}),
        "events": Kind("/api/v1/namespaces/{ns}/events", {
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": "ev"},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": "{ns}"},
            "reason": "DeviceRefused", "message": "m", "type": "Warning", "count": 1,
            "firstTimestamp": "2025-01-01T00:00:00Z", "lastTimestamp": "2025-01-01T00:00:00Z",
            "source": {"component": "bridge"}, "reportingComponent": "bridge", "reportingInstance": "h"}),
        "leases": Kind("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}),
        "configmaps": Kind("/api/v1/namespaces/{ns}/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "labels": {"app": "diff"}},
            "data": {"k": "v"}}),
        "resourceclaims": Kind(res + "/namespaces/{ns}/resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "claim"},
            "spec": claim_spec()}),
        "resourceclaimtemplates": Kind(res + "/namespaces/{ns}/resourceclaimtemplates", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "tpl"},
            "spec": {"spec": claim_spec(2)}}),
        "resourceslices": Kind(res + "/resourceslices", slice_body(f"slice-{sfx}", f"node-{sfx}")),
        "deviceclasses": Kind(res + "/deviceclasses", {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": f"class-{sfx}"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}),
        "mutatingwebhookconfigurations": Kind(adm + "/mutatingwebhookconfigurations", {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": f"hook-{sfx}"},
            "webhooks": [{"name": "pods.dra-bridge.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                          "clientConfig": {"url": "https://127.0.0.1:1/mutate"},
                          "namespaceSelector": {"matchLabels": {f"never-{sfx}": "x"}},
                          "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                     "resources": ["pods"]}]}]}),
        "validatingadmissionpolicies": Kind(adm + "/validatingadmissionpolicies", {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": f"policy-{sfx}"},
            "spec": {"failurePolicy": "Fail",
                     "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                             "operations": ["CREATE"], "resources": ["configmaps"]}]},
                     "validations": [{"expression": "true"}]}}),
        "validatingadmissionpolicybindings": Kind(adm + "/validatingadmissionpolicybindings", {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": f"binding-{sfx}"},
            "spec": {"policyName": f"policy-{sfx}", "validationActions": ["Deny"],
                     "matchResources": {"namespaceSelector": {"matchLabels": {f"never-{sfx}": "x"}}}}}),
    }


def invalid_claims() -> dict[str, Obj]:
    def with_request(**exactly: Any) -> Obj:
        return {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.dra-bridge.io",
                                                                       **exactly}}]}}
    return {
        "no device class": {"devices": {"requests": [{"name": "gpu", "exactly": {"count": 1}}]}},
        "count zero": with_request(count=0),
        "bad allocation mode": with_request(allocationMode="Some"),
        "bad request name": {"devices": {"requests": [{"name": "GPU_1", "exactly": {"deviceClassName": "c"}}]}},
        "CEL syntax error": with_request(selectors=[{"cel": {"expression": "device.driver =="}}]),
        "CEL not a bool": with_request(selectors=[{"cel": {"expression": "device.driver"}}]),
        "exactly and firstAvailable": {"devices": {"requests": [{
            "name": "gpu", "exactly": {"deviceClassName": "c"}, "firstAvailable": [{"name": "a", "deviceClassName": "c"}]}]}},
        "duplicate request names": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "c"}}, {"name": "gpu", "exactly": {"deviceClassName": "c"}}]}},
        # valid through 1.37 (capacity requests were not validated); refused from 1.38
        "negative capacity request": with_request(capacity={"requests": {"memory": "-1"}}),
        "33 capacity requests": with_request(capacity={"requests": {f"c{i}": "1" for i in range(33)}}),
        "capacity request name with two slashes": with_request(capacity={"requests": {"a.example.com/b/c": "1"}}),
    }


def invalid_slices(sfx: str) -> dict[str, Obj]:
    def spec(**changes: Any) -> Obj:
        base = slice_body("x", f"invalid-{sfx}")["spec"]  # a node of its own: a valid one stays (no table rows)
        return {k: v for k, v in {**base, **changes}.items() if v is not None}
    return {
        "no driver": spec(driver=None),
        "bad driver name": spec(driver="Not_A_Driver"),
        "no pool": spec(pool=None),
        "no pool generation": spec(pool={"name": f"invalid-{sfx}", "resourceSliceCount": 1}),  # valid: 0
        "node name and all nodes": spec(allNodes=True),
        "no node selection": spec(nodeName=None),
        "duplicate devices": spec(devices=[{"name": "gpu-0"}, {"name": "gpu-0"}]),
        "bad device name": spec(devices=[{"name": "GPU 0"}]),
        "too many devices": spec(devices=[{"name": f"gpu-{i}"} for i in range(129)]),
        "attribute with two values": spec(devices=[{"name": "gpu-0", "attributes": {"a": {"int": 1, "bool": True}}}]),
        # valid through 1.37; from 1.38 a number may have at most 18 digits
        "version with a 19-digit number": spec(devices=[{"name": "gpu-0", "attributes": {
            "driverVersion": {"version": "1234567890123456789.0.0"}}}]),
        "version with a 19-digit pre-release": spec(devices=[{"name": "gpu-0", "attributes": {
            "driverVersion": {"version": "1.0.0-1234567890123456789"}}}]),
        "attribute name with two slashes": spec(devices=[{"name": "gpu-0", "attributes": {
            "example.com/a/b": {"int": 1}}}]),
    }
