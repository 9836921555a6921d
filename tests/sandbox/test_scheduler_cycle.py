"""The scheduler stand-in's pure core: pod requests, node filters, the structured allocator, KEP-5004 and the
FailedScheduling messages — each written from the upstream plugin it stands in for."""

from __future__ import annotations

import random
from typing import Any

import pytest

from bridge.kvalues.celcheck import compile_selector
from bridge.sandbox.apiserver import profile_for
from bridge.sandbox.scheduler import AllocatedState, AllocatorError, Features, allocate, schedule
from bridge.sandbox.scheduler.allocator import NodeAllocationError
from bridge.sandbox.scheduler.cycle import NodeUsage, PlacedPod, Scheduled, Snapshot, Unschedulable
from bridge.sandbox.scheduler.extended import class_mapping, node_decision, requests_and_mappings
from bridge.sandbox.scheduler.nodefilters import insufficient, node_affinity, taint_toleration
from bridge.sandbox.scheduler.podresources import pod_requests
from bridge.sandbox.scheduler.preemption import pick_node
from bridge.sandbox.scheduler.scheduler import profile_of

Obj = dict[str, Any]
DRIVER = "gpu.dra-bridge.io"
ALL = Features(admin_access=True, prioritized_list=True, partitionable_devices=True, device_taints=True,
               consumable_capacity=True)


def ctr(name: str = "c", restart: str | None = None, **requests: str) -> Obj:
    c: Obj = {"name": name, "image": "x", "resources": {"requests": dict(requests)}}
    if restart:
        c["restartPolicy"] = restart
    return c


def pod(name: str = "p", containers: list[Obj] | None = None, init: list[Obj] | None = None,
        claims: list[Obj] | None = None, statuses: list[Obj] | None = None, **spec: Any) -> Obj:
    body: Obj = {"containers": containers or [ctr()], **spec}
    if init:
        body["initContainers"] = init
    if claims:
        body["resourceClaims"] = claims
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": body, "status": {"resourceClaimStatuses": statuses or []}}


def node(name: str, gpus: int = 0, labels: dict[str, str] | None = None, taints: list[Obj] | None = None,
         **spec: Any) -> Obj:
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": taints or [], **spec},
            "status": {"allocatable": alloc}}


def device(i: int, memory: str = "80Gi", **extra: Any) -> Obj:
    return {"name": f"gpu-{i}", "attributes": {"productName": {"string": "H100"}, "index": {"int": i}},
            "capacity": {"memory": {"value": memory}}, **extra}


