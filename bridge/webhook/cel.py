"""GPU Feature Discovery node labels -> CEL selectors on the bridge's device attributes.

Pods written for the device plugin pick GPUs by node labels that GFD sets (`nvidia.com/gpu.product=NVIDIA-H100-80GB-
HBM3`, `nvidia.com/gpu.memory=81559`, ...). Under DRA the same intent is a CEL selector on the attributes the node
daemon publishes in its ResourceSlices (driver `gpu.dra-bridge.io`). This module owns that mapping and nothing else.

Facts the mapping rests on (fixed with the node-daemon engineer):

* `nvidia.com/gpu.product` is the NVML product name with spaces replaced by `-`. The reverse is ambiguous (product
  names contain `-`: `NVIDIA A100-SXM4-80GB`), so the CEL applies the same replacement to the attribute instead of
  guessing: `productName.replace(" ", "-") == "<label>"` (Kubernetes' CEL strings extension).
* `nvidia.com/gpu.memory` is MiB as a decimal string; the device publishes capacity `memory` as a quantity, so the
  comparison is `memory.compareTo(quantity("<v>Mi"))`. Equality holds only when the daemon publishes the exact
  NVML total (it does: capacity is the NVML byte count).
* `nvidia.com/gpu.family` is the lower-cased architecture; `compute.major/minor` are the parts of the
  `cudaComputeCapability` version attribute.
* `nvidia.com/gpu.count` and every other label describe the node, not a device: they are not translatable to a
  device selector and stay on the pod (they still constrain the node, which is still correct).

Invariants: every expression this module emits is parsed by `cel-python` before it is returned (`compile_checked`);
an operator the mapping cannot express fully (`DoesNotExist`, non-numeric `Gt`, a shared/MIG product suffix)
yields `None` plus a reason, never an approximation. `evaluate` runs an expression against a device's attributes
with the Kubernetes CEL library functions the mapping uses (semver, quantity, strings), so tests prove the CEL
means what it says.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.kvalues import cel as kcel
from bridge.kvalues.cel import MAX_EXPRESSION_LEN, CelError, Quantity, Semver

__all__ = ["CelError", "MAX_EXPRESSION_LEN", "Quantity", "Semver", "compile_checked", "device_activation", "evaluate"]

DRIVER = "gpu.dra-bridge.io"

GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_FAMILY = "nvidia.com/gpu.family"
GFD_COMPUTE_MAJOR = "nvidia.com/gpu.compute.major"
GFD_COMPUTE_MINOR = "nvidia.com/gpu.compute.minor"
GFD_COUNT = "nvidia.com/gpu.count"
# Labels that describe one device and therefore map to a device selector.
DEVICE_LABELS = frozenset({GFD_PRODUCT, GFD_MEMORY, GFD_FAMILY, GFD_COMPUTE_MAJOR, GFD_COMPUTE_MINOR})


@dataclass(frozen=True)
class Requirement:
    """One node-selector requirement: key, operator (In/NotIn/Exists/DoesNotExist/Gt/Lt) and values."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class Mapped:
    """The CEL for a requirement (`expression` None and `always` True: the device class already implies it), or the
    reason it cannot be expressed (`reason` set, `expression` None, `always` False)."""

    expression: str | None
    always: bool = False
    reason: str = ""

    @property
    def ok(self) -> bool:
        return not self.reason


def _attr(driver: str, name: str) -> str:
    return f"device.attributes[{json.dumps(driver)}].{name}"


def _cap(driver: str, name: str) -> str:
    return f"device.capacity[{json.dumps(driver)}].{name}"


def _str_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def _member(lhs: str, values: Sequence[str]) -> str:
    return f"{lhs} == {json.dumps(values[0])}" if len(values) == 1 else f"{lhs} in {_str_list(values)}"


def _int_member(lhs: str, values: Sequence[int]) -> str:
    return f"{lhs} == {values[0]}" if len(values) == 1 else f"{lhs} in [{', '.join(map(str, values))}]"


