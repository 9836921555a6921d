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

from dataclasses import dataclass

from bridge.ledger.holders import described_side
from bridge.ledger.sides import Side
from bridge.report.features import BRIDGE_DRIVER
from bridge.report.model import ClusterModel, Node
from bridge.report.supply import BoundGpuPod

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


def double_offers(model: ClusterModel, bound: dict[str, list[BoundGpuPod]]) -> dict[str, DoubleOffer]:
    """node -> what it offers twice, for every bridge node publishing devices; `bound` is
    `bridge.report.supply.bound_gpu_pods` (the pods bound to bridge nodes that hold nvidia.com/gpu)."""
    out: dict[str, DoubleOffer] = {}
    for node in model.nodes.values():
        if "bridge" not in node.backends:
            continue
        published = sum(1 for d in node.devices if d.driver == BRIDGE_DRIVER)
        if not published:
            continue
        running = sorted(((p.gpus, f"{p.namespace}/{p.name}") for p in bound.get(node.name, ())
                          if p.phase == "Running"), key=lambda np: (-np[0], np[1]))
        offer = DoubleOffer(node.name, node.gpu_total, published, sum(n for n, _ in running),
                            tuple(name for _, name in running[:MAX_PODS]), _held_by_legacy(node))
        if offer.excess:
            out[node.name] = offer
    return out


__all__ = ["DoubleOffer", "double_offers"]
