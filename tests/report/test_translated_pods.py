"""Pods already on DRA count their GPUs: from their claims' requests (templates, claims), or the DeviceClass's
extended-resource name, with the device-plugin arithmetic; the workload table and JSON say which API they use."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from bridge.kvalues.podgpu import pod_devices
from bridge.report import build_report, run_report
from bridge.report.model import build_model
from bridge.report.podspec import dra_gpus
from bridge.webhook.facts import ClusterFacts
from bridge.webhook.jsonpatch import apply_patch
from bridge.webhook.policy import Action, Target
from bridge.webhook.translate import translate
from tests.report.conftest import (
    REPO,
    bridge_class,
    cluster,
    container,
    deployment,
    findings,
    gpu_device,
    namespace,
    node,
    pod,
    resource_slice,
    spec,
)

Obj = dict[str, Any]
CLASS = "gpu.dra-bridge.io"
SCHEMA = json.loads((REPO / "bridge" / "report" / "render" / "report.schema.json").read_text())


def template(name: str, count: int | None = 1, ns: str = "team", mode: str = "ExactCount", cls: str = CLASS,
             selector: str = "") -> Obj:
    exact: Obj = {"deviceClassName": cls, "allocationMode": mode}
    if count is not None:
        exact["count"] = count
    if selector:
        exact["selectors"] = [{"cel": {"expression": selector}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exact}]}}}}


def claimed_pod(name: str, templates: dict[str, str], ns: str = "team", node_name: str = "gpu-1",
                phase: str = "Running") -> Obj:
    """A pod whose container `main` uses pod claims from templates (claim name -> template name)."""
    c = container(name="main", resources={"claims": [{"name": k} for k in templates]})
    return pod(name, ns, spec(c, resourceClaims=[{"name": k, "resourceClaimTemplateName": t}
                                                 for k, t in templates.items()]), node=node_name, phase=phase)


def row(report: Any, name: str) -> Any:
    return next(w for w in report.workloads if w.name == name)


def test_a_translated_pod_counts_the_devices_its_claim_templates_request() -> None:
    data = cluster(namespace("team", "dra"), bridge_class(), template("gpu-2", 2),
                   claimed_pod("train-v2", {"gpu-main": "gpu-2"}))
    w = row(build_report(data), "train-v2")
    assert (w.gpus_per_pod, w.gpus, w.api, w.pods_by_api) == (
        {"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 2}, "dra", {"dra": 1})


def test_the_webhook_translation_keeps_the_device_plugin_count_in_the_report() -> None:
    """The real webhook translates pods with init containers and sidecars; the report counts exactly
    `pod_devices` of the original, from the templates the webhook wrote."""
    shapes = {
        "init-8-main-8": {"initContainers": [container({"nvidia.com/gpu": 8}, name="prep")],
                          "containers": [container({"nvidia.com/gpu": 8}, name="main")]},
        "init-4-main-1": {"initContainers": [container({"nvidia.com/gpu": 4}, name="prep")],
                          "containers": [container({"nvidia.com/gpu": 1}, name="main")]},
        "sidecar-1-init-2-main-1": {
            "initContainers": [container({"nvidia.com/gpu": 1}, name="logger", restartPolicy="Always"),
                               container({"nvidia.com/gpu": 2}, name="prep")],
            "containers": [container({"nvidia.com/gpu": 1}, name="main")]},
        "two-app-containers": {"containers": [container({"nvidia.com/gpu": 3}, name="a"),
                                              container({"nvidia.com/gpu": 1}, name="b")]},
    }
    facts = ClusterFacts("v1", 1, 35)
    objects: list[Obj] = [namespace("team", "dra"), bridge_class()]
    want = {}
    for name, body in shapes.items():
        original = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team"}, "spec": body}
        result = translate(original, "team", Action.TRANSLATE, Target.CLAIMS, facts)
        translated = apply_patch(original, list(result.patch))
        assert not any("nvidia.com/gpu" in json.dumps(c.get("resources", {}))
                       for c in translated["spec"]["containers"] + translated["spec"].get("initContainers", []))
        translated["spec"]["nodeName"] = "gpu-1"
        translated["status"] = {"phase": "Running"}
        objects += [translated, *result.templates]
        want[name] = pod_devices(body, "nvidia.com/gpu")
    report = build_report(cluster(*objects))
    assert {w.name: w.gpus_per_pod for w in report.workloads} == {n: {"nvidia.com/gpu": k} for n, k in want.items()}
    assert want == {"init-8-main-8": 8, "init-4-main-1": 4, "sidecar-1-init-2-main-1": 3, "two-app-containers": 4}
    assert {w.api for w in report.workloads} == {"dra"}


def test_the_extended_resource_name_counts_with_the_device_plugin_arithmetic() -> None:
    ext = "deviceclass.resource.kubernetes.io/gpu.dra-bridge.io"
    body = spec(container({ext: 2}, name="main"),
                initContainers=[container({ext: 4}, name="prep")])
    data = cluster(namespace("team", "dra"), bridge_class(), pod("ext", "team", body))
    w = row(build_report(data), "ext")
    assert (w.gpus_per_pod, w.api) == ({"nvidia.com/gpu": 4}, "dra")


def test_a_claim_named_by_the_pod_is_read_from_the_claim_itself() -> None:
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "shared", "namespace": "team"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS, "count": 3}}]}}}
    p = pod("uses-claim", "team", spec(container(name="main", resources={"claims": [{"name": "g"}]}),
                                       resourceClaims=[{"name": "g", "resourceClaimName": "shared"}]))
    w = row(build_report(cluster(namespace("team", "dra"), bridge_class(), claim, p)), "uses-claim")
    assert w.gpus_per_pod == {"nvidia.com/gpu": 3}


def test_a_generated_claim_is_preferred_to_its_template_and_v1beta1_requests_count() -> None:
    generated = {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim",
                 "metadata": {"name": "p-gpu-abcde", "namespace": "team"},
                 "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": CLASS, "count": 2}]}}}
    p = claimed_pod("p", {"gpu": "gone-template"})
    p["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "p-gpu-abcde"}]
    w = row(build_report(cluster(namespace("team", "dra"), bridge_class(), generated, p)), "p")
    assert (w.gpus_per_pod, w.dra_unknown) == ({"nvidia.com/gpu": 2}, ())


def test_what_cannot_be_counted_is_named_not_guessed() -> None:
    data = cluster(namespace("team", "dra"), bridge_class(), template("all-of-them", None, mode="All"),
                   claimed_pod("missing", {"gpu": "not-exported"}), claimed_pod("all", {"gpu": "all-of-them"}))
    report = build_report(data)
    missing, every = row(report, "missing"), row(report, "all")
    assert missing.gpus_per_pod == {} and missing.api == "dra"
    assert missing.dra_unknown == ("claim gpu: ResourceClaimTemplate not-exported is not in the input",)
    assert every.dra_unknown == ("claim gpu request gpu: allocationMode All has no count",)
    doc = json.loads(run_report(data, output="json").text)
    jsonschema.validate(doc, SCHEMA)
    assert next(w for w in doc["workloads"] if w["name"] == "missing")["draUncounted"] == list(missing.dra_unknown)


def test_claims_of_another_device_class_are_not_the_bridge_gpus() -> None:
    data = cluster(namespace("team", "dra"), bridge_class(), template("nic", 1, cls="nic.example.com"),
                   claimed_pod("net", {"nic": "nic"}))
    w = row(build_report(data), "net")
    assert (w.gpus_per_pod, w.api) == ({}, "none")


def test_a_deployment_whose_pods_were_translated_reports_their_api_and_mixed_during_a_rollout() -> None:
    tmpl_spec = spec(container({"nvidia.com/gpu": 1}, name="main"))
    dep = deployment("web", "team", 3, tmpl_spec)
    legacy_pod = pod("web-old", "team", tmpl_spec, owner=("Deployment", "web"))
    new_pods = [claimed_pod(f"web-new-{i}", {"gpu-main": "gpu-1"}) for i in range(2)]
    for p in new_pods:
        p["metadata"]["ownerReferences"] = legacy_pod["metadata"]["ownerReferences"]
    mixed = build_report(cluster(namespace("team", "dra"), bridge_class(), template("gpu-1"), dep, legacy_pod,
                                 *new_pods))
    w = row(mixed, "web")
    assert (w.api, w.pods_by_api, w.gpus_per_pod, w.gpus) == (
        "mixed", {"dra": 2, "legacy": 1}, {"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 3})
    done = build_report(cluster(namespace("team", "dra"), bridge_class(), template("gpu-1"), dep, *new_pods))
    assert row(done, "web").api == "dra"
    assert row(build_report(cluster(namespace("team"), dep, legacy_pod)), "web").api == "legacy"


def test_table_and_markdown_show_the_api_column() -> None:
    data = cluster(namespace("team", "dra"), bridge_class(), template("gpu-2", 2),
                   claimed_pod("train-v2", {"gpu-main": "gpu-2"}), pod("train", "team",
                                                                       spec(container({"nvidia.com/gpu": 1}))))
    table = run_report(data).text
    assert any(line.startswith("team/Pod/train-v2") and " 2 gpu " in line and " DRA " in line
               for line in table.splitlines())
    assert any(line.startswith("team/Pod/train ") and " legacy " in line for line in table.splitlines())
    assert "| `team/Pod/train-v2` | 1 | 2 gpu | DRA |" in run_report(data, output="markdown").text


def test_translated_pods_take_their_place_in_the_dra_capacity() -> None:
    """Their GPUs count against the DRA side (they hold devices there), with their claims' own selectors."""
    h100_only = 'device.attributes["gpu.dra-bridge.io"].productName == "NVIDIA H100 80GB HBM3"'
    data = cluster(namespace("team", "dra"), bridge_class(), template("gpu-2", 2, selector=h100_only),
                   *(claimed_pod(f"p{i}", {"gpu": "gpu-2"}) for i in range(3)),
                   node("gpu-1", 8, allocatable=4), resource_slice("gpu-1", [gpu_device(i) for i in range(4)]))
    fs = findings(data, "DRB032")
    assert [(f.severity, f.details["gpus"], f.details["pendingAlone"]) for f in fs] == [("blocker", 6, 1)]
    other = 'device.attributes["gpu.dra-bridge.io"].productName == "NVIDIA A100"'
    data2 = cluster(namespace("team", "dra"), bridge_class(), template("gpu-2", 2, selector=other),
                    claimed_pod("p", {"gpu": "gpu-2"}), node("gpu-1", 8, allocatable=4),
                    resource_slice("gpu-1", [gpu_device(i) for i in range(4)]))
    assert findings(data2, "DRB032")[0].details["matchingDevices"] == 0


@pytest.mark.parametrize("status", [None, {}, {"resourceClaimStatuses": "not a list"}])
def test_a_pod_status_without_generated_names_falls_back_to_the_template(status: Obj | None) -> None:
    p = claimed_pod("p", {"gpu": "t"})
    assert dra_gpus(p["spec"], "team", status, {("team", "t"): template("t", 2)}).count == 2


def test_model_counts_pods_per_api_without_rereading_the_template() -> None:
    data = cluster(namespace("team", "dra"), bridge_class(), template("gpu-1"),
                   claimed_pod("a", {"g": "gpu-1"}), claimed_pod("b", {"g": "gpu-1"}, phase="Succeeded"))
    model = build_model(data)
    a = next(w for w in model.workloads if w.name == "a")
    b = next(w for w in model.workloads if w.name == "b")
    assert (a.pods_by_api, a.replicas, b.pods_by_api, b.replicas) == ({"dra": 1}, 1, {}, 0)
