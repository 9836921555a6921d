"""The inline fast path and the review memo: answers on the event loop only when the caches can give them, the
blocking remainder handed to the pool otherwise, and memoised answers identical to fresh ones."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.kube import connect
from bridge.kube.api import EVENTS, NAMESPACES, KubeAPI
from bridge.sandbox.apiserver import ApiServer
from bridge.webhook.app import Admitter
from bridge.webhook.effects import MISS, EventRecorder, TemplateEnsurer
from bridge.webhook.facts import ClusterFacts, facts_from_discovery
from bridge.webhook.memo import ReviewMemo, encode
from bridge.webhook.metrics import WebhookMetrics
from bridge.webhook.policy import PolicyConfig
from bridge.webhook.review import ReviewConfig, review
from tests.webhook.pods import admission_review, container, deployment_pod
from tests.webhook.test_translate import CASES, UNTRANSLATABLE
from tests.polling import wait_until as wait_for

DRA = {"dra-bridge.io/mode": "dra"}
CONFIG = ReviewConfig(PolicyConfig(own_namespace="dra-bridge"), ClusterFacts("v1", 1, 35), "claims")


def body_of(pod: dict[str, Any], namespace: str = "team-a", *, uid: str, dry_run: bool = False, compact: bool = False) -> bytes:
    doc = admission_review(pod, namespace, uid=uid, dry_run=dry_run)
    return json.dumps(doc, separators=(",", ":") if compact else None).encode()


CORPUS: dict[str, tuple[dict[str, Any], str, dict[str, str] | None]] = {
    **{f"translate: {n}": (c.pod, "team-a", DRA) for n, c in CASES.items()},
    **{f"untranslatable: {n}": (deployment_pod(c, container("other", 1)), "team-a", DRA)
       for n, (c, _) in UNTRANSLATABLE.items()},
    "shadow": (deployment_pod(container("main", 2)), "team-a", {"dra-bridge.io/mode": "shadow"}),
    "legacy": (deployment_pod(container("main", 2)), "team-a", {}),
    "unknown namespace": (deployment_pod(container("main", 2)), "team-a", None),
    "kube-system": (deployment_pod(container("main", 2)), "kube-system", DRA),
    "no GPU": (deployment_pod(container("web")), "team-a", DRA),
    "malformed pod": ({"metadata": {}, "spec": {"containers": "nope"}}, "team-a", DRA),
}


@pytest.mark.parametrize("compact", [False, True], ids=["spaced-json", "compact-json"])
@pytest.mark.parametrize("name", list(CORPUS))
def test_a_memoised_answer_is_byte_identical_to_a_fresh_review(name: str, compact: bool) -> None:
    pod, namespace, labels = CORPUS[name]
    memo = ReviewMemo(CONFIG)
    for uid in ("3b0d3f4e-0000-4000-8000-000000000001", "3b0d3f4e-0000-4000-8000-000000000002",
                "3b0d3f4e-0000-4000-8000-000000000003"):
        raw = body_of(pod, namespace, uid=uid, compact=compact)
        doc = json.loads(raw)
        result, encoded = memo.review(raw, doc, lambda ns: labels)
        fresh = review(json.loads(raw), CONFIG, lambda ns: labels)
        assert encoded == encode(fresh.body)
        assert json.loads(encoded)["response"]["uid"] == uid
        assert result == fresh  # outcome, templates, events, reason: all as a fresh review says
    # the first sighting is only remembered, the second stored, the third answered from the memo (when storable)
    assert (memo.hits, memo.misses) == ((1, 2) if len(memo) else (0, 3))


def test_the_memo_key_holds_everything_the_answer_depends_on() -> None:
    memo = ReviewMemo(CONFIG)
    pod = deployment_pod(container("main", 2))
    labels: dict[str, str] = dict(DRA)

    def answer(uid: str, **kw: Any) -> Any:
        """The third sighting of the request: answered from the entry the second stored, never from another's."""
        hits = memo.hits
        for again in ("a", "b", "c"):
            raw = body_of(pod, uid=uid + again, **kw)
            result = memo.review(raw, json.loads(raw), lambda ns: labels)[0]
        assert memo.hits == hits + 1
        return result

    assert answer("u1").outcome == "translated"
    assert answer("u2", dry_run=True).dry_run is True  # dryRun is part of the request: its own entry
    labels["dra-bridge.io/mode"] = "legacy"  # the namespace flips back: the next pod is not translated
    assert answer("u3").outcome == "skipped"
    labels["dra-bridge.io/target"] = "extended"
    labels["dra-bridge.io/mode"] = "dra"
    assert answer("u4").target == "extended"
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 4
    pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = 4
    assert answer("u5").templates == ()  # extended target: a different pod is a different answer


