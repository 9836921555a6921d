"""The controller keeps each watched object cut down to what it reads (bridge.controller.slim) and decides exactly as
it would with the whole objects.

The reference objects are a Running pod of a Deployment and its Node as a real kube-apiserver and kubelet (v1.37.2,
`bridge sandbox cluster --backend real`) returned them (tests/controller/data; the node's machine and boot ids
zeroed). The property test replays random event sequences of the incremental-state test
(tests/controller/test_cluster_state.py) with every object dressed as a real server dresses it (managedFields,
volumes, container statuses, images, conditions), with more pod shapes (no GPU, sidecar and init-container GPUs, the
extended resource, a count that is not valid), feeds the state the cut objects, and checks views and demand against
the full rebuild from the whole ones.
"""

from __future__ import annotations

import collections
import copy
import json
import os
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

import tests.controller.test_cluster_state as base
from bridge.controller.cluster import ClusterState, differences, rebuild_state
from bridge.controller.demand import Names
from bridge.controller.slim import asks_for_gpus, slim_node, slim_pod, slim_resource
from bridge.kube.events import build_event

DATA = Path(__file__).parent / "data"
REAL_POD: dict[str, Any] = json.loads((DATA / "real-pod-running.json").read_text())
REAL_NODE: dict[str, Any] = json.loads((DATA / "real-node.json").read_text())
EXAMPLES = int(os.environ.get("BRIDGE_STATE_EXAMPLES", "80"))
SLIM = slim_pod(Names())


def test_a_running_pod_of_a_real_api_server_keeps_its_identity_node_phase_and_gpu_requests() -> None:
    pod = copy.deepcopy(REAL_POD)
    pod.update(apiVersion="v1", kind="Pod")  # as the client fills them in on a list's items
    meta = pod["metadata"]
    assert SLIM(pod) == {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")},
        "spec": {"nodeName": "node-0", "priority": 0, "tolerations": pod["spec"]["tolerations"],
                 "containers": [{"name": "main", "resources": pod["spec"]["containers"][0]["resources"]},
                                {"name": "web", "resources": {}}]},
        "status": {"phase": "Running"},
    }
    assert pod == {**copy.deepcopy(REAL_POD), "apiVersion": "v1", "kind": "Pod"}, "the informer's object is not changed"


def test_a_pod_that_asks_for_no_gpu_keeps_only_what_says_whether_it_is_bound_or_pending() -> None:
    pod = copy.deepcopy(REAL_POD)
    for c in pod["spec"]["containers"]:
        c["resources"] = {"requests": {"cpu": "1"}}
    pod["spec"]["schedulingGates"] = [{"name": "quota"}]
    assert SLIM(pod) == {"metadata": SLIM(REAL_POD)["metadata"],
                         "spec": {"nodeName": "node-0", "priority": 0, "schedulingGates": [{"name": "quota"}]},
                         "status": {"phase": "Running"}}


@pytest.mark.parametrize("spec", [
    {"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}], "containers": [{"name": "m"}]},
    {"containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": "1e400"}}}]},
    {"containers": [{"name": "m", "resources": {"requests": {"nvidia.com/gpu": "0"}}}]},
    {"initContainers": [{"name": "s", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
     "containers": [{"name": "m"}]},
    {"containers": [{"name": "m", "resources": {"limits": {
        "deviceclass.resource.kubernetes.io/gpu.dra-bridge.io": "2"}}}]},
    {"containers": "not a list"},
    {"containers": [{"name": "m", "resources": ["not", "a", "map"]}]},
    {"containers": [{"name": "m", "resources": {"limits": "not a map"}}]},
    {"containers": ["not a map"]},
], ids=["claims", "invalid-count", "zero-count", "sidecar", "extended-resource", "containers-not-a-list",
        "resources-not-a-map", "limits-not-a-map", "container-not-a-map"])
