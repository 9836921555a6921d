"""Prometheus metrics of the DRA half, registered on the daemon's own registry (never the global one).

`DraMetrics` (prepare/unprepare results, latency, refusals, sweep) lives on the DRA node's registry, which the
composition root (`bridge.node.dual`) registers as a collector on the daemon's `/metrics` registry;
`SlicePublisherCollector` adds the ResourceSlice publisher's counters the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric


class DraMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.claims = Counter(
            "dra_bridge_dra_claim_operations", "Per-claim prepare/unprepare results", ["op", "result"], registry=r
        )
        self.refusals = Counter(
            "dra_bridge_dra_refusals",
            "Devices refused by NodePrepareResources (ownership ledger or exclusivity)",
            ["reason"],
            registry=r,
        )
        self.seconds = Histogram(
            "dra_bridge_dra_rpc_seconds",
            "NodePrepare/NodeUnprepare batch latency inside the driver",
            ["op"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 15, 45),
            registry=r,
        )
        # Where a NodePrepareResources call's time goes (its sum over one call is the call's `_rpc_seconds`, less
        # bookkeeping): `read` the claims from the API server (concurrently, outside the node lock), `lock` waiting
        # for the node-wide lock, `work` under it (the ownership guard, the checkpoint writes, the CDI specs).
        self.prepare_phase = Histogram(
            "dra_bridge_dra_prepare_phase_seconds",
            "Time of each phase of a NodePrepareResources call: read (claims from the API), lock (waiting for the "
            "node lock), work (guards, checkpoint and CDI writes under the lock)",
            ["phase"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 15, 45),
            registry=r,
        )
        self.claim_get = Histogram(
            "dra_bridge_dra_claim_get_seconds",
            "One ResourceClaim GET of a NodePrepareResources call, timed on the thread that sends it (the API "
            "server's answer and our client; the read phase adds the hand-offs between threads)",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 15, 45),
            registry=r,
        )
        self.prepared = Gauge("dra_bridge_dra_prepared_claims", "Claims currently prepared on this node", registry=r)
        self.swept = Counter(
            "dra_bridge_dra_swept", "Half-finished prepares and leaked CDI specs undone at start", ["what"], registry=r
        )


class SlicePublisherCollector:
    """Exports the slice publisher's counters (`PublisherStats`) at scrape time, read without a lock (plain ints
    updated by the publisher's one worker thread). A structural type keeps this module free of publisher imports."""

    def __init__(self, stats: Callable[[], PublisherStatsLike], generation: Callable[[], int]) -> None:
        self._stats = stats
        self._generation = generation

    def collect(self) -> Iterator[Metric]:
        s = self._stats()
        writes = CounterMetricFamily("dra_bridge_dra_slice_writes", "ResourceSlice writes by kind", labels=["kind"])
        for kind, value in (("create", s.creates), ("update", s.updates), ("delete", s.deletes)):
            writes.add_metric([kind], value)
        yield writes
        yield CounterMetricFamily("dra_bridge_dra_slice_reconciles", "ResourceSlice reconciles (no-ops included)",
                                  value=s.reconciles)
        yield CounterMetricFamily("dra_bridge_dra_slice_noops", "Reconciles that found the server already current "
                                  "(nothing written)", value=s.noops)
        yield CounterMetricFamily("dra_bridge_dra_slice_failures", "Failed reconciles (API down, conflict, RBAC); "
                                  "retried with backoff", value=s.failures)
        yield CounterMetricFamily("dra_bridge_dra_slice_restores", "Reconciles triggered by someone else deleting or "
                                  "changing our slices (e.g. the kubelet's wipe)", value=s.restores)
        yield GaugeMetricFamily("dra_bridge_dra_slice_generation", "Pool generation last written or seen",
                                value=self._generation())


class PublisherStatsLike(Protocol):
    reconciles: int
    noops: int
    creates: int
    updates: int
    deletes: int
    failures: int
    restores: int
