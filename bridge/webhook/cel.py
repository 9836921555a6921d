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
from fractions import Fraction
from typing import Any

import celpy
import celpy.celtypes as ct

DRIVER = "gpu.dra-bridge.io"

GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_FAMILY = "nvidia.com/gpu.family"
GFD_COMPUTE_MAJOR = "nvidia.com/gpu.compute.major"
GFD_COMPUTE_MINOR = "nvidia.com/gpu.compute.minor"
GFD_COUNT = "nvidia.com/gpu.count"
# Labels that describe one device and therefore map to a device selector.
DEVICE_LABELS = frozenset({GFD_PRODUCT, GFD_MEMORY, GFD_FAMILY, GFD_COMPUTE_MAJOR, GFD_COMPUTE_MINOR})

MAX_EXPRESSION_LEN = 10 * 1024  # CELSelectorExpressionMaxLength


class CelError(ValueError):
    """An expression that does not parse (or is too long for the API server)."""


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


_ENV = celpy.Environment()


@functools.lru_cache(maxsize=4096)
def _parse(expression: str) -> Any:
    return _ENV.compile(expression)


def compile_checked(expression: str) -> str:
    """Return `expression` if it parses as CEL and fits the API server's length limit, else raise CelError."""
    if len(expression) > MAX_EXPRESSION_LEN:
        raise CelError(f"CEL expression is {len(expression)} bytes, over the {MAX_EXPRESSION_LEN}-byte limit")
    try:
        _parse(expression)
    except Exception as err:  # celpy raises parser-specific types
        raise CelError(f"CEL does not parse: {err}") from err
    return expression


# --- evaluation with the Kubernetes CEL library functions the mapping uses -------------------------------------


@functools.total_ordering
class Semver:
    def __init__(self, text: str) -> None:
        m = re.match(r"^(\d+)\.(\d+)\.(\d+)", str(text))
        if not m:
            raise ValueError(f"not a semantic version: {text!r}")
        self.parts = (int(m[1]), int(m[2]), int(m[3]))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.parts == other.parts

    def __lt__(self, other: Semver) -> bool:
        return self.parts < other.parts

    def __hash__(self) -> int:
        return hash(self.parts)


_SUFFIX: dict[str, int | Fraction] = {
    "": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}


@functools.total_ordering
class Quantity:
    def __init__(self, text: str) -> None:
        m = re.match(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$", str(text).strip())
        if not m:
            raise ValueError(f"not a quantity: {text!r}")
        self.value = Fraction(m[1]) * _SUFFIX[m[2] or ""]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)


def _cmp(a: Any, b: Any) -> ct.IntType:
    return ct.IntType((a > b) - (a < b))


_FUNCTIONS: dict[str, Any] = {
    "semver": lambda s: Semver(str(s)),
    "quantity": lambda s: Quantity(str(s)),
    "major": lambda v: ct.IntType(v.parts[0]),
    "minor": lambda v: ct.IntType(v.parts[1]),
    "patch": lambda v: ct.IntType(v.parts[2]),
    "compareTo": _cmp,
    "isGreaterThan": lambda a, b: ct.BoolType(a > b),
    "isLessThan": lambda a, b: ct.BoolType(a < b),
    "replace": lambda s, a, b: ct.StringType(str(s).replace(str(a), str(b))),
    "lowerAscii": lambda s: ct.StringType(str(s).lower()),
}


def _to_cel(value: Any) -> Any:
    if isinstance(value, (Semver, Quantity)):
        return value
    if isinstance(value, bool):
        return ct.BoolType(value)
    if isinstance(value, int):
        return ct.IntType(value)
    if isinstance(value, str):
        return ct.StringType(value)
    raise TypeError(f"unsupported attribute value {value!r}")


def device_activation(
    attributes: Mapping[str, Any], capacity: Mapping[str, Any], driver: str = DRIVER
) -> dict[str, Any]:
    """The `device` variable for one device. `attributes` values: str, int, bool or Semver; `capacity` values:
    Quantity or quantity strings (as in a ResourceSlice)."""
    attrs = ct.MapType({ct.StringType(k): _to_cel(v) for k, v in attributes.items()})
    caps = ct.MapType(
        {ct.StringType(k): v if isinstance(v, Quantity) else Quantity(str(v)) for k, v in capacity.items()}
    )
    return {
        "device": ct.MapType(
            {
                ct.StringType("driver"): ct.StringType(driver),
                ct.StringType("attributes"): ct.MapType({ct.StringType(driver): attrs}),
                ct.StringType("capacity"): ct.MapType({ct.StringType(driver): caps}),
            }
        )
    }


def evaluate(expression: str, attributes: Mapping[str, Any], capacity: Mapping[str, Any], driver: str = DRIVER) -> bool:
    """Evaluate a selector against one device. Raises CelError when evaluation fails (as the scheduler would)."""
    program = _ENV.program(_parse(compile_checked(expression)), functions=_FUNCTIONS)
    try:
        result = program.evaluate(device_activation(attributes, capacity, driver))
    except Exception as err:
        raise CelError(f"CEL evaluation failed: {err}") from err
    if not isinstance(result, (bool, ct.BoolType)):
        raise CelError(f"CEL selector returned {type(result).__name__}, not bool")
    return bool(result)