def test_a_pod_that_names_the_bridges_gpus_or_that_the_cut_cannot_read_keeps_what_its_demand_reads(
        spec: dict[str, Any]) -> None:
    assert asks_for_gpus(spec, Names())
    cut = SLIM({"metadata": {"name": "p", "namespace": "a"}, "spec": spec})
    for key in ("containers", "initContainers"):
        if key in spec and isinstance(spec[key], list):
            assert [c.get("name") if isinstance(c, dict) else c for c in cut["spec"][key]] == \
                [c.get("name") if isinstance(c, dict) else c for c in spec[key]]
            assert [c.get("resources") for c in cut["spec"][key] if isinstance(c, dict)] == \
                [c.get("resources") for c in spec[key] if isinstance(c, dict)]
        elif key in spec:
            assert cut["spec"][key] == spec[key]


def test_a_pod_that_names_another_resource_or_another_class_is_not_the_bridges() -> None:
    assert not asks_for_gpus({"containers": [{"name": "m", "resources": {"limits": {"amd.com/gpu": "1"}}}]}, Names())
    assert asks_for_gpus({"containers": [{"name": "m", "resources": {"limits": {"amd.com/gpu": "1"}}}]},
                         Names(resource="amd.com/gpu"))
    assert not asks_for_gpus({}, Names())


def test_an_object_whose_spec_or_status_is_not_a_map_only_loses_its_managed_fields() -> None:
    odd = {"metadata": {"name": "p", "namespace": "a", "managedFields": [{"manager": "x"}], "labels": {"a": "b"}},
           "spec": "not a map", "status": {"phase": "Pending"}}
    assert SLIM(odd) == {"metadata": {"name": "p", "namespace": "a", "labels": {"a": "b"}}, "spec": "not a map",
                         "status": {"phase": "Pending"}}
    assert slim_node({"metadata": {"name": "n"}, "status": None}) == {"metadata": {"name": "n"}, "status": None}


def test_a_node_of_a_real_api_server_keeps_metadata_spec_capacity_and_the_ready_condition() -> None:
    cut = slim_node(REAL_NODE)
    meta = {k: v for k, v in REAL_NODE["metadata"].items() if k != "managedFields"}
    assert cut["metadata"] == meta and "dra-bridge.io/split-status" in meta["annotations"]
    assert cut["spec"] == REAL_NODE["spec"]
    assert cut["status"] == {"capacity": REAL_NODE["status"]["capacity"],
                             "allocatable": REAL_NODE["status"]["allocatable"],
                             "conditions": [c for c in REAL_NODE["status"]["conditions"] if c["type"] == "Ready"]}
    assert cut["status"]["conditions"][0]["status"] == "True"


def test_claims_and_templates_lose_only_their_managed_fields() -> None:
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "c", "namespace": "a", "managedFields": [{"manager": "kube-scheduler"}]},
             "spec": {"devices": {"requests": [{"name": "g"}]}}, "status": {"allocation": {"devices": {}}}}
    cut = slim_resource(claim)
    assert cut == {**claim, "metadata": {"name": "c", "namespace": "a"}}
    assert "managedFields" in claim["metadata"]


# ---- the property: the state fed cut objects decides as the rebuild from whole ones ----------------------------


