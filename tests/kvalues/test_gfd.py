"""GPU Feature Discovery label semantics and the CEL that stands in for them.

The central test: for every simulated GPU model, every device label GFD would write on its node, every operator and
every GFD family rule, the CEL selects exactly the devices (as `bridge/dra/slices.py` publishes them, for every
model) whose node the label requirement selects."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from bridge.dra.slices import device_entry
from bridge.inventory.catalog import model_names
from bridge.inventory.simulated import devices_from_spec
from bridge.kvalues import cel as kcel
from bridge.kvalues import gfd
from bridge.kvalues.gfd import FamilyRule, Requirement, map_requirement

DRIVER = gfd.DEFAULT_DRIVER
MODELS = model_names()


def published(model: str) -> Any:
    """The `device` CEL variable for GPU 0 of a node of `model`, from the slice entry the node daemon publishes."""
    (dev,) = devices_from_spec(f"1x{model}", "node-a")
    entry = device_entry(dev, "v1", None)
    attrs: dict[str, Any] = {}
    for name, value in entry["attributes"].items():
        (kind, raw), = value.items()
        attrs[name] = kcel.Semver(raw) if kind == "version" else raw
    caps = {name: value["value"] for name, value in entry["capacity"].items()}
    return kcel.device_activation(DRIVER, {DRIVER: attrs}, {DRIVER: caps})


def node_labels(model: str, rule: FamilyRule) -> dict[str, str]:
    """What GFD labels a node of `model` with, from the NVML values (not from the slice)."""
    (dev,) = devices_from_spec(f"1x{model}", "node-a")
    return gfd.device_labels(dev.product_name, dev.memory_bytes, dev.compute_capability, rule)


def node_matches(req: Requirement, labels: dict[str, str]) -> bool:
    """Kubernetes node-affinity semantics (k8s.io/component-helpers/scheduling/corev1/nodeaffinity)."""
    value = labels.get(req.key)
    if req.operator == "In":
        return value is not None and value in req.values
    if req.operator == "NotIn":
        return value is None or value not in req.values
    if req.operator == "Exists":
        return value is not None
    if req.operator == "DoesNotExist":
        return value is None
    if value is None or not value.isdigit():
        return False
    return int(value) > int(req.values[0]) if req.operator == "Gt" else int(value) < int(req.values[0])


def requirements(rule: FamilyRule) -> list[Requirement]:
    """Every requirement worth asking: each label value of each model with In/NotIn, pairs of values, Exists and
    DoesNotExist, Gt/Lt around every numeric value, and values no model has. Only the family depends on the GFD
    release, so the other labels are asked under the latest rule only."""
    out: list[Requirement] = []
    for key in sorted(gfd.DEVICE_LABELS if rule is gfd.LATEST else {gfd.FAMILY}):
        values = sorted({v for m in MODELS if (v := node_labels(m, rule).get(key)) is not None})
        values += ["no-such-gpu"] if key in (gfd.PRODUCT, gfd.FAMILY) else ["1"]
        for v in values:
            out += [Requirement(key, "In", (v,)), Requirement(key, "NotIn", (v,))]
            if v.isdigit():
                out += [Requirement(key, op, (str(int(v) + d),)) for op in ("Gt", "Lt") for d in (-1, 0, 1)
                        if int(v) + d >= 0]
        out += [Requirement(key, "In", pair) for pair in itertools.combinations(values[:4], 2)]
        out += [Requirement(key, "Exists"), Requirement(key, "DoesNotExist")]
    return out


@pytest.mark.parametrize("rule", list(FamilyRule), ids=[r.name for r in FamilyRule])
def test_every_gfd_label_selects_exactly_the_published_devices_of_every_model(rule: FamilyRule) -> None:
    devices = {m: published(m) for m in MODELS}
    labels = {m: node_labels(m, rule) for m in MODELS}
    assert set(MODELS) >= {"L4", "L40S", "H100-80GB", "H200-141GB", "A100-40GB", "B200", "T4", "V100-32GB"}
    checked = 0
    for req in requirements(rule):
        mapped = map_requirement(req, DRIVER, rule)
        want = {m for m in MODELS if node_matches(req, labels[m])}
        if not mapped.ok:
            # only requirements that select no GPU at all may be refused (they stay on the pod, same meaning)
            assert want == set() or req.operator == "DoesNotExist", (req, mapped.reason)
            continue
        if mapped.always:
            assert want == set(MODELS), req
            continue
        assert mapped.expression is not None
        got = {m for m in MODELS if kcel.evaluate(mapped.expression, devices[m])}
        assert got == want, (req, mapped.expression)
        checked += 1
    assert checked > (150 if rule is gfd.LATEST else 15)


def test_the_family_follows_the_compute_capability_not_nvmls_architecture_name() -> None:
    l4 = node_labels("L4", gfd.LATEST)
    assert l4[gfd.FAMILY] == "ada-lovelace" and "Ada Lovelace" != l4[gfd.FAMILY]
    assert node_labels("L4", FamilyRule.BEFORE_V0_18)[gfd.FAMILY] == "ampere"
    assert node_labels("B200", FamilyRule.BEFORE_V0_18)[gfd.FAMILY] == "undefined"
    assert node_labels("B200", FamilyRule.V0_18)[gfd.FAMILY] == "blackwell"
    assert [gfd.family(13, 0, r) for r in gfd.RULES_NEWEST_FIRST] == ["rubin", "undefined", "undefined"]
    assert gfd.family(0, 0) is None and gfd.family(12, 0) == "blackwell" and gfd.family(7, 5) == "turing"


def product_device(name: str) -> Any:
    return kcel.device_activation(DRIVER, {DRIVER: {"productName": name}}, {DRIVER: {"memory": "1Gi"}})


@pytest.mark.parametrize(
    ("name", "label"),
    [("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"), ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
     ("Tesla V100-SXM2-32GB", "Tesla-V100-SXM2-32GB"), ("  NVIDIA  RTX (TM) 6000 Ada ", "NVIDIA-RTX-TM-6000-Ada"),
     ("NVIDIA GH200 480GB", "NVIDIA-GH200-480GB"), ("A - B", "A---B")],
)
def test_product_names_are_sanitised_as_gfd_does(name: str, label: str) -> None:
    assert gfd.sanitise(name) == label
    expression = map_requirement(Requirement(gfd.PRODUCT, "In", (label,))).expression
    assert expression is not None and kcel.evaluate(expression, product_device(name))


def test_the_product_cel_computes_gfds_sanitise_for_any_name() -> None:
    """Names with every kind of character sanitise keeps, drops or splits on: the CEL's sanitised name equals
    GFD's, so a label selects exactly the names it selected on the node (and another label does not)."""
    rng = random.Random(11)
    alphabet = "AB1--_. ()'\"\t"
    names = sorted({"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))) for _ in range(300)})
    labels = sorted({gfd.sanitise(n) for n in names} - {""})
    assert len(labels) > 50
    for i, name in enumerate(names):
        label = gfd.sanitise(name)
        other = labels[i % len(labels)] if labels[i % len(labels)] != label else "Z"
        for want, expect in ((label or "Z", bool(label)), (other, False)):
            expression = map_requirement(Requirement(gfd.PRODUCT, "In", (want,))).expression
            assert expression is not None
            assert kcel.evaluate(expression, product_device(name)) is expect, (name, want)


def test_the_product_cel_is_within_the_api_servers_limits() -> None:
    from bridge.kvalues.celcheck import MAX_COST, compile_selector

    expression = map_requirement(Requirement(gfd.PRODUCT, "In", ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3")))
    assert expression.expression is not None
    result = compile_selector(expression.expression)
    assert result.ok and result.max_cost < MAX_COST / 10, result


def test_gpu_memory_is_mib_rounded_down_as_nvml_reports_it() -> None:
    assert gfd.memory_label(81559 * gfd.MIB) == "81559"
    assert gfd.memory_label(81559 * gfd.MIB + 1) == "81559"
    assert gfd.memory_label(100) is None
    mapped = map_requirement(Requirement(gfd.MEMORY, "In", ("81559",)))
    assert mapped.expression is not None
    for total, want in ((81559 * gfd.MIB + 5, True), (81560 * gfd.MIB, False), (81559 * gfd.MIB - 1, False)):
        device = kcel.device_activation(DRIVER, {DRIVER: {}}, {DRIVER: {"memory": str(total)}})
        assert kcel.evaluate(mapped.expression, device) is want


def test_a_device_without_a_compute_capability_is_not_a_cel_error() -> None:
    device = kcel.device_activation(DRIVER, {DRIVER: {"productName": "NVIDIA X"}}, {DRIVER: {"memory": "1Gi"}})
    for req, want in ((Requirement(gfd.FAMILY, "In", ("hopper",)), False),
                      (Requirement(gfd.FAMILY, "NotIn", ("hopper",)), True),
                      (Requirement(gfd.COMPUTE_MAJOR, "Gt", ("7",)), False),
                      (Requirement(gfd.COMPUTE_MINOR, "Exists"), False),
                      (Requirement(gfd.COMPUTE_MINOR, "DoesNotExist"), True)):
        expression = map_requirement(req).expression
        assert expression is not None and '"cudaComputeCapability" in device.attributes' in expression
        assert kcel.evaluate(expression, device) is want, req


@pytest.mark.parametrize(
    ("labels", "why"),
    [
        ({gfd.PRODUCT: "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", gfd.MIG_STRATEGY: "single"}, "MIG slice"),
        ({gfd.PRODUCT: "NVIDIA-A100-SXM4-40GB-MIG-INVALID", gfd.MIG_STRATEGY: "single"}, "MIG slice"),
        ({gfd.PRODUCT: "Tesla-T4-SHARED", gfd.REPLICAS: "4", gfd.SHARING_STRATEGY: "time-slicing"}, "-SHARED"),
        ({gfd.PRODUCT: "Tesla-T4", gfd.REPLICAS: "4"}, "gpu.replicas=4"),  # renamed: nvidia.com/gpu is not offered
        ({gfd.PRODUCT: "NVIDIA-L4", gfd.SHARING_STRATEGY: "mps"}, "sharing-strategy=mps"),
        ({gfd.MIG_STRATEGY: "single"}, "MIG strategy single"),
    ],
)
def test_labels_that_say_nvidia_gpu_is_not_a_whole_gpu(labels: dict[str, str], why: str) -> None:
    reason = gfd.not_whole_gpu(labels)
    assert reason is not None and why in reason and len(reason) <= 80


@pytest.mark.parametrize(
    "labels",
    [{}, {gfd.PRODUCT: "NVIDIA-H100-80GB-HBM3", gfd.REPLICAS: "1", gfd.SHARING_STRATEGY: "none"},
     {gfd.PRODUCT: "NVIDIA-A100-SXM4-80GB", gfd.MIG_STRATEGY: "single"},  # single, but MIG is off on the GPUs
     {gfd.PRODUCT: "NVIDIA-A100-SXM4-80GB", gfd.MIG_STRATEGY: "mixed"}, {gfd.REPLICAS: "0"}],
)
def test_labels_of_whole_gpus_are_not_flagged(labels: dict[str, str]) -> None:
    assert gfd.not_whole_gpu(labels) is None


def test_the_family_rule_is_inferred_from_what_the_nodes_say() -> None:
    assert gfd.infer_family_rule([]) == (FamilyRule.V0_20, "")
    assert gfd.infer_family_rule([("ampere", 8, 9), ("hopper", 9, 0)])[0] is FamilyRule.BEFORE_V0_18
    assert gfd.infer_family_rule([("ada-lovelace", 8, 9), ("undefined", 13, 0)])[0] is FamilyRule.V0_18
    rule, why = gfd.infer_family_rule([("ampere", 8, 9), ("ada-lovelace", 8, 9)])
    assert rule is None and "disagree" in why


def test_label_values_that_cannot_be_labels_match_nothing_and_cannot_inject() -> None:
    mapped = map_requirement(Requirement(gfd.PRODUCT, "In", ('x" || true || "',)))
    assert mapped.expression == "false"
