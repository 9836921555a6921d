"""The node daemon's metrics registry: one `CollectorRegistry` per daemon, never the process-global one.

Each half of the daemon registers its own metric families on it (the device plugin's `DevicePluginMetrics`; the
DRA half adds its own), and `/metrics` serves the registry.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Info

from bridge.deviceplugin.metrics import DevicePluginMetrics


class NodeMetrics:
    def __init__(self, node_name: str, resource_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.info = Info("dra_bridge_node", "The node daemon's identity", registry=self.registry)
        self.info.info({"node": node_name, "resource": resource_name})
        self.devices = Gauge("dra_bridge_node_devices", "GPUs discovered at start", registry=self.registry)
        self.deviceplugin = DevicePluginMetrics(self.registry, resource_name)


class SplitMetrics:
    """The ownership ledger's metrics (`dra_bridge_split_*`), on their own registry, which the composition root
    registers on the daemon's `/metrics` registry (like the DRA half's).

    Per evaluation: `evaluations_total{state}`, the requested and applied counts, and one `target_info` series naming
    the requested value and where it came from (the previous series is removed, so there is always exactly one)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.devices = Gauge("dra_bridge_split_devices", "GPUs per side of the ownership ledger", ["side"], registry=r)
        self.moves = Counter("dra_bridge_split_moves", "Device moves between the APIs by direction and result "
                             "(started, finished, aborted)", ["direction", "result"], registry=r)
        self.reclaims = Counter("dra_bridge_split_reclaims", "Free devices taken back from the device plugin for an "
                                "allocated claim at NodePrepareResources", registry=r)
        self.refusals = Counter("dra_bridge_split_refusals", "Refusals by the ownership ledger: an invalid target "
                                "(split), a device-plugin Allocate or a NodePrepareResources for a device of the other "
                                "side", ["api"], registry=r)
        self.stuck = Gauge("dra_bridge_split_stuck_claims", "ResourceClaims allocated a GPU that a legacy container "
                           "holds (a late allocation after the GPU left DRA): their pods wait for that container",
                           registry=r)
        self.evaluations = Counter("dra_bridge_split_evaluations", "Split evaluations by resulting state "
                                   "(converged, converging, refused)", ["state"], registry=r)
        self.requested = Gauge("dra_bridge_split_requested_devices", "GPUs the requested split puts on DRA "
                               "(-1 while the request is refused)", registry=r)
        self.applied = Gauge("dra_bridge_split_applied_devices", "GPUs on the DRA side now", registry=r)
        self.target = Gauge("dra_bridge_split_target_info", "The requested split value and its source (always 1)",
                            ["requested", "source", "state"], registry=r)
        self.waiting = Gauge("dra_bridge_split_waiting_devices", "GPUs not yet on the side the target asks for",
                             registry=r)
        self.checkpoint_failures = Counter(
            "dra_bridge_checkpoint_write_failures", "Checkpoint writes that failed (I/O error, read-only or full "
            "state directory, lock timeout), by the change that needed them (split, allocate, prepare)",
            ["writer"], registry=r)
        self.checkpoint_failing = Gauge(
            "dra_bridge_checkpoint_unwritable", "1 while a split change waits because the checkpoint cannot be "
            "written (retried with backoff), else 0", registry=r)
        self.evaluation_failures = Counter(
            "dra_bridge_split_evaluation_failures", "Split evaluations that failed (retried with backoff)",
            registry=r)
        self.evaluation_failing = Gauge(
            "dra_bridge_split_evaluation_failing", "1 while split evaluations fail (the status says error), else 0",
            registry=r)
        self._target_labels: tuple[str, str, str] | None = None

    def set_target(self, requested: str, source: str, state: str) -> None:
        labels = (requested[:63], source, state)
        if labels != self._target_labels:
            if self._target_labels is not None:
                self.target.remove(*self._target_labels)
            self._target_labels = labels
        self.target.labels(*labels).set(1)