def dressed(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as a real API server sends it: what the server and the kubelet add around the fields under test
    (taken from the real pod and node where a field is theirs)."""
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    meta.setdefault("uid", f"uid-{kind}-{meta['name']}")
    meta.setdefault("resourceVersion", str(zlib.crc32(json.dumps(obj, sort_keys=True).encode())))
    source = REAL_NODE if kind == "node" else REAL_POD
    meta["managedFields"] = copy.deepcopy(source["metadata"]["managedFields"])
    obj.update(apiVersion="v1", kind={"node": "Node", "pod": "Pod"}.get(kind, kind))
    if kind == "node":
        status = obj.setdefault("status", {})
        for key in ("nodeInfo", "images", "addresses", "daemonEndpoints", "runtimeHandlers"):
            status[key] = copy.deepcopy(REAL_NODE["status"][key])
        others = [c for c in REAL_NODE["status"]["conditions"] if c["type"] != "Ready"]
        status["conditions"] = list(status.get("conditions") or []) + copy.deepcopy(others)
    elif kind == "pod":
        meta.update(labels={"app": "train"}, annotations={"note": "x"}, generateName="train-",
                    ownerReferences=copy.deepcopy(REAL_POD["metadata"]["ownerReferences"]))
        spec = obj["spec"]
        spec["volumes"] = copy.deepcopy(REAL_POD["spec"]["volumes"])
        spec.update(dnsPolicy="ClusterFirst", serviceAccountName="default", schedulerName="default-scheduler")
        for c in spec.get("containers") or ():
            c.update({k: copy.deepcopy(v) for k, v in REAL_POD["spec"]["containers"][1].items()
                      if k not in ("name", "resources")})
        if spec.get("nodeName"):
            status = obj.setdefault("status", {})
            for key in ("conditions", "hostIP", "podIP", "containerStatuses", "qosClass"):
                status[key] = copy.deepcopy(REAL_POD["status"][key])
    return obj


def gpu_container(resource: str, count: str, **extra: Any) -> dict[str, Any]:
    return {"name": "g", "image": "x", "resources": {"limits": {resource: count}}, **extra}


BASE_PODS = base.VARIANTS["pod"][2]


def more_pod_variant(name: str, v: int) -> dict[str, Any]:
    """The incremental-state test's pods (v < BASE_PODS), and shapes that matter to the cut (12-19 here)."""
    if v < BASE_PODS:
        return base.pod_variant(name, v)
    v += 12 - BASE_PODS
    meta: dict[str, Any] = {"name": name, "namespace": "team-a", "creationTimestamp": f"2025-06-01T13:0{v - 12}:00Z"}
    spec: dict[str, Any] = {"containers": [{"name": "m", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}
    status: dict[str, Any] = {"phase": "Pending"}
    if v == 13:  # no GPU, bound and running
        spec["nodeName"], status["phase"] = base.NODES[1], "Running"
    elif v == 14:  # GPUs in a sidecar (they add to the app containers' one; an ordinary init container's would not)
        spec["initContainers"] = [gpu_container("nvidia.com/gpu", "2", restartPolicy="Always")]
        spec["containers"].append(gpu_container("nvidia.com/gpu", "1"))
    elif v == 15:  # an ordinary init container that needs more than the app containers
        spec["initContainers"] = [gpu_container("nvidia.com/gpu", "3")]
        spec["containers"].append(gpu_container("nvidia.com/gpu", "1"))
        spec["nodeName"], status["phase"] = base.NODES[2], "Running"
    elif v == 16:  # the DeviceClass's extended resource, and a required node affinity
        spec["containers"].append(gpu_container("deviceclass.resource.kubernetes.io/gpu.dra-bridge.io", "2"))
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["L4"]}]}]}}}
    elif v == 17:  # not a valid count: reported, never planned
        spec["containers"].append(gpu_container("nvidia.com/gpu", "1e400"))
    elif v == 18:  # no GPU, gated, with a priority
        spec.update(schedulingGates=[{"name": "quota"}], priority=5)
    elif v == 19:  # no GPU, bound, being deleted
        spec["nodeName"], status["phase"] = base.NODES[0], "Running"
        meta["deletionTimestamp"] = "2025-06-01T14:00:00Z"
    return {"metadata": meta, "spec": spec, "status": status}


CUT = {"node": slim_node, "pod": SLIM, "claim": slim_resource, "template": slim_resource}
SEEN: collections.Counter[str] = collections.Counter()


