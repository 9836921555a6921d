"""The pure translation over realistic pods: what the pod and its templates look like after the webhook.

Every patched pod and every template is validated against the Kubernetes schemas, and translating the result
again changes nothing (reinvocation)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from bridge.kvalues.podgpu import container_count, pod_devices
from bridge.webhook import cel
from bridge.webhook.facts import ClusterFacts
from bridge.webhook.jsonpatch import apply_patch
from bridge.webhook.policy import DETAIL_ANNOTATION, SHADOW_ANNOTATION, TRANSLATED_ANNOTATION, PolicyConfig
from bridge.webhook.review import ReviewConfig, review
from tests.webhook.conftest import decode_patch, validate
from tests.webhook.pods import admission_review, container, deployment_pod, expr, required_affinity

H100 = "NVIDIA-H100-80GB-HBM3"
DRA = {"dra-bridge.io/mode": "dra"}


@dataclass
class Case:
    pod: dict[str, Any]
    claims: dict[str, int] = field(default_factory=dict)  # pod claim name -> GPU count of its template
    node_selector: dict[str, str] | None = None  # expected after translation (None: absent)
    affinity_keys: set[str] = field(default_factory=set)  # node-affinity keys left on the pod
    selector_devices: set[str] | None = None  # which sample devices the CEL selects (None: no selector)
    warning: str = ""


SAMPLE_DEVICES = {
    "h100": ({"productName": "NVIDIA H100 80GB HBM3", "architecture": "Hopper",
              "cudaComputeCapability": cel.Semver("9.0.0")}, {"memory": "81559Mi"}),
    "a100-40": ({"productName": "NVIDIA A100-SXM4-40GB", "architecture": "Ampere",
                 "cudaComputeCapability": cel.Semver("8.0.0")}, {"memory": "40960Mi"}),
}

CASES = {
    "deployment pod with 1 GPU": Case(deployment_pod(container("main", 1)), {"gpu-main": 1}),
    "2 GPUs given as a string quantity": Case(deployment_pod(container("main", "2")), {"gpu-main": 2}),
    "8 GPUs, limits only": Case(deployment_pod(container("main", 8, requests=False)), {"gpu-main": 8}),
    "multi-container pod gets one claim per GPU container": Case(
        deployment_pod(container("trainer", 4), container("sidecar"), container("evaluator", 1)),
        {"gpu-trainer": 4, "gpu-evaluator": 1}),
    # an init container runs before the app containers and hands its GPUs on: it borrows main's claim (a cut of
    # it: one of main's two GPUs), so the pod holds 2 GPUs as under the device plugin, not 3
    "init container with a GPU borrows the app container's claim": Case(
        deployment_pod(container("main", 2), init=(container("warmup", 1),)), {"gpu-main": 2}),
    "init container as large as main shares the whole claim": Case(
        deployment_pod(container("main", 8), init=(container("prep", 8),)), {"gpu-main": 8}),
    "init container larger than main adds a shared init claim": Case(
        deployment_pod(container("main", 1), init=(container("prep", 4),)), {"gpu-main": 1, "gpu-init": 3}),
    "sidecar runs alongside: its own claim": Case(
        deployment_pod(container("main", 1), init=({**container("logger", 1), "restartPolicy": "Always"},)),
        {"gpu-logger": 1, "gpu-main": 1}),
    "GFD product nodeSelector becomes CEL and leaves the pod": Case(
        deployment_pod(container("main", 1), node_selector={cel.GFD_PRODUCT: H100, "kubernetes.io/os": "linux"}),
        {"gpu-main": 1}, node_selector={"kubernetes.io/os": "linux"}, selector_devices={"h100"}),
    "GFD-only nodeSelector is removed entirely": Case(
        deployment_pod(container("main", 1), node_selector={cel.GFD_FAMILY: "ampere"}),
        {"gpu-main": 1}, selector_devices={"a100-40"}),
    "gpu.count stays on the pod (it describes the node)": Case(
        deployment_pod(container("main", 1), node_selector={cel.GFD_COUNT: "8", cel.GFD_MEMORY: "81559"}),
        {"gpu-main": 1}, node_selector={cel.GFD_COUNT: "8"}, selector_devices={"h100"}),
    "required node affinity: GFD part to CEL, zone stays": Case(
        deployment_pod(container("main", 2), affinity=required_affinity(
            [expr(cel.GFD_MEMORY, "Gt", "60000"), expr("topology.kubernetes.io/zone", "In", "eu-west-1a")])),
        {"gpu-main": 2}, affinity_keys={"topology.kubernetes.io/zone"}, selector_devices={"h100"}),
    "required node affinity with alternative GFD terms becomes an OR": Case(
        deployment_pod(container("main", 1), affinity=required_affinity(
            [expr(cel.GFD_PRODUCT, "In", H100)], [expr(cel.GFD_COMPUTE_MAJOR, "In", "8")])),
        {"gpu-main": 1}, selector_devices={"h100", "a100-40"}),
    "DoesNotExist stays on the pod with a warning": Case(
        deployment_pod(container("main", 1), affinity=required_affinity(
            [expr(cel.GFD_FAMILY, "In", "hopper"), expr(cel.GFD_PRODUCT, "DoesNotExist")])),
        {"gpu-main": 1}, affinity_keys={cel.GFD_PRODUCT}, selector_devices={"h100"}, warning="DoesNotExist"),
    "mixed alternative terms stay on the pod with a warning": Case(
        deployment_pod(container("main", 1), affinity=required_affinity(
            [expr(cel.GFD_PRODUCT, "In", H100)], [expr("node.kubernetes.io/instance-type", "In", "p5.48xlarge")])),
        {"gpu-main": 1}, affinity_keys={cel.GFD_PRODUCT, "node.kubernetes.io/instance-type"},
        warning="several terms"),
}


def original(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["spec"].get("containers", []) + pod["spec"].get("initContainers", [])
                if c["name"] == name)


def run(cfg: ReviewConfig, pod: dict[str, Any], labels: dict[str, str] | None = None) -> Any:
    return review(admission_review(pod), cfg, lambda ns: DRA if labels is None else labels)


@pytest.mark.parametrize("name", list(CASES))
def test_claims_target_translates_realistic_pods(name: str, config: ReviewConfig) -> None:
    case = CASES[name]
    validate(case.pod)
    result = run(config, case.pod)
    assert result.outcome == "translated", result.reason
    out = apply_patch(case.pod, decode_patch(result.body))
    validate(out)
    spec = out["spec"]
    # no legacy GPU resource is left anywhere
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        assert "nvidia.com/gpu" not in c["resources"].get("limits", {})
        assert "nvidia.com/gpu" not in c["resources"].get("requests", {})
    templates = {t["metadata"]["name"]: t for t in result.templates}
    for t in templates.values():
        validate(t)
        assert t["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "dra-bridge"
    pod_claims = {c["name"]: c["resourceClaimTemplateName"] for c in spec["resourceClaims"]}
    requests = {n: templates[t]["spec"]["spec"]["devices"]["requests"] for n, t in pod_claims.items()}
    assert {n: sum(r["exactly"]["count"] for r in reqs) for n, reqs in requests.items()} == case.claims
    # every container sees exactly its device-plugin count, and the pod holds what the device plugin gave it
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        seen = sum(r["exactly"]["count"] for ref in c["resources"].get("claims", []) for r in requests[ref["name"]]
                   if ref.get("request") in (None, r["name"]))
        assert seen == container_count(original(case.pod, c["name"]), "nvidia.com/gpu"), c["name"]
    assert sum(case.claims.values()) == pod_devices(case.pod["spec"], "nvidia.com/gpu")
    assert json.loads(out["metadata"]["annotations"][DETAIL_ANNOTATION])["devices"] == sum(case.claims.values())
    assert spec.get("nodeSelector") == case.node_selector
    left = {e["key"] for t in spec.get("affinity", {}).get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
        for e in t.get("matchExpressions", [])}
    assert left == case.affinity_keys
    selectors = {json.dumps(r["exactly"].get("selectors")) for t in templates.values()
                 for r in t["spec"]["spec"]["devices"]["requests"]}
    assert len(selectors) == 1  # one pod-wide device constraint
    sel = json.loads(selectors.pop())
    if case.selector_devices is None:
        assert sel is None
    else:
        expression = sel[0]["cel"]["expression"]
        assert {n for n, (a, c) in SAMPLE_DEVICES.items() if cel.evaluate(expression, a, c)} == case.selector_devices
    warnings = " ".join(result.body["response"].get("warnings", []))
    assert case.warning in warnings if case.warning else not warnings
    assert out["metadata"]["annotations"][TRANSLATED_ANNOTATION] == "claims"
    assert json.loads(out["metadata"]["annotations"][DETAIL_ANNOTATION])["ok"] is True
    # reinvocation on our own output: nothing more to do
    again = run(config, out)
    assert again.outcome == "skipped" and decode_patch(again.body) == []


def test_translation_without_the_record_annotation_is_still_idempotent(config: ReviewConfig) -> None:
    pod = deployment_pod(container("main", 2), node_selector={cel.GFD_PRODUCT: H100})
    once = apply_patch(pod, decode_patch(run(config, pod).body))
    del once["metadata"]["annotations"]
    second = run(config, once)
    assert second.outcome == "no-gpu" and decode_patch(second.body) == []


def test_templates_are_deterministic_and_shared_by_pods_asking_the_same(config: ReviewConfig) -> None:
    a = run(config, deployment_pod(container("main", 2), app="a", node_selector={cel.GFD_PRODUCT: H100}))
    b = run(config, deployment_pod(container("x", 2), app="b", node_selector={cel.GFD_PRODUCT: H100}))
    c = run(config, deployment_pod(container("main", 2), app="c"))
    names = lambda r: [t["metadata"]["name"] for t in r.templates]  # noqa: E731
    assert names(a) == names(b)
    assert names(a) != names(c)
    assert names(a)[0].startswith("dra-bridge-gpu-2-") and len(names(a)[0]) == len("dra-bridge-gpu-2-") + 8


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2", "v1"])
def test_template_shape_follows_the_served_resource_version(version: str) -> None:
    cfg = ReviewConfig(PolicyConfig(), ClusterFacts(version, 1, 33), "claims")
    result = run(cfg, deployment_pod(container("main", 4), node_selector={cel.GFD_FAMILY: "hopper"}))
    (t,) = result.templates
    assert t["apiVersion"] == f"resource.k8s.io/{version}"
    validate(t)
    req = t["spec"]["spec"]["devices"]["requests"][0]
    exact = req if version == "v1beta1" else req["exactly"]
    assert exact["deviceClassName"] == "gpu.dra-bridge.io" and exact["count"] == 4
    assert "exactly" not in req if version == "v1beta1" else "deviceClassName" not in req


def test_extended_target_renames_the_resource_and_keeps_node_selectors() -> None:
    cfg = ReviewConfig(PolicyConfig(), ClusterFacts("v1", 1, 36), "extended")
    sidecar = {**container("log", 1, requests=False), "restartPolicy": "Always"}
    pod = deployment_pod(container("main", 2), init=(sidecar,), node_selector={cel.GFD_PRODUCT: H100})
    result = run(cfg, pod)
    assert result.outcome == "translated" and result.target == "extended" and result.templates == ()
    out = apply_patch(pod, decode_patch(result.body))
    validate(out)
    name = "deviceclass.resource.kubernetes.io/gpu.dra-bridge.io"
    main = out["spec"]["containers"][0]["resources"]
    assert main["limits"][name] == 2 and main["requests"][name] == 2 and "nvidia.com/gpu" not in main["limits"]
    log = out["spec"]["initContainers"][0]["resources"]
    assert log["limits"][name] == 1 and name not in log["requests"]
    assert out["spec"]["nodeSelector"] == {cel.GFD_PRODUCT: H100}
    assert "resourceClaims" not in out["spec"]
    assert json.loads(out["metadata"]["annotations"][DETAIL_ANNOTATION])["devices"] == 3
    assert run(cfg, out).outcome == "skipped"


def test_extended_target_translates_pods_with_gpu_init_containers_with_claims() -> None:
    """The scheduler's extended-resource claim summed init and app containers before kubernetes#134880; claims keep
    the device-plugin count on every release."""
    cfg = ReviewConfig(PolicyConfig(), ClusterFacts("v1", 1, 36), "extended")
    pod = deployment_pod(container("main", 8), init=(container("prep", 8),))
    result = run(cfg, pod)
    assert result.outcome == "translated" and result.target == "claims"
    out = apply_patch(pod, decode_patch(result.body))
    assert out["metadata"]["annotations"][TRANSLATED_ANNOTATION] == "claims"
    (template,) = result.templates
    assert [r["exactly"]["count"] for r in template["spec"]["spec"]["devices"]["requests"]] == [8]
    assert out["spec"]["initContainers"][0]["resources"]["claims"] == [{"name": "gpu-main"}]


def test_namespace_target_label_overrides_the_cluster_choice() -> None:
    cfg = ReviewConfig(PolicyConfig(), ClusterFacts("v1", 1, 36), "extended")
    result = run(cfg, deployment_pod(container("main", 1)), {**DRA, "dra-bridge.io/target": "claims"})
    assert result.target == "claims" and len(result.templates) == 1


UNTRANSLATABLE = {
    "MIG slice": (container("main", extra={"nvidia.com/mig-1g.10gb": 1}), "MIG"),
    "time-sliced GPU": (container("main", extra={"nvidia.com/gpu.shared": 1}), "time-sliced"),
    "MIG next to a whole GPU": (container("main", 1, extra={"nvidia.com/mig-3g.40gb": 1}), "MIG"),
    "33 GPUs": (container("main", 33), "more than a claim"),
    "fractional GPU": (container("main", "500m"), "whole number"),
    "requests differ from limits": ({**container("main", 2), "resources": {"requests": {"nvidia.com/gpu": 1},
                                                                           "limits": {"nvidia.com/gpu": 2}}}, "differ"),
    "request without limit": ({**container("main"), "resources": {"requests": {"nvidia.com/gpu": 1}}}, "without a limit"),
    "HAMi memory resource": (container("main", 1, extra={"nvidia.com/gpumem": 4000}), "no DRA equivalent"),
}


# what the operator is told to do, for the names the issue calls out (MIG, time-slicing, more than 32)
REMEDY = {"MIG slice": ("request a MIG DeviceClass through a ResourceClaim", "dra-bridge.io/translate=false"),
          "time-sliced GPU": ("keep this workload legacy", "rewrite it with a claim and a sharing config"),
          "33 GPUs": ("split the work across pods", "dra-bridge.io/translate=false")}


@pytest.mark.parametrize("name", list(REMEDY))
def test_untranslatable_warnings_and_events_say_why_and_what_to_do(name: str, config: ReviewConfig) -> None:
    c, why = UNTRANSLATABLE[name]
    result = run(config, deployment_pod(c))
    (warning,) = result.body["response"]["warnings"]
    (event,) = result.events
    # the warning is the short reason (the API's guidance: 120 characters); the Event says what to do
    assert why in warning and "container main" in warning and "stays on the device plugin" in warning
    assert len(warning) <= 120
    assert why in event.message and "container main" in event.message
    assert all(remedy in event.message for remedy in REMEDY[name]), event.message
    assert len(event.message) <= 1024


@pytest.mark.parametrize("name", list(UNTRANSLATABLE))
def test_untranslatable_pods_are_left_untouched_with_warning_and_event(name: str, config: ReviewConfig) -> None:
    c, why = UNTRANSLATABLE[name]
    result = run(config, deployment_pod(c, container("other", 1)))
    assert result.outcome == "untranslatable"
    assert decode_patch(result.body) == []
    assert result.body["response"]["allowed"] is True
    assert any(why in w for w in result.body["response"]["warnings"])
    (event,) = result.events
    assert why in event.message and event.reason == "DRABridgeUntranslatable"
    assert result.templates == ()


def test_shadow_mode_records_the_translation_and_changes_nothing_else(config: ReviewConfig) -> None:
    pod = deployment_pod(container("main", 2), node_selector={cel.GFD_PRODUCT: H100},
                         annotations={"team": "vision"})
    result = run(config, pod, {"dra-bridge.io/mode": "shadow"})
    assert result.outcome == "shadow" and result.templates == ()
    out = apply_patch(pod, decode_patch(result.body))
    validate(out)
    record = json.loads(out["metadata"]["annotations"].pop(SHADOW_ANNOTATION))
    assert out == pod
    assert record["ok"] is True and record["containers"] == {"main": 2} and "productName" in record["selector"]
    assert run(config, apply_patch(pod, decode_patch(result.body)), {"dra-bridge.io/mode": "shadow"}).outcome == "skipped"


def test_shadow_mode_records_why_a_pod_would_stay_legacy(config: ReviewConfig) -> None:
    pod = deployment_pod(container("main", extra={"nvidia.com/gpu.shared": 1}))
    result = run(config, pod, {"dra-bridge.io/mode": "shadow"})
    assert result.outcome == "untranslatable"
    out = apply_patch(pod, decode_patch(result.body))
    record = json.loads(out["metadata"]["annotations"][SHADOW_ANNOTATION])
    assert record["ok"] is False and "time-sliced" in record["reasons"][0]
    assert "would stay" in result.body["response"]["warnings"][0]


@pytest.mark.parametrize(
    ("pod", "namespace", "labels", "reason"),
    [
        (deployment_pod(container("main", 1), annotations={"dra-bridge.io/translate": "false"}), "team-a", DRA,
         "opted out"),
        (deployment_pod(container("main", 1)), "kube-system", DRA, "system namespace"),
        (deployment_pod(container("main", 1)), "dra-bridge", DRA, "own namespace"),
        (deployment_pod(container("main", 1)), "team-a", {}, "legacy"),
        (deployment_pod(container("main", 1)), "team-a", {"dra-bridge.io/mode": "legacy"}, "legacy"),
    ],
)
def test_pods_outside_the_policy_are_untouched(pod: Any, namespace: str, labels: Any, reason: str,
                                              config: ReviewConfig) -> None:
    result = review(admission_review(pod, namespace), config, lambda ns: labels)
    assert result.outcome == "skipped" and reason in result.reason
    assert decode_patch(result.body) == [] and result.templates == ()


def test_pod_without_gpus_is_untouched(config: ReviewConfig) -> None:
    result = run(config, deployment_pod(container("web"), node_selector={"kubernetes.io/os": "linux"}))
    assert result.outcome == "no-gpu" and decode_patch(result.body) == []


def test_unknown_mode_value_is_treated_as_legacy_with_a_warning(config: ReviewConfig) -> None:
    result = run(config, deployment_pod(container("main", 1)), {"dra-bridge.io/mode": "DRA!"})
    assert result.outcome == "skipped"
    assert "not one of legacy, shadow, dra" in result.body["response"]["warnings"][0]


def test_existing_claims_and_annotations_are_kept(config: ReviewConfig) -> None:
    pod = deployment_pod(container("main", 1), annotations={"prometheus.io/scrape": "true"})
    pod["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": "rdma-nic"}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "nic"}]
    out = apply_patch(pod, decode_patch(run(config, pod).body))
    validate(out)
    assert [c["name"] for c in out["spec"]["resourceClaims"]] == ["nic", "gpu-main"]
    assert [c["name"] for c in out["spec"]["containers"][0]["resources"]["claims"]] == ["nic", "gpu-main"]
    assert out["metadata"]["annotations"]["prometheus.io/scrape"] == "true"


def test_dry_run_is_reported_so_the_shell_skips_side_effects(config: ReviewConfig) -> None:
    result = review(admission_review(deployment_pod(container("main", 1)), dry_run=True), config, lambda ns: DRA)
    assert result.outcome == "translated" and result.dry_run is True and result.templates


def test_another_scheduler_is_translated_only_when_configured() -> None:
    pod = deployment_pod(container("main", 1))
    pod["spec"]["schedulerName"] = "gpu-scheduler"  # e.g. a second kube-scheduler profile
    plain = ReviewConfig(PolicyConfig(), ClusterFacts("v1", 1, 35), "claims")
    left = run(plain, pod)
    assert left.outcome == "untranslatable" and "--translate-scheduler gpu-scheduler" in left.events[0].message
    allowed = ReviewConfig(PolicyConfig(), ClusterFacts("v1", 1, 35), "claims",
                           frozenset({"default-scheduler", "gpu-scheduler"}))
    assert run(allowed, pod).outcome == "translated"


def test_nothing_is_translated_where_no_resource_api_is_served() -> None:
    result = run(ReviewConfig(PolicyConfig(), ClusterFacts(None, 1, 31), "claims"), deployment_pod(container("m", 1)))
    assert result.outcome == "untranslatable" and "no resource.k8s.io" in result.body["response"]["warnings"][0]
