"""Least privilege, checked on the RBAC real Helm renders: every verb on every resource each component's service
account is granted, listed here in full, so any widening of a role fails this test and has to be argued for.

Sources of each grant: the API calls the component makes (bridge/node, bridge/dra, bridge/webhook, and
`bridge controller --help` for the controller). RBAC cannot say "only your own node": node-restriction.yaml's
ValidatingAdmissionPolicies do (tests/chart/test_node_restriction.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.conftest import NAMESPACE, find, one

CONTROLLER = {"controller": {"enabled": True, "policyConfigMap": "split-policy"}}

# (scope, apiGroup, resource, verb, resourceName or "") per service account; scope "cluster" or a namespace.
EXPECTED: dict[str, set[tuple[str, str, str, str, str]]] = {
    "dra-bridge-node": {
        *{("cluster", "", "nodes", v, "") for v in ("get", "list", "watch", "patch")},
        # get: a pod that left the nominated view is looked up (bridge/node/nodepods.py `_resolve_leaving`)
        *{("cluster", "", "pods", v, "") for v in ("get", "list", "watch")},
        ("cluster", "resource.k8s.io", "resourceclaims", "get", ""),
        # the explicit extendedResourceNames the scheduler serves through DRA (bridge/node/deviceclasses.py)
        *{("cluster", "resource.k8s.io", "deviceclasses", v, "") for v in ("list", "watch")},
        *{("cluster", "resource.k8s.io", "resourceslices", v, "") for v in ("list", "watch", "create", "update",
                                                                              "delete")},
        ("cluster", "", "events", "create", ""),
    },
    "dra-bridge-webhook": {
        *{("cluster", "", "namespaces", v, "") for v in ("get", "list", "watch")},
        *{("cluster", "resource.k8s.io", "resourceclaimtemplates", v, "") for v in ("create", "list", "watch")},
        ("cluster", "", "events", "create", ""),
        *{("cluster", "", "nodes", v, "") for v in ("list", "watch")},  # GPU nodes: MIG/shared, kubelet versions
        ("cluster", "resource.k8s.io", "deviceclasses", "get", ""),  # auto: extended only with the DeviceClass
        (NAMESPACE, "", "pods", "create", ""),  # the dry-run serve check, in its own namespace only
    },
    "dra-bridge-controller": {
        *{("cluster", "", "pods", v, "") for v in ("get", "list", "watch")},
        *{("cluster", "resource.k8s.io", r, v, "") for r in ("resourceclaims", "resourceclaimtemplates")
          for v in ("get", "list", "watch")},
        *{("cluster", "", "nodes", v, "") for v in ("get", "list", "watch", "patch")},
        ("cluster", "", "events", "create", ""),
        (NAMESPACE, "coordination.k8s.io", "leases", "create", ""),
        (NAMESPACE, "coordination.k8s.io", "leases", "get", "dra-bridge-controller"),
        (NAMESPACE, "coordination.k8s.io", "leases", "update", "dra-bridge-controller"),
        *{(NAMESPACE, "", "configmaps", v, "") for v in ("get", "list", "watch")},
    },
}


def grants(objects: list[dict[str, Any]]) -> dict[str, set[tuple[str, str, str, str, str]]]:
    """Every (scope, group, resource, verb, name) each service account gets through the release's bindings."""
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"] in ("Role", "ClusterRole")}
    out: dict[str, set[tuple[str, str, str, str, str]]] = {}
    for binding in find(objects, "ClusterRoleBinding") + find(objects, "RoleBinding"):
        scope = "cluster" if binding["kind"] == "ClusterRoleBinding" else binding["metadata"]["namespace"]
        ref = binding["roleRef"]
        role = roles[(ref["kind"], ref["name"])]
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount" and subject["namespace"] == NAMESPACE, subject
            for rule in role["rules"]:
                assert not rule.get("nonResourceURLs"), rule
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            for name in rule.get("resourceNames") or [""]:
                                out.setdefault(subject["name"], set()).add((scope, group, resource, verb, name))
    return out


@pytest.mark.parametrize("values", [{}, CONTROLLER], ids=["defaults", "with-controller"])
def test_each_component_gets_exactly_the_listed_grants(values: dict[str, Any], installed: Any) -> None:
    objects = installed(values)
    expected = {sa: g for sa, g in EXPECTED.items() if values or sa != "dra-bridge-controller"}
    assert grants(objects) == expected


def test_no_rule_uses_a_wildcard_or_a_privilege_escalating_verb(installed: Any) -> None:
    for role in find(installed(CONTROLLER), "ClusterRole") + find(installed(CONTROLLER), "Role"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in (rule.get(field) or []), (role["metadata"]["name"], rule)
            assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(rule["verbs"]), rule
            assert not {"secrets", "serviceaccounts/token", "pods/exec", "nodes/proxy"} & set(rule["resources"]), rule


def test_the_controllers_configmap_access_is_only_in_its_namespace_and_only_with_a_policy(installed: Any) -> None:
    without = grants(installed({"controller": {"enabled": True}}))["dra-bridge-controller"]
    assert not [g for g in without if g[2] == "configmaps"]
    with_policy = grants(installed(CONTROLLER))["dra-bridge-controller"]
    assert {g[0] for g in with_policy if g[2] in ("configmaps", "leases")} == {NAMESPACE}


def test_every_component_runs_as_its_own_service_account(installed: Any) -> None:
    objects = installed(CONTROLLER)
    accounts = {o["metadata"]["name"] for o in find(objects, "ServiceAccount")}
    workloads = {o["metadata"]["name"]: o["spec"]["template"]["spec"]["serviceAccountName"]
                 for o in find(objects, "DaemonSet") + find(objects, "Deployment")}
    assert workloads == {"dra-bridge-node": "dra-bridge-node", "dra-bridge-webhook": "dra-bridge-webhook",
                         "dra-bridge-controller": "dra-bridge-controller"}
    assert accounts == set(workloads.values())
    assert one(objects, "DaemonSet")["metadata"]["namespace"] == NAMESPACE
