"""Composition root of `bridge webhook`: wires the kube layer, the caches, the pure review and the HTTPS server.

`Admitter.handle` is the `/mutate` handler: pure `review`, then the side effects the result asks for (unless the
request is a dry run), then metrics and one log line. When a template the patch refers to cannot be created, the
pod is admitted UNtranslated with a warning: a legacy pod that runs beats a DRA pod stuck on a missing template.

The log line's level follows what an operator must look at. A routine outcome (`translated`, `shadow`, `skipped`,
`no-gpu`) is DEBUG: the pod itself records it (`dra-bridge.io/translated` and its detail annotation), the
`dra_bridge_webhook_reviews` counter counts it, and at INFO one line per pod CREATE was about half of a review's
CPU time on a cold cache (0.15 of 0.31 ms in process; through the real API server,
bench/real_webhook_create_bench.py measured our review at 0.62-0.84 ms with the line and 0.38-0.56 ms without).
An outcome that needs a look (`untranslatable`, which also answers the user with a warning and records an Event;
`invalid`; `error`) stays INFO. `--log-level debug` shows every review.

Both review under the current `ServeFacts` snapshot (`serve()`, from `serving.LiveFacts`: the API server's claim
check, the DeviceClass, the GPU nodes), read once per review.

`Admitter.handle_inline` is what the server actually runs for `/mutate`, on its event loop: the same review, but
the namespace labels come from `peek` (cache only) and the templates from `ensure_cached` (TTL only). When both
hit - every review of a namespace after its first pod - the whole answer is produced on the loop with no thread
hop. When either misses it returns `lambda: handle(body)` (or the side effects alone) and the server runs that in
its thread pool, where the blocking GET/create may wait. Events never block either way (bounded queue).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from bridge.kube.api import MUTATING_WEBHOOKS, KubeAPI, ResourceAPI
from bridge.kube.errors import AlreadyExists
from bridge.webhook import jsoncodec
from bridge.webhook.effects import (
    DEFAULT_MAX_TEMPLATES_PER_NAMESPACE,
    MISS,
    EventRecorder,
    NamespaceCache,
    Peek,
    TemplateEnsurer,
)
from bridge.webhook.facts import DEFAULT_DEVICE_CLASS, ClusterFacts, ServeFacts, auto_target, facts_from_discovery
from bridge.webhook.memo import ReviewMemo, encode
from bridge.webhook.metrics import WebhookMetrics
from bridge.webhook.policy import SYSTEM_NAMESPACES, PolicyConfig
from bridge.webhook.review import NamespaceLabels, ReviewConfig, ReviewResult, allow, review
from bridge.webhook.server import MAX_BODY, Deferred, Reply, WebhookServer
from bridge.webhook.serving import DEFAULT_INTERVAL, LiveFacts
from bridge.webhook.tls import ClientAuth, ReloadingContext
from bridge.webhook.translate import DEFAULT_SCHEDULER

log = logging.getLogger(__name__)

# Review outcomes logged at DEBUG (see the module docstring); every other outcome is logged at INFO.
ROUTINE_OUTCOMES = frozenset({"translated", "shadow", "skipped", "no-gpu"})

SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass(frozen=True)
class WebhookOptions:
    cert_file: str
    key_file: str
    port: int = 8443
    host: str = "127.0.0.1"  # the chart passes 0.0.0.0: the API server comes in through the Service
    kubeconfig: str | None = None
    context: str | None = None
    device_class: str = DEFAULT_DEVICE_CLASS
    target: str = "auto"
    namespace: str = ""  # the webhook's own namespace (never mutated)
    max_body: int = MAX_BODY
    api_timeout: float = 3.0  # one API call on the admission path (namespace GET, template create)
    client_ca_file: str | None = None  # verify client certificates: only the API server may POST reviews
    client_names: tuple[str, ...] = ()  # ... and only with one of these CNs / DNS SANs (empty: any the CA signed)
    max_templates_per_namespace: int = DEFAULT_MAX_TEMPLATES_PER_NAMESPACE
    register: Mapping[str, Any] | None = None  # a MutatingWebhookConfiguration to create/update once serving
    schedulers: tuple[str, ...] = ()  # besides default-scheduler: schedulers whose pods are translated
    serve_check_interval: float = DEFAULT_INTERVAL  # seconds between the API server checks


class _NeedsIO(Exception):
    """Raised by the peeking label lookup on a cache miss: the review must be redone off the loop."""


_RERAISE = (_NeedsIO,)


def _load(body: bytes) -> Any:
    """The parsed body when it is a JSON object (only the fields the review reads, `jsoncodec.load_review`), else the
    raw bytes (then `review` parses them again and says what is wrong: a parsed JSON string would be taken for a
    raw body)."""
    try:
        doc = jsoncodec.load_review(body)
    except (ValueError, RecursionError):
        return body
    return doc if isinstance(doc, dict) else body


class Admitter:
    """`namespace_labels` may block (cache, then one GET); `peek_labels` must not (cache only, MISS otherwise).
    Without `peek_labels` every namespace is a miss for `handle_inline`, which then always defers to the pool.
    Reviews go through a `ReviewMemo` (`memo_capacity` entries; 0 turns it off). `serve` returns the current live
    facts; None: `ServeFacts()` (a cluster vouched to keep claims, nodes unknown)."""

    def __init__(self, config: ReviewConfig, namespace_labels: NamespaceLabels, templates: TemplateEnsurer | None,
                 events: EventRecorder | None, metrics: WebhookMetrics, peek_labels: Peek | None = None,
                 memo_capacity: int = 256, serve: Callable[[], ServeFacts] | None = None) -> None:
        self.config = config
        fixed = ServeFacts()
        self._serve = serve or (lambda: fixed)
        self._labels = namespace_labels
        self._peek = peek_labels or (lambda ns: MISS)
        self._templates = templates
        self._events = events
        self._metrics = metrics
        self.memo = ReviewMemo(config, memo_capacity) if memo_capacity else None

    def _review(self, body: bytes, doc: Any, labels: NamespaceLabels,
                reraise: tuple[type[Exception], ...] = ()) -> tuple[ReviewResult, bytes]:
        serve = self._serve()
        if self.memo is not None:
            return self.memo.review(body, doc, labels, reraise, serve)
        result = review(doc, self.config, labels, reraise, serve)
        return result, encode(result.body)

    def handle(self, body: bytes) -> Reply:
        """The whole review, blocking I/O allowed (namespace GET, template creates): runs in the pool."""
        start = time.perf_counter()
        doc = _load(body)
        result, encoded = self._review(body, doc, self._labels)
        return self._finish(result, encoded, self._side_effects(result, doc), start)

    def handle_inline(self, body: bytes) -> Reply | Deferred:
        """The whole review on the caller's thread when the caches answer; otherwise the blocking remainder as a
        callable for the pool. Never does I/O itself."""
        start = time.perf_counter()
        doc = _load(body)
        try:
            result, encoded = self._review(body, doc, self._peek_or_raise, _RERAISE)
        except _NeedsIO:
            return lambda: self.handle(body)
        if (result.templates and not result.dry_run and self._templates is not None
                and not self._templates.ensure_cached(result.templates)):
            return lambda: self._finish(result, encoded, self._side_effects(result, doc), start)
        return self._finish(result, encoded, self._side_effects(result, doc, ensure=False), start)

    def _peek_or_raise(self, namespace: str) -> Mapping[str, str] | None:
        found = self._peek(namespace)
        if found is MISS:
            raise _NeedsIO(namespace)
        return found

    def _finish(self, reviewed: ReviewResult, encoded: bytes, result: ReviewResult, start: float) -> Reply:
        """Metrics and the log line for `result`; its body is `encoded` unless the side effects replaced it."""
        self._metrics.reviews.inc((result.outcome, result.mode or "-", result.target or "-"))
        level = logging.DEBUG if result.outcome in ROUTINE_OUTCOMES else logging.INFO
        if log.isEnabledFor(level):
            log.log(level, "review %s", result.outcome, extra={
                "uid": result.uid, "namespace": result.namespace, "pod": result.pod, "mode": result.mode,
                "target": result.target, "dry_run": result.dry_run, "reason": result.reason,
                "ms": round((time.perf_counter() - start) * 1000, 2)})
        return result.status, encoded if result is reviewed else encode(result.body)

    def _side_effects(self, result: ReviewResult, doc: Any, ensure: bool = True) -> ReviewResult:
        """Templates (when `ensure`; the inline path has checked they are cached) and Events, unless dry run."""
        if result.dry_run:
            return result
        if ensure and result.templates and self._templates is not None:
            errors = self._templates.ensure(result.templates)
            if errors:
                log.warning("templates not ensured; admitting the pod untranslated", extra={"errors": errors})
                return replace(result, body=allow(result.uid, warnings=[f"not translated: {e}" for e in errors]),
                               outcome="error", templates=(), reason="template creation failed")
        if result.events and self._events is not None:
            pod = (doc.get("request") or {}).get("object") if isinstance(doc, dict) else None
            for spec in result.events:
                self._events.submit(spec, pod if isinstance(pod, dict) else None)
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
          ready: Callable[[], tuple[bool, str]] | None = None,
          live: LiveFacts | None = None,
          namespace_cache: NamespaceCache | None = None) -> tuple[WebhookServer, NamespaceCache, EventRecorder]:
    """Everything wired but not started (tests start the pieces themselves). Without `live` the webhook reviews under
    `ServeFacts()`: the caller vouches that the cluster keeps claims (tests that do not run the checks).
    `namespace_cache`: one built by the caller (tests pass one whose watch lags)."""
    cache = namespace_cache if namespace_cache is not None else NamespaceCache(api, metrics)
    watch = ResourceAPI(facts.resource_version).claim_templates if facts.resource_version else None
    templates = TemplateEnsurer(api, metrics, max_per_namespace=options.max_templates_per_namespace, watch=watch)
    cache.start_with(templates.start)  # the templates of ours are watched whenever the namespace cache runs
    events = EventRecorder(api, metrics)
    policy = PolicyConfig(own_namespace=own_namespace(options.namespace), excluded_namespaces=SYSTEM_NAMESPACES)
    config = ReviewConfig(policy, facts, options.target, frozenset({DEFAULT_SCHEDULER, *options.schedulers}))
    admitter = Admitter(config, cache.labels, templates, events, metrics, peek_labels=cache.peek,
                        serve=live.current if live is not None else None)
    tls = ReloadingContext(options.cert_file, options.key_file,
                           on_reload=lambda r: metrics.tls_reloads.labels(r).inc(),
                           client_ca_file=options.client_ca_file)
    client_auth = (ClientAuth.of(options.client_ca_file, options.client_names)
                   if options.client_ca_file else None)

    def default_ready() -> tuple[bool, str]:
        if not cache.synced:
            return False, "namespace cache not synced"
        if live is not None and not live.synced:
            return False, "node cache not synced or the API server not checked yet"
        return True, ""

    # /mutate runs on the event loop: handle_inline never blocks and hands cache misses to the pool itself
    server = WebhookServer({"/mutate": admitter.handle_inline}, tls, host=options.host, port=options.port,
                           metrics=metrics, ready=ready or default_ready, max_body=options.max_body,
                           inline=["/mutate"], client_auth=client_auth)
    return server, cache, events


def register(api: KubeAPI, config: dict[str, Any]) -> None:
    """Create the MutatingWebhookConfiguration, or replace the webhooks of the one of that name (`--register`).
    Raises KubeError (the CLI exits 2)."""
    name = config["metadata"]["name"]
    try:
        api.create(MUTATING_WEBHOOKS, config)
        log.info("registered the webhook", extra={"configuration": name})
        return
    except AlreadyExists:
        pass
    current = api.get(MUTATING_WEBHOOKS, name)
    api.update(MUTATING_WEBHOOKS, {**current, "webhooks": config["webhooks"]})
    log.info("updated the webhook registration", extra={"configuration": name})


def live_facts(options: WebhookOptions, api: KubeAPI, facts: ClusterFacts, metrics: WebhookMetrics) -> LiveFacts:
    """The live facts with their metrics and a log line for every change of the target `auto` would pick."""
    last: list[str] = []

    def changed(serve: ServeFacts) -> None:
        metrics.claims_kept.set({True: 1, False: 0, None: -1}[serve.claims_kept])
        whole = sum(1 for n in serve.nodes.nodes if not n.not_whole)
        metrics.gpu_nodes.labels("true").set(whole)
        metrics.gpu_nodes.labels("false").set(len(serve.nodes.nodes) - whole)
        target, why = auto_target(facts, serve)
        line = f"{target.value}: {why}"
        if options.target == "auto" and last != [line]:
            last[:] = [line]
            log.info("auto target", extra={"target": target.value, "why": why})

    return LiveFacts(api, facts, own_namespace(options.namespace), interval=options.serve_check_interval,
                     on_change=changed)


def run(options: WebhookOptions, stop: threading.Event | None = None) -> None:
    """Run until SIGTERM/SIGINT (or `stop`). Raises on a configuration error (bad cert files, no cluster)."""
    from bridge.kube import connect
    from bridge.kube.retry import RetryPolicy

    stop = stop or threading.Event()
    api = connect(options.kubeconfig, options.context, timeout=options.api_timeout,
                  retry=RetryPolicy(deadline=options.api_timeout))
    facts = facts_from_discovery(api.discovery(), options.device_class)
    log.info("cluster facts", extra={"resource_version": facts.resource_version,
                                     "server": f"{facts.major}.{facts.minor}", "target": options.target,
                                     "device_class": options.device_class,
                                     "schedulers": [DEFAULT_SCHEDULER, *options.schedulers]})
    metrics = WebhookMetrics()
    live = live_facts(options, api, facts, metrics)
    server, cache, events = build(options, api, facts, metrics, live=live)
    cache.start(stop)
    live.start(stop)
    events.start()
    server.start()
    log.info("webhook serving", extra={"port": server.port, "pid": os.getpid(), "address": options.host,
                                       "client_ca": options.client_ca_file or "-"})
    if options.register is not None:
        try:
            register(api, dict(options.register))
        except BaseException:
            stop.set()
            server.shutdown()
            events.stop()
            raise
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.5):  # timed: an untimed wait keeps CPython from running the signal handler when the
        pass                   # kernel delivers SIGTERM to another thread
    log.info("webhook stopping")
    server.shutdown()
    events.stop()
