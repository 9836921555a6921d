"""Who holds which GPU, and to which API each GPU is offered, across a sandbox cluster, from the same sources an
operator would check. The invariant the bridge promises is one owner per GPU: no GPU ever has two holders, and no
GPU is ever offered to both APIs at once. These helpers read it from outside the node daemons, so a test (or
`bridge demo`) checks the daemons instead of trusting them.

* `holders` / `shared`: each node's PodResources `List` (device-plugin devices by GPU UUID, DRA devices by
  pool/device) and the ResourceClaims' allocations (every claim allocated to a GPU of the bridge's driver);
* `offered_twice`: the GPUs the kubelet sees healthy from the device plugin (its `ListAndWatch` view) that are also
  published in the node's ResourceSlices;
* `SideWatch`: both, sampled in a background thread for as long as a test or the demo runs, so "never" means every
  sample, not only the last one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from types import TracebackType

import grpc

from bridge.inventory.simulated import devices_from_spec
from bridge.kube.errors import KubeError
from bridge.sandbox.cluster.cluster import DRIVER, GPU_RESOURCE, SandboxCluster, SandboxNode
from bridge.sandbox.kubelet.podresources import allocatable_devices, list_devices

log = logging.getLogger(__name__)


def _uuids(cluster: SandboxCluster) -> dict[tuple[str, str], str]:
    """(node, "gpu-<index>") -> GPU UUID, for every simulated GPU of the cluster."""
    return {(node.name, f"gpu-{d.index}"): d.uuid for node in cluster.nodes
            for d in devices_from_spec(node.spec.gpus, node.name)}


Holdings = dict[tuple[str, str], set[str]]


def _pod_resources(cluster: SandboxCluster, uuid_of: dict[tuple[str, str], str]) -> Holdings:
    out: Holdings = defaultdict(set)
    for node in cluster.nodes:
        socket = node.real.podresources_socket if node.real is not None else node.sim.podresources_socket
        for held in list_devices(socket):
            if held.resource == GPU_RESOURCE:
                out[(node.name, held.device)].add(f"legacy {held.namespace}/{held.pod}")
            elif held.resource == DRIVER:
                pool, _, device = held.device.partition("/")
                uuid = uuid_of.get((pool, device), held.device)
                out[(pool, uuid)].add(f"claim {held.claim}")
    return out


def _claims(cluster: SandboxCluster, uuid_of: dict[tuple[str, str], str]) -> Holdings:
    out: Holdings = defaultdict(set)
    api = cluster.api
    for claim in api.list(api.resource_api().claims)["items"]:
        alloc = (claim.get("status") or {}).get("allocation") or {}
        meta = claim["metadata"]
        for r in (alloc.get("devices") or {}).get("results") or []:
            if r.get("driver") != DRIVER:
                continue
            uuid = uuid_of.get((r.get("pool", ""), r.get("device", "")), r.get("device", ""))
            out[(r.get("pool", ""), uuid)].add(f"claim {meta['namespace']}/{meta['name']}")
    return out


def _merge(*parts: Holdings) -> Holdings:
    out: Holdings = defaultdict(set)
    for part in parts:
        for key, held in part.items():
            out[key] |= held
    return dict(out)


def holders(cluster: SandboxCluster) -> Holdings:
    """(node, GPU UUID) -> holders ("legacy ns/pod", "claim ns/name"), for every GPU somebody holds.

    A DRA device seen both in PodResources and in its claim's allocation is the same holding (the claim)."""
    uuid_of = _uuids(cluster)
    return _merge(_pod_resources(cluster, uuid_of), _claims(cluster, uuid_of))


def shared(cluster: SandboxCluster, *, allocations: bool = True) -> Holdings:
    """The GPUs with more than one holder: must always be empty. `allocations=False` counts only what the kubelets
    gave to pods (PodResources), not the claims' allocations: for a scenario where a claim is allocated a GPU a
    legacy pod holds and waits for it (a binding that landed late), which must never reach a container.

    PodResources and the claims are read at different instants, so a GPU whose legacy pod ended and that moved to
    DRA and was allocated between the two reads could look held twice without ever being so. PodResources is
    therefore read before and after the claims, and a holding from it counts only when both reads show it: a GPU
    leaves the legacy side only after PodResources stopped showing its holder (so the second read cannot show a
    holder the claims replaced), and joins it only after the claims let it go (so the claims read cannot show a
    holding PodResources replaced)."""
    uuid_of = _uuids(cluster)
    first = _pod_resources(cluster, uuid_of)
    claims = _claims(cluster, uuid_of) if allocations else {}
    second = _pod_resources(cluster, uuid_of)
    steady = {k: first[k] & second[k] for k in first.keys() & second.keys()}
    return {k: v for k, v in _merge(steady, claims).items() if len(v) > 1}


