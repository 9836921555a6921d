"""The pods bound to this node and their claims, as the split sees them: what changes wake the split, and how often.

Each wake-up is a split evaluation, which lists the kubelet's PodResources (and may write the Node's status
annotation) while the kubelet is starting the very pod that caused it: one per change, never one for the pod and
another for its claim."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

import pytest

from bridge.kube.api import PODS, WatchEvent
from bridge.node.nodepods import ClaimView, NodePods, PodsSnapshot
from tests.dra.fakekube import FakeKube
from tests.kube.idlestream import BlockingStream
from tests.polling import wait_until

NODE = "node-a"
DRIVER = "gpu.dra-bridge.io"
CLAIMS = FakeKube().resource_api().claims


def claim(name: str, device: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml"}, "status": {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device}]}}}}


def pod(phase: str = "Pending", claim_name: str = "c1") -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ml", "uid": "u1"},
            "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "x"}],
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}]},
            "status": {"phase": phase}}


class Node:
    def __init__(self) -> None:
        self.kube = FakeKube()
        self.changes = 0
        self.pods = NodePods(self.kube, NODE, resource="nvidia.com/gpu", driver=DRIVER, on_change=self.changed)

    def changed(self) -> None:
        self.changes += 1

    def event(self, type_: str, obj: dict[str, Any]) -> None:
        assert self.pods.informer.on_event is not None
        self.pods.informer.on_event(WatchEvent(type_, obj))  # type: ignore[arg-type]

    def claim_reads(self) -> int:
        return sum(1 for verb, what in self.kube.calls if verb == "get" and what.startswith("resourceclaims/"))


def test_a_new_pod_whose_claim_is_read_is_one_change_to_the_split() -> None:
    node = Node()
    node.kube.put(CLAIMS, claim("c1", "gpu-2"))
    node.event("ADDED", pod())
    assert node.claim_reads() == 1
    assert node.changes == 1


def test_a_pod_update_that_changes_nothing_we_hold_wakes_nothing() -> None:
    node = Node()
    node.kube.put(CLAIMS, claim("c1", "gpu-2"))
    node.event("ADDED", pod())
    node.event("MODIFIED", pod(phase="Running"))  # Running is not what the holders read: same view, claim cached
    assert (node.claim_reads(), node.changes) == (1, 1)


def test_a_pod_that_ends_rereads_its_claims_and_is_one_change() -> None:
    node = Node()
    node.kube.put(CLAIMS, claim("c1", "gpu-2"))
    node.event("ADDED", pod())
    node.kube.put(CLAIMS, {"metadata": {"name": "c1", "namespace": "ml"}, "status": {}})  # deallocated meanwhile
    node.event("MODIFIED", pod(phase="Succeeded"))
    assert node.claim_reads() == 2
    assert node.changes == 2
    assert node.pods._claims[("ml", "c1")] == ClaimView("ml", "c1", ())


def test_a_refresh_that_finds_a_changed_claim_is_one_change_and_an_unchanged_one_none() -> None:
    node = Node()
    node.kube.put(CLAIMS, claim("c1", "gpu-2"))
    node.event("ADDED", pod())
    node.pods.refresh_claims(every=True)
    assert (node.claim_reads(), node.changes) == (2, 1)
    node.kube.put(CLAIMS, claim("c1", "gpu-3"))
    node.pods.refresh_claims(every=True)
    assert (node.claim_reads(), node.changes) == (3, 2)



class ListingKube(FakeKube):
    """FakeKube that also lists and watches pods (by `spec.nodeName` / `status.nominatedNodeName`) and DeviceClasses
    (none); watches idle."""

    def __init__(self, bound: list[dict[str, Any]], nominated: list[dict[str, Any]] | None = None) -> None:
        super().__init__()
        self.lists = {f"spec.nodeName={NODE}": bound, f"status.nominatedNodeName={NODE}": nominated or []}
        self.streams: list[BlockingStream] = []
        self.watching: list[str] = []  # what each watch was opened for: a field selector, else the resource
        self.list_first: threading.Event | None = None

    def list(self, res: Any, namespace: Any = None, *, field_selector: str | None = None, **kw: Any) -> dict[str, Any]:
        if res.plural == "deviceclasses":
            return {"metadata": {"resourceVersion": "10"}, "items": []}
        if self.list_first is not None and field_selector == f"spec.nodeName={NODE}":
            self.list_first.wait(10)  # the nominated pods are listed (and synced) first
        return {"metadata": {"resourceVersion": "10"}, "items": copy.deepcopy(self.lists[field_selector or ""])}

    def watch(self, res: Any, namespace: Any = None, **kw: Any) -> BlockingStream:
        self.streams.append(BlockingStream())
        self.watching.append(kw.get("field_selector") or res.plural)
        return self.streams[-1]


def bound_pod(name: str, uid: str, claim_name: str) -> dict[str, Any]:
    p = pod(claim_name=claim_name)
    p["metadata"].update(name=name, uid=uid, resourceVersion="5")
    return p


def test_the_pods_are_not_listed_until_every_listed_pod_was_taken_in() -> None:
    """The first list is every pod bound here only once each of them reached NodePods: a snapshot between two of
    them would show the second pod's allocated claim as free DRA device."""
    kube = ListingKube([bound_pod("a", "ua", "ca"), bound_pod("b", "ub", "cb")])
    kube.put(CLAIMS, claim("ca", "gpu-0"))
    kube.put(CLAIMS, claim("cb", "gpu-1"))
    seen: list[tuple[bool, tuple[str, ...]]] = []
    pods: NodePods | None = None

    def changed() -> None:
        assert pods is not None
        snap = pods.snapshot()
        seen.append((snap.listed and snap.claims_ok, tuple(sorted(p.name for p in snap.pods))))

    pods = NodePods(kube, NODE, resource="nvidia.com/gpu", driver=DRIVER, on_change=changed)
    kube.list_first = pods.nominated.synced
    pods.start()
    try:
        # An informer opens its watch once its list reached NodePods. Both pod watches, by their selectors: the
        # DeviceClasses' watch opens too (its list is empty), and two watches of any kind could be that one and the
        # nominated pods' while the bound pods are still being taken in.
        wait_until(lambda: {f"spec.nodeName={NODE}", f"status.nominatedNodeName={NODE}"} <= set(kube.watching), 30,
                   "both pod watches opened")
        snap = pods.snapshot()
        assert snap.listed and snap.claims_ok and {p.name for p in snap.pods} == {"a", "b"}
    finally:
        pods.stop()
    assert [names for ok, names in seen if ok] in ([], [("a", "b")]), seen


