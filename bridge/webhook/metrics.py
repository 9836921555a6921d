"""The webhook's Prometheus metrics, on a registry owned by the server instance (no process-global registry, so
tests and benches can run several servers in one process)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Admission latency lives in milliseconds; the API server's own budget is seconds.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass
class WebhookMetrics:
    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))

    def __post_init__(self) -> None:
        r = self.registry
        self.reviews = Counter("dra_bridge_webhook_reviews", "Admission reviews answered, by outcome, namespace mode "
                               "and translation target.", ["outcome", "mode", "target"], registry=r)
        self.latency = Histogram("dra_bridge_webhook_review_duration_seconds", "Time from request body read to "
                                 "response written, side effects included.", buckets=_BUCKETS, registry=r)
        self.http = Counter("dra_bridge_webhook_http_requests", "HTTP requests by path and status code.",
                            ["path", "code"], registry=r)
        self.templates = Counter("dra_bridge_webhook_template_ensures", "ResourceClaimTemplate ensure calls by "
                                 "result (created, exists, cached, failed).", ["result"], registry=r)
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