def _published(cluster: SandboxCluster) -> set[tuple[str, str]]:
    """(node, GPU UUID) for every device of the bridge's driver in a ResourceSlice."""
    api = cluster.api
    uuid_of = _uuids(cluster)
    out = set()
    for s in api.list(api.resource_api().slices)["items"]:
        spec = s.get("spec") or {}
        if spec.get("driver") != DRIVER:
            continue
        node = spec.get("nodeName") or (spec.get("pool") or {}).get("name", "")
        for d in spec.get("devices") or []:
            out.add((node, uuid_of.get((node, d.get("name", "")), d.get("name", ""))))
    return out


def _healthy_legacy(node: SandboxNode) -> set[str]:
    """The GPUs the node's kubelet offers to new legacy pods: the simulator's device-plugin view, or a real
    kubelet's PodResources `GetAllocatableResources` (its healthy devices)."""
    if node.real is not None:
        return allocatable_devices(node.real.podresources_socket, GPU_RESOURCE)
    return set(node.sim.devices.resource(GPU_RESOURCE).healthy)


def offered_twice(cluster: SandboxCluster) -> set[tuple[str, str]]:
    """(node, GPU UUID) of the GPUs offered to both APIs at once: healthy in the kubelet's device-plugin view and
    published in a ResourceSlice. Must always be empty.

    The two views are read at different instants, so a GPU that completes a whole move between them could look
    offered twice without ever being so. The slices are therefore read before and after the kubelet's view, and a
    GPU counts only when both slice reads publish it: a DRA -> legacy move publishes the slice without the GPU
    before offering it to the device plugin (so the second read cannot have it), and a legacy -> DRA move withdraws
    it from the device plugin before publishing it (so the first read cannot have it)."""
    before = _published(cluster)
    legacy = {(node.name, uuid) for node in cluster.nodes for uuid in _healthy_legacy(node)}
    after = _published(cluster)
    return before & after & legacy


@dataclass
class Samples:
    """What a `SideWatch` saw: how many samples, and every violation with the time it was seen."""

    count: int = 0
    errors: int = 0  # samples that could not be taken (API or socket unreachable, e.g. while stopping)
    shared: list[tuple[float, dict[tuple[str, str], set[str]]]] = field(default_factory=list)
    offered_twice: list[tuple[float, set[tuple[str, str]]]] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.shared and not self.offered_twice

    def describe(self) -> str:
        if self.clean:
            return f"no GPU on both sides in {self.count} samples"
        parts = [f"{node}/{uuid} held by {', '.join(sorted(h))} (t={t:.1f}s)"
                 for t, found in self.shared for (node, uuid), h in found.items()]
        parts += [f"{node}/{uuid} offered to both APIs (t={t:.1f}s)" for t, found in self.offered_twice
                  for node, uuid in sorted(found)]
        return f"{len(self.shared) + len(self.offered_twice)} of {self.count} samples saw a GPU on both sides: " + \
            "; ".join(parts[:10])


class SideWatch:
    """Samples `shared` and `offered_twice` every `interval` seconds in a thread until stopped.

        with SideWatch(cluster) as watch:
            ...                               # the scenario
        assert watch.samples.clean, watch.samples.describe()
    """

    def __init__(self, cluster: SandboxCluster, interval: float = 0.25, *, allocations: bool = True) -> None:
        self.cluster = cluster
        self.allocations = allocations  # `shared(allocations=)`
        self.interval = interval
        self.samples = Samples()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()

    def sample(self) -> None:
        """Take one sample now (also what the thread does)."""
        now = time.monotonic() - self._t0
        try:
            twice = shared(self.cluster, allocations=self.allocations)
            offered = offered_twice(self.cluster)
        except (KubeError, OSError, grpc.RpcError) as err:
            self.samples.errors += 1
            log.debug("side watch: sample failed: %s", err)
            return
        self.samples.count += 1
        if twice:
            self.samples.shared.append((now, twice))
        if offered:
            self.samples.offered_twice.append((now, offered))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> SideWatch:
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="side-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Samples:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None
        self.sample()  # and one at the very end
        return self.samples

    def __enter__(self) -> SideWatch:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