# ---- pods nominated to this node: the hold lasts until the API says where the pod went ---------------------------

def nominated_pod(node_name: str = "", nominated: str = NODE, claim_name: str = "c1") -> dict[str, Any]:
    p = pod(claim_name=claim_name)
    p["spec"]["nodeName"] = node_name
    p["status"]["nominatedNodeName"] = nominated
    return p


def synced(node: Node) -> NodePods:
    for inf in (node.pods.informer, node.pods.nominated):
        inf.synced.set()
        inf.healthy = True
    return node.pods


def nominated_event(node: Node, type_: str, obj: dict[str, Any]) -> None:
    assert node.pods.nominated.on_event is not None
    node.pods.nominated.on_event(WatchEvent(type_, obj))  # type: ignore[arg-type]


def devices_held(snap: PodsSnapshot) -> dict[str, tuple[str, ...]]:
    """pod name -> the devices its claims hold, over the bound and the nominated pods."""
    assert snap.claims is not None
    return {p.name: tuple(d for n in p.claims for d in snap.claims[(p.namespace, n)].devices)
            for p in (*snap.pods, *snap.incoming)}


def test_a_nominated_pod_bound_here_holds_its_device_until_the_bound_watch_has_it() -> None:
    """Binding clears nominatedNodeName and sets nodeName in one write, seen by two watches in either order: when
    the nominated one tells first, the pod and its allocated claim must not vanish until the other one tells."""
    node = Node()
    pods = synced(node)
    node.kube.put(CLAIMS, claim("c1", "gpu-2"))
    nominated_event(node, "ADDED", nominated_pod())
    assert devices_held(pods.snapshot()) == {"p": ("gpu-2",)}
    node.kube.put(PODS, nominated_pod(node_name=NODE, nominated=""))  # bound
    nominated_event(node, "DELETED", nominated_pod())  # the previous object, as the API server sends it
    snap = pods.snapshot()
    assert snap.claims_ok and devices_held(snap) == {"p": ("gpu-2",)}
    node.event("ADDED", nominated_pod(node_name=NODE, nominated=""))
    snap = pods.snapshot()
    assert devices_held(snap) == {"p": ("gpu-2",)} and snap.incoming == () and pods._leaving == {}


