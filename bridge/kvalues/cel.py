"""The DRA CEL environment: the `device` variable and the Kubernetes library functions DRA selectors use.

Written from k8s.io/dynamic-resource-allocation/cel/compile.go (the environment the scheduler and the API server
compile DeviceClass and request selectors in) and the Kubernetes CEL libraries it enables
(k8s.io/apiserver/pkg/cel/library: quantity.go, semver.go; cel-go's strings extension):

* `device.driver` (string), `device.attributes[domain][name]` (bool, int, string or semver),
  `device.capacity[domain][name]` (quantity), `device.allowMultipleAllocations` (bool).
* `quantity("80Gi")` with `compareTo`, `isGreaterThan`, `isLessThan`, `asInteger`; `semver("1.2.3")` with
  `major()`, `minor()`, `patch()`, `compareTo`, `isGreaterThan`, `isLessThan`; strings `lowerAscii`, `upperAscii`,
  `replace`, `split`, `join` (cel-go's strings extension); `find`, `findAll` (the Kubernetes regex library,
  library/regex.go, RE2 syntax).
* `cel.bind(name, init, expr)` (cel-go's ext.Bindings, enabled in compile.go), so
  `cel.bind(dra, device.attributes["dra.example.com"], dra.a && dra.b)` works as on the real server.
* `device.attributes[domain]` / `device.capacity[domain]` for a domain the device does not have is an **empty map**,
  not an error (compile.go `newStringInterfaceMapWithDefault`): `"x" in device.attributes["other.io"]` is false,
  while `device.attributes["other.io"].x` is still a "no such key" runtime error.

Evaluation follows the scheduler's rule (structured/allocator.go `selectorsMatch`): a runtime error — a missing
map key, a type mismatch — is an **error** that aborts allocation for the pod, not "no match". `evaluate` raises
`CelError` for it; callers that want "error = no match" must say so explicitly.

Programs are compiled once per expression (`program`, memoised), so evaluating one selector against thousands of
devices parses it once.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

import celpy
import celpy.celtypes as ct
import lark
import re2
from celpy.evaluation import Evaluator

from bridge.kvalues.quantity import QuantityError, parse_quantity

# CELSelectorExpressionMaxLength in k8s.io/api/resource/v1/types.go.
MAX_EXPRESSION_LEN = 10 * 1024


class CelError(ValueError):
    """An expression that does not compile, or whose evaluation failed (the scheduler's runtime error)."""


@functools.total_ordering
class Semver:
    """A `version` attribute or `semver()` value. Strict like the Kubernetes library: MAJOR.MINOR.PATCH, an
    optional pre-release/build suffix is ignored for ordering here."""

    __slots__ = ("parts",)

    def __init__(self, text: str) -> None:
        m = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", str(text))
        if not m:
            raise ValueError(f"not a semantic version: {text!r}")
        self.parts = (int(m[1]), int(m[2]), int(m[3]))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.parts == other.parts

    def __lt__(self, other: Semver) -> bool:
        return self.parts < other.parts

    def __hash__(self) -> int:
        return hash(self.parts)

    def __repr__(self) -> str:
        return "Semver({}.{}.{})".format(*self.parts)


@functools.total_ordering
class Quantity:
    """A resource quantity in CEL; compares by exact value (`80Gi == 81920Mi`)."""

    __slots__ = ("value",)

    def __init__(self, value: str | int | Fraction) -> None:
        try:
            self.value = value if isinstance(value, Fraction) else parse_quantity(value)
        except QuantityError as err:
            raise ValueError(str(err)) from err

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Quantity({self.value})"


def _cmp(a: Any, b: Any) -> ct.IntType:
    if type(a) is not type(b) or not isinstance(a, (Quantity, Semver)):
        raise TypeError(f"cannot compare {type(a).__name__} with {type(b).__name__}")
    return ct.IntType((a > b) - (a < b))


# Quantity and Semver are opaque values celpy carries between these functions; its declared result types
# (celtypes only) do not include them, hence Any.
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": lambda s: Quantity(str(s)),
    "semver": lambda s: Semver(str(s)),
    "compareTo": _cmp,
    "isGreaterThan": lambda a, b: ct.BoolType(_cmp(a, b) > 0),
    "isLessThan": lambda a, b: ct.BoolType(_cmp(a, b) < 0),
    "asInteger": lambda q: ct.IntType(int(q.value)),
    "major": lambda v: ct.IntType(v.parts[0]),
    "minor": lambda v: ct.IntType(v.parts[1]),
    "patch": lambda v: ct.IntType(v.parts[2]),
    "lowerAscii": lambda s: ct.StringType(str(s).lower()),
    "upperAscii": lambda s: ct.StringType(str(s).upper()),
    "replace": lambda s, a, b: ct.StringType(str(s).replace(str(a), str(b))),
    "split": lambda s, sep: ct.ListType([ct.StringType(p) for p in str(s).split(str(sep))] if str(sep)
                                        else [ct.StringType(ch) for ch in str(s)]),
    "join": lambda items, sep="": ct.StringType(str(sep).join(str(i) for i in items)),
    "find": lambda s, pattern: ct.StringType(next((m.group(0) for m in re2.finditer(str(pattern), str(s))), "")),
    "findAll": lambda s, pattern: ct.ListType([ct.StringType(m.group(0)) for m in re2.finditer(str(pattern), str(s))]),
}

