"""The node daemon's ValidatingAdmissionPolicies, as real Helm renders them, evaluated with their CEL against
admission requests a real API server would build: a daemon writes only its own node's ResourceSlices of our
driver, and on Nodes only its own node's split-status annotation. The sample slices are the ones the daemon itself
builds (bridge.dra.slices.desired_slices)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bridge.dra.slices import NodeRef, SliceInputs, desired_slices
from bridge.inventory.options import parse_devices_option
from bridge.kvalues.cel import compile_checked
from tests.chart.conftest import NAMESPACE, find, one
from tests.chart.vap import Decision, Request, evaluate

DAEMON = f"system:serviceaccount:{NAMESPACE}:dra-bridge-node"
CONTROLLER = f"system:serviceaccount:{NAMESPACE}:dra-bridge-controller"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
DRIVER = "gpu.dra-bridge.io"


@pytest.fixture(scope="module")
def policies(installed: Any) -> dict[str, dict[str, Any]]:
    objects = installed()
    found = {p["metadata"]["name"].rsplit("-", 1)[-1]: p for p in find(objects, "ValidatingAdmissionPolicy")}
    assert set(found) == {"resourceslices", "nodes"}
    bindings = find(objects, "ValidatingAdmissionPolicyBinding")
    assert {b["spec"]["policyName"] for b in bindings} == {p["metadata"]["name"] for p in found.values()}
    assert all(b["spec"]["validationActions"] == ["Deny"] and "matchResources" not in b["spec"] for b in bindings)
    return found


def slice_of(node: str, driver: str = DRIVER, version: str = "v1") -> dict[str, Any]:
    gpus = parse_devices_option("simulated:2xH100-80GB", node).devices()
    obj = desired_slices(SliceInputs(node=NodeRef(node, f"uid-{node}"), dra_devices=gpus, driver=DRIVER,
                                     version=version))[0]
    obj["spec"]["driver"] = driver
    return obj


def slice_request(op: str, *, user: str = DAEMON, on_node: str | None = "n1", obj: Any = None, old: Any = None,
                  version: str = "v1", dry_run: bool = False) -> Request:
    extra = {NODE_NAME_EXTRA: (on_node,), "authentication.kubernetes.io/pod-name": ("dra-bridge-node-x",)} \
        if on_node else {}
    return Request(op, "resource.k8s.io", version, "resourceslices", "ResourceSlice", user, object=obj,
                   old_object=old, extra=extra, dry_run=dry_run,
                   name=(obj or old or {}).get("metadata", {}).get("name", ""))


def test_every_expression_parses_and_every_message_is_one_line(policies: dict[str, dict[str, Any]]) -> None:
    for policy in policies.values():
        spec = policy["spec"]
        assert spec["failurePolicy"] == "Fail"
        exprs = [c["expression"] for c in spec["matchConditions"]] + [v["expression"] for v in spec["variables"]]
        exprs += [v["expression"] for v in spec["validations"]]
        exprs += [v["messageExpression"] for v in spec["validations"] if "messageExpression" in v]
        for e in exprs:
            compile_checked(e)
            assert "?" not in e.replace(" ? ", ""), f"optional syntax cel-python cannot check: {e}"
        for v in spec["validations"]:
            assert "\n" not in v.get("message", ""), v


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1beta1"])
def test_a_daemon_may_create_update_and_delete_its_own_nodes_slices(version: str,
                                                                      policies: dict[str, dict[str, Any]]) -> None:
    mine = slice_of("n1", version=version)
    changed = copy.deepcopy(mine)
    changed["metadata"]["resourceVersion"] = "7"
    changed["spec"]["pool"]["generation"] = 2
    for req in (slice_request("CREATE", obj=mine, version=version),
                slice_request("CREATE", obj=mine, version=version, dry_run=True),
                slice_request("UPDATE", obj=changed, old=mine, version=version),
                slice_request("DELETE", old=mine, version=version)):
        assert evaluate(policies["resourceslices"], req) == Decision(allowed=True, applied=True), req.operation


def test_a_daemon_may_not_write_another_nodes_slice(policies: dict[str, dict[str, Any]]) -> None:
    theirs = slice_of("n2")
    for req in (slice_request("CREATE", obj=theirs), slice_request("DELETE", old=theirs),
                slice_request("UPDATE", obj=theirs, old=theirs)):
        d = evaluate(policies["resourceslices"], req)
        assert not d.allowed and d.reason == "Forbidden", req.operation
        assert d.message == "the node daemon on node 'n1' may write only ResourceSlices of its own node, not one " \
                            "of node 'n2'"


def test_a_daemon_may_not_take_over_another_nodes_slice_by_renaming_its_node(
        policies: dict[str, dict[str, Any]]) -> None:
    theirs = slice_of("n2")
    hijacked = copy.deepcopy(theirs)
    hijacked["spec"]["nodeName"] = "n1"
    d = evaluate(policies["resourceslices"], slice_request("UPDATE", obj=hijacked, old=theirs))
    assert not d.allowed and "not one of node 'n2'" in d.message


def test_a_daemon_may_not_write_a_cluster_wide_slice_or_another_drivers(policies: dict[str, dict[str, Any]]) -> None:
    everywhere = slice_of("n1")
    del everywhere["spec"]["nodeName"]
    everywhere["spec"]["allNodes"] = True
    d = evaluate(policies["resourceslices"], slice_request("CREATE", obj=everywhere))
    assert not d.allowed and d.message.endswith("not a slice without spec.nodeName")
    d = evaluate(policies["resourceslices"], slice_request("CREATE", obj=slice_of("n1", driver="gpu.nvidia.com")))
    assert not d.allowed
    assert d.message == "the node daemon may write only ResourceSlices of driver gpu.dra-bridge.io, not gpu.nvidia.com"


def test_a_token_without_a_node_name_is_refused_and_says_why(policies: dict[str, dict[str, Any]]) -> None:
    d = evaluate(policies["resourceslices"], slice_request("CREATE", obj=slice_of("n1"), on_node=None))
    assert not d.allowed
    assert d.message.startswith("the node daemon's token names no node")
    assert "ServiceAccountTokenPodNodeInfo" in d.message


def test_other_users_are_not_subject_to_the_policy(policies: dict[str, dict[str, Any]]) -> None:
    for user in (CONTROLLER, "system:kube-controller-manager", "system:node:n1", "admin",
                 "system:serviceaccount:other:dra-bridge-node"):
        d = evaluate(policies["resourceslices"], slice_request("CREATE", user=user, obj=slice_of("n2")))
        assert d == Decision(allowed=True, applied=False), user


def node(name: str, annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
         unschedulable: bool = False) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "3",
                                        "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
                           "spec": {"podCIDR": "10.0.0.0/24"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    if annotations:
        obj["metadata"]["annotations"] = annotations
    if unschedulable:
        obj["spec"]["unschedulable"] = True
    return obj


def node_update(new: dict[str, Any], old: dict[str, Any], *, user: str = DAEMON, on_node: str = "n1") -> Request:
    return Request("UPDATE", "", "v1", "nodes", "Node", user, object=new, old_object=old,
                   extra={NODE_NAME_EXTRA: (on_node,)} if on_node else {}, name=new["metadata"]["name"])


STATUS = "dra-bridge.io/split-status"


def test_a_daemon_may_publish_and_clear_its_split_status_on_its_own_node(policies: dict[str, dict[str, Any]]) -> None:
    before = node("n1", {"dra-bridge.io/dra-devices": "2"})
    after = node("n1", {"dra-bridge.io/dra-devices": "2", STATUS: '{"version":1}'})
    again = node("n1", {"dra-bridge.io/dra-devices": "2", STATUS: '{"version":2}'})
    for new, old in ((after, before), (again, after), (before, after)):
        assert evaluate(policies["nodes"], node_update(new, old)) == Decision(allowed=True, applied=True)


@pytest.mark.parametrize(("new", "old", "says"), [
    (node("n2", {STATUS: "{}"}), node("n2"), "may change only its own Node, not 'n2'"),
    (node("n1", {"dra-bridge.io/dra-devices": "all"}), node("n1", {"dra-bridge.io/dra-devices": "2"}),
     "may change only the annotations dra-bridge.io/split-status on Nodes"),
    (node("n1"), node("n1", {"dra-bridge.io/split-decision": "{}"}), "may change only the annotations"),
    (node("n1", labels={"dra-bridge.io/dra-devices": "all"}), node("n1"), "labels or spec"),
    (node("n1", unschedulable=True), node("n1"), "labels or spec"),
], ids=["another-node", "own-target", "removes-the-controllers-record", "a-label", "cordon"])
def test_a_daemon_may_change_nothing_else_on_nodes(new: dict[str, Any], old: dict[str, Any], says: str,
                                                   policies: dict[str, dict[str, Any]]) -> None:
    d = evaluate(policies["nodes"], node_update(new, old))
    assert not d.allowed and d.reason == "Forbidden" and says in d.message


def test_the_daemons_node_policy_does_not_apply_to_the_controller(policies: dict[str, dict[str, Any]]) -> None:
    d = evaluate(policies["nodes"], node_update(node("n2", {"dra-bridge.io/dra-devices": "4"}), node("n2"),
                                                user=CONTROLLER))
    assert d == Decision(allowed=True, applied=False)


@pytest.fixture(scope="module")
def controller_policy(installed: Any) -> dict[str, Any]:
    objects = installed({"controller": {"enabled": True}})
    policy = one(objects, "ValidatingAdmissionPolicy", "dra-bridge-controller-restriction-nodes")
    assert one(objects, "ValidatingAdmissionPolicyBinding", policy["metadata"]["name"])["spec"]["policyName"] == \
        policy["metadata"]["name"]
    assert not find(installed(), "ValidatingAdmissionPolicy", "dra-bridge-controller-restriction-nodes")
    return policy


def test_the_controller_may_set_any_nodes_target_and_record_why(controller_policy: dict[str, Any]) -> None:
    before = node("n7", {STATUS: "{}"})
    after = node("n7", {STATUS: "{}", "dra-bridge.io/dra-devices": "4", "dra-bridge.io/split-decision": "{}"})
    assert evaluate(controller_policy, node_update(after, before, user=CONTROLLER, on_node="")) == \
        Decision(allowed=True, applied=True)


@pytest.mark.parametrize(("new", "old", "says"), [
    (node("n7", {STATUS: "{}"}), node("n7"), "may change only the annotations dra-bridge.io/dra-devices, "
                                             "dra-bridge.io/split-decision on Nodes"),
    (node("n7", labels={"dra-bridge.io/dra-devices": "4"}), node("n7"), "labels or spec"),
    (node("n7", unschedulable=True), node("n7"), "labels or spec"),
], ids=["the-daemons-status", "a-label-pin", "cordon"])
def test_the_controller_may_change_nothing_else(new: dict[str, Any], old: dict[str, Any], says: str,
                                                controller_policy: dict[str, Any]) -> None:
    d = evaluate(controller_policy, node_update(new, old, user=CONTROLLER, on_node=""))
    assert not d.allowed and says in d.message


def test_the_policies_name_the_daemons_service_account_and_the_key_it_writes(installed: Any) -> None:
    objects = installed()
    daemon_sa = one(objects, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"]
    for policy in find(objects, "ValidatingAdmissionPolicy"):
        assert policy["spec"]["matchConditions"][0]["expression"] == \
            f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:{daemon_sa}"'
    try:
        from bridge.ledger.status import STATUS_KEY  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # the split status is being moved into bridge/ledger (issue 9); its key is fixed there
        STATUS_KEY = STATUS
    nodes = one(objects, "ValidatingAdmissionPolicy", "dra-bridge-node-restriction-nodes")
    own = next(v for v in nodes["spec"]["variables"] if v["name"] == "ownKeys")
    assert own["expression"] == f"['{STATUS_KEY}']"


def test_without_node_restriction_no_policy_is_rendered(installed: Any) -> None:
    objects = installed({"nodeRestriction": {"enabled": False}, "vendorDevicePlugin": "none"})
    assert not find(objects, "ValidatingAdmissionPolicy") and not find(objects, "ValidatingAdmissionPolicyBinding")