class CutEvents(base.Events):
    variants = {**base.VARIANTS, "pod": (base.PODS, more_pod_variant, BASE_PODS + 8)}

    def made(self, kind: str, name: str, v: int) -> dict[str, Any]:
        return dressed(kind, super().made(kind, name, v))

    def fed(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        cut = CUT[kind](obj)
        assert json.dumps(cut, sort_keys=True).count("managedFields") == 0
        return cut

    def compare(self) -> None:
        truth = rebuild_state(self.server["node"].values(), self.server["pod"].values(), self.server["claim"],
                              self.server["template"])
        mine = self.state.state()
        # Views and demand: exactly the rebuild's from the whole objects.
        assert differences(replace(mine, nodes=truth.nodes, pending_pods=truth.pending_pods), truth) == []
        # What the writer reads of the kept objects: a node's metadata (its patch carries the resourceVersion and
        # reads the annotations), and what an Event names an unbound pod by.
        assert mine.nodes.keys() == truth.nodes.keys() and mine.pending_pods.keys() == truth.pending_pods.keys()
        for name, node in mine.nodes.items():
            whole = truth.nodes[name]
            assert node["metadata"] == {k: v for k, v in whole["metadata"].items() if k != "managedFields"}
        for key, pod in mine.pending_pods.items():
            assert build_event(pod, "R", "m", now="t", host="h") == \
                build_event(truth.pending_pods[key], "R", "m", now="t", host="h")
        SEEN.update({"compared": 1, "pending demand": len(mine.demand.pending), "invalid": len(mine.demand.invalid),
                     "held legacy": sum(v.legacy_held for v in mine.views),
                     "nominated": sum(1 for p in mine.pending_pods.values()
                                      if (p.get("status") or {}).get("nominatedNodeName")),
                     "unbound pods asking nothing": sum(1 for p in mine.pending_pods.values()
                                                        if not asks_for_gpus(p["spec"], Names()))})


@pytest.mark.timeout(300)  # about 20 s on a quiet 2-core machine
def test_the_state_fed_cut_objects_equals_the_rebuild_from_whole_objects_after_any_sequence_of_events() -> None:
    SEEN.clear()
    run_state_machine_as_test(CutEvents, settings=settings(
        max_examples=EXAMPLES, stateful_step_count=50, deadline=None, database=None, derandomize=True,
        suppress_health_check=[HealthCheck.too_slow]))
    # Not a vacuous pass: demand, invalid counts, held GPUs, nominated pods and pods that ask nothing were all
    # compared.
    assert SEEN["pending demand"] > 10 * EXAMPLES and SEEN["invalid"] > EXAMPLES // 2, SEEN
    assert SEEN["nominated"] > EXAMPLES, SEEN  # kept by the cut: else the views above would differ
    assert SEEN["held legacy"] > 2 * EXAMPLES and SEEN["unbound pods asking nothing"] > EXAMPLES, SEEN


def test_the_state_reads_the_same_cluster_from_cut_objects_as_from_whole_ones_for_the_real_pod_and_node() -> None:
    whole, cut = ClusterState(), ClusterState()
    for state, node, pod in ((whole, REAL_NODE, REAL_POD), (cut, slim_node(REAL_NODE), SLIM(REAL_POD))):
        state.apply("node", "ADDED", node)
        state.apply("pod", "ADDED", pod)
    (view,) = cut.state().views
    assert view == whole.state().views[0]
    # 4 of 8 on DRA as the daemon published; 2 legacy GPUs held: the Deployment's two pods, as the daemon's status
    # says (this pod's own request is one of them).
    assert (view.name, view.total, view.dra, view.legacy_held) == ("node-0", 8, 4, 2)


def test_a_pods_cut_keeps_only_whether_the_scheduler_refused_it() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": []}, "status": {
        "phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 nodes ..."},
            {"type": "DisruptionTarget", "status": "True"}]}}
    assert SLIM(pod)["status"]["conditions"] == [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    pod["status"]["conditions"][0].update(status="True", reason=None)  # bound: nothing to keep
    assert "conditions" not in SLIM(pod)["status"]