def gpu_slice(node_name: str, devices: list[Obj], **spec: Any) -> Obj:
    return {"metadata": {"name": f"{node_name}-gpus", "resourceVersion": "1"},
            "spec": {"driver": DRIVER, "nodeName": node_name,
                     "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1}, "devices": devices, **spec}}


CLASS = {"metadata": {"name": DRIVER, "creationTimestamp": "2026-01-01T00:00:00Z"},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def claim(name: str = "c", *requests: Obj, uid: str | None = None, **status: Any) -> Obj:
    return {"metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}"},
            "spec": {"devices": {"requests": list(requests) or [req()]}}, "status": dict(status)}


def req(name: str = "gpu", count: int = 1, selector: str | None = None, **extra: Any) -> Obj:
    exactly: Obj = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": count, **extra}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"name": name, "exactly": exactly}


def run(claims: list[Obj], slices: list[Obj], *, n: Obj | None = None, features: Features = ALL,
        allocated: AllocatedState | None = None) -> list[Obj] | None:
    return allocate(n or node("n1"), claims, classes={DRIVER: CLASS}, slices=slices,
                    allocated=allocated or AllocatedState(), features=features, new_share_id=lambda: "share-1")


def devices_of(result: list[Obj] | None) -> list[list[str]]:
    assert result is not None
    return [[r["device"] for r in a["devices"]["results"]] for a in result]


# -- pod requests ---------------------------------------------------------------------------------------------------

def test_pod_requests_take_the_larger_of_init_containers_and_the_sum_of_app_containers():
    p = pod(containers=[ctr("a", **{"nvidia.com/gpu": "1"}), ctr("b", **{"nvidia.com/gpu": "1"})],
            init=[ctr("init", **{"nvidia.com/gpu": "3", "cpu": "500m"})])
    assert pod_requests(p) == {"nvidia.com/gpu": 3, "cpu": 500}


def test_sidecars_add_to_the_pod_and_to_every_later_init_container():
    p = pod(containers=[ctr("app", cpu="1")],
            init=[ctr("sidecar", restart="Always", cpu="1"), ctr("migrate", cpu="1500m")])
    # steps: sidecar 1, migrate 1.5 + sidecar 1 = 2.5; app 1 + sidecar 1 = 2 -> 2.5
    assert pod_requests(p) == {"cpu": 2500}


def test_a_limit_without_a_request_counts_as_the_request_and_overhead_is_added():
    c = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2", "memory": "1Gi"}}}
    assert pod_requests(pod(containers=[c], overhead={"memory": "1Ki"})) == {"nvidia.com/gpu": 2,
                                                                              "memory": 2**30 + 1024}


# -- node filters -------------------------------------------------------------------------------------------------

def test_node_resources_fit_lists_every_insufficient_resource_and_whether_preemption_could_help():
    short = insufficient({"cpu": 9000, "nvidia.com/gpu": 2}, {"cpu": 8000, "nvidia.com/gpu": 4, "pods": 1},
                         {"nvidia.com/gpu": 3}, pods_on_node=1)
    # cpu: more than the node has at all (unresolvable); GPUs: 4 on the node, 3 taken (a victim could free one)
    assert short == [("Too many pods", False), ("Insufficient cpu", True), ("Insufficient nvidia.com/gpu", False)]


def test_taint_reason_depends_on_the_release():
    n = node("n1", taints=[{"key": "gpu", "value": "busy", "effect": "NoSchedule"}])
    assert taint_toleration(pod(), n, detailed=True) == "node(s) had untolerated taint {gpu: busy}"
    assert taint_toleration(pod(), n, detailed=False) == "node(s) had untolerated taint(s)"
    tolerant = pod(tolerations=[{"key": "gpu", "operator": "Exists"}])
    assert taint_toleration(tolerant, n, detailed=False) is None
    prefer = node("n2", taints=[{"key": "gpu", "effect": "PreferNoSchedule"}])
    assert taint_toleration(pod(), prefer, detailed=False) is None


def test_node_affinity_terms_are_ored_and_an_empty_term_matches_nothing():
    n = node("n1", labels={"gpu": "h100", "gen": "9"})
    def affinity(*terms: Obj) -> Obj:
        return pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": list(terms)}}})
    assert node_affinity(affinity({"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]},
                                  {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["8"]}]}), n) is None
    assert node_affinity(affinity({}), n) == "node(s) didn't match Pod's node affinity/selector"
    assert node_affinity(pod(nodeSelector={"gpu": "a100"}), n) == "node(s) didn't match Pod's node affinity/selector"


# -- allocator ---------------------------------------------------------------------------------------------------

def test_allocator_takes_the_first_free_devices_and_pins_the_claim_to_the_node():
    held = AllocatedState()
    held.devices.add((DRIVER, "n1", "gpu-0"))
    (alloc,) = run([claim("c", req(count=2))], [gpu_slice("n1", [device(i) for i in range(4)])], allocated=held)
    assert [r["device"] for r in alloc["devices"]["results"]] == ["gpu-1", "gpu-2"]
    assert alloc["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}


def test_two_claims_of_one_pod_never_get_the_same_device():
    result = run([claim("a"), claim("b")], [gpu_slice("n1", [device(0), device(1)])])
    assert devices_of(result) == [["gpu-0"], ["gpu-1"]]
    assert run([claim("a"), claim("b"), claim("c")], [gpu_slice("n1", [device(0), device(1)])]) is None


def test_all_mode_takes_every_matching_device_and_fails_on_a_pool_being_updated():
    slices = [gpu_slice("n1", [device(0), device(1, memory="40Gi")])]
    big = 'device.capacity["gpu.dra-bridge.io"].memory.compareTo(quantity("80Gi")) >= 0'
    assert devices_of(run([claim("c", req(allocationMode="All", count=None, selector=big))], slices)) == [["gpu-0"]]
    slices[0]["spec"]["pool"]["resourceSliceCount"] = 2
    with pytest.raises(AllocatorError, match="asks for all devices, but resource pool gpu.dra-bridge.io/n1 is currently being updated"):
        run([claim("c", req(allocationMode="All"))], slices)


def test_the_search_takes_no_device_from_an_incomplete_or_invalid_pool():
    """allocateDevice skips both (every allocator variant: `if pool.IsIncomplete || pool.IsInvalid { continue }`);
    when nothing fits and a pool was invalid, the node is refused with why (ErrFailedAllocationOnNode)."""
    incomplete = gpu_slice("n1", [device(0)])
    incomplete["spec"]["pool"]["resourceSliceCount"] = 2
    assert run([claim("c")], [incomplete]) is None
    invalid = gpu_slice("n1", [device(0), device(0)])
    with pytest.raises(NodeAllocationError, match="^invalid resource pools were encountered$"):
        run([claim("c")], [invalid])
    other = gpu_slice("n1", [device(1)])
    other["metadata"]["name"], other["spec"]["pool"]["name"] = "other", "other"
    assert devices_of(run([claim("c")], [invalid, other])) == [["gpu-1"]]


@pytest.mark.parametrize(("version", "per_node"), [("1.37", False), ("1.38", True)])
def test_an_all_request_over_a_pool_being_updated_refuses_only_that_node_from_1_38(version: str,
                                                                                  per_node: bool) -> None:
    """1.38 wraps the error in ErrFailedAllocationOnNode (allocator_stable.go validateDeviceRequest): the node's
    reason, not an error for the pod (SchedulerError) as in 1.37."""
    updating = gpu_slice("a", [device(0)])
    updating["spec"]["pool"]["resourceSliceCount"] = 2
    c = claim("c", req(allocationMode="All", count=None))
    p = pod(claims=[{"name": "gpu", "resourceClaimName": "c"}])
    out = cycle(p, snapshot([node("a")], [updating], [c]), version)
    assert isinstance(out, Unschedulable) and out.error is not per_node
    why = ("claim default/c, request gpu: asks for all devices, but resource pool gpu.dra-bridge.io/a is currently "
           "being updated")
    if per_node:
        assert out.message == (f"0/1 nodes are available: 1 {why}. preemption: 0/1 nodes are available: 1 Preemption "
                               "is not helpful for scheduling.")
    else:
        assert out.message == f'running "DynamicResources" filter plugin: {why}'


def test_a_cel_runtime_error_is_an_error_for_the_pod_not_a_non_matching_device():
    with pytest.raises(AllocatorError, match="claim default/c: selector #0: CEL runtime error"):
        run([claim("c", req(selector='device.attributes["gpu.dra-bridge.io"].nope == 1'))],
            [gpu_slice("n1", [device(0)])])


def test_a_missing_domain_is_an_empty_map_as_in_the_real_cel_environment():
    sel = '!("x" in device.attributes["other.example.com"])'
    assert devices_of(run([claim("c", req(selector=sel))], [gpu_slice("n1", [device(0)])])) == [["gpu-0"]]


def test_tainted_devices_need_a_toleration_only_when_device_taints_are_on():
    taint = {"key": "gpu.dra-bridge.io/unhealthy", "value": "xid-79", "effect": "NoSchedule"}
    slices = [gpu_slice("n1", [device(0, taints=[taint]), device(1)])]
    assert devices_of(run([claim()], slices)) == [["gpu-1"]]
    assert devices_of(run([claim()], slices, features=Features())) == [["gpu-0"]]
    tolerant = req(tolerations=[{"key": "gpu.dra-bridge.io/unhealthy", "operator": "Exists"}])
    assert devices_of(run([claim("c", tolerant)], slices)) == [["gpu-0"]]
    informational = [gpu_slice("n1", [device(0, taints=[dict(taint, effect="None")])])]
    assert devices_of(run([claim()], informational)) == [["gpu-0"]]


def test_first_available_falls_back_to_the_next_sub_request_and_names_it_in_the_result():
    request = {"name": "gpu", "firstAvailable": [
        {"name": "two", "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 2},
        {"name": "one", "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}]}
    (alloc,) = run([claim("c", request)], [gpu_slice("n1", [device(0)])])  # type: ignore[misc]
    assert alloc["devices"]["results"][0]["request"] == "gpu/one"
    with pytest.raises(AllocatorError, match="has subrequests, but the DRAPrioritizedList feature is disabled"):
        run([claim("c", request)], [gpu_slice("n1", [device(0)])], features=Features())


def test_match_attribute_constraints_keep_devices_on_one_numa_node():
    devs = [dict(device(i), attributes={"numa": {"int": i % 2}}) for i in range(4)]
    c = claim("c", req(count=2))
    c["spec"]["devices"]["constraints"] = [{"matchAttribute": "gpu.dra-bridge.io/numa"}]
    assert devices_of(run([c], [gpu_slice("n1", devs)])) == [["gpu-0", "gpu-2"]]


def test_admin_access_shares_devices_already_allocated_but_is_an_error_when_its_gate_is_off():
    held = AllocatedState()
    held.devices.add((DRIVER, "n1", "gpu-0"))
    admin = req(adminAccess=True)
    (alloc,) = run([claim("c", admin)], [gpu_slice("n1", [device(0)])], allocated=held)  # type: ignore[misc]
    assert alloc["devices"]["results"][0]["adminAccess"] is True
    with pytest.raises(AllocatorError, match="admin access is requested, but the feature is disabled"):
        run([claim("c", admin)], [gpu_slice("n1", [device(0)])], features=Features())


def test_a_multi_allocatable_device_is_shared_while_its_capacity_lasts():
    shared = [gpu_slice("n1", [device(0, allowMultipleAllocations=True)])]
    half = req(capacity={"requests": {"memory": "40Gi"}})
    result = run([claim("a", half), claim("b", half)], shared)
    assert devices_of(result) == [["gpu-0"], ["gpu-0"]]
    assert result[0]["devices"]["results"][0]["consumedCapacity"] == {"memory": "40Gi"}  # type: ignore[index]
    assert run([claim("a", half), claim("b", half), claim("c", half)], shared) is None
    # Without a capacity request the whole device is consumed (no requestPolicy default).
    assert run([claim("a"), claim("b")], shared) is None


def test_only_slices_reachable_from_the_node_and_their_newest_generation_count():
    old = gpu_slice("n1", [device(0)])
    new = gpu_slice("n1", [device(7)])
    new["metadata"]["name"] = "n1-new"
    new["spec"]["pool"]["generation"] = 2
    other = gpu_slice("n2", [device(1)])
    assert devices_of(run([claim()], [old, new, other])) == [["gpu-7"]]


# -- KEP-5004 ------------------------------------------------------------------------------------------------------

def test_extended_resource_names_map_to_classes_newest_first():
    older = {"metadata": {"name": "a", "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"extendedResourceName": "nvidia.com/gpu"}}
    newer = {"metadata": {"name": "b", "creationTimestamp": "2026-02-01T00:00:00Z"}, "spec": {"extendedResourceName": "nvidia.com/gpu"}}
    mapping = class_mapping([older, newer])
    assert mapping["nvidia.com/gpu"]["metadata"]["name"] == "b"
    assert set(mapping) == {"nvidia.com/gpu", "deviceclass.resource.kubernetes.io/a", "deviceclass.resource.kubernetes.io/b"}


def test_dra_serves_an_extended_resource_only_where_the_node_has_none_of_it():
    mapping = class_mapping([CLASS | {"spec": {"extendedResourceName": "nvidia.com/gpu"}}])
    assert node_decision({"nvidia.com/gpu": 1}, mapping, {"nvidia.com/gpu": 4}) == ({}, None)
    assert node_decision({"nvidia.com/gpu": 1}, mapping, {"nvidia.com/gpu": 0}) == ({"nvidia.com/gpu": 1}, None)
    assert node_decision({"example.com/fpga": 1}, mapping, {}) == ({}, "cannot fit resource")


def test_extended_requests_let_init_containers_reuse_later_requests_and_keep_only_the_largest():
    name = "deviceclass.resource.kubernetes.io/" + DRIVER
    mapping = class_mapping([CLASS])
    p = pod(containers=[ctr("app", **{name: "1"})], init=[ctr("i1", **{name: "2"}), ctr("i2", **{name: "3", "cpu": "1"})])
    reqs, mappings = requests_and_mappings(p, {name: 3}, mapping)
    # app (index 2) asks 1; i1 reuses it and adds 1; i2 reuses it and adds 2: only the larger init request stays.
    assert [(r["name"], r["exactly"]["count"]) for r in reqs] == [("container-1-request-1", 2), ("container-2-request-0", 1)]
    assert {(m["containerName"], m["requestName"]) for m in mappings} == {
        ("app", "container-2-request-0"), ("i1", "container-2-request-0"), ("i1", "container-1-request-1"),
        ("i2", "container-2-request-0"), ("i2", "container-1-request-1")}


# -- whole cycles and their messages -----------------------------------------------------------------------------------

def snapshot(nodes: list[Obj], slices: list[Obj] | None = None, claims: list[Obj] | None = None,
             classes: list[Obj] | None = None, usage: dict[str, NodeUsage] | None = None,
             on: dict[str, list[Obj]] | None = None, nominated: dict[str, list[Obj]] | None = None) -> Snapshot:
    """`on`: the pods running on each node (their requests make up the usage); `nominated`: the nominator."""
    allocated = AllocatedState()
    for c in claims or []:
        allocated.add_claim(c)
    usage = dict(usage or {})
    placed: dict[str, list[PlacedPod]] = {}
    for name, pods in (on or {}).items():
        for p in pods:
            usage.setdefault(name, NodeUsage()).add(pod_requests(p))
            placed.setdefault(name, []).append(PlacedPod(p, pod_requests(p)))
    return Snapshot(nodes, usage, {("default", c["metadata"]["name"]): c for c in claims or []},
                    {c["metadata"]["name"]: c for c in classes or [CLASS]}, slices or [], allocated,
                    pods=placed, nominated={n: [PlacedPod(p, pod_requests(p)) for p in ps]
                                            for n, ps in (nominated or {}).items()})


def cycle(p: Obj, snap: Snapshot, version: str = "1.37") -> Scheduled | Unschedulable:
    return schedule(p, snap, profile_of(profile_for(version)), rng=random.Random(1))


@pytest.mark.parametrize(("version", "expected"), [
    # kube-scheduler v1.37.2 (seen in tests/real/test_real_gpu_health.py): a request over the node's whole allocatable
    # is unresolvable (1.34+), and DynamicResources' PostFilter gives no reason when it does nothing (1.37+)
    ("1.37", "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient nvidia.com/gpu. preemption: "
             "0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful "
             "for scheduling."),
    ("1.36", "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient nvidia.com/gpu. no new "
             "claims to deallocate, preemption: 0/3 nodes are available: 1 No preemption victims found for incoming "
             "pod, 2 Preemption is not helpful for scheduling."),
    ("1.33", "0/3 nodes are available: 1 node(s) had untolerated taint {k: v}, 2 Insufficient nvidia.com/gpu. no new "
             "claims to deallocate, preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
             "2 No preemption victims found for incoming pod."),
])
def test_legacy_pod_message_counts_each_reason_and_ends_with_preemption(version: str, expected: str) -> None:
    """Node a has 1 GPU for a pod asking 2 (no preemption can help from 1.34), c has 4 of which 3 are taken
    (preemption could help, had it lower-priority victims), b is tainted."""
    p = pod(containers=[ctr(**{"nvidia.com/gpu": "2"})])
    nodes = [node("a", gpus=1), node("b", gpus=8, taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]),
             node("c", gpus=4)]
    out = cycle(p, snapshot(nodes, usage={"c": NodeUsage(requested={"nvidia.com/gpu": 3}, pods=3)}), version)
    assert isinstance(out, Unschedulable) and not out.error
    assert out.message == expected


@pytest.mark.parametrize(("version", "postfilter"), [("1.37", ""), ("1.36", "still not schedulable, ")])
def test_a_claim_whose_selector_matches_nothing_cannot_be_allocated_anywhere(version: str, postfilter: str) -> None:
    c = claim("c", req(selector='device.attributes["gpu.dra-bridge.io"].productName == "B200"'))
    p = pod(claims=[{"name": "gpu", "resourceClaimName": "c"}])
    out = cycle(p, snapshot([node("a"), node("b")], [gpu_slice("a", [device(0)]), gpu_slice("b", [device(0)])], [c]),
                version)
    assert isinstance(out, Unschedulable)
    assert out.message == (f"0/2 nodes are available: 2 cannot allocate all claims. {postfilter}preemption: "
                           "0/2 nodes are available: 2 Preemption is not helpful for scheduling.")


def test_a_pod_waiting_for_its_template_claim_is_gated_without_a_message_event():
    p = pod(claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
    out = cycle(p, snapshot([node("a")]))
    assert isinstance(out, Unschedulable) and out.gated
    assert out.message == 'pod "default/p": ResourceClaim not created yet'


@pytest.mark.parametrize(("version", "postfilter"), [("1.37", ""), ("1.36", "no new claims to deallocate, ")])
def test_a_missing_device_class_is_a_prefilter_failure_for_every_node(version: str, postfilter: str) -> None:
    """DynamicResources' PreFilter rejects before it records the claims, so its PostFilter finds none: "no new claims
    to deallocate" through 1.36, no reason from 1.37 (dynamicresources.go PreFilter / PostFilter)."""
    c = claim("c", {"name": "gpu", "exactly": {"deviceClassName": "nope", "allocationMode": "ExactCount", "count": 1}})
    out = cycle(pod(claims=[{"name": "gpu", "resourceClaimName": "c"}]), snapshot([node("a"), node("b")], claims=[c]),
                version)
    assert isinstance(out, Unschedulable)
    assert out.message == (f"0/2 nodes are available: request gpu: device class nope does not exist. {postfilter}"
                           "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")


def test_a_cel_error_aborts_the_cycle_as_an_error():
    c = claim("c", req(selector='device.attributes["gpu.dra-bridge.io"].nope == 1'))
    out = cycle(pod(claims=[{"name": "gpu", "resourceClaimName": "c"}]), snapshot([node("a")], [gpu_slice("a", [device(0)])], [c]))
    assert isinstance(out, Unschedulable) and out.error
    assert out.message.startswith('running "DynamicResources" filter plugin: claim default/c: selector #0: CEL runtime error')


def test_an_allocated_claim_pins_the_pod_to_its_node_and_postfilter_deallocates_it_when_unreserved():
    alloc = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "a", "device": "gpu-0"}]},
             "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}]}}
    c = claim("c", allocation=alloc)
    p = pod(claims=[{"name": "gpu", "resourceClaimName": "c"}], nodeSelector={"zone": "b"})
    nodes = [node("a"), node("b", labels={"zone": "b"})]
    out = cycle(p, snapshot(nodes, [gpu_slice("a", [device(0)])], [c]))
    assert isinstance(out, Unschedulable)
    assert "1 resourceclaim not available on the node" in out.message
    assert "deallocation of ResourceClaim completed" in out.message and out.deallocate is not None
    ok = cycle(pod(claims=[{"name": "gpu", "resourceClaimName": "c"}]), snapshot(nodes, [gpu_slice("a", [device(0)])], [c]))
    assert isinstance(ok, Scheduled) and ok.node == "a" and ok.claims[0].allocation is None  # only a reservation


def test_extended_resource_pod_gets_a_special_claim_only_on_nodes_without_the_device_plugin_resource():
    cls = CLASS | {"spec": {**CLASS["spec"], "extendedResourceName": "nvidia.com/gpu"}}
    p = pod(containers=[ctr(**{"nvidia.com/gpu": "1"})])
    dp_node, dra_node = node("dp", gpus=4), node("dra")
    out = cycle(p, snapshot([dra_node], [gpu_slice("dra", [device(0)])], classes=[cls]))
    assert isinstance(out, Scheduled) and out.node == "dra"
    (plan,) = out.claims
    assert plan.extended and plan.claim["metadata"]["generateName"] == "p-extended-resources-"
    assert plan.claim["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert plan.claim["spec"]["devices"]["requests"][0]["name"] == "container-0-request-0"
    assert plan.mappings == [{"containerName": "c", "resourceName": "nvidia.com/gpu", "requestName": "container-0-request-0"}]
    served_by_plugin = cycle(p, snapshot([dp_node], classes=[cls]))
    assert isinstance(served_by_plugin, Scheduled) and served_by_plugin.claims == []
    # Before 1.36 (gate alpha) nvidia.com/gpu is just an extended resource the node lacks.
    old = cycle(p, snapshot([dra_node], [gpu_slice("dra", [device(0)])], classes=[cls]), "1.35")
    assert isinstance(old, Unschedulable) and "1 Insufficient nvidia.com/gpu" in old.message


def test_no_nodes_at_all_has_its_own_message():
    out = cycle(pod(), snapshot([]))
    assert isinstance(out, Unschedulable) and out.message == "no nodes available to schedule pods"


def test_cel_compile_results_for_typical_selectors_are_cheap():
    assert compile_selector(f'device.driver == "{DRIVER}"').max_cost < 100


# -- DefaultPreemption -------------------------------------------------------------------------------------------------

def gpu_pod(name: str, prio: int = 0, gpus: int = 1, started: str | None = None, **spec: Any) -> Obj:
    """A legacy pod asking `gpus` nvidia.com/gpu with `spec.priority` (what the Priority admission plugin writes)."""
    p = pod(name, containers=[ctr(**{"nvidia.com/gpu": str(gpus)})], priority=prio, **spec)
    if started:
        p["status"]["startTime"] = started
    return p


def names(pods: list[Obj]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


@pytest.mark.parametrize(("version", "expected"), [
    # kube-scheduler v1.37.2 on a real control plane, word for word (no period after "victims")
    ("1.37", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: found a potential placement for pod "
             "on node n1, preempting 1 victims"),
    # through 1.36 a successful preemption has no message, and the DynamicResources reason is dropped with it
    ("1.36", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."),
])
def test_a_higher_priority_pod_evicts_the_lower_priority_holder_of_the_gpu_and_is_nominated(
        version: str, expected: str) -> None:
    low, high = gpu_pod("low", 0), gpu_pod("high", 1000)
    out = cycle(high, snapshot([node("n1", gpus=1)], on={"n1": [low]}), version)
    assert isinstance(out, Unschedulable) and not out.error
    assert out.message == expected
    assert out.nominate == "n1" and names(out.victims) == ["low"]


def test_a_pod_of_equal_priority_is_never_a_victim_and_the_nomination_is_cleared() -> None:
    out = cycle(gpu_pod("second", 1000), snapshot([node("n1", gpus=1)], on={"n1": [gpu_pod("first", 1000)]}))
    assert isinstance(out, Unschedulable) and out.victims == []
    assert out.message == ("0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are "
                           "available: 1 No preemption victims found for incoming pod.")
    assert out.nominate == ""  # the PostFilter result clears a nomination when no node is a candidate


def test_only_as_many_victims_as_needed_lowest_priority_and_newest_first() -> None:
    """Four pods of one GPU each on a 4-GPU node; the pod asks 2: all lower ones are removed, then put back most
    important first (priority, then the older) while the pod still fits: the two least important are evicted."""
    on = [gpu_pod("keep-500", 500), gpu_pod("old-10", 10, started="2026-01-01T00:00:00Z"),
          gpu_pod("new-10", 10, started="2026-01-02T00:00:00Z"), gpu_pod("zero", 0)]
    out = cycle(gpu_pod("big", 1000, gpus=2), snapshot([node("n1", gpus=4)], on={"n1": on}))
    assert isinstance(out, Unschedulable)
    assert names(out.victims) == ["new-10", "zero"]  # most important first, as the real victims list
    assert out.message.endswith("preempting 2 victims")


def test_a_higher_priority_pod_is_reprieved_even_when_evicting_it_alone_would_do() -> None:
    """Reprieve order is importance, not size: the 2-GPU pod of priority 500 is put back first and stays, so both
    1-GPU pods of priority 0 go, although evicting the bigger one alone would have freed as much."""
    on = [gpu_pod("big-500", 500, gpus=2), gpu_pod("a", 0), gpu_pod("b", 0)]
    out = cycle(gpu_pod("p", 1000, gpus=2), snapshot([node("n1", gpus=4)], on={"n1": on}))
    assert isinstance(out, Unschedulable) and sorted(names(out.victims)) == ["a", "b"]


def test_preemption_policy_never_keeps_the_pod_waiting_without_victims_or_a_new_nomination() -> None:
    p = gpu_pod("polite", 1000, preemptionPolicy="Never")
    out = cycle(p, snapshot([node("n1", gpus=1)], on={"n1": [gpu_pod("low", 0)]}))
    assert isinstance(out, Unschedulable) and out.victims == []
    assert out.message == ("0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: not eligible due to "
                           "preemptionPolicy=Never.")
    assert out.nominate is None


@pytest.mark.parametrize(("version", "answer"), [
    # 1.34+: asking more than the node's whole allocatable is unresolvable, the node is no candidate
    ("1.37", "1 Preemption is not helpful for scheduling"),
    # 1.33: the node is tried; even without its lower-priority pod the GPUs do not fit: the filter's reason
    ("1.33", "1 Insufficient nvidia.com/gpu"),
])
def test_a_node_that_no_eviction_can_make_fit_is_not_a_candidate(version: str, answer: str) -> None:
    out = cycle(gpu_pod("p", 1000, gpus=2), snapshot([node("n1", gpus=1)], on={"n1": [gpu_pod("low", 0)]}), version)
    assert isinstance(out, Unschedulable) and out.victims == [] and out.nominate == ""
    assert out.message.endswith(f"preemption: 0/1 nodes are available: {answer}.")


def test_evicting_every_lower_priority_pod_is_not_enough_the_node_answers_with_its_filter_reason() -> None:
    on = {"n1": [gpu_pod("vip", 2000), gpu_pod("low", 0)]}
    out = cycle(gpu_pod("p", 1000, gpus=2), snapshot([node("n1", gpus=2)], on=on))
    assert isinstance(out, Unschedulable) and out.victims == []
    assert out.message == ("0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are "
                           "available: 1 Insufficient nvidia.com/gpu.")


def test_a_dra_pod_does_not_preempt_for_a_device_held_by_a_lower_priority_claim() -> None:
    """DynamicResources has no PreFilterExtensions: evicting the holder would not free its device in the simulation,
    so its "cannot allocate all claims" is unresolvable and no pod is evicted (kube-scheduler v1.37.2 does the same)."""
    alloc = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}}
    held = claim("held", allocation=alloc, reservedFor=[{"resource": "pods", "name": "low", "uid": "uid-low"}])
    low = pod("low", claims=[{"name": "gpu", "resourceClaimName": "held"}], priority=0)
    high = pod("high", claims=[{"name": "gpu", "resourceClaimName": "want"}], priority=1000)
    snap = snapshot([node("n1")], [gpu_slice("n1", [device(0)])], [held, claim("want")], on={"n1": [low]})
    out = cycle(high, snap)
    assert isinstance(out, Unschedulable) and out.victims == []
    assert out.message == ("0/1 nodes are available: 1 cannot allocate all claims. preemption: 0/1 nodes are "
                           "available: 1 Preemption is not helpful for scheduling.")


def test_a_dra_pod_short_of_cpu_preempts_when_its_device_is_free() -> None:
    """The reverse: the claim can be allocated, only cpu is short; the lower-priority cpu user is evicted."""
    hog = pod("hog", containers=[ctr(cpu="8")], priority=0)
    high = pod("high", containers=[ctr(cpu="1")], claims=[{"name": "gpu", "resourceClaimName": "want"}], priority=9)
    snap = snapshot([node("n1")], [gpu_slice("n1", [device(0)])], [claim("want")], on={"n1": [hog]})
    out = cycle(high, snap)
    assert isinstance(out, Unschedulable) and names(out.victims) == ["hog"] and out.nominate == "n1"
    assert out.message == ("0/1 nodes are available: 1 Insufficient cpu. preemption: found a potential placement for "
                           "pod on node n1, preempting 1 victims")


def test_the_node_with_the_least_important_victims_is_chosen() -> None:
    """pickOneNodeForPreemption: a's victim has priority 50, b's and c's top out at 10 (a is out); c's victims sum
    to 10, b's to 20: c."""
    nodes = [node("a", gpus=2), node("b", gpus=2), node("c", gpus=2)]
    on = {"a": [gpu_pod("a-50", 50, gpus=2)], "b": [gpu_pod("b-10", 10), gpu_pod("b-10b", 10)],
          "c": [gpu_pod("c-10", 10), gpu_pod("c-0", 0)]}
    out = cycle(gpu_pod("p", 1000, gpus=2), snapshot(nodes, on=on))
    assert isinstance(out, Unschedulable) and out.nominate == "c" and names(out.victims) == ["c-10", "c-0"]


def test_node_choice_ties_go_to_fewer_victims_then_to_the_most_recently_started() -> None:
    def placed(name: str, prio: int, started: str | None = None) -> PlacedPod:
        return PlacedPod(gpu_pod(name, prio, started=started))
    rng = random.Random(0)
    # equal highest priority and equal sums (each victim counts prio + 2^31): fewer victims first
    assert pick_node({"two": [placed("x", 0), placed("y", 0)], "one": [placed("z", 0)]}, rng) == "one"
    # same in all of that: the node whose highest-priority victims started latest (a pod not started yet counts
    # as started now)
    old, new = "2026-01-01T00:00:00Z", "2026-03-01T00:00:00Z"
    assert pick_node({"old": [placed("o", 5, old)], "new": [placed("n", 5, new)]}, rng) == "new"
    assert pick_node({"old": [placed("o", 5, old)], "pending": [placed("p", 5)]}, rng) == "pending"


def test_a_pod_nominated_to_a_node_keeps_its_room_from_pods_of_lower_or_equal_priority_only() -> None:
    """addGENominatedPods: pods nominated with at least the incoming pod's priority count as running there."""
    high = gpu_pod("high", 1000)
    high["status"]["nominatedNodeName"] = "n1"
    snap = snapshot([node("n1", gpus=1)], nominated={"n1": [high]})
    low = cycle(gpu_pod("late-low", 0), snap)
    assert isinstance(low, Unschedulable)
    assert low.message == ("0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are "
                           "available: 1 No preemption victims found for incoming pod.")
    assert isinstance(cycle(gpu_pod("peer", 1000), snap), Unschedulable)  # equal priority yields too
    higher = cycle(gpu_pod("higher", 2000), snap)
    assert isinstance(higher, Scheduled) and higher.node == "n1"  # the room was kept against lower pods only
    itself = cycle(high, snap)  # the nominated pod does not count against itself
    assert isinstance(itself, Scheduled) and itself.node == "n1"


def test_the_nominated_node_is_tried_first_and_taken_when_it_fits() -> None:
    p = gpu_pod("p", 1000)
    p["status"]["nominatedNodeName"] = "busy"
    nodes = [node("busy", gpus=2), node("idle", gpus=2)]
    on = {"busy": [pod("web", containers=[ctr(cpu="6")])]}  # scoring (LeastAllocated) would prefer "idle"
    out = cycle(p, snapshot(nodes, on=on))
    assert isinstance(out, Scheduled) and out.node == "busy"
    del p["status"]["nominatedNodeName"]
    assert cycle(p, snapshot(nodes, on=on)).node == "idle"  # type: ignore[union-attr]


def test_while_its_victim_terminates_the_preemptor_waits_keeping_its_nomination() -> None:
    victim = gpu_pod("low", 0)
    victim["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    victim["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                       "reason": "PreemptionByScheduler", "message": "default-scheduler: ..."}]
    high = gpu_pod("high", 1000)
    high["status"]["nominatedNodeName"] = "n1"
    out = cycle(high, snapshot([node("n1", gpus=1)], on={"n1": [victim]}))
    assert isinstance(out, Unschedulable) and out.victims == [] and out.nominate is None
    assert out.message == ("0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: not eligible due to "
                           "a terminating pod on the nominated node.")
    # Another pod, not nominated there, may pick the terminating pod as its victim again (no second DELETE is sent
    # for it: the scheduler skips victims being deleted)
    other = cycle(gpu_pod("other", 1000), snapshot([node("n1", gpus=1)], on={"n1": [victim]}))
    assert isinstance(other, Unschedulable) and names(other.victims) == ["low"]


def test_a_filter_error_met_only_while_simulating_an_eviction_ends_the_message_and_keeps_the_nomination() -> None:
    """The main pass stops at NodeResourcesFit (cpu), so DynamicResources' CEL error shows only in the dry run:
    DryRunPreemption keeps the error, Preempt returns it with no candidate, and the pod stays Unschedulable (not a
    SchedulerError) with it after "preemption: "; the PostFilter result is nil, so the nomination is left."""
    hog = pod("hog", containers=[ctr(cpu="8")], priority=0)
    bad = claim("c", req(selector='device.attributes["gpu.dra-bridge.io"].nope == 1'))
    p = pod("p", containers=[ctr(cpu="1")], claims=[{"name": "gpu", "resourceClaimName": "c"}], priority=9)
    out = cycle(p, snapshot([node("n1")], [gpu_slice("n1", [device(0)])], [bad], on={"n1": [hog]}))
    assert isinstance(out, Unschedulable) and not out.error and out.victims == [] and out.nominate is None
    assert out.message.startswith('0/1 nodes are available: 1 Insufficient cpu. preemption: running "DynamicResources" '
                                  'filter plugin: claim default/c: selector #0: CEL runtime error')
