"""GPU Feature Discovery node labels -> CEL selectors on the bridge's device attributes, as the webhook uses them.

The mapping itself (label semantics, the family rule, product-name sanitising, guards for optional attributes) lives
in `bridge.kvalues.gfd`, shared with the report; this module keeps the webhook's names for it and the evaluation
helpers tests use to prove that a selector means what it says (`evaluate` runs an expression against one device's
attributes with the Kubernetes CEL library functions, raising `CelError` where the real scheduler would report an
error).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge.kvalues import cel as kcel
from bridge.kvalues.cel import MAX_EXPRESSION_LEN, CelError, Quantity, Semver
from bridge.kvalues.gfd import (
    COMPUTE_MAJOR as GFD_COMPUTE_MAJOR,
    COMPUTE_MINOR as GFD_COMPUTE_MINOR,
    COUNT as GFD_COUNT,
    DEFAULT_DRIVER as DRIVER,
    DEVICE_LABELS,
    FAMILY as GFD_FAMILY,
    MEMORY as GFD_MEMORY,
    PRODUCT as GFD_PRODUCT,
    FamilyRule,
    Mapped,
    Requirement,
    conjunction,
    disjunction,
    map_requirement,
)

__all__ = [
    "CelError", "DEVICE_LABELS", "DRIVER", "FamilyRule", "GFD_COMPUTE_MAJOR", "GFD_COMPUTE_MINOR", "GFD_COUNT",
    "GFD_FAMILY", "GFD_MEMORY", "GFD_PRODUCT", "MAX_EXPRESSION_LEN", "Mapped", "Quantity", "Requirement", "Semver",
    "compile_checked", "conjunction", "device_activation", "disjunction", "evaluate", "map_requirement",
]


def compile_checked(expression: str) -> str:
    """Return `expression` if it parses as CEL and fits the API server's length limit, else raise CelError."""
    return kcel.compile_checked(expression)


def device_activation(
    attributes: Mapping[str, Any], capacity: Mapping[str, Any], driver: str = DRIVER
) -> dict[str, Any]:
    """The `device` variable for one device of `driver`. `attributes` values: str, int, bool or Semver; `capacity`
    values: Quantity or quantity strings (as in a ResourceSlice)."""
    return kcel.device_activation(driver, {driver: attributes}, {driver: capacity})


def evaluate(expression: str, attributes: Mapping[str, Any], capacity: Mapping[str, Any], driver: str = DRIVER) -> bool:
    """Evaluate a selector against one device. Raises CelError when evaluation fails (as the scheduler would)."""
    return kcel.evaluate(expression, device_activation(attributes, capacity, driver))
