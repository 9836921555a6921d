"""GPUs offered through both APIs on one bridge node: the state the node daemon exists to prevent (pure).

The daemon's invariant (docs/architecture.md, "one owner per device"): a GPU is in the ResourceSlice only while it is
on the DRA side, and then the device plugin reports it Unhealthy, so no legacy pod can hold it. Two facts from the
cluster's own objects contradict that, and either one means GPUs can be given twice:

* **by count**: the bridge's ResourceSlices for the node publish `published` devices while Running pods bound to
  it hold `legacy_held` `nvidia.com/gpu` (the device-plugin count of each pod, `bridge.kvalues.podgpu`), and
  `published + legacy_held` exceeds the node's GPUs. Only Running pods count (a Pending pod bound to the node may
  not have been admitted yet), so this never fires on a state the daemon can produce.
* **by device**, where the daemon's split status shows it (annotation `dra-bridge.io/split-status`,
  `bridge.ledger.status`): a published device whose UUID the status lists with a legacy holder
  (`bridge.ledger.holders.described_side`).

Such devices are not DRA capacity: the capacity simulation (DRB032) leaves `excess` of the node's published devices
out, the ones named by device first. What makes it happen: a ResourceSlice written by something other than the node
daemon (a copy restored from a backup, an edited snapshot), a daemon version with a bug, two daemons on one node.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from bridge.kvalues.podgpu import pod_devices
from bridge.ledger.holders import described_side
from bridge.ledger.sides import Side
from bridge.report.features import BRIDGE_DRIVER, GPU
from bridge.report.model import ClusterModel, Node

MAX_PODS = 20  # pods named per node (the count covers all)


@dataclass(frozen=True)
class DoubleOffer:
    node: str
    gpus: int  # the node's GPUs
    published: int  # bridge devices in its ResourceSlices
    legacy_held: int  # nvidia.com/gpu of the Running pods bound to it
    pods: tuple[str, ...]  # namespace/name of those pods (at most MAX_PODS), largest first
    devices: tuple[str, ...] = ()  # published devices the split status shows held by a legacy holder

    @property
    def excess(self) -> int:
        """Published devices that cannot be DRA capacity: at least the overcount, at least those held by name."""
        return max(self.published + self.legacy_held - self.gpus, len(self.devices), 0)

    @property
    def dra_room(self) -> int:
        """The most GPUs the node can have on the DRA side while those pods run."""
        return max(0, self.gpus - self.legacy_held)


def _held_by_legacy(node: Node) -> tuple[str, ...]:
    status = node.split_status
    if status is None:
        return ()
    legacy_uuids = {d.uuid for d in status.devices if any(described_side(h) is Side.LEGACY for h in d.holders)}
    if not legacy_uuids:
        return ()
    return tuple(sorted(d.name for d in node.devices if d.driver == BRIDGE_DRIVER
                        and str(d.attributes.get(BRIDGE_DRIVER, {}).get("uuid", "")) in legacy_uuids))


def double_offers(model: ClusterModel) -> dict[str, DoubleOffer]:
    """node -> what it offers twice, for every bridge node publishing devices; one pass over the pods, reading only
    those bound to such a node."""
    published = {n.name: sum(1 for d in n.devices if d.driver == BRIDGE_DRIVER) for n in model.nodes.values()
                 if "bridge" in n.backends}
    published = {n: k for n, k in published.items() if k}
    if not published:
        return {}
    held: dict[str, int] = defaultdict(int)
    pods: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for pod in model.data.of("Pod"):
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if node not in published or (pod.get("status") or {}).get("phase") != "Running":
            continue
        n = pod_devices(spec, GPU)
        if n:
            held[node] += n
            m = pod.get("metadata") or {}
            pods[node].append((n, f"{m.get('namespace', '')}/{m.get('name', '')}"))
    out: dict[str, DoubleOffer] = {}
    for name, count in sorted(published.items()):
        node = model.nodes[name]
        offer = DoubleOffer(name, node.gpu_total, count, held.get(name, 0),
                            tuple(p for _, p in sorted(pods.get(name, []), key=lambda np: (-np[0], np[1]))[:MAX_PODS]),
                            _held_by_legacy(node))
        if offer.excess:
            out[name] = offer
    return out


__all__ = ["DoubleOffer", "double_offers"]
