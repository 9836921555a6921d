"""Pending GPU demand through both APIs, and what bound pods and allocated claims hold."""

from __future__ import annotations

from typing import Any

from bridge.controller.demand import (
    Names,
    allocated_by_node,
    is_pending,
    legacy_requested_by_node,
    pending_demand,
    pod_requests,
)

GPU = "nvidia.com/gpu"
CLASS = "gpu.dra-bridge.io"


def container(name: str, gpus: int | str | None = None, *, limits_only: bool = False, sidecar: bool = False,
              claims: list[str] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "x"}
    if gpus is not None:
        c["resources"] = {"limits": {GPU: str(gpus)}} if limits_only else {"requests": {GPU: str(gpus)},
                                                                          "limits": {GPU: str(gpus)}}
    if claims:
        c.setdefault("resources", {})["claims"] = [{"name": n} for n in claims]
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def pod(name: str, ns: str = "team-a", *, containers: list[dict[str, Any]] | None = None,
        init: list[dict[str, Any]] | None = None, node: str = "", phase: str = "Pending",
        claims: list[dict[str, Any]] | None = None, statuses: list[dict[str, Any]] | None = None,
        **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"containers": containers or [container("main", 1)], **spec}
    if init:
        s["initContainers"] = init
    if node:
        s["nodeName"] = node
    if claims:
        s["resourceClaims"] = claims
    status: dict[str, Any] = {"phase": phase}
    if statuses:
        status["resourceClaimStatuses"] = statuses
    return {"metadata": {"name": name, "namespace": ns, "creationTimestamp": "2025-06-01T12:00:00Z"}, "spec": s,
            "status": status}


def claim(name: str, count: int = 1, ns: str = "team-a", *, allocated_on: str | None = None,
          devices: tuple[str, ...] = ("gpu-0",), cls: str = CLASS, v1beta1: bool = False,
          mode: str = "ExactCount") -> dict[str, Any]:
    body = {"deviceClassName": cls, "allocationMode": mode, "count": count}
    req = {"name": "gpus", **body} if v1beta1 else {"name": "gpus", "exactly": body}
    c: dict[str, Any] = {"metadata": {"name": name, "namespace": ns}, "spec": {"devices": {"requests": [req]}}}
    if allocated_on:
        c["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpus", "driver": CLASS, "pool": allocated_on, "device": d} for d in devices]}}}
    return c


def keyed(*objs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in objs}


def test_legacy_requests_follow_the_scheduler_with_init_containers_and_sidecars() -> None:
    spec = pod("p", containers=[container("a", 2), container("b", 1)])["spec"]
    assert pod_requests(spec, GPU) == 3
    spec = pod("p", containers=[container("a", 1)], init=[container("prep", 4)])["spec"]
    assert pod_requests(spec, GPU) == 4  # the largest init container wins when larger than the app containers
    # A sidecar runs alongside everything after it: it adds to the app containers and to later init containers.
    spec = pod("p", containers=[container("a", 1)],
               init=[container("side", 1, sidecar=True), container("prep", 3)])["spec"]
    assert pod_requests(spec, GPU) == 4  # max(1 + 1, 3 + 1)
    spec = pod("p", containers=[container("a", 1)],
               init=[container("prep", 3), container("side", 1, sidecar=True)])["spec"]
    assert pod_requests(spec, GPU) == 3  # max(1 + 1, 3): this sidecar starts after prep
    assert pod_requests(pod("p", containers=[container("a", 2, limits_only=True)])["spec"], GPU) == 2


def test_only_unbound_ungated_live_pods_are_pending() -> None:
    assert is_pending(pod("p"))
    assert not is_pending(pod("p", node="n1"))
    assert not is_pending(pod("p", schedulingGates=[{"name": "wait"}]))
    assert not is_pending(pod("p", phase="Failed"))
    gone = pod("p")
    gone["metadata"]["deletionTimestamp"] = "2025-06-01T12:00:00Z"
    assert not is_pending(gone)


def test_legacy_demand_from_nvidia_gpu_requests() -> None:
    d = pending_demand([pod("a", containers=[container("m", 2)]), pod("cpu", containers=[container("m")]),
                        pod("bound", node="n1")], {}, {})
    assert [(p.key, p.api, p.gpus) for p in d.pending] == [("team-a/a", "legacy", 2)]


