"""Holder facts from the node's sources: PodResources, the kubelet's device-manager checkpoint with the pods' init
status, the claims allocated to this node's devices, our prepared claims; unknown sources say so."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from bridge.inventory.simulated import devices_from_spec
from bridge.ledger import Holder, HolderKind, Side
from bridge.node import kubeletcheckpoint
from bridge.node.holders import HolderSources
from bridge.node.nodepods import ClaimView, PodsSnapshot, allocated_devices, legacy_need, pod_view
from bridge.sandbox.kubelet.devicemanager import Assignment, DeviceManager
from bridge.sandbox.kubelet.podresources import PodResourcesServer

NODE = "node-a"
GPUS = devices_from_spec("4xH100-80GB", NODE)
RESOURCE = "nvidia.com/gpu"


def pod(name: str, uid: str, *, init_gpus: int = 0, init_state: str | None = "running", phase: str = "Pending",
        claims: tuple[str, ...] = (), template_claim: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": NODE, "containers": [{"name": "main", "image": "x"}]}
    status: dict[str, Any] = {"phase": phase}
    if init_gpus:
        spec["initContainers"] = [{"name": "init", "image": "x", "resources": {"limits": {RESOURCE: str(init_gpus)}}}]
        if init_state:
            status["initContainerStatuses"] = [{"name": "init", "state": {init_state: {}}}]
    if claims or template_claim:
        spec["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
        if template_claim:
            spec["resourceClaims"].append({"name": "t", "resourceClaimTemplateName": "tmpl"})
            status["resourceClaimStatuses"] = [{"name": "t", "resourceClaimName": template_claim}]
    return {"metadata": {"name": name, "namespace": "ml", "uid": uid}, "spec": spec, "status": status}


class Pods:
    def __init__(self, snap: PodsSnapshot) -> None:
        self.snap = snap

    def snapshot(self) -> PodsSnapshot:
        return self.snap

    def refresh_claims(self, *, every: bool = False, ended_interval_s: float = 5.0) -> None:
        return None


def listed(*pods: dict[str, Any], claims: dict[tuple[str, str], ClaimView] | None = None) -> PodsSnapshot:
    return PodsSnapshot(True, True, "", tuple(pod_view(p, RESOURCE) for p in pods), claims or {})


def write_checkpoint(path: Path, entries: list[tuple[str, str, list[str]]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"Data": {"PodDeviceEntries": [
        {"PodUID": u, "ContainerName": c, "ResourceName": RESOURCE, "DeviceIDs": {"-1": ids}, "AllocResp": ""}
        for u, c, ids in entries], "RegisteredDevices": {}}, "Checksum": 1}))


@pytest.fixture
def kubelet(short_tmp: Path):  # type: ignore[no-untyped-def]
    manager = DeviceManager(short_tmp / "device-plugins")
    server = PodResourcesServer(short_tmp, manager)
    server.start()
    yield short_tmp, manager
    server.stop()


def sources(root: Path, pods: PodsSnapshot | None, prepared: list[tuple[Any, Holder]] | None = None) -> HolderSources:
    return HolderSources(GPUS, resource_name=RESOURCE, driver="gpu.dra-bridge.io", node_name=NODE,
                         podresources_socket=root / "pod-resources" / "kubelet.sock",
                         kubelet_checkpoint=root / "device-plugins" / kubeletcheckpoint.CHECKPOINT_FILE,
                         pods=Pods(pods) if pods is not None else None,
                         prepared=lambda: prepared or [], timeout_s=2)


def test_podresources_containers_are_legacy_holders(kubelet) -> None:  # type: ignore[no-untyped-def]
    root, manager = kubelet
    manager.seed_assignment(Assignment("u1", "ml", "train-0", "main", RESOURCE, (GPUS[1].uuid,)))
    facts = sources(root, listed()).facts()
    assert facts.of(GPUS[1].uuid) == (Holder(HolderKind.CONTAINER, "pod ml/train-0 container main"),)
    assert facts.known(Side.LEGACY) and facts.known(Side.DRA)


def test_evaluations_share_one_podresources_channel_and_a_restarted_kubelet_is_read_at_once(short_tmp: Path) -> None:
    manager = DeviceManager(short_tmp / "device-plugins")
    server = PodResourcesServer(short_tmp, manager)
    server.start()
    src = sources(short_tmp, listed())
    try:
        manager.seed_assignment(Assignment("u1", "ml", "train-0", "main", RESOURCE, (GPUS[1].uuid,)))
        for _ in range(5):
            assert src.facts().of(GPUS[1].uuid) == (Holder(HolderKind.CONTAINER, "pod ml/train-0 container main"),)
        assert src._lister.dials == 1  # one channel for every List, not one per evaluation

        server.stop()  # the kubelet dies, leaving a socket nobody listens on: connections are refused
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dead.bind(str(short_tmp / "pod-resources" / "kubelet.sock"))
        try:
            down = src.facts()
        finally:
            dead.close()
            (short_tmp / "pod-resources" / "kubelet.sock").unlink()
        assert not down.known(Side.LEGACY) and "did not answer" in down.unknown[Side.LEGACY]
        server = PodResourcesServer(short_tmp, manager)  # ... and the restarted kubelet listens on a new socket
        server.start()
        # The failed call dropped the channel, so the next evaluation dials afresh instead of waiting out a backed-off
        # reconnect of the old one (gRPC backs off up to 120 s).
        back = src.facts()
        assert back.known(Side.LEGACY), back.unknown
        assert back.of(GPUS[1].uuid) == (Holder(HolderKind.CONTAINER, "pod ml/train-0 container main"),)
    finally:
        src.close()
        server.stop()


def test_a_missing_podresources_socket_makes_the_legacy_side_unknown(short_tmp: Path) -> None:
    facts = sources(short_tmp, listed()).facts()
    assert not facts.known(Side.LEGACY) and "no PodResources socket" in facts.unknown[Side.LEGACY]


def test_a_running_init_container_holds_what_the_kubelet_checkpoint_gave_it(kubelet) -> None:  # type: ignore[no-untyped-def]
    root, _ = kubelet
    write_checkpoint(root / "device-plugins" / kubeletcheckpoint.CHECKPOINT_FILE,
                     [("uid-7", "init", [GPUS[3].uuid]), ("uid-done", "init", [GPUS[2].uuid])])
    pods = listed(pod("train-7", "uid-7", init_gpus=1),
                  pod("done", "uid-done", init_gpus=1, init_state="terminated", phase="Running"))
    facts = sources(root, pods).legacy_facts()
    assert facts.of(GPUS[3].uuid) == (Holder(HolderKind.INIT_CONTAINER, "pod ml/train-7 container init"),)
    assert facts.of(GPUS[2].uuid) == ()  # its init container terminated: the GPU is free


def test_a_running_gpu_init_container_without_the_kubelet_checkpoint_makes_legacy_unknown(kubelet) -> None:  # type: ignore[no-untyped-def]
    root, _ = kubelet
    facts = sources(root, listed(pod("train-7", "uid-7", init_gpus=1))).legacy_facts()
    assert "runs init container init" in facts.unknown[Side.LEGACY] and "is missing" in facts.unknown[Side.LEGACY]
    assert sources(root, listed(pod("cpu-only", "u"))).legacy_facts().known(Side.LEGACY)


def test_checkpoint_entries_of_pods_not_seen_yet_hold_for_a_while_then_are_leftovers(kubelet) -> None:  # type: ignore[no-untyped-def]
    root, _ = kubelet
    write_checkpoint(root / "device-plugins" / kubeletcheckpoint.CHECKPOINT_FILE, [("uid-new", "init", [GPUS[0].uuid])])
    now = [100.0]
    src = sources(root, listed())
    src.clock = lambda: now[0]
    assert src.legacy_facts().of(GPUS[0].uuid)[0].who.startswith("pod UID uid-new container init")
    now[0] += 31
    assert src.legacy_facts().of(GPUS[0].uuid) == ()


def test_checkpoint_entries_of_a_deleted_pod_are_leftovers_at_once_unless_the_kubelet_still_runs_it(  # type: ignore[no-untyped-def]
        kubelet) -> None:
    # The kubelet rewrites its checkpoint only at its next Allocate or ListAndWatch update: an ended pod's entry stays.
    root, manager = kubelet
    # uid-forced was force-deleted in the API while the kubelet still runs it (PodResources lists it).
    manager.seed_assignment(Assignment("uid-forced", "ml", "forced", "main", RESOURCE, (GPUS[2].uuid,)))
    write_checkpoint(root / "device-plugins" / kubeletcheckpoint.CHECKPOINT_FILE,
                     [("uid-gone", "main", [GPUS[0].uuid]), ("uid-forced", "init", [GPUS[1].uuid])])
    snap = PodsSnapshot(True, True, "", (), {}, {"uid-gone": ("ml", "gone"), "uid-forced": ("ml", "forced")})
    facts = sources(root, snap).legacy_facts()
    assert facts.of(GPUS[0].uuid) == ()
    assert facts.of(GPUS[1].uuid) == (Holder(HolderKind.CONTAINER, "pod ml/forced container init (deleted, still active "
                                                                   "in the kubelet)"),)


def test_an_unreadable_kubelet_checkpoint_makes_the_legacy_side_unknown_a_missing_one_only_when_it_matters(
        kubelet) -> None:  # type: ignore[no-untyped-def]
    """Issue 27 item 3: a file that is there but cannot be used means holders unknown (nothing moves), whatever
    runs; a missing file only matters while a GPU init container runs (before its first Allocate the kubelet has
    written none)."""
    root, _ = kubelet
    path = root / "device-plugins" / kubeletcheckpoint.CHECKPOINT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    assert sources(root, listed()).legacy_facts().known(Side.LEGACY)
    assert "is missing" in sources(root, listed(pod("t", "u", init_gpus=1))).legacy_facts().unknown[Side.LEGACY]
    path.write_text("{not json")
    assert "cannot be read" in sources(root, listed(pod("t", "u", init_gpus=1))).legacy_facts().unknown[Side.LEGACY]
    assert "is not JSON" in sources(root, listed()).legacy_facts().unknown[Side.LEGACY]


def test_claims_allocated_to_our_devices_are_dra_holders_prepared_or_not(kubelet) -> None:  # type: ignore[no-untyped-def]
    root, _ = kubelet
    claims = {("ml", "direct"): ClaimView("ml", "direct", ("gpu-1",)),
              ("ml", "gen-1"): ClaimView("ml", "gen-1", ("gpu-2",))}
    pods = listed(pod("p", "u", claims=("direct",), template_claim="gen-1"), claims=claims)
    prepared = [(GPUS[3].uuid, Holder(HolderKind.PREPARED, "claim ml/old"))]
    facts = sources(root, pods, prepared).facts()
    assert facts.of(GPUS[1].uuid) == (Holder(HolderKind.ALLOCATED, "claim ml/direct (pod ml/p)"),)
    assert facts.of(GPUS[2].uuid) == (Holder(HolderKind.ALLOCATED, "claim ml/gen-1 (pod ml/p)"),)
    assert facts.of(GPUS[3].uuid, Side.DRA) == (Holder(HolderKind.PREPARED, "claim ml/old"),)


def test_a_pod_watch_that_is_down_or_a_claim_that_cannot_be_read_makes_dra_unknown(kubelet) -> None:  # type: ignore[no-untyped-def]
    root, _ = kubelet
    down = PodsSnapshot(False, False, "the watch on the pods bound to node node-a is down (connection refused)")
    facts = sources(root, down).facts()
    assert "is down" in facts.unknown[Side.DRA] and "is down" in facts.unknown[Side.LEGACY]
    bad = PodsSnapshot(True, False, "ResourceClaim ml/c cannot be read (forbidden)",
                       (pod_view(pod("p", "u", claims=("c",)), RESOURCE),), {("ml", "c"): ClaimView("ml", "c", error="x")})
    facts = sources(root, bad).facts()
    assert "cannot be read" in facts.unknown[Side.DRA] and facts.known(Side.LEGACY)


def test_only_our_driver_and_pool_count_in_a_claims_allocation() -> None:
    claim = {"status": {"allocation": {"devices": {"results": [
        {"request": "a", "driver": "gpu.dra-bridge.io", "pool": NODE, "device": "gpu-1"},
        {"request": "b", "driver": "gpu.dra-bridge.io", "pool": "other-node", "device": "gpu-2"},
        {"request": "c", "driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-3"}]}}}}
    assert allocated_devices(claim, "gpu.dra-bridge.io", NODE) == ("gpu-1",)
    assert allocated_devices({}, "gpu.dra-bridge.io", NODE) == ()


def test_the_claims_a_pod_uses_include_generated_and_extended_resource_claims() -> None:
    p = pod("p", "u", claims=("named",), template_claim="from-template")
    p["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": "p-extended-resources-xyz"}
    assert pod_view(p, RESOURCE).claims == ("named", "from-template", "p-extended-resources-xyz")


def test_the_kubelet_checkpoint_parser_reads_both_formats_and_refuses_garbage() -> None:
    new = {"Data": {"PodDeviceEntries": [{"PodUID": "u", "ContainerName": "c", "ResourceName": RESOURCE,
                                          "DeviceIDs": {"0": ["a"], "1": ["b"]}}]}, "Checksum": 1}
    old = {"Data": {"PodDeviceEntries": [{"PodUID": "u", "ContainerName": "c", "ResourceName": RESOURCE,
                                          "DeviceIDs": ["a", "b"]}]}}
    assert kubeletcheckpoint.parse(json.dumps(new))[0].device_ids == ("a", "b")
    assert kubeletcheckpoint.parse(json.dumps(old))[0].device_ids == ("a", "b")
    with pytest.raises(kubeletcheckpoint.KubeletCheckpointError, match="DeviceIDs"):
        kubeletcheckpoint.parse(json.dumps({"Data": {"PodDeviceEntries": [
            {"PodUID": "u", "ContainerName": "c", "ResourceName": RESOURCE, "DeviceIDs": 5}]}}))
    with pytest.raises(kubeletcheckpoint.KubeletCheckpointError, match="not JSON"):
        kubeletcheckpoint.parse("{")


def legacy_pod(name: str, uid: str, gpus: int, *, phase: str = "Pending", bound: bool = True,
               extended_claim: str = "") -> dict[str, Any]:
    limits = {"limits": {RESOURCE: str(gpus)}}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x", "resources": limits}]}
    if bound:
        spec["nodeName"] = NODE
    status: dict[str, Any] = {"phase": phase}
    if extended_claim:
        status["extendedResourceClaimStatus"] = {"resourceClaimName": extended_claim, "requestMappings": []}
    return {"metadata": {"name": name, "namespace": "team", "uid": uid}, "spec": spec, "status": status}


def test_legacy_pods_placed_here_and_not_admitted_yet_hold_a_count_of_free_legacy_gpus(  # type: ignore[no-untyped-def]
        kubelet) -> None:
    root, manager = kubelet
    # "shown": admitted, PodResources shows its container; "checkpointed": admitted, only the kubelet's checkpoint
    # names it (as for a GPU init container); "waiting": bound, not admitted; "failed": ended before admission;
    # "nominated": the scheduler is binding it here; "by-dra": its extended-resource claim serves the GPUs.
    manager.seed_assignment(Assignment("u-shown", "team", "shown", "main", RESOURCE, (GPUS[0].uuid,)))
    write_checkpoint(root / "device-plugins" / kubeletcheckpoint.CHECKPOINT_FILE,
                     [("u-shown", "main", [str(GPUS[0].uuid)]), ("u-checkpointed", "main", [str(GPUS[1].uuid)])])
    snap = listed(legacy_pod("shown", "u-shown", 1), legacy_pod("checkpointed", "u-checkpointed", 1),
                  legacy_pod("waiting", "u-waiting", 2), legacy_pod("failed", "u-failed", 1, phase="Failed"),
                  legacy_pod("by-dra", "u-by-dra", 1, extended_claim="by-dra-gpu"))
    snap = PodsSnapshot(True, True, "", snap.pods, {("team", "by-dra-gpu"): ClaimView("team", "by-dra-gpu")},
                        incoming=(pod_view(legacy_pod("nominated", "u-nominated", 3, bound=False), RESOURCE),))
    facts = sources(root, snap).facts()
    assert facts.admitting == ((Holder(HolderKind.ADMITTING, "pod team/waiting"), 2),
                               (Holder(HolderKind.ADMITTING, "pod team/nominated, nominated to this node"), 3))
    assert facts.admitting_gpus() == 5
    assert facts.admitting[0][0].describe() == ("pod team/waiting (legacy pod placed on this node, not admitted by the "
                                                "kubelet yet)")


def test_without_a_kubelet_checkpoint_a_bound_legacy_pod_is_not_admitted_until_podresources_shows_it(  # type: ignore[no-untyped-def]
        kubelet) -> None:
    root, manager = kubelet
    snap = listed(legacy_pod("waiting", "u-waiting", 1))
    assert sources(root, snap).facts().admitting_gpus() == 1
    manager.seed_assignment(Assignment("u-waiting", "team", "waiting", "main", RESOURCE, (GPUS[2].uuid,)))
    assert sources(root, snap).facts().admitting == ()


def test_the_kubelet_counts_init_containers_and_sidecars_as_the_scheduler_does() -> None:
    spec = {"initContainers": [{"name": "fetch", "resources": {"limits": {RESOURCE: "3"}}},
                               {"name": "proxy", "restartPolicy": "Always", "resources": {"limits": {RESOURCE: "1"}}}],
            "containers": [{"name": "a", "resources": {"limits": {RESOURCE: "1"}}},
                           {"name": "b", "resources": {"requests": {RESOURCE: "1"}, "limits": {RESOURCE: "1"}}},
                           {"name": "cpu-only"}]}
    assert legacy_need(spec, RESOURCE) == 4  # the init container's 3 with the sidecar's 1 (more than 2 + 1)
    spec["initContainers"][0]["resources"]["limits"][RESOURCE] = "1"
    assert legacy_need(spec, RESOURCE) == 3  # the two app containers with the sidecar
    assert legacy_need({"containers": [{"name": "cpu"}]}, RESOURCE) == 0
