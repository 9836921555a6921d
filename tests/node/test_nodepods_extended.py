"""Pods nominated to this node that ask for an extended resource served by DRA (KEP-5004): while the scheduler has
not made their claim (`status.extendedResourceClaimStatus` names none), any DRA device of this node may be the
one they get, so none may leave the DRA side.

The rules are kube-scheduler's (pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go
`filterExtendedResources`, k8s.io/dynamic-resource-allocation deviceclass/extendedresourcecache): a name is served
by DRA when a DeviceClass maps it (its implicit `deviceclass.resource.kubernetes.io/<class>`, or its explicit
`spec.extendedResourceName`) and the node's allocatable for it is 0 or absent; where a device plugin advertises
it, the device plugin serves it and no claim comes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.kube import KubeAPI, RetryPolicy, connect
from bridge.kube.api import WatchEvent
from bridge.ledger import Holder, HolderKind, Side
from bridge.node.nodepods import NodePods, PodsSnapshot, pod_view, served_by_dra, waits_for_allocation
from bridge.sandbox.apiserver import ApiServer
from tests.dra.fakekube import FakeKube
from tests.node.test_holders import GPUS, kubelet, sources  # noqa: F401  (kubelet: a fixture)
from tests.polling import wait_until

NODE = "node-a"
DRIVER = "gpu.dra-bridge.io"
EXPLICIT = "example.com/gpu"
IMPLICIT = "deviceclass.resource.kubernetes.io/gpu.dra-bridge.io"
CLAIMS = FakeKube().resource_api().claims


def device_class(name: str = "gpu.dra-bridge.io", explicit: str | None = EXPLICIT, rv: str = "1") -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}
    if explicit is not None:
        spec["extendedResourceName"] = explicit
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": rv}, "spec": spec}


def asking(resource: str = EXPLICIT, count: str = "1", *, claim: str = "", uid: str = "u1",
           name: str = "p") -> dict[str, Any]:
    """A pod nominated to this node, not bound, asking for `count` of `resource`; `claim`: the claim the
    scheduler made for it (written to `status.extendedResourceClaimStatus` at the end of PreBind)."""
    status: dict[str, Any] = {"phase": "Pending", "nominatedNodeName": NODE}
    if claim:
        status["extendedResourceClaimStatus"] = {"resourceClaimName": claim, "requestMappings": [
            {"containerName": "main", "resourceName": resource, "requestName": "container-0-request-0"}]}
    return {"metadata": {"name": name, "namespace": "ml", "uid": uid, "resourceVersion": "5"},
            "spec": {"containers": [{"name": "main", "image": "x",
                                     "resources": {"requests": {resource: count}, "limits": {resource: count}}}]},
            "status": status}


class Node:
    """NodePods on a fake API, fed watch events by hand; the Node's allocatable is `allocatable` (None: the Node
    has not been read)."""

    def __init__(self, *, classes_listed: bool = True, allocatable: dict[str, str] | None = None,
                 node_read: bool = True) -> None:
        self.kube = FakeKube()
        self.allocatable: dict[str, str] | None = (allocatable or {}) if node_read else None
        self.changes = 0
        self.pods = NodePods(self.kube, NODE, resource="nvidia.com/gpu", driver=DRIVER, on_change=self.changed,
                             node_allocatable=lambda: self.allocatable)
        for inf in (self.pods.informer, self.pods.nominated):
            inf.synced.set()
            inf.healthy = True
        if classes_listed:
            self.list_classes()

    def changed(self) -> None:
        self.changes += 1

    def list_classes(self, *classes: dict[str, Any]) -> None:
        for c in classes:
            self.pods.classes.informer.on_event(WatchEvent("ADDED", c))  # type: ignore[misc]
        self.pods.classes.informer.synced.set()
        self.pods.classes.informer.healthy = True

    def class_event(self, type_: str, obj: dict[str, Any]) -> None:
        self.pods.classes.informer.on_event(WatchEvent(type_, obj))  # type: ignore[arg-type, misc]

    def nominated(self, type_: str, obj: dict[str, Any]) -> None:
        self.pods.nominated.on_event(WatchEvent(type_, obj))  # type: ignore[arg-type, misc]

    def waiting(self) -> list[str]:
        """The nominated pods the holders count as waiting for a device of this node (`INCOMING`)."""
        snap = self.pods.snapshot()
        assert snap.claims is not None
        return [p.name for p in snap.incoming if waits_for_allocation(p, snap.claims)]


# ---- the explicit extendedResourceName ---------------------------------------------------------------------------

def test_a_nominated_pod_asking_for_a_deviceclass_s_explicit_extended_resource_name_waits_for_a_device_here() -> None:
    node = Node()
    node.list_classes(device_class())
    node.nominated("ADDED", asking(EXPLICIT))
    snap = node.pods.snapshot()
    assert snap.claims_ok and node.waiting() == ["p"]
    assert node.pods.waiting_for_claims()  # evaluations keep coming until the claim shows


def test_once_its_extended_resource_claim_status_names_the_claim_it_waits_no_more_and_the_claim_holds() -> None:
    node = Node()
    node.list_classes(device_class())
    node.nominated("ADDED", asking(EXPLICIT))
    assert node.waiting() == ["p"]
    node.kube.put(CLAIMS, {"metadata": {"name": "p-extended-resources-x", "namespace": "ml"}, "status": {
        "allocation": {"devices": {"results": [{"request": "container-0-request-0", "driver": DRIVER, "pool": NODE,
                                                 "device": "gpu-3"}]}}}})
    node.nominated("MODIFIED", asking(EXPLICIT, claim="p-extended-resources-x"))
    snap = node.pods.snapshot()
    assert snap.claims_ok and node.waiting() == []
    assert snap.claims is not None and snap.claims[("ml", "p-extended-resources-x")].devices == ("gpu-3",)
    assert not node.pods.waiting_for_claims()


def test_a_resource_name_no_deviceclass_declares_is_not_waited_for() -> None:
    node = Node()
    node.list_classes(device_class(explicit="example.com/other"), device_class("plain", explicit=None))
    node.nominated("ADDED", asking(EXPLICIT))
    snap = node.pods.snapshot()
    assert snap.claims_ok and node.waiting() == []
    assert not node.pods.waiting_for_claims()


def test_a_request_of_zero_asks_for_nothing() -> None:
    """hasDeviceClassMappedExtendedResource skips zero requests: such a pod takes no DRA path."""
    node = Node()
    node.list_classes(device_class())
    node.nominated("ADDED", asking(EXPLICIT, count="0"))
    assert node.waiting() == []


def test_a_deviceclass_added_later_is_picked_up_and_wakes_the_split() -> None:
    node = Node()
    node.nominated("ADDED", asking(EXPLICIT))
    assert node.waiting() == []
    before = node.changes
    node.class_event("ADDED", device_class())
    assert node.changes == before + 1  # one evaluation: the pod's waiting changed
    assert node.waiting() == ["p"]


def test_a_deviceclass_that_drops_or_changes_its_name_later_is_picked_up_for_pods_nominated_after() -> None:
    node = Node()
    node.list_classes(device_class())
    node.class_event("MODIFIED", device_class(explicit="example.com/renamed", rv="2"))
    node.nominated("ADDED", asking(EXPLICIT, uid="u1", name="old-name"))
    node.nominated("ADDED", asking("example.com/renamed", uid="u2", name="new-name"))
    assert node.waiting() == ["new-name"]
    node.class_event("DELETED", device_class(explicit="example.com/renamed", rv="2"))
    node.nominated("ADDED", asking("example.com/renamed", uid="u3", name="after-delete"))
    assert "after-delete" not in node.waiting()


def test_a_pod_found_waiting_keeps_waiting_while_nominated_when_its_deviceclass_goes() -> None:
    """The scheduler chose DRA for this binding cycle at Filter time, from its caches then; deleting the class
    does not stop the PreBind under way, which still creates and allocates the claim."""
    node = Node()
    node.list_classes(device_class())
    node.nominated("ADDED", asking(EXPLICIT))
    assert node.waiting() == ["p"]
    node.class_event("DELETED", device_class())
    assert node.waiting() == ["p"]
    node.kube.put(CLAIMS, {"metadata": {"name": "p-extended-resources-x", "namespace": "ml"}, "status": {
        "allocation": {"devices": {"results": [{"request": "r", "driver": DRIVER, "pool": NODE, "device": "gpu-1"}]}}}})
    node.nominated("MODIFIED", asking(EXPLICIT, claim="p-extended-resources-x"))  # PreBind done
    assert node.waiting() == [] and node.pods._extended_dra == set()


# ---- where a device plugin advertises the name -------------------------------------------------------------------

@pytest.mark.parametrize(("allocatable", "waits"), [
    ({EXPLICIT: "4"}, False),  # a device plugin serves it on this node: no claim comes
    ({EXPLICIT: "0"}, True),  # advertised at 0 (its devices unhealthy, or ours all on DRA): DRA serves it
    ({"example.com/other": "4"}, True),  # not advertised
], ids=["advertised", "advertised-as-zero", "not-advertised"])
def test_a_name_the_node_advertises_through_a_device_plugin_is_served_by_it_not_waited_for(
        allocatable: dict[str, str], waits: bool) -> None:
    """filterExtendedResources: `isBackedByDRA && allocatable == 0` is DRA; a node whose allocatable has the name
    above 0 serves it through the device plugin (PreBind's bindClaim: 'satisfied by device plugin')."""
    node = Node(allocatable=allocatable)
    node.list_classes(device_class())
    node.nominated("ADDED", asking(EXPLICIT))
    assert node.waiting() == (["p"] if waits else [])


def test_a_deviceclass_declaring_our_own_resource_waits_only_once_the_device_plugin_offers_none() -> None:
    """A class with `extendedResourceName: nvidia.com/gpu` (KEP-5004's migration pattern): while our device plugin
    advertises GPUs the scheduler gives such a pod the legacy path here; once the Node's allocatable shows 0, the
    scheduler makes a claim for it. A pod found not waiting is judged again on the facts of each evaluation (the
    side that holds); one found waiting keeps waiting when the allocatable grows (its binding cycle chose DRA)."""
    node = Node(allocatable={"nvidia.com/gpu": "2"})
    node.list_classes(device_class(explicit="nvidia.com/gpu"))
    node.nominated("ADDED", asking("nvidia.com/gpu"))
    assert node.waiting() == []
    node.allocatable = {"nvidia.com/gpu": "0"}
    assert node.waiting() == ["p"]
    node.allocatable = {"nvidia.com/gpu": "1"}
    assert node.waiting() == ["p"]


def test_the_implicit_name_waits_as_before_unless_the_node_advertises_it() -> None:
    """No DeviceClass knowledge needed: a device plugin cannot advertise a kubernetes.io name (the kubelet registers
    only IsExtendedResourceName names), so a nominated pod asking for it was given the DRA path."""
    node = Node(classes_listed=False, node_read=False)
    node.nominated("ADDED", asking(IMPLICIT))
    snap = node.pods.snapshot()
    assert snap.claims_ok and node.waiting() == ["p"]
    assert pod_view(asking(IMPLICIT), "nvidia.com/gpu").extended == (IMPLICIT,)


# ---- not known yet: safe ------------------------------------------------------------------------------------------

def test_while_the_deviceclasses_are_not_listed_such_a_pod_waits_and_the_dra_side_is_unknown() -> None:
    node = Node(classes_listed=False)
    node.nominated("ADDED", asking(EXPLICIT))
    snap = node.pods.snapshot()
    assert snap.listed and not snap.claims_ok
    assert snap.why == ("whether pod ml/p, nominated to this node, waits for a DRA device for example.com/gpu is "
                        "unknown: the DeviceClasses have not been listed yet")
    assert node.waiting() == ["p"]
    node.list_classes()  # listed: no class declares the name
    assert node.pods.snapshot().claims_ok and node.waiting() == []


def test_a_deviceclass_watch_that_cannot_list_stops_nothing_while_no_nominated_pod_asks_for_a_name() -> None:
    node = Node(classes_listed=False)
    node.nominated("ADDED", asking("nvidia.com/gpu", count="0"))
    node.nominated("ADDED", asking(EXPLICIT, claim="done", uid="u2", name="claimed"))
    node.kube.put(CLAIMS, {"metadata": {"name": "done", "namespace": "ml"}, "status": {}})
    node.pods.refresh_claims()
    assert node.pods.snapshot().claims_ok


def test_while_the_nodes_allocatable_is_not_read_such_a_pod_waits_and_the_dra_side_is_unknown() -> None:
    node = Node(node_read=False)
    node.list_classes(device_class())
    node.nominated("ADDED", asking(EXPLICIT))
    snap = node.pods.snapshot()
    assert not snap.claims_ok and snap.why.endswith("unknown: the Node node-a's allocatable has not been read")
    assert node.waiting() == ["p"]


def test_the_rule_alone() -> None:
    maps = {EXPLICIT: True, "example.com/other": False}.get
    assert served_by_dra([EXPLICIT], maps, {}) == (True, EXPLICIT)
    assert served_by_dra(["example.com/other"], maps, {}) == (False, "")
    assert served_by_dra([EXPLICIT], maps, {EXPLICIT: "1"}) == (False, "")
    assert served_by_dra(["example.com/unlisted"], lambda _n: None, {}) == (None, "example.com/unlisted")
    assert served_by_dra(["example.com/unlisted"], lambda _n: None, {"example.com/unlisted": "1"}) == (False, "")
    assert served_by_dra([IMPLICIT], lambda _n: None, None) == (True, IMPLICIT)
    assert served_by_dra(["example.com/other", EXPLICIT], maps, None) == (None, EXPLICIT)


# ---- what the split sees ------------------------------------------------------------------------------------------

def test_such_a_pod_holds_every_device_of_the_node_as_incoming(kubelet: Any) -> None:  # noqa: F811
    root, _ = kubelet
    node = Node()
    node.list_classes(device_class())
    node.nominated("ADDED", asking(EXPLICIT))
    snap: PodsSnapshot = node.pods.snapshot()
    facts = sources(root, snap).facts()
    assert facts.known(Side.DRA)
    assert all(facts.of(g.uuid, Side.DRA) == (Holder(HolderKind.INCOMING, "pod ml/p"),) for g in GPUS)


# ---- through a real watch ------------------------------------------------------------------------------------------

@pytest.fixture
def api(tmp_path: Path) -> Iterator[KubeAPI]:
    with ApiServer(version="1.37.2") as srv:  # DRAExtendedResource on: the server keeps extendedResourceName
        srv.write_kubeconfig(tmp_path / "kc")
        yield connect(tmp_path / "kc", retry=RetryPolicy(initial_backoff=0.05, max_backoff=0.5, deadline=2.0))


def test_deviceclasses_created_and_deleted_on_the_api_server_are_followed(api: KubeAPI) -> None:
    classes = api.resource_api().device_classes
    api.create(classes, {**device_class("first"), "metadata": {"name": "first"}})
    pods = NodePods(api, NODE, resource="nvidia.com/gpu", driver=DRIVER, node_allocatable=dict)
    pods.start()
    try:
        wait_until(lambda: pods.classes.known(), what="the DeviceClasses listed")
        assert pods.classes.maps(EXPLICIT) and pods.classes.maps("example.com/second") is False
        api.create(classes, {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                             "metadata": {"name": "second"}, "spec": {"extendedResourceName": "example.com/second"}})
        wait_until(lambda: pods.classes.maps("example.com/second"), what="the second class's name")
        api.delete(classes, "first")
        wait_until(lambda: pods.classes.maps(EXPLICIT) is False, what="the first class's name gone")
    finally:
        pods.stop()
