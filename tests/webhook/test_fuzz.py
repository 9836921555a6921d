"""Random and malformed AdmissionReviews: the pure review never raises, the server never answers 5xx without a
message, and memory stays flat."""

from __future__ import annotations

import http.client
import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.webhook.app import Admitter
from bridge.webhook.facts import ClusterFacts
from bridge.webhook.memo import encode
from bridge.webhook.metrics import WebhookMetrics
from bridge.webhook.policy import PolicyConfig
from bridge.webhook.review import ReviewConfig, review
from bridge.webhook.server import WebhookServer
from bridge.webhook.tls import ReloadingContext
from tests.webhook.pki import Pki
from tests.webhook.pods import admission_review, container, deployment_pod, expr, required_affinity

CONFIG = ReviewConfig(PolicyConfig(own_namespace="dra-bridge"), ClusterFacts("v1", 1, 35), "claims")
LABELS = {"dra-bridge.io/mode": "dra"}

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=False),
                      st.text(max_size=20))
json_any = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                           st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                        max_leaves=25)
keys = st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb", "cpu", "memory",
                        "deviceclass.resource.kubernetes.io/gpu.dra-bridge.io"])
quantity = st.one_of(st.integers(-3, 40), st.sampled_from(["1", "2", "8", "500m", "1k", "", "x", "33"]), json_any)
resources = st.fixed_dictionaries({}, optional={"requests": st.dictionaries(keys, quantity, max_size=3),
                                                "limits": st.dictionaries(keys, quantity, max_size=3),
                                                "claims": st.one_of(st.lists(st.fixed_dictionaries({"name": st.text(max_size=5)}), max_size=2), json_any)})
containers = st.lists(st.fixed_dictionaries({"name": st.text(min_size=1, max_size=8)},
                                            optional={"resources": st.one_of(resources, resources, resources, json_any)}), max_size=3)
gfd_keys = st.sampled_from(["nvidia.com/gpu.product", "nvidia.com/gpu.memory", "nvidia.com/gpu.family",
                            "nvidia.com/gpu.compute.major", "nvidia.com/gpu.count", "zone"])