def test_a_pod_seen_once_is_remembered_by_a_hash_only_and_its_second_sighting_is_stored() -> None:
    """Unrelated pods (each its own spec) cost the memo a hash each, not an entry: only a request seen again, as
    the replicas of one Deployment are, takes an entry."""
    memo = ReviewMemo(CONFIG, capacity=4)
    for i in range(50):
        raw = body_of(deployment_pod(container(f"one-off-{i}", 1)), uid=f"u{i}")
        assert memo.review(raw, json.loads(raw), lambda ns: DRA)[0].outcome == "translated"
    assert len(memo) == 0 and memo.misses == 50
    replica = deployment_pod(container("replica", 1))
    for i in range(3):
        raw = body_of(replica, uid=f"r{i}")
        memo.review(raw, json.loads(raw), lambda ns: DRA)
    assert len(memo) == 1 and memo.hits == 1


def test_the_uid_is_found_in_compact_and_spaced_bodies_alike() -> None:
    for compact in (True, False):
        memo = ReviewMemo(CONFIG)
        for uid in ("x1", "x2", "x3"):
            raw = body_of(deployment_pod(container("main", 1)), uid=uid, compact=compact)
            result, encoded = memo.review(raw, json.loads(raw), lambda ns: DRA)
            assert json.loads(encoded)["response"]["uid"] == uid
        assert memo.hits == 1, compact


def test_a_body_whose_uid_is_spelled_differently_is_answered_but_not_memoised() -> None:
    memo = ReviewMemo(CONFIG)
    raw = body_of(deployment_pod(container("main", 1)), uid="abc").replace(b'"uid": "abc"', b'"uid": "\\u0061bc"')
    for _ in range(2):
        result, encoded = memo.review(raw, json.loads(raw), lambda ns: DRA)
        assert result.outcome == "translated" and json.loads(encoded)["response"]["uid"] == "abc"
    assert len(memo) == 0 and memo.hits == 0


def test_the_memo_is_bounded() -> None:
    memo = ReviewMemo(CONFIG, capacity=3)
    for i in range(10):
        for uid in ("a", "b"):
            raw = body_of(deployment_pod(container(f"c{i}", 1)), uid=f"u{i}{uid}")
            memo.review(raw, json.loads(raw), lambda ns: DRA)
    assert len(memo) == 3
    with pytest.raises(ValueError):
        ReviewMemo(CONFIG, capacity=0)


def test_a_namespace_cache_miss_is_deferred_and_only_then_asks_the_api() -> None:
    asked: list[str] = []

    def blocking_labels(ns: str) -> dict[str, str]:
        asked.append(ns)
        return DRA

    admitter = Admitter(CONFIG, blocking_labels, None, None, WebhookMetrics(), peek_labels=lambda ns: MISS)
    raw = body_of(deployment_pod(container("main", 1)), uid="u1")
    deferred = admitter.handle_inline(raw)
    assert callable(deferred) and asked == []
    status, out = deferred()
    assert status == 200 and asked == ["team-a"]
    assert json.loads(out)["response"]["patchType"] == "JSONPatch"
    assert (status, out) == admitter.handle(raw)


def test_system_namespaces_are_answered_inline_without_a_label_lookup() -> None:
    admitter = Admitter(CONFIG, lambda ns: DRA, None, None, WebhookMetrics(), peek_labels=lambda ns: MISS)
    for ns in ("kube-system", "dra-bridge"):
        answer = admitter.handle_inline(body_of(deployment_pod(container("main", 1)), ns, uid="u"))
        assert isinstance(answer, tuple) and "patch" not in json.loads(answer[1])["response"]


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[KubeAPI]:
    srv = ApiServer(version="1.35.0").start()
    try:
        api = connect(str(srv.write_kubeconfig(tmp_path / "kubeconfig")))
        api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
        yield api
    finally:
        srv.stop()