_INT = re.compile(r"^[0-9]{1,9}$")


@functools.lru_cache(maxsize=4096)
def map_requirement(req: Requirement, driver: str = DRIVER) -> Mapped:
    """Translate one GFD requirement. Callers pass only keys in DEVICE_LABELS. Cached (pure, and the inputs repeat:
    every pod of a Deployment carries the same selector), so the CEL is built and parse-checked once per distinct
    requirement, not once per review."""
    op, vals = req.operator, req.values
    if req.key not in DEVICE_LABELS:
        return Mapped(None, reason=f"{req.key} describes the node, not a device")
    if op == "Exists":
        return Mapped(None, always=True)  # every device of the bridge's class publishes these attributes
    if op == "DoesNotExist":
        return Mapped(None, reason=f"{req.key} DoesNotExist excludes every GPU; nothing to translate")
    if op in ("In", "NotIn") and not vals:
        return Mapped(None, reason=f"{req.key} {op} needs at least one value")
    if op not in ("In", "NotIn", "Gt", "Lt"):
        return Mapped(None, reason=f"unknown node-selector operator {op!r}")
    if op in ("Gt", "Lt") and (len(vals) != 1 or not _INT.match(vals[0])):
        return Mapped(None, reason=f"{req.key} {op} needs exactly one integer value")

    expr: str
    if req.key == GFD_PRODUCT:
        if op in ("Gt", "Lt"):
            return Mapped(None, reason=f"{req.key} {op} compares a name numerically")
        for v in vals:
            if v.endswith("-SHARED") or "-MIG-" in v:
                return Mapped(None, reason=f"{req.key}={v} names a shared or MIG GPU; the bridge serves whole GPUs")
        expr = _member(_attr(driver, 'productName.replace(" ", "-")'), vals)
    elif req.key == GFD_FAMILY:
        if op in ("Gt", "Lt"):
            return Mapped(None, reason=f"{req.key} {op} compares a name numerically")
        expr = _member(_attr(driver, "architecture.lowerAscii()"), [v.lower() for v in vals])
    elif req.key == GFD_MEMORY:
        if not all(_INT.match(v) for v in vals):
            return Mapped(None, reason=f"{req.key} values must be MiB integers, got {list(vals)}")
        cmp = _cap(driver, "memory") + ".compareTo(quantity({}))"
        if op == "Gt":
            expr = cmp.format(json.dumps(vals[0] + "Mi")) + " > 0"
        elif op == "Lt":
            expr = cmp.format(json.dumps(vals[0] + "Mi")) + " < 0"
        else:
            parts = [cmp.format(json.dumps(v + "Mi")) + " == 0" for v in vals]
            expr = parts[0] if len(parts) == 1 else "(" + " || ".join(parts) + ")"
    else:  # compute major / minor
        if not all(_INT.match(v) for v in vals):
            return Mapped(None, reason=f"{req.key} values must be integers, got {list(vals)}")
        part = "major()" if req.key == GFD_COMPUTE_MAJOR else "minor()"
        lhs = _attr(driver, f"cudaComputeCapability.{part}")
        if op == "Gt":
            expr = f"{lhs} > {int(vals[0])}"
        elif op == "Lt":
            expr = f"{lhs} < {int(vals[0])}"
        else:
            expr = _int_member(lhs, [int(v) for v in vals])
    if op == "NotIn":
        expr = f"!({expr})"
    return Mapped(compile_checked(expr))


def conjunction(exprs: Sequence[str]) -> str:
    """AND of expressions, each parenthesised where needed; '' for none."""
    if not exprs:
        return ""
    if len(exprs) == 1:
        return exprs[0]
    return " && ".join(e if _atomic(e) else f"({e})" for e in exprs)


def disjunction(exprs: Sequence[str]) -> str:
    if len(exprs) == 1:
        return exprs[0]
    return " || ".join(f"({e})" for e in exprs)


def _atomic(e: str) -> bool:
    return "&&" not in e and "||" not in e


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
