"""CEL evaluation of DeviceClass selectors and the bin-packing simulation."""

from __future__ import annotations

from fractions import Fraction

import pytest

from bridge.report.cel import CelError, SelectorEvaluator, gfd_to_cel
from bridge.report.model import Device, VersionValue
from bridge.report.simulate import PodNeed, Pool

D = "gpu.dra-bridge.io"


def dev(name: str = "gpu-0", product: str = "NVIDIA H100 80GB HBM3", mem_gi: int = 80, cc: str = "9.0.0",
        driver: str = D, uuid: str = "GPU-1", arch: str = "Hopper") -> Device:
    return Device(driver, "n", name, "n", {driver: {"productName": product, "architecture": arch,
                                                    "cudaComputeCapability": VersionValue(cc), "uuid": uuid}},
                  {driver: {"memory": Fraction(mem_gi * 2**30)}}, "slice")


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (f'device.driver == "{D}"', True),
        (f'device.capacity["{D}"].memory.compareTo(quantity("40Gi")) > 0', True),
        (f'device.capacity["{D}"].memory.isLessThan(quantity("40Gi"))', False),
        (f'device.attributes["{D}"].cudaComputeCapability.isGreaterThan(semver("8.9.0"))', True),
        (f'device.attributes["{D}"].cudaComputeCapability.major() == 9', True),
        (f'device.attributes["{D}"].productName.replace(" ", "-") == "NVIDIA-H100-80GB-HBM3"', True),
        (f'device.attributes["{D}"].architecture.lowerAscii() == "hopper"', True),
        (f'device.attributes["{D}"].missing == "x"', False),  # evaluation error: no match, as in the scheduler
        ('device.driver == "gpu.nvidia.com"', False),
    ],
)
def test_selector_evaluation(expr: str, expected: bool) -> None:
    assert SelectorEvaluator().matches(expr, dev()) is expected


def test_invalid_expression_is_reported() -> None:
    with pytest.raises(CelError):
        SelectorEvaluator().check("device.driver ==")


def test_memo_never_mixes_devices_that_differ_in_a_referenced_identity_attribute() -> None:
    ev = SelectorEvaluator()
    expr = f'device.attributes["{D}"].uuid == "GPU-1"'
    assert ev.matches(expr, dev(uuid="GPU-1")) is True
    assert ev.matches(expr, dev(uuid="GPU-2")) is False


def test_gfd_translation_is_the_webhooks_and_ors_terms() -> None:
    t = gfd_to_cel(((("nvidia.com/gpu.family", "In", ("hopper",)),), (("nvidia.com/gpu.compute.major", "Gt", ("8",)),
                                                                      ("nvidia.com/gpu.count", "In", ("8",)))))
    assert t.cel is not None and " || " in t.cel
    assert t.node_only == ("nvidia.com/gpu.count In 8",) and t.problems == ()
    ev = SelectorEvaluator()
    assert ev.matches(t.cel, dev()) is True
    assert ev.matches(t.cel, dev(arch="Ampere", cc="8.0.0")) is False  # neither term
    assert ev.matches(t.cel, dev(arch="Blackwell", cc="10.0.0")) is True  # second term


def test_pool_places_whole_pods_on_one_node_best_fit() -> None:
    t = (True,)
    pool = Pool.from_nodes([[t] * 4, [t] * 2], 1)
    assert pool.matching(0) == 6 and pool.nodes_with_match(0) == 2
    res = pool.fit([PodNeed(0, 2), PodNeed(0, 3), PodNeed(0, 1)])
    assert res.fits  # 3 -> the 4-node, 2 -> the 2-node, 1 -> the 4-node's last device
    assert pool.fit([PodNeed(0, 1)]).pending == 1


def test_pool_respects_selectors_and_keeps_flexible_devices() -> None:
    # one node: 2 devices match both selectors, 2 match only selector 0
    pool = Pool.from_nodes([[(True, True), (True, True), (True, False), (True, False)]], 2)
    res = pool.fit([PodNeed(0, 2), PodNeed(1, 2)])
    assert res.fits  # selector-0 pod must take the selector-0-only devices first


def test_a_new_device_never_inherits_a_freed_devices_memoised_result() -> None:
    """The memo keys devices by identity; CPython reuses the id of a freed object, so a device made after another
    was dropped must be evaluated on its own attributes (this was a flaky wrong match)."""
    import gc

    ev = SelectorEvaluator()
    expr = '"cudaComputeCapability" in device.attributes["gpu.dra-bridge.io"] && ' \
           'device.attributes["gpu.dra-bridge.io"].cudaComputeCapability.major() > 8'
    for _ in range(20):
        assert ev.matches(expr, dev()) is True  # 9.0: the temporary device is freed right after
        gc.collect(0)
        assert ev.matches(expr, dev(arch="Ampere", cc="8.0.0")) is False