def test_an_unknown_template_is_created_off_the_loop_then_served_inline(emulator: KubeAPI) -> None:
    metrics = WebhookMetrics()
    facts = facts_from_discovery(emulator.discovery())
    templates = emulator.resource_api().claim_templates
    admitter = Admitter(ReviewConfig(PolicyConfig(), facts, "claims"), lambda ns: DRA, TemplateEnsurer(emulator, metrics),
                        None, metrics, peek_labels=lambda ns: DRA)
    pod = deployment_pod(container("main", 2))

    dry = admitter.handle_inline(body_of(pod, uid="u0", dry_run=True))
    assert isinstance(dry, tuple)  # a dry run creates nothing, so it never needs the pool
    assert emulator.list(templates, "team-a")["items"] == []

    first = admitter.handle_inline(body_of(pod, uid="u1"))
    assert callable(first)
    assert emulator.list(templates, "team-a")["items"] == []  # nothing was created on the loop
    assert json.loads(first()[1])["response"]["patchType"] == "JSONPatch"
    (created,) = emulator.list(templates, "team-a")["items"]

    second = admitter.handle_inline(body_of(pod, uid="u2"))
    assert isinstance(second, tuple) and json.loads(second[1])["response"]["uid"] == "u2"
    assert emulator.list(templates, "team-a")["items"] == [created]
    assert metrics.templates.value("cached") == 1


def test_untranslatable_pods_are_answered_inline_and_their_event_reaches_the_api(emulator: KubeAPI) -> None:
    metrics = WebhookMetrics()
    events = EventRecorder(emulator, metrics, capacity=1)
    admitter = Admitter(CONFIG, lambda ns: DRA, None, events, metrics, peek_labels=lambda ns: DRA)
    mig = deployment_pod(container("main", extra={"nvidia.com/mig-1g.10gb": 1}))
    for uid in ("u1", "u2"):  # the recorder is not draining yet: the second Event finds the queue full
        answer = admitter.handle_inline(body_of(mig, uid=uid))
        assert isinstance(answer, tuple)
        assert "MIG" in json.loads(answer[1])["response"]["warnings"][0]
    assert metrics.events.labels("dropped")._value.get() == 1
    events.start()
    try:
        (event,) = wait_for(lambda: emulator.list(EVENTS, "team-a")["items"])
    finally:
        events.stop()
    assert event["reason"] == "DRABridgeUntranslatable" and event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "ReplicaSet"  # the pod has no name yet; its controller does
    assert "MIG slice" in event["message"] and "opt out with dra-bridge.io/translate=false" in event["message"]


def test_each_review_logs_one_structured_line_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    admitter = Admitter(CONFIG, lambda ns: DRA, None, None, WebhookMetrics(), peek_labels=lambda ns: DRA)
    with caplog.at_level("DEBUG", logger="bridge.webhook.app"):
        admitter.handle_inline(body_of(deployment_pod(container("main", 1)), uid="u-log"))
    (record,) = [r for r in caplog.records if r.name == "bridge.webhook.app"]
    assert record.levelname == "DEBUG"
    assert record.getMessage() == "review translated"
    fields = {k: getattr(record, k) for k in ("uid", "namespace", "pod", "mode", "target", "dry_run", "reason")}
    assert fields == {"uid": "u-log", "namespace": "team-a", "pod": "trainer-7d9f8b6c4-", "mode": "dra",
                      "target": "claims", "dry_run": False, "reason": "translated to claims"}
    assert record.ms >= 0  # type: ignore[attr-defined]


def test_at_info_only_reviews_that_need_a_look_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    """A translated pod and a pod without GPUs are routine (the pod's annotations and the reviews counter record
    them): no line at INFO. An untranslatable pod (the user got a warning) and a body that is not a review do log."""
    metrics = WebhookMetrics()
    admitter = Admitter(CONFIG, lambda ns: DRA, None, None, metrics, peek_labels=lambda ns: DRA)
    mig, _ = UNTRANSLATABLE["MIG slice"]
    with caplog.at_level("INFO", logger="bridge.webhook.app"):
        admitter.handle_inline(body_of(deployment_pod(container("main", 1)), uid="u-gpu"))
        admitter.handle_inline(body_of(deployment_pod(container("main")), uid="u-none"))
        admitter.handle_inline(body_of(deployment_pod(mig), uid="u-mig"))
        admitter.handle_inline(b"not json")
    lines = [(r.levelname, r.getMessage(), getattr(r, "uid", None)) for r in caplog.records
             if r.name == "bridge.webhook.app"]
    assert lines == [("INFO", "review untranslatable", "u-mig"), ("INFO", "review invalid", "")]
    counted = {labels[0]: value for labels, value in metrics.reviews.totals().items()}
    assert counted == {"translated": 1, "no-gpu": 1, "untranslatable": 1, "invalid": 1}
