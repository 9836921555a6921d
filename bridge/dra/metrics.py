"""Prometheus metrics of the DRA half, registered on the daemon's own registry (never the global one)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class DraMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.claims = Counter(
            "bridge_dra_claim_operations", "Per-claim prepare/unprepare results", ["op", "result"], registry=r
        )
        self.refusals = Counter(
            "bridge_dra_refusals",
            "Devices refused by NodePrepareResources (ownership ledger or exclusivity)",
            ["reason"],
            registry=r,
        )
        self.seconds = Histogram(
            "bridge_dra_rpc_seconds",
            "NodePrepare/NodeUnprepare batch latency inside the driver",
            ["op"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 15, 45),
            registry=r,
        )
        self.prepared = Gauge("bridge_dra_prepared_claims", "Claims currently prepared on this node", registry=r)
        self.swept = Counter(
            "bridge_dra_swept", "Half-finished prepares and leaked CDI specs undone at start", ["what"], registry=r
        )