@pytest.mark.parametrize("where", ["deleted", "bound elsewhere", "nomination cleared", "another pod by that name"])
def test_a_nominated_pod_that_went_elsewhere_stops_holding_at_once(where: str) -> None:
    node = Node()
    pods = synced(node)
    node.kube.put(CLAIMS, {"metadata": {"name": "c1", "namespace": "ml"}, "status": {}})  # PreBind not yet
    nominated_event(node, "ADDED", nominated_pod())
    assert [p.name for p in pods.snapshot().incoming] == ["p"]
    now = {"deleted": None, "bound elsewhere": nominated_pod(node_name="node-b", nominated=""),
           "nomination cleared": nominated_pod(nominated=""),
           "another pod by that name": {**nominated_pod(node_name=NODE), "metadata": {
               "name": "p", "namespace": "ml", "uid": "u2"}}}[where]
    if now is not None:
        node.kube.put(PODS, now)
    nominated_event(node, "DELETED", nominated_pod())
    snap = pods.snapshot()
    assert snap.incoming == () and snap.claims == {} and pods._leaving == {}


def test_a_nominated_pod_whose_fate_cannot_be_read_holds_until_it_can() -> None:
    node = Node()
    pods = synced(node)
    node.kube.put(CLAIMS, {"metadata": {"name": "c1", "namespace": "ml"}, "status": {}})
    nominated_event(node, "ADDED", nominated_pod())
    node.kube.down = True
    nominated_event(node, "DELETED", nominated_pod())
    assert [p.name for p in pods.snapshot().incoming] == ["p"]
    assert pods.waiting_for_claims()  # evaluations keep coming to ask again
    node.kube.down = False
    pods.refresh_claims()  # the pod is gone (NotFound)
    assert pods.snapshot().incoming == () and pods._leaving == {}


class OvertakenKube(FakeKube):
    """The first claim GET answers the claim as it was, after a second read (started later, e.g. the split's
    refresh while the pod watch's read is in flight) has already answered the newer claim and stored it."""

    def __init__(self) -> None:
        super().__init__()
        self.overtake: Callable[[], None] | None = None

    def get(self, res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        answer = super().get(res, name, namespace)
        if self.overtake is not None:
            overtake, self.overtake = self.overtake, None
            self.put(CLAIMS, claim("c1", "gpu-2"))  # PreBind wrote the allocation
            overtake()
        return answer


def test_a_claim_read_overtaken_by_a_later_one_does_not_overwrite_it() -> None:
    kube = OvertakenKube()
    pods = NodePods(kube, NODE, resource="nvidia.com/gpu", driver=DRIVER)
    kube.put(CLAIMS, {"metadata": {"name": "c1", "namespace": "ml"}, "status": {}})
    pods.informer.on_event(WatchEvent("ADDED", pod()))  # type: ignore[misc]
    assert pods._claims[("ml", "c1")].allocated is False
    kube.put(CLAIMS, {"metadata": {"name": "c1", "namespace": "ml"}, "status": {}})
    kube.overtake = lambda: pods.refresh_claims(every=True)
    pods.refresh_claims(every=True)
    assert pods._claims[("ml", "c1")] == ClaimView("ml", "c1", ("gpu-2",), allocated=True)