def test_dra_demand_from_unallocated_claims_direct_generated_or_from_the_template() -> None:
    claims = keyed(claim("shared", 2), claim("gen-abc", 3), claim("done", 1, allocated_on="n1"))
    templates = keyed({"metadata": {"name": "tmpl", "namespace": "team-a"},
                       "spec": {"spec": {"devices": {"requests": [
                           {"name": "g", "exactly": {"deviceClassName": CLASS, "count": 4}}]}}}})
    pods = [
        pod("direct", containers=[container("m", claims=["c"])], claims=[{"name": "c", "resourceClaimName": "shared"}]),
        pod("generated", containers=[container("m", claims=["c"])],
            claims=[{"name": "c", "resourceClaimTemplateName": "tmpl"}],
            statuses=[{"name": "c", "resourceClaimName": "gen-abc"}]),
        pod("fresh", containers=[container("m", claims=["c"])],
            claims=[{"name": "c", "resourceClaimTemplateName": "tmpl"}]),
        pod("allocated", containers=[container("m", claims=["c"])],
            claims=[{"name": "c", "resourceClaimName": "done"}]),
        pod("also-shared", containers=[container("m", claims=["c"])],
            claims=[{"name": "c", "resourceClaimName": "shared"}]),
    ]
    pods[-1]["metadata"]["creationTimestamp"] = "2025-06-01T12:05:00Z"  # younger: the scheduler serves it later
    d = pending_demand(pods, claims, templates)
    assert [(p.key, p.api, p.gpus) for p in d.pending] == [
        ("team-a/direct", "dra", 2),  # a shared claim is counted once, for the pod the scheduler serves first
        ("team-a/generated", "dra", 3),  # the generated claim (status.resourceClaimStatuses), not the template
        ("team-a/fresh", "dra", 4),  # the claim does not exist yet: the template says what it will ask
    ]
    assert sorted(pending_demand(pods[::-1], claims, templates).pending, key=lambda p: p.key) == \
        sorted(d.pending, key=lambda p: p.key)  # whatever order the pods are listed in


def test_a_shared_claim_counts_for_the_higher_priority_pod_then_the_name() -> None:
    claims = keyed(claim("shared", 2))

    def p(name: str, **spec: Any) -> dict[str, Any]:
        return pod(name, containers=[container("m", claims=["c"])], claims=[{"name": "c", "resourceClaimName": "shared"}],
                   **spec)

    assert [x.key for x in pending_demand([p("a"), p("b", priority=10)], claims, {}).pending] == ["team-a/b"]
    assert [x.key for x in pending_demand([p("b"), p("a")], claims, {}).pending] == ["team-a/a"]


def test_claims_of_other_classes_all_mode_and_api_versions() -> None:
    claims = keyed(claim("other", 2, cls="other.example.com"), claim("old", 2, v1beta1=True),
                   claim("all", mode="All"))
    first = {"metadata": {"name": "first", "namespace": "team-a"}, "spec": {"devices": {"requests": [
        {"name": "g", "firstAvailable": [{"name": "big", "deviceClassName": "other.example.com", "count": 8},
                                         {"name": "ours", "deviceClassName": CLASS, "count": 2}]}]}}}
    claims.update(keyed(first))

    def p(name: str, c: str) -> dict[str, Any]:
        return pod(name, containers=[container("m", claims=["c"])], claims=[{"name": "c", "resourceClaimName": c}])

    d = pending_demand([p("a", "other"), p("b", "old"), p("c", "all"), p("d", "first")], claims, {})
    assert [(x.key, x.gpus) for x in d.pending] == [("team-a/b", 2), ("team-a/d", 2)]
    assert d.skipped == ("team-a/c: a request with allocationMode All has no count to plan with",)


def test_the_kep_5004_extended_resource_name_is_dra_demand() -> None:
    names = Names()
    c = {"name": "m", "image": "x", "resources": {"requests": {names.extended: "3"}, "limits": {names.extended: "3"}}}
    d = pending_demand([pod("ext", containers=[c])], {}, {})
    assert [(p.key, p.api, p.gpus) for p in d.pending] == [("team-a/ext", "dra", 3)]


def test_a_pod_asking_both_apis_yields_one_demand_per_api() -> None:
    p = pod("both", containers=[container("m", 1, claims=["c"])], claims=[{"name": "c", "resourceClaimName": "x"}])
    d = pending_demand([p], keyed(claim("x", 2)), {})
    assert [(x.key, x.api, x.gpus) for x in d.pending] == [("team-a/both#legacy", "legacy", 1),
                                                           ("team-a/both#dra", "dra", 2)]


