"""The webhook reads an AdmissionReview keeping only the fields the review uses (`jsoncodec.load_review`): every
answer, patch, template, Event and warning must be what the whole body gives, for every pod the other tests know
and for random ones, with the rest of a real pod (images, env, volumes, probes, status) around them."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from bridge.webhook import jsoncodec
from bridge.webhook.effects import involved_object
from bridge.webhook.facts import ClusterFacts, ServeFacts
from bridge.webhook.policy import PolicyConfig
from bridge.webhook.review import ReviewConfig, ReviewResult, review
from tests.webhook.pods import admission_review, container, deployment_pod
from tests.webhook.test_fuzz import pods as random_pods
from tests.webhook.test_inline import CORPUS
from tests.webhook.test_nodes import MIG, WHOLE, node, view

CONFIGS = {
    "claims": ReviewConfig(PolicyConfig(own_namespace="dra-bridge"), ClusterFacts("v1", 1, 35), "claims"),
    "extended": ReviewConfig(PolicyConfig(own_namespace="dra-bridge"), ClusterFacts("v1", 1, 36), "extended"),
}
# a whole-GPU node and a MIG node, one tainted: placement reads the pod's selectors, affinity and tolerations
SERVE = ServeFacts(generation=1, nodes=view(node("h100-0", WHOLE),
                                            node("mig-0", MIG, taints=[{"key": "mig", "effect": "NoSchedule"}])))
TOLERATING = [{"key": "mig", "operator": "Exists", "effect": "NoSchedule"}]


def dressed(pod: Any) -> Any:
    """`pod` with what a real pod created through a Deployment also carries (none of it read by the review)."""
    if not isinstance(pod, dict):
        return pod
    pod = copy.deepcopy(pod)
    meta = pod.get("metadata")
    if isinstance(meta, dict):
        meta.setdefault("labels", {"app": "x", "pod-template-hash": "5d8f"})
        meta.setdefault("ownerReferences", [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x-5d8f",
                                             "uid": "0c1a", "controller": True, "blockOwnerDeletion": True}])
    spec = pod.get("spec")
    if isinstance(spec, dict):
        spec.setdefault("volumes", [{"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {
            "expirationSeconds": 3607, "path": "token"}}], "defaultMode": 420}}])
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("priority", 0)
        for c in spec.get("containers") if isinstance(spec.get("containers"), list) else []:
            if isinstance(c, dict):
                c.setdefault("env", [{"name": "RANK", "value": "0"}, {"name": "HUGE", "value": 18446744073709551616}])
                c.setdefault("ports", [{"containerPort": 8080, "protocol": "TCP"}])
                c.setdefault("livenessProbe", {"httpGet": {"path": "/healthz", "port": 8080}})
    pod.setdefault("status", {"phase": "Pending", "qosClass": "Burstable"})
    return pod


def both(body: bytes, config: ReviewConfig, labels: dict[str, str] | None) -> tuple[ReviewResult, ReviewResult]:
    whole = review(json.loads(body), config, lambda ns: labels, serve=SERVE)
    slim = review(jsoncodec.load_review(body), config, lambda ns: labels, serve=SERVE)
    return slim, whole


def assert_same_answer(body: bytes, config: ReviewConfig, labels: dict[str, str] | None) -> None:
    slim, whole = both(body, config, labels)
    assert slim == whole
    pod_slim = (jsoncodec.load_review(body).get("request") or {}).get("object")
    pod_whole = (json.loads(body).get("request") or {}).get("object")
    for spec in whole.events:  # the Event names the same object (the pod, or its controller)
        assert involved_object(spec, pod_slim) == involved_object(spec, pod_whole)


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", list(CORPUS))
def test_every_corpus_pod_gets_the_same_answer_from_the_slim_reading(name: str, config: str) -> None:
    pod, namespace, labels = CORPUS[name]
    for variant in (pod, dressed(pod)):
        for dry_run in (False, True):
            body = json.dumps(admission_review(variant, namespace, uid="u-1", dry_run=dry_run)).encode()
            assert_same_answer(body, CONFIGS[config], labels)


@pytest.mark.parametrize("spec_extra, outcome", [
    ({"nodeSelector": {"pool": "mig"}}, "translated"),  # the MIG node's taint keeps the pod off it: nowhere to run
    ({"nodeSelector": {"pool": "mig"}, "tolerations": TOLERATING}, "untranslatable"),  # only the MIG node
    ({"tolerations": TOLERATING}, "translated"),
    ({"schedulerName": "volcano"}, "untranslatable"),
    ({"nodeName": "h100-0"}, "untranslatable"),
], ids=["taint-keeps-it-off", "tolerates-the-mig-node", "tolerates-but-not-only", "other-scheduler", "preset-node"])
def test_placement_and_scheduling_read_the_same_fields(spec_extra: dict[str, Any], outcome: str) -> None:
    pod = dressed(deployment_pod(container("main", 1)))
    pod["spec"].update(copy.deepcopy(spec_extra))
    body = json.dumps(admission_review(pod, uid="u-2")).encode()
    slim, whole = both(body, CONFIGS["claims"], {"dra-bridge.io/mode": "dra"})
    assert slim == whole and whole.outcome == outcome


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_pods)
def test_random_pods_get_the_same_answer_from_the_slim_reading(pod: dict[str, Any]) -> None:
    body = json.dumps(admission_review(dressed(pod), uid="u-3")).encode()
    assert_same_answer(body, CONFIGS["claims"], {"dra-bridge.io/mode": "dra"})


def test_the_slim_reading_drops_what_the_review_never_reads() -> None:
    body = json.dumps(admission_review(dressed(deployment_pod(container("main", 1))), uid="u-4")).encode()
    doc = jsoncodec.load_review(body)
    pod = doc["request"]["object"]
    assert "status" not in pod and "volumes" not in pod["spec"] and "userInfo" not in doc["request"]
    assert set(pod["spec"]["containers"][0]) <= {"name", "resources", "restartPolicy"}
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"  # the Event of a generateName pod needs it


def test_a_body_of_another_shape_is_read_whole() -> None:
    for odd in ({"spec": {"containers": "nope"}}, {"metadata": None, "spec": {}}, {"spec": {"containers": [7]}}):
        body = json.dumps(admission_review(odd, uid="u-5")).encode()
        assert jsoncodec.load_review(body) == json.loads(body)
    assert jsoncodec.load_review(b"[1, 2]") == [1, 2]
    with pytest.raises(ValueError):
        jsoncodec.load_review(b"{not json")


def test_integers_of_any_size_are_read_exactly() -> None:
    pod = deployment_pod(container("main", 1))
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 18446744073709551617
    body = json.dumps(admission_review(pod, uid="u-6")).encode()
    limits = jsoncodec.load_review(body)["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 18446744073709551617 and type(limits["nvidia.com/gpu"]) is int


def test_the_patch_is_standard_base64() -> None:
    import base64
    import os

    from bridge.webhook.review import _b64, _b64_stdlib
    for n in (0, 1, 2, 3, 998, 999, 1000, 4097):
        data = os.urandom(n)
        assert _b64(data) == _b64_stdlib(data) == base64.b64encode(data).decode()