requirement = st.fixed_dictionaries({"key": st.one_of(gfd_keys, json_any),
                                     "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "?"])},
                                    optional={"values": st.one_of(st.lists(st.text(max_size=10), max_size=3), json_any)})
affinity = st.one_of(json_any, st.builds(lambda terms: required_affinity(*terms),
                                         st.lists(st.lists(requirement, max_size=3), max_size=3)))
pods = st.fixed_dictionaries(
    {"metadata": st.one_of(st.fixed_dictionaries({}, optional={"annotations": st.one_of(st.dictionaries(st.text(max_size=30), st.text(max_size=5), max_size=2), json_any),
                                                               "name": st.text(max_size=10)}), st.just({}), json_any),
     "spec": st.one_of(st.fixed_dictionaries({}, optional={"containers": st.one_of(containers, containers, containers, json_any),
                                                            "initContainers": containers,
                                                            "nodeSelector": st.one_of(st.dictionaries(gfd_keys, st.text(max_size=25), max_size=3), json_any),
                                                            "affinity": affinity,
                                                            "resourceClaims": st.one_of(st.just([]), json_any)}), st.just({"containers": [container("main", 2)]}), json_any)})


def structured_review(pod: Any, ns: Any, op: Any, kind: Any) -> dict[str, Any]:
    r = admission_review(deployment_pod(container("main", 1)))
    r["request"].update({"object": pod, "namespace": ns, "operation": op, "kind": kind})
    return r


reviews = st.one_of(
    json_any,
    st.builds(structured_review, pods, st.one_of(st.just("team-a"), st.just("kube-system"), json_any),
              st.sampled_from(["CREATE", "UPDATE", None]),
              st.one_of(st.just({"group": "", "version": "v1", "kind": "Pod"}), json_any)),
    st.builds(structured_review, pods, st.just("team-a"), st.just("CREATE"),
              st.just({"group": "", "version": "v1", "kind": "Pod"})),
    st.builds(lambda d: {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": d}, json_any),
)


def check(result: Any) -> None:
    assert result.status in (200, 400, 413)
    if result.status == 200:
        assert result.body["response"]["allowed"] is True
    else:
        assert result.body["message"]


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reviews)
def test_random_reviews_never_crash_the_pure_review(doc: Any) -> None:
    check(review(doc, CONFIG, lambda ns: LABELS))
    check(review(json.dumps(doc).encode(), CONFIG, lambda ns: LABELS))


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_crash_the_pure_review(raw: bytes) -> None:
    check(review(raw, CONFIG, lambda ns: LABELS))


MEMO_ADMITTER = Admitter(CONFIG, lambda ns: LABELS, None, None, WebhookMetrics(), peek_labels=lambda ns: LABELS)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reviews, st.booleans())
def test_memoised_answers_to_random_reviews_equal_fresh_ones(doc: Any, compact: bool) -> None:
    raw = json.dumps(doc, separators=(",", ":") if compact else None).encode()
    fresh = review(raw, CONFIG, lambda ns: LABELS)
    for _ in range(2):  # a miss, then (for memoisable answers) a hit
        assert MEMO_ADMITTER.handle_inline(raw) == (fresh.status, encode(fresh.body))


def test_deeply_nested_json_is_a_400_not_a_crash() -> None:
    result = review(b"[" * 100_000 + b"]" * 100_000, CONFIG, lambda ns: LABELS)
    assert result.status == 400 and "not JSON" in result.body["message"]


def test_memory_stays_flat_over_many_reviews() -> None:
    docs = [admission_review(deployment_pod(container("main", n % 9 + 1), node_selector={"nvidia.com/gpu.family": "hopper"},
                                            affinity=required_affinity([expr("nvidia.com/gpu.memory", "Gt", str(n))])))
            for n in range(200)]
    bodies = [json.dumps(d).encode() for d in docs] + [b"garbage", b"{}"]

    def burst() -> None:
        for b in bodies:
            review(b, CONFIG, lambda ns: LABELS)

    burst()  # warm caches (CEL parse cache, interned strings)
    tracemalloc.start()
    burst()
    first, _ = tracemalloc.get_traced_memory()
    for _ in range(10):
        burst()
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # 10 more bursts of 202 reviews each must not keep memory: allow a small constant for caches settling
    assert after - first < 256 * 1024, f"memory grew by {after - first} bytes over 2020 reviews"


def test_memory_stays_flat_through_the_memo_once_it_is_full() -> None:
    admitter = Admitter(CONFIG, lambda ns: LABELS, None, None, WebhookMetrics(), peek_labels=lambda ns: LABELS,
                        memo_capacity=64)
    pods = [deployment_pod(container("main", n % 8 + 1), app=f"app{n}") for n in range(300)]
    counter = iter(range(10**9))

    def burst() -> None:  # 300 distinct pods, each review with a fresh uid: the memo keeps replacing entries
        for pod in pods:
            assert isinstance(admitter.handle_inline(json.dumps(admission_review(pod, uid=f"u{next(counter)}")).encode()), tuple)

    burst()
    tracemalloc.start()
    burst()
    first, _ = tracemalloc.get_traced_memory()
    for _ in range(5):
        burst()
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert admitter.memo is not None and len(admitter.memo) == 64
    assert after - first < 256 * 1024, f"memory grew by {after - first} bytes over 1500 reviews"


@pytest.fixture(scope="module")
def https(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WebhookServer, Pki]]:
    pki = Pki(Path(tmp_path_factory.mktemp("pki")))
    pki.issue()
    metrics = WebhookMetrics()
    admitter = Admitter(CONFIG, lambda ns: LABELS, None, None, metrics, peek_labels=lambda ns: LABELS)
    srv = WebhookServer({"/mutate": admitter.handle_inline}, ReloadingContext(str(pki.cert_file), str(pki.key_file)),
                        host="127.0.0.1", port=0, metrics=metrics, max_body=64 * 1024, io_timeout=5,
                        inline=["/mutate"])
    with srv:
        yield srv, pki


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(reviews.map(lambda d: json.dumps(d).encode()), st.binary(max_size=200)))
def test_random_bodies_over_https_get_answers_with_messages(https: tuple[WebhookServer, Pki], body: bytes) -> None:
    import ssl

    srv, pki = https
    conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=ssl.create_default_context(cafile=str(pki.ca_file)),
                                       timeout=10)
    try:
        conn.request("POST", "/mutate", body=body)
        resp = conn.getresponse()
        data = resp.read()
    finally:
        conn.close()
    assert resp.status < 500, data
    doc = json.loads(data)
    if resp.status == 200:
        assert doc["response"]["allowed"] is True
    else:
        assert doc["message"]
