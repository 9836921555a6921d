"""Who holds which GPU across a sandbox cluster, from the same sources an operator would check: each node's
PodResources `List` (device-plugin devices by GPU UUID, DRA devices by pool/device) and the ResourceClaims'
allocations (every claim allocated to a GPU of the bridge's driver). The invariant the bridge promises is that no
GPU ever has two holders; `holders` lists them all so a test can assert it and a person can read it."""

from __future__ import annotations

from collections import defaultdict

from bridge.inventory.simulated import devices_from_spec
from bridge.sandbox.cluster.cluster import DRIVER, GPU_RESOURCE, SandboxCluster
from bridge.sandbox.kubelet.podresources import list_devices


def holders(cluster: SandboxCluster) -> dict[tuple[str, str], set[str]]:
    """(node, GPU UUID) -> holders ("legacy ns/pod", "claim ns/name"), for every GPU somebody holds.

    A DRA device seen both in PodResources and in its claim's allocation is the same holding (the claim)."""
    out: dict[tuple[str, str], set[str]] = defaultdict(set)
    uuid_of: dict[tuple[str, str], str] = {}
    by_uuid: dict[str, str] = {}
    for node in cluster.nodes:
        for d in devices_from_spec(node.spec.gpus, node.name):
            uuid_of[(node.name, f"gpu-{d.index}")] = d.uuid
            by_uuid[d.uuid] = node.name
    for node in cluster.nodes:
        for held in list_devices(node.kubelet.podresources_socket):
            if held.resource == GPU_RESOURCE:
                out[(node.name, held.device)].add(f"legacy {held.namespace}/{held.pod}")
            elif held.resource == DRIVER:
                pool, _, device = held.device.partition("/")
                uuid = uuid_of.get((pool, device), held.device)
                out[(pool, uuid)].add(f"claim {held.claim}")
    api = cluster.api
    for claim in api.list(api.resource_api().claims)["items"]:
        alloc = (claim.get("status") or {}).get("allocation") or {}
        meta = claim["metadata"]
        for r in (alloc.get("devices") or {}).get("results") or []:
            if r.get("driver") != DRIVER:
                continue
            uuid = uuid_of.get((r.get("pool", ""), r.get("device", "")), r.get("device", ""))
            out[(r.get("pool", ""), uuid)].add(f"claim {meta['namespace']}/{meta['name']}")
    return dict(out)


def shared(cluster: SandboxCluster) -> dict[tuple[str, str], set[str]]:
    """The GPUs with more than one holder: must always be empty."""
    return {k: v for k, v in holders(cluster).items() if len(v) > 1}
