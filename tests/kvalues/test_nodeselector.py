"""Node selector requirements, as the scheduler's nodeaffinity helper evaluates them."""

from __future__ import annotations

import pytest

from bridge.kvalues.nodeselector import requirement_matches

LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8", "odd": "x1"}


@pytest.mark.parametrize(("key", "op", "values", "matches"), [
    ("nvidia.com/gpu.product", "In", ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100"], True),
    ("nvidia.com/gpu.product", "In", ["NVIDIA-A100"], False),
    ("missing", "In", ["x"], False),
    ("nvidia.com/gpu.product", "NotIn", ["NVIDIA-A100"], True),
    ("missing", "NotIn", ["x"], True),  # a node without the label is not in the set
    ("nvidia.com/gpu.count", "Exists", [], True),
    ("missing", "DoesNotExist", [], True),
    ("nvidia.com/gpu.count", "Gt", ["4"], True),
    ("nvidia.com/gpu.count", "Lt", ["4"], False),
    ("nvidia.com/gpu.count", "Gt", ["4", "5"], False),  # Gt/Lt take exactly one value
    ("odd", "Gt", ["1"], False),  # not an integer: no match, not an error
    ("missing", "Lt", ["9"], False),
    ("nvidia.com/gpu.count", "Sideways", ["8"], False),
])
def test_each_operator_matches_as_the_scheduler_does(key: str, op: str, values: list[str], matches: bool) -> None:
    assert requirement_matches(key, op, values, LABELS) is matches