def test_node_selectors_priority_and_age_travel_with_the_demand() -> None:
    p = pod("sel", nodeSelector={"nvidia.com/gpu.product": "H100"}, priority=1000)
    (d,) = pending_demand([p], {}, {}).pending
    assert d.priority == 1000 and d.since > 0
    assert d.constraints.node_selector == (("nvidia.com/gpu.product", "H100"),)


def test_held_gpus_per_node_from_bound_pods_and_allocated_claims() -> None:
    pods = [pod("a", node="n1", phase="Running", containers=[container("m", 2)]),
            pod("b", node="n1", phase="Pending", containers=[container("m", 1)]),
            pod("done", node="n1", phase="Succeeded", containers=[container("m", 4)]),
            pod("c", node="n2", phase="Running", containers=[container("m", 3)])]
    assert legacy_requested_by_node(pods) == {"n1": 3, "n2": 3}
    claims = [claim("x", allocated_on="n1", devices=("gpu-6", "gpu-7")), claim("y", allocated_on="n2"),
              claim("z")]
    other = claim("o", allocated_on="n1", devices=("gpu-1",))
    other["status"]["allocation"]["devices"]["results"][0]["driver"] = "other.example.com"
    assert allocated_by_node(claims + [other]) == {"n1": {"gpu-6", "gpu-7"}, "n2": {"gpu-0"}}


def nominated(p: dict[str, Any], node: str) -> dict[str, Any]:
    p["status"]["nominatedNodeName"] = node
    return p


def test_a_legacy_pod_nominated_to_a_node_holds_its_gpus_there_and_is_not_demand() -> None:
    # kube-scheduler v1.37.2 after preempting: the preemptor waits, nominated, for its victim to stop.
    victim = pod("low", node="n1", phase="Running")
    victim["metadata"]["deletionTimestamp"] = "2025-06-01T12:01:00Z"
    preemptor = nominated(pod("high", priority=1000), "n1")
    assert pending_demand([victim, preemptor], {}, {}).pending == ()
    # The node reads fuller than it is until the victim stops (2 on 1 GPU), never emptier.
    assert legacy_requested_by_node([victim, preemptor]) == {"n1": 2}


def test_a_nominated_dra_pod_is_demand_on_its_nominated_node_only() -> None:
    p = nominated(pod("dra", containers=[container("m", claims=["c"])],
                      claims=[{"name": "c", "resourceClaimName": "x"}], nodeSelector={"gpu": "h100"}), "n1")
    (d,) = pending_demand([p], keyed(claim("x")), {}).pending
    assert (d.api, d.gpus) == ("dra", 1)
    assert d.constraints.allows("n1", {"gpu": "h100"})
    assert not d.constraints.allows("n2", {"gpu": "h100"})
    assert not d.constraints.allows("n1", {"gpu": "l4"})  # its own selector still holds
    assert legacy_requested_by_node([p]) == {}


def test_a_pod_whose_nomination_is_cleared_or_that_is_being_deleted_holds_nothing() -> None:
    cleared = nominated(pod("again", priority=1000), "")
    (d,) = pending_demand([cleared], {}, {}).pending
    assert (d.key, d.api, d.gpus) == ("team-a/again", "legacy", 1)
    assert d.constraints.allows("n2", {})
    gone = nominated(pod("gone", priority=1000), "n1")
    gone["metadata"]["deletionTimestamp"] = "2025-06-01T12:01:00Z"
    assert pending_demand([gone], {}, {}).pending == () and legacy_requested_by_node([gone]) == {}


def refused(p: dict[str, Any]) -> dict[str, Any]:
    """As kube-scheduler marks a pod it could not place (handleSchedulingFailure)."""
    p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                  "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}]
    return p


def test_waiting_for_the_scheduler_a_pod_is_demand_only_once_it_was_refused() -> None:
    fresh = pod("fresh")  # just created: the scheduler may place it as things are, or preempt for it
    gated = pod("gated")
    gated["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]
    errored = pod("errored")
    errored["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}]
    waiting = refused(pod("waiting"))
    assert [d.key for d in pending_demand([fresh, gated, errored, waiting], {}, {}, tried_only=True).pending] == \
        ["team-a/waiting"]
    assert len(pending_demand([fresh, gated, errored, waiting], {}, {}).pending) == 4  # without: every pending pod
    # A preemptor is refused and nominated in one write: held on its node, not demand, either way.
    preemptor = nominated(refused(pod("high", priority=1000)), "n1")
    assert pending_demand([preemptor], {}, {}, tried_only=True).pending == ()
    assert legacy_requested_by_node([preemptor]) == {"n1": 1}
