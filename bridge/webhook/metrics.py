"""The webhook's Prometheus metrics, on a registry owned by the server instance (no process-global registry, so
tests and benches can run several servers in one process)."""

from __future__ import annotations

from threading import get_ident
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily

# Admission latency lives in milliseconds; the API server's own budget is seconds.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class TallyCounter:
    """A labelled Prometheus counter for what every review counts. `inc` adds to a dict owned by the calling thread
    (one writer per dict, so no lock and no lost update; the event loop and the pool threads each have theirs);
    a scrape sums them. prometheus_client's `Counter.inc` takes a lock and checks its arguments on every call:
    the two counts of a review cost about 9,000 instructions that way, a twentieth of the review.
    Exposed as `<name>_total` with the same labels as a `Counter` of that name (no `_created` series)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry) -> None:
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        # thread ident -> that thread's dict, which only that thread adds to (an ident a finished thread had may be
        # reused: its counts then go on in the same dict, which is still summed, so nothing is lost)
        self._by_thread: dict[int, dict[tuple[str, ...], float]] = {}
        registry.register(self)

    def inc(self, labels: tuple[str, ...], amount: float = 1) -> None:
        tally = self._by_thread.get(get_ident())
        if tally is None:
            tally = self._by_thread[get_ident()] = {}
        tally[labels] = tally.get(labels, 0) + amount

    def value(self, *labels: str) -> float:
        return self.totals().get(labels, 0)

    def totals(self) -> dict[tuple[str, ...], float]:
        out: dict[tuple[str, ...], float] = {}
        for tally in list(self._by_thread.values()):  # each list() is one C call: no insertion can interleave
            for key, n in list(tally.items()):
                out[key] = out.get(key, 0) + n
        return out

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self._name, self._documentation, labels=self._labelnames)

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = self._family()
        for key, n in sorted(self.totals().items()):
            family.add_metric(list(key), n)
        yield family


@dataclass
class WebhookMetrics:
    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))

    def __post_init__(self) -> None:
        r = self.registry
        self.reviews = TallyCounter("dra_bridge_webhook_reviews", "Admission reviews answered, by outcome, namespace "
                                    "mode and translation target.", ["outcome", "mode", "target"], registry=r)
        self.latency = Histogram("dra_bridge_webhook_review_duration_seconds", "Time from request body read to "
                                 "response written, side effects included.", buckets=_BUCKETS, registry=r)
        self.http = Counter("dra_bridge_webhook_http_requests", "HTTP requests by path and status code.",
                            ["path", "code"], registry=r)
        self.templates = TallyCounter("dra_bridge_webhook_template_ensures", "ResourceClaimTemplate ensure calls by "
                                      "result (created, exists, cached, failed, capped: the namespace already has "
                                      "--max-templates-per-namespace of ours).", ["result"], registry=r)
        self.events = Counter("dra_bridge_webhook_events", "Kubernetes Events about untranslatable pods by result "
                              "(recorded, failed, dropped).", ["result"], registry=r)
        self.tls_reloads = Counter("dra_bridge_webhook_tls_reloads", "Certificate reloads by result.", ["result"],
                                   registry=r)
        self.claims_kept = Gauge("dra_bridge_webhook_claims_kept", "1 when the API server keeps a pod's claims (the "
                                 "dry-run check), 0 when it drops them (nothing is translated), -1 when not known.",
                                 registry=r)
        self.claims_kept.set(-1)
        self.gpu_nodes = Gauge("dra_bridge_webhook_gpu_nodes", "GPU nodes the webhook knows, by whether nvidia.com/gpu "
                               "is a whole GPU there.", ["whole"], registry=r)
        self.namespaces = Gauge("dra_bridge_webhook_namespaces", "Namespaces in the label cache by mode.", ["mode"],
                                registry=r)
