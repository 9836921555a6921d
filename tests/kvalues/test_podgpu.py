"""The device-plugin arithmetic (how many GPUs a pod holds) and the DRA sharing plan that keeps it.

The count is checked against worked examples from the scheduler's and the kubelet's rules; the plan is checked on
every pod shape up to four containers of 0-3 GPUs by simulating who runs when and which devices each sees."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from bridge.kvalues.podgpu import (
    ContainerCount,
    container_count,
    containers,
    devices_of,
    plan_claims,
    pod_devices,
    pod_devices_by_name,
)

GPU = "nvidia.com/gpu"


def c(name: str, gpus: int | str | None, *, sidecar: bool = False, limits_only: bool = False) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if gpus is not None:
        res["limits"] = {GPU: gpus}
        if not limits_only:
            res["requests"] = {GPU: gpus}
    out: dict[str, Any] = {"name": name, "image": "x", "resources": res}
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def spec(app: list[dict[str, Any]], init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"containers": app, "initContainers": init or []}


@pytest.mark.parametrize(
    ("pod", "held"),
    [
        (spec([c("main", 2)]), 2),
        (spec([c("a", 2), c("b", 1)]), 3),
        (spec([c("main", 8)], [c("init", 8)]), 8),  # init hands its GPUs on to main: 8, not 16
        (spec([c("main", 1)], [c("init", 1)]), 1),
        (spec([c("main", 1)], [c("init", 8)]), 8),  # the largest init container wins
        (spec([c("main", 1)], [c("side", 1, sidecar=True), c("init", 2)]), 3),  # sidecar runs during init
        (spec([c("main", 1)], [c("init", 2), c("side", 1, sidecar=True)]), 2),  # this one starts after init
        (spec([c("main", 2)], [c("side", 1, sidecar=True)]), 3),
        (spec([c("main", "4", limits_only=True)]), 4),
        (spec([c("web", None)]), 0),
        (spec([c("main", "500m")]), 0),  # not a whole number: the API server rejects it; nothing counted
    ],
)
def test_a_pod_holds_what_the_scheduler_and_the_device_manager_give_it(pod: dict[str, Any], held: int) -> None:
    assert pod_devices(pod, GPU) == held


def test_limits_are_what_the_device_manager_allocates() -> None:
    assert container_count({"resources": {"limits": {GPU: 2}, "requests": {GPU: 1}}}, GPU) == 2
    assert container_count({"resources": {"requests": {GPU: 3}}}, GPU) == 3
    assert container_count({"resources": {"limits": {GPU: "x"}}}, GPU) == 0
    assert container_count({"resources": None}, GPU) == 0


def test_every_resource_name_is_counted_separately() -> None:
    pod = spec([{"name": "m", "resources": {"limits": {GPU: 1, "nvidia.com/mig-1g.10gb": 2, "cpu": "1"}}}],
               [{"name": "i", "resources": {"limits": {"nvidia.com/mig-1g.10gb": 3}}}])
    assert pod_devices_by_name(pod, lambda n: n.startswith("nvidia.com/")) == {GPU: 1, "nvidia.com/mig-1g.10gb": 3}


def simulate(counts: list[ContainerCount]) -> None:
    """Every container sees exactly its count; containers running at the same time never share a device; the pod
    holds exactly what the device plugin gave it."""
    plan = plan_claims(counts)
    assert plan.devices == devices_of(counts)

    def units(kind: Any, index: int) -> set[tuple[int, int]]:
        out: set[tuple[int, int]] = set()
        for use in plan.uses.get((kind, index), ()):
            segs = plan.claims[use.claim].segments
            starts = [sum(segs[:k]) for k in range(len(segs))]
            chosen = use.requests or tuple(range(len(segs)))
            out |= {(use.claim, starts[k] + j) for k in chosen for j in range(segs[k])}
        return out

    seen = {(x.kind, x.index): units(x.kind, x.index) for x in counts}
    for x in counts:
        assert len(seen[(x.kind, x.index)]) == x.count == plan.visible(x.kind, x.index), (counts, plan)
    running: list[tuple[Any, int]] = []  # sidecars started so far
    for x in counts:
        key = (x.kind, x.index)
        if x.kind == "init":
            for other in running:
                assert not seen[key] & seen[other], (counts, plan)
        elif x.kind == "sidecar":
            running.append(key)
    long_lived = [(x.kind, x.index) for x in counts if x.long_lived]
    for a, b in itertools.combinations(long_lived, 2):
        assert not seen[a] & seen[b], (counts, plan)
    for claim in plan.claims:
        assert sum(claim.segments) == claim.count and all(s > 0 for s in claim.segments)


KINDS = ("init", "sidecar", "app")


def shapes() -> list[list[ContainerCount]]:
    out = []
    for n in range(1, 5):
        for kinds in itertools.product(KINDS, repeat=n):
            if "app" not in kinds or list(kinds) != sorted(kinds, key=lambda k: k == "app"):
                continue  # init containers (and sidecars) come first, at least one app container
            for gpus in itertools.product(range(4), repeat=n):
                idx = {"init": 0, "app": 0}
                row = []
                for k, g in zip(kinds, gpus):
                    lst = "app" if k == "app" else "init"
                    row.append(ContainerCount(f"{k}{idx[lst]}", k, idx[lst], g))  # type: ignore[arg-type]
                    idx[lst] += 1
                out.append(row)
    return out


def test_the_sharing_plan_keeps_the_count_and_never_shares_between_running_containers() -> None:
    all_shapes = shapes()
    assert len(all_shapes) > 1000
    for counts in all_shapes:
        simulate(counts)


def test_init_containers_borrow_the_app_containers_claims() -> None:
    counts = list(containers(spec([c("main", 8)], [c("init", 8)]), GPU))
    plan = plan_claims(counts)
    assert [(p.owner, p.count, p.segments) for p in plan.claims] == [("main", 8, (8,))]
    assert plan.uses[("init", 0)] == plan.uses[("app", 0)]


def test_an_init_container_asking_fewer_gpus_gets_a_cut_of_the_claim() -> None:
    plan = plan_claims(list(containers(spec([c("main", 8)], [c("warmup", 1)]), GPU)))
    assert [(p.owner, p.segments) for p in plan.claims] == [("main", (1, 7))]
    (use,) = plan.uses[("init", 0)]
    assert use.requests == (0,) and plan.visible("init", 0) == 1 and plan.visible("app", 0) == 8


def test_sidecars_get_their_own_claim_and_a_shortfall_gets_one_shared_extra_claim() -> None:
    pod = spec([c("main", 1)], [c("side", 1, sidecar=True), c("prep", 2), c("load", 3)])
    plan = plan_claims(list(containers(pod, GPU)))
    assert [(p.owner, p.count) for p in plan.claims] == [("side", 1), ("main", 1), ("", 2)]
    assert plan.devices == pod_devices(pod, GPU) == 4


def test_the_count_is_devices_of_the_container_counts_for_every_shape() -> None:
    """`pod_devices` counts without building ContainerCounts; it is `devices_of(containers(...))` on every pod shape
    up to four containers, with malformed entries (not a mapping, a value that is not a count) among them."""
    for counts in shapes():
        init = [c(x.name, x.count, sidecar=x.kind == "sidecar") for x in counts if x.kind != "app"]
        app = [c(x.name, x.count) for x in counts if x.kind == "app"]
        for pod in (spec(app, init), spec(app + ["junk"], [*init, 5]),  # type: ignore[list-item]
                    spec(app, [c("bad", "1e400"), *init]), {"containers": app}, {"initContainers": init}):
            assert pod_devices(pod, GPU) == devices_of(containers(pod, GPU))
