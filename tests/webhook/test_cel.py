"""GFD node-label requirements become CEL that selects exactly the devices the label selected."""

from __future__ import annotations

import pytest

from bridge.webhook import cel
from bridge.webhook.cel import Quantity, Requirement, Semver, evaluate, map_requirement

H100 = {
    "uuid": "GPU-9f1a2b3c-0000-4000-8000-000000000001", "productName": "NVIDIA H100 80GB HBM3",
    "architecture": "Hopper", "cudaComputeCapability": Semver("9.0.0"), "driverVersion": Semver("550.54.15"),
    "index": 0, "minor": 0, "pciBusID": "0000:17:00.0", "numaNode": 0, "migCapable": True,
}
H100_CAP = {"memory": "81559Mi"}
A100 = {**H100, "productName": "NVIDIA A100-SXM4-80GB", "architecture": "Ampere",
        "cudaComputeCapability": Semver("8.0.0")}
A100_CAP = {"memory": "81920Mi"}
L4 = {**H100, "productName": "NVIDIA L4", "architecture": "Ada Lovelace", "cudaComputeCapability": Semver("8.9.0"),
      "migCapable": False}
L4_CAP = {"memory": "23034Mi"}
FLEET = {"h100": (H100, H100_CAP), "a100": (A100, A100_CAP), "l4": (L4, L4_CAP)}


def matching(req: Requirement) -> set[str]:
    m = map_requirement(req)
    assert m.ok, m.reason
    assert m.expression is not None
    return {name for name, (attrs, cap) in FLEET.items() if evaluate(m.expression, attrs, cap)}


@pytest.mark.parametrize(
    ("req", "expected"),
    [
        (Requirement(cel.GFD_PRODUCT, "In", ("NVIDIA-H100-80GB-HBM3",)), {"h100"}),
        # product names that contain '-' themselves still match their GFD label exactly
        (Requirement(cel.GFD_PRODUCT, "In", ("NVIDIA-A100-SXM4-80GB",)), {"a100"}),
        (Requirement(cel.GFD_PRODUCT, "In", ("NVIDIA-A100-SXM4-80GB", "NVIDIA-L4")), {"a100", "l4"}),
        (Requirement(cel.GFD_PRODUCT, "NotIn", ("NVIDIA-L4",)), {"h100", "a100"}),
        (Requirement(cel.GFD_FAMILY, "In", ("hopper",)), {"h100"}),
        (Requirement(cel.GFD_FAMILY, "In", ("ampere", "hopper")), {"h100", "a100"}),
        (Requirement(cel.GFD_MEMORY, "In", ("81559",)), {"h100"}),
        (Requirement(cel.GFD_MEMORY, "Gt", ("40000",)), {"h100", "a100"}),
        (Requirement(cel.GFD_MEMORY, "Lt", ("40000",)), {"l4"}),
        (Requirement(cel.GFD_COMPUTE_MAJOR, "In", ("9",)), {"h100"}),
        (Requirement(cel.GFD_COMPUTE_MAJOR, "Gt", ("7",)), {"h100", "a100", "l4"}),
        (Requirement(cel.GFD_COMPUTE_MINOR, "In", ("9",)), {"l4"}),
        (Requirement(cel.GFD_COMPUTE_MAJOR, "Lt", ("9",)), {"a100", "l4"}),
    ],
)
def test_gfd_requirement_selects_exactly_the_devices_the_label_selected(req: Requirement, expected: set[str]) -> None:
    assert matching(req) == expected


def test_exists_is_implied_by_the_device_class_and_needs_no_cel() -> None:
    m = map_requirement(Requirement(cel.GFD_PRODUCT, "Exists"))
    assert m.ok and m.always and m.expression is None


@pytest.mark.parametrize(
    ("req", "why"),
    [
        (Requirement(cel.GFD_PRODUCT, "DoesNotExist"), "DoesNotExist"),
        (Requirement(cel.GFD_PRODUCT, "In", ("NVIDIA-A100-SXM4-40GB-SHARED",)), "shared or MIG"),
        (Requirement(cel.GFD_PRODUCT, "In", ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",)), "shared or MIG"),
        (Requirement(cel.GFD_MEMORY, "Gt", ("lots",)), "integer"),
        (Requirement(cel.GFD_MEMORY, "In", ("80GB",)), "MiB"),
        (Requirement(cel.GFD_PRODUCT, "Gt", ("5",)), "numerically"),
        (Requirement(cel.GFD_COUNT, "In", ("8",)), "node, not a device"),
        (Requirement(cel.GFD_FAMILY, "In", ()), "at least one value"),
        (Requirement(cel.GFD_FAMILY, "Near", ("hopper",)), "unknown"),
    ],
)
def test_requirements_the_cel_cannot_express_are_refused_with_a_reason(req: Requirement, why: str) -> None:
    m = map_requirement(req)
    assert not m.ok and m.expression is None
    assert why in m.reason


def test_values_with_quotes_cannot_escape_the_string_literal() -> None:
    m = map_requirement(Requirement(cel.GFD_PRODUCT, "In", ('x" || true || "',)))
    assert m.expression is not None
    assert matching(Requirement(cel.GFD_PRODUCT, "In", ('x" || true || "',))) == set()


def test_unparseable_or_oversized_cel_is_rejected_before_use() -> None:
    with pytest.raises(cel.CelError, match="does not parse"):
        cel.compile_checked('device.attributes["gpu.dra-bridge.io"].productName == ')
    with pytest.raises(cel.CelError, match="limit"):
        cel.compile_checked("true && " * 2000 + "true")


def test_evaluation_of_a_missing_attribute_fails_loudly_like_the_scheduler() -> None:
    with pytest.raises(cel.CelError, match="evaluation failed"):
        evaluate('device.attributes["gpu.dra-bridge.io"].nope == 1', H100, H100_CAP)


def test_quantities_compare_across_units() -> None:
    assert Quantity("80Gi") == Quantity("81920Mi")
    assert Quantity("1G") < Quantity("1Gi")
    assert Semver("9.0.0") > Semver("8.9.0")