class _DomainMap(ct.MapType):
    """The outer attributes/capacity map: a missing domain reads as an empty map (compile.go's mapper.Find)."""

    def __missing__(self, key: Any) -> ct.MapType:
        return ct.MapType({})

    def get(self, key: Any, default: Any = None) -> Any:
        return super().get(key, ct.MapType({}))


class _BindingEvaluator(Evaluator):
    """celpy's evaluator plus the `cel.bind(var, init, expr)` macro of cel-go's ext.Bindings."""

    def sub_evaluator(self, ast: lark.Tree[Any]) -> Evaluator:
        return _BindingEvaluator(ast, activation=self.activation)

    def member_dot_arg(self, tree: lark.Tree[Any]) -> Any:
        member, method = tree.children[0], tree.children[1]
        if getattr(method, "value", None) == "bind" and _is_ident(member, "cel") and len(tree.children) > 2:
            args = tree.children[2]
            var_tree, init_tree, body_tree = args.children
            name = next(var_tree.find_data("ident")).children[0].value  # type: ignore[union-attr]
            value = self.visit(init_tree)
            return self.sub_evaluator(body_tree).evaluate({name: value})
        return super().member_dot_arg(tree)


def _is_ident(tree: Any, name: str) -> bool:
    """`tree` is a bare identifier `name` (member -> primary -> ident)."""
    while isinstance(tree, lark.Tree) and tree.data in ("member", "primary") and len(tree.children) == 1:
        tree = tree.children[0]
    return (isinstance(tree, lark.Tree) and tree.data == "ident"
            and getattr(tree.children[0], "value", None) == name)


class _Runner(celpy.InterpretedRunner):
    def evaluate(self, context: Any) -> Any:
        return _BindingEvaluator(ast=self.ast, activation=self.new_activation()).evaluate(context)


_ENV = celpy.Environment(runner_class=_Runner)


@functools.lru_cache(maxsize=4096)
def _parse(expression: str) -> Any:
    return _ENV.compile(expression)


def compile_checked(expression: str) -> str:
    """Return `expression` if it parses as CEL and fits the API's length limit, else raise CelError."""
    if len(expression) > MAX_EXPRESSION_LEN:
        raise CelError(f"CEL expression is {len(expression)} bytes, over the {MAX_EXPRESSION_LEN}-byte limit")
    try:
        _parse(expression)
    except Exception as err:  # celpy raises parser-specific types
        raise CelError(f"CEL does not parse: {err}") from err
    return expression


@functools.lru_cache(maxsize=4096)
def program(expression: str) -> Any:
    """The compiled, runnable program for `expression` (memoised). Raises CelError when it does not compile."""
    return _ENV.program(_parse(compile_checked(expression)), functions=FUNCTIONS)


def attribute_value(value: Any) -> Any:
    """A device attribute as CEL sees it: bool, int, string, or a Semver (`version` attributes)."""
    if isinstance(value, (Semver, Quantity)):
        return value
    if isinstance(value, bool):
        return ct.BoolType(value)
    if isinstance(value, int):
        return ct.IntType(value)
    if isinstance(value, str):
        return ct.StringType(value)
    raise TypeError(f"unsupported attribute value {value!r}")


def capacity_value(value: Any) -> Quantity:
    """A device capacity as CEL sees it: always a quantity (a ResourceSlice carries quantity strings)."""
    return value if isinstance(value, Quantity) else Quantity(value if isinstance(value, Fraction) else str(value))


def device_activation(
    driver: str,
    attributes: Mapping[str, Mapping[str, Any]],
    capacity: Mapping[str, Mapping[str, Any]],
    allow_multiple_allocations: bool = False,
) -> dict[str, Any]:
    """The `device` variable for one device; `attributes` and `capacity` are keyed by domain, then by name."""

    def nest(by_domain: Mapping[str, Mapping[str, Any]], convert: Callable[[Any], Any]) -> ct.MapType:
        return _DomainMap(
            {
                ct.StringType(dom): ct.MapType({ct.StringType(k): convert(v) for k, v in ids.items()})
                for dom, ids in by_domain.items()
            }
        )

    return {
        "device": ct.MapType(
            {
                ct.StringType("driver"): ct.StringType(driver),
                ct.StringType("attributes"): nest(attributes, attribute_value),
                ct.StringType("capacity"): nest(capacity, capacity_value),
                ct.StringType("allowMultipleAllocations"): ct.BoolType(allow_multiple_allocations),
            }
        )
    }


def evaluate(expression: str, activation: Mapping[str, Any]) -> bool:
    """Run a selector. Raises CelError when it does not compile, fails at run time, or is not a bool — all of which
    the real scheduler reports as an error for the pod rather than treating the device as non-matching."""
    prog = program(expression)
    try:
        result = prog.evaluate(dict(activation))
    except Exception as err:  # CELEvalError, TypeError/ValueError from the library functions
        raise CelError(f"CEL evaluation failed: {err}") from err
    if isinstance(result, Exception):  # celpy may return its error value instead of raising
        raise CelError(f"CEL evaluation failed: {result}")
    if not isinstance(result, (bool, ct.BoolType)):
        raise CelError(f"CEL selector returned {type(result).__name__}, not bool")
    return bool(result)
