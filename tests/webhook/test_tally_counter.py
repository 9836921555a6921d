"""The webhook's per-review counters: exact under concurrent increments, exposed as ordinary Prometheus counters."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, generate_latest

from bridge.webhook.metrics import TallyCounter, WebhookMetrics


def test_increments_from_many_threads_are_all_counted() -> None:
    counter = TallyCounter("x", "x", ["outcome"], CollectorRegistry())
    start = threading.Barrier(8)

    def work() -> None:
        start.wait()
        for _ in range(20_000):
            counter.inc(("translated",))
        counter.inc(("skipped",), 2)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counter.value("translated") == 160_000 and counter.value("skipped") == 16
    assert counter.value("never") == 0


def test_the_exposition_is_that_of_a_labelled_counter() -> None:
    metrics = WebhookMetrics()
    metrics.reviews.inc(("translated", "dra", "claims"))
    metrics.reviews.inc(("translated", "dra", "claims"))
    metrics.templates.inc(("cached",), 3)
    text = generate_latest(metrics.registry).decode()
    assert "# TYPE dra_bridge_webhook_reviews_total counter" in text or "# TYPE dra_bridge_webhook_reviews counter" in text
    assert 'dra_bridge_webhook_reviews_total{mode="dra",outcome="translated",target="claims"} 2.0' in text
    assert 'dra_bridge_webhook_template_ensures_total{result="cached"} 3.0' in text
