"""Composition root of `bridge webhook`: wires the kube layer, the caches, the pure review and the HTTPS server.

`Admitter.handle` is the `/mutate` handler: pure `review`, then the side effects the result asks for (unless the
request is a dry run), then metrics and one log line. When a template the patch refers to cannot be created, the
pod is admitted UNtranslated with a warning: a legacy pod that runs beats a DRA pod stuck on a missing template.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.kube.api import KubeAPI
from bridge.webhook.effects import EventRecorder, NamespaceCache, TemplateEnsurer
from bridge.webhook.facts import DEFAULT_DEVICE_CLASS, ClusterFacts, facts_from_discovery
from bridge.webhook.metrics import WebhookMetrics
from bridge.webhook.policy import SYSTEM_NAMESPACES, PolicyConfig
from bridge.webhook.review import NamespaceLabels, ReviewConfig, ReviewResult, allow, review
from bridge.webhook.server import MAX_BODY, WebhookServer
from bridge.webhook.tls import ReloadingContext

log = logging.getLogger(__name__)

SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass(frozen=True)
class WebhookOptions:
    cert_file: str
    key_file: str
    port: int = 8443
    host: str = "0.0.0.0"
    kubeconfig: str | None = None
    context: str | None = None
    device_class: str = DEFAULT_DEVICE_CLASS
    target: str = "auto"
    namespace: str = ""  # the webhook's own namespace (never mutated)
    max_body: int = MAX_BODY
    api_timeout: float = 3.0  # one API call on the admission path (namespace GET, template create)


class Admitter:
    def __init__(self, config: ReviewConfig, namespace_labels: NamespaceLabels, templates: TemplateEnsurer | None,
                 events: EventRecorder | None, metrics: WebhookMetrics) -> None:
        self.config = config
        self._labels = namespace_labels
        self._templates = templates
        self._events = events
        self._metrics = metrics

    def handle(self, body: bytes) -> tuple[int, bytes]:
        start = time.perf_counter()
        result = review(body, self.config, self._labels)
        if not result.dry_run:
            result = self._side_effects(result, body)
        self._metrics.reviews.labels(result.outcome, result.mode or "-", result.target or "-").inc()
        log.info("review %s", result.outcome, extra={
            "uid": result.uid, "namespace": result.namespace, "pod": result.pod, "mode": result.mode,
            "target": result.target, "dry_run": result.dry_run, "reason": result.reason,
            "ms": round((time.perf_counter() - start) * 1000, 2)})
        return result.status, json.dumps(result.body, separators=(",", ":")).encode()

    def _side_effects(self, result: ReviewResult, body: bytes) -> ReviewResult:
        if result.templates and self._templates is not None:
            errors = self._templates.ensure(result.templates)
            if errors:
                log.warning("templates not ensured; admitting the pod untranslated", extra={"errors": errors})
                return ReviewResult(200, allow(result.uid, warnings=[f"not translated: {e}" for e in errors]),
                                    "error", result.mode, result.target, result.uid, result.namespace, result.pod,
                                    result.dry_run, reason="template creation failed")
        if result.events and self._events is not None:
            pod: dict[str, Any] | None = None
            try:
                pod = json.loads(body)["request"]["object"]
            except (ValueError, KeyError, TypeError):
                pod = None
            for spec in result.events:
                self._events.submit(spec, pod)
        return result


def own_namespace(configured: str) -> str:
    if configured:
        return configured
    try:
        with open(SA_NAMESPACE_FILE) as f:
            return f.read().strip()
    except OSError:
        return ""


def build(options: WebhookOptions, api: KubeAPI, facts: ClusterFacts, metrics: WebhookMetrics,
          ready: Callable[[], tuple[bool, str]] | None = None) -> tuple[WebhookServer, NamespaceCache, EventRecorder]:
    """Everything wired but not started (tests start the pieces themselves)."""
    cache = NamespaceCache(api, metrics)
    templates = TemplateEnsurer(api, metrics)
    events = EventRecorder(api, metrics)
    policy = PolicyConfig(own_namespace=own_namespace(options.namespace), excluded_namespaces=SYSTEM_NAMESPACES)
    admitter = Admitter(ReviewConfig(policy, facts, options.target), cache.labels, templates, events, metrics)
    tls = ReloadingContext(options.cert_file, options.key_file,
                           on_reload=lambda r: metrics.tls_reloads.labels(r).inc())

    def default_ready() -> tuple[bool, str]:
        return (True, "") if cache.synced else (False, "namespace cache not synced")

    server = WebhookServer({"/mutate": admitter.handle}, tls, host=options.host, port=options.port,
                           metrics=metrics, ready=ready or default_ready, max_body=options.max_body)
    return server, cache, events


def run(options: WebhookOptions, stop: threading.Event | None = None) -> None:
    """Run until SIGTERM/SIGINT (or `stop`). Raises on a configuration error (bad cert files, no cluster)."""
    from bridge.kube import connect
    from bridge.kube.retry import RetryPolicy

    stop = stop or threading.Event()
    api = connect(options.kubeconfig, options.context, timeout=options.api_timeout,
                  retry=RetryPolicy(deadline=options.api_timeout))
    facts = facts_from_discovery(api.discovery(), options.device_class)
    log.info("cluster facts", extra={"resource_version": facts.resource_version,
                                     "server": f"{facts.major}.{facts.minor}", "auto_target": facts.auto_target().value,
                                     "target": options.target, "device_class": options.device_class})
    metrics = WebhookMetrics()
    server, cache, events = build(options, api, facts, metrics)
    cache.start(stop)
    events.start()
    server.start()
    log.info("webhook serving", extra={"port": server.port, "pid": os.getpid()})
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    log.info("webhook stopping")
    server.shutdown()
    events.stop()
