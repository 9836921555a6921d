"""What the API server checks in a DRA CEL selector before storing it: parse, type-check, worst-case cost.

Written from kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go
(`CompileCELExpression`: `env.Compile` issues -> "compilation failed: " + the cel-go issue text; a result type that
is neither bool nor dyn -> "must evaluate to bool or the unknown type, not <T>"; then `env.EstimateCost` with the
declared sizes of the `device` variable) and pkg/apis/resource/validation/validation.go (`validateCELSelector`:
over 10 KiB -> Too long, not compiled; a compile error -> Invalid with the detail; `MaxCost` above
`CELSelectorExpressionMaxCost` (1,000,000) -> Forbidden "too complex, exceeds cost limit").

The environment (compile.go `newCompiler`): one variable `device` of object type `kubernetes.DRADevice` with the
fields `driver` (string), `attributes` (map of domain -> map of name -> dyn), `capacity` (map of domain -> map of
name -> quantity) and, only when DRAConsumableCapacity is on (or for stored expressions), `allowMultipleAllocations`
(bool); the Kubernetes quantity and semver libraries, cel-go's standard functions, strings extension and
`cel.bind`. Every map holds at most 32 entries (ResourceSliceMaxAttributesAndCapacitiesPerDevice) and an attribute
value at most 64 characters (DeviceAttributeMaxValueLength); the cost estimate uses those bounds.

Messages keep cel-go's shape: `ERROR: <input>:LINE:COL: <message>` followed by the source line and a caret
(`| device.foo == 1` / `| ......^`), with cel-go's checker wording for the errors this module detects (undeclared
reference, undefined field, no matching overload for the common operators). Two approximations, documented rather
than hidden: a *syntax* error's text after "Syntax error:" comes from the Python CEL parser (cel-go's ANTLR parser
words it differently; position and shape are the same), and the cost is a model of cel-go's checker/cost.go
(1 per select, identifier, index and call; comprehensions cost their range size times their body; string functions
cost one tenth of the string's maximum size) that agrees with the real estimate to within a small factor for the
shapes DRA selectors have: far below the limit for ordinary selectors, far above it for nested loops over large
lists.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import lark
import lark.exceptions

from bridge.kvalues.cel import MAX_EXPRESSION_LEN, _parse

# CELSelectorExpressionMaxCost in k8s.io/api/resource/v1/types.go.
MAX_COST = 1_000_000
MAX_MAP_ENTRIES = 32
MAX_ATTRIBUTE_LEN = 64
_UNBOUNDED = 2**63

ErrorType = Literal["Invalid", "Required", "Internal"]


@dataclass(frozen=True)
class CompileIssue:
    type: ErrorType
    detail: str


@dataclass(frozen=True)
class CompileResult:
    expression: str
    issue: CompileIssue | None = None
    max_cost: int = 0

    @property
    def ok(self) -> bool:
        return self.issue is None


# -- types --------------------------------------------------------------------------------------------------------
# Simple names; "dyn" is cel-go's dynamic type (an attribute value), the others as cel-go prints them.
DEVICE = "kubernetes.DRADevice"
ATTRS_OUTER, ATTRS_INNER = "map(string, map(string, dyn))", "map(string, dyn)"
CAPS_OUTER, CAPS_INNER = "map(string, map(string, Quantity))", "map(string, Quantity)"
_NUMERIC = {"int", "uint", "double"}

_GLOBAL_FUNCTIONS: dict[str, str] = {
    "quantity": "Quantity", "isQuantity": "bool", "semver": "Semver", "isSemver": "bool",
    "int": "int", "uint": "uint", "double": "double", "string": "string", "bool": "bool", "bytes": "bytes",
    "size": "int", "type": "type", "dyn": "dyn", "duration": "google.protobuf.Duration",
    "timestamp": "google.protobuf.Timestamp", "matches": "bool",
}
_METHODS: dict[str, str] = {
    # Quantity (k8s.io/apiserver/pkg/cel/library/quantity.go)
    "compareTo": "int", "isGreaterThan": "bool", "isLessThan": "bool", "asInteger": "int",
    "asApproximateFloat": "double", "isInteger": "bool", "sign": "int", "add": "Quantity", "sub": "Quantity",
    # Semver (library/semver.go)
    "major": "int", "minor": "int", "patch": "int",
    # standard library and strings extension
    "startsWith": "bool", "endsWith": "bool", "contains": "bool", "matches": "bool", "size": "int",
    "lowerAscii": "string", "upperAscii": "string", "replace": "string", "trim": "string", "substring": "string",
    "charAt": "string", "indexOf": "int", "lastIndexOf": "int", "split": "list(string)", "join": "string",
    "format": "string", "reverse": "string", "quote": "string",
    # Kubernetes regex library (library/regex.go)
    "find": "string", "findAll": "list(string)",
}
_STRING_COST_METHODS = {"startsWith", "endsWith", "contains", "matches", "lowerAscii", "upperAscii", "replace",
                        "trim", "substring", "indexOf", "lastIndexOf", "split", "join", "format", "reverse", "quote",
                        "find", "findAll"}
_MACROS = {"all": "bool", "exists": "bool", "exists_one": "bool", "map": "list(dyn)", "filter": "list(dyn)"}


class _CheckError(Exception):
    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.message, self.line, self.column = message, line, column


@dataclass
class _Val:
    """The checker's view of a sub-expression: its type, worst-case cost, and (for lists/maps) maximum size."""

    type: str
    cost: int = 0
    size: int = 0
    # For string-typed values: the maximum length (for the cost of string functions).
    strlen: int = MAX_ATTRIBUTE_LEN
    extra: dict[str, Any] = field(default_factory=dict)


def _pos(tree: Any) -> tuple[int, int]:
    if isinstance(tree, lark.Token):
        return tree.line or 1, tree.column or 1
    meta = getattr(tree, "meta", None)
    if meta is not None and not getattr(meta, "empty", True):
        return meta.line, meta.column
    for child in getattr(tree, "children", []):
        return _pos(child)
    return 1, 1


def _undeclared(name: str, at: Any) -> _CheckError:
    return _CheckError(f"undeclared reference to '{name}' (in container '')", *_pos(at))


def _overload(op: str, args: list[_Val], at: Any) -> _CheckError:
    return _CheckError(f"found no matching overload for '{op}' applied to '({', '.join(a.type for a in args)})'",
                       *_pos(at))


class _Checker:
    def __init__(self, consumable_capacity: bool) -> None:
        self.fields = {"driver": "string", "attributes": ATTRS_OUTER, "capacity": CAPS_OUTER}
        if consumable_capacity:
            self.fields["allowMultipleAllocations"] = "bool"
        self.scopes: list[dict[str, _Val]] = []

    # -- entry ---------------------------------------------------------------------------------------------------
    def check(self, tree: lark.Tree[Any]) -> _Val:
        return self.visit(tree)

    def visit(self, tree: Any) -> _Val:
        if isinstance(tree, lark.Token):
            return _Val("dyn")
        handler = getattr(self, f"v_{tree.data}", None)
        if handler is None:
            if len(tree.children) == 1:
                return self.visit(tree.children[0])
            raise _CheckError(f"unsupported expression ({tree.data})", *_pos(tree))
        result: _Val = handler(tree)
        return result

    # -- operators -----------------------------------------------------------------------------------------------
    def v_expr(self, t: lark.Tree[Any]) -> _Val:
        if len(t.children) == 1:
            return self.visit(t.children[0])
        cond, a, b = (self.visit(c) for c in t.children)
        if cond.type not in ("bool", "dyn"):
            raise _overload("_?_:_", [cond, a, b], t)
        typ = a.type if a.type == b.type else "dyn"
        return _Val(typ, cond.cost + max(a.cost, b.cost), max(a.size, b.size))

    def _logic(self, t: lark.Tree[Any], op: str) -> _Val:
        if len(t.children) == 1:
            return self.visit(t.children[0])
        left, right = self.visit(t.children[0]), self.visit(t.children[1])
        for v in (left, right):
            if v.type not in ("bool", "dyn"):
                raise _overload(op, [left, right], t)
        return _Val("bool", left.cost + right.cost)

    def v_conditionalor(self, t: lark.Tree[Any]) -> _Val:
        return self._logic(t, "_||_")

    def v_conditionaland(self, t: lark.Tree[Any]) -> _Val:
        return self._logic(t, "_&&_")

    def v_relation(self, t: lark.Tree[Any]) -> _Val:
        if len(t.children) == 1:
            return self.visit(t.children[0])
        op_tree, right_tree = t.children
        op = {"relation_lt": "_<_", "relation_le": "_<=_", "relation_gt": "_>_", "relation_ge": "_>=_",
              "relation_eq": "_==_", "relation_ne": "_!=_", "relation_in": "@in"}[op_tree.data]
        left, right = self.visit(op_tree.children[0]), self.visit(right_tree)
        if op == "@in":
            if right.type not in ("dyn",) and not right.type.startswith(("list", "map")):
                raise _overload(op, [left, right], t)
            return _Val("bool", left.cost + right.cost + max(1, right.size))
        if "dyn" not in (left.type, right.type) and left.type != right.type:
            if not (left.type.startswith("list") and right.type.startswith("list")) and not (
                    left.type.startswith("map") and right.type.startswith("map")):
                raise _overload(op, [left, right], t)
        if op in ("_<_", "_<=_", "_>_", "_>=_") and left.type not in _NUMERIC | {"dyn", "string", "bytes",
                                                                                  "bool", "google.protobuf.Timestamp",
                                                                                  "google.protobuf.Duration"}:
            raise _overload(op, [left, right], t)
        cost = left.cost + right.cost + 1
        if left.type == "string" or right.type == "string":
            cost += math.ceil(min(left.strlen, right.strlen) * 0.1)
        return _Val("bool", cost)

    def _arith(self, t: lark.Tree[Any], names: dict[str, str]) -> _Val:
        if len(t.children) == 1:
            return self.visit(t.children[0])
        op_tree, right_tree = t.children
        op = names[op_tree.data]
        left, right = self.visit(op_tree.children[0]), self.visit(right_tree)
        cost = left.cost + right.cost + 1
        if "dyn" in (left.type, right.type):
            return _Val("dyn", cost, left.size + right.size)
        if left.type != right.type:
            raise _overload(op, [left, right], t)
        if op == "_+_" and left.type in ("string", "bytes"):
            return _Val(left.type, cost, strlen=left.strlen + right.strlen)
        if op == "_+_" and left.type.startswith("list"):
            return _Val(left.type, cost + left.size + right.size, left.size + right.size)
        if left.type not in _NUMERIC:
            raise _overload(op, [left, right], t)
        return _Val(left.type, cost)

    def v_addition(self, t: lark.Tree[Any]) -> _Val:
        return self._arith(t, {"addition_add": "_+_", "addition_sub": "_-_"})

    def v_multiplication(self, t: lark.Tree[Any]) -> _Val:
        return self._arith(t, {"multiplication_mul": "_*_", "multiplication_div": "_/_",
                               "multiplication_mod": "_%_"})

    def v_unary(self, t: lark.Tree[Any]) -> _Val:
        if len(t.children) == 1:
            return self.visit(t.children[0])
        op, operand_tree = t.children
        operand = self.visit(operand_tree)
        if op.data == "unary_not":
            if operand.type not in ("bool", "dyn"):
                raise _overload("!_", [operand], t)
            return _Val("bool", operand.cost + 1)
        if operand.type not in _NUMERIC | {"dyn"}:
            raise _overload("-_", [operand], t)
        return _Val(operand.type, operand.cost + 1)

    # -- members -------------------------------------------------------------------------------------------------
    def v_member_dot(self, t: lark.Tree[Any]) -> _Val:
        base_tree, name_tok = t.children
        base = self.visit(base_tree)
        name = str(name_tok)
        line, col = _pos(name_tok)
        at = (line, max(1, col - 1))  # cel-go points at the '.'
        cost = base.cost + 1
        if base.type == DEVICE:
            if name not in self.fields:
                raise _CheckError(f"undefined field '{name}'", *at)
            typ = self.fields[name]
            return _Val(typ, cost, MAX_MAP_ENTRIES if typ.startswith("map") else 0)
        return self._element(base, cost, at)

    def _element(self, base: _Val, cost: int, at: tuple[int, int]) -> _Val:
        if base.type == ATTRS_OUTER:
            return _Val(ATTRS_INNER, cost, MAX_MAP_ENTRIES)
        if base.type == ATTRS_INNER or base.type in ("dyn", "map(dyn, dyn)") or base.type.startswith("list"):
            return _Val("dyn", cost, MAX_ATTRIBUTE_LEN)
        if base.type == CAPS_OUTER:
            return _Val(CAPS_INNER, cost, MAX_MAP_ENTRIES)
        if base.type == CAPS_INNER:
            return _Val("Quantity", cost)
        raise _CheckError(f"type '{base.type}' does not support field selection", *at)

    def v_member_index(self, t: lark.Tree[Any]) -> _Val:
        base_tree, index_tree = t.children
        base, index = self.visit(base_tree), self.visit(index_tree)
        if base.type == DEVICE or base.type in ("string", "int", "uint", "double", "bool", "Quantity", "Semver"):
            raise _overload("_[_]", [base, index], t)
        return self._element(base, base.cost + index.cost + 1, _pos(t))

    def v_member_dot_arg(self, t: lark.Tree[Any]) -> _Val:
        base_tree, name_tok = t.children[0], t.children[1]
        args = list(t.children[2].children) if len(t.children) > 2 and t.children[2] is not None else []
        name = str(name_tok)
        if name == "bind" and self._is_ident(base_tree, "cel"):
            return self._bind(t, args)
        base = self.visit(base_tree)
        if name in _MACROS:
            return self._comprehension(t, name, base, args)
        if name not in _METHODS:
            raise _undeclared(name, name_tok)
        values = [self.visit(a) for a in args]
        cost = base.cost + sum(v.cost for v in values) + 1
        typ = _METHODS[name]
        if name == "join" and base.type.startswith("list"):
            # k8s.io/apiserver pkg/cel/library/cost.go `join`: the result's size is the list's size times its
            # elements' (`listElementNode`), and an element of a list that does not come from the `device`
            # variable (a literal, what split/findAll/filter return) has no known size: the estimate, and every
            # cost computed from the joined string, is unbounded (kube-apiserver v1.37.2 refuses
            # `["a"].join("") == "a"` as too complex). On a dyn attribute value there is no element node: free.
            return _Val(typ, _UNBOUNDED, strlen=_UNBOUNDED)
        if name in ("matches", "find", "findAll") and values:
            # cel-go checker/cost.go `matches` and the library's find/findAll: (string size + 1) x 0.1 times the
            # pattern's size x 0.25 (RegexStringLengthCostFactor), each rounded up
            cost += math.ceil((base.strlen + 1) * 0.1) * math.ceil(values[0].strlen * 0.25)
        elif name in _STRING_COST_METHODS:
            cost += math.ceil(base.strlen * 0.1)
        return _Val(typ, min(cost, _UNBOUNDED), MAX_ATTRIBUTE_LEN if typ.startswith("list") else 0)

    def _is_ident(self, tree: Any, name: str) -> bool:
        while isinstance(tree, lark.Tree) and tree.data in ("member", "primary") and len(tree.children) == 1:
            tree = tree.children[0]
        return (isinstance(tree, lark.Tree) and tree.data == "ident" and str(tree.children[0]) == name
                and not any(name in s for s in self.scopes))

    def _var_name(self, tree: Any, what: str) -> str:
        node = tree
        while isinstance(node, lark.Tree) and len(node.children) == 1 and node.data != "ident":
            node = node.children[0]
        if not (isinstance(node, lark.Tree) and node.data == "ident"):
            raise _CheckError(f"{what} must be a simple name", *_pos(tree))
        return str(node.children[0])

    def _bind(self, t: lark.Tree[Any], args: list[Any]) -> _Val:
        if len(args) != 3:
            raise _CheckError("cel.bind() requires 3 arguments", *_pos(t))
        name = self._var_name(args[0], "cel.bind() variable name")
        init = self.visit(args[1])
        self.scopes.append({name: init})
        try:
            body = self.visit(args[2])
        finally:
            self.scopes.pop()
        return _Val(body.type, init.cost + body.cost, body.size)

    def _comprehension(self, t: lark.Tree[Any], name: str, base: _Val, args: list[Any]) -> _Val:
        if len(args) != 2:
            raise _CheckError(f"{name}() requires 2 arguments", *_pos(t))
        var = self._var_name(args[0], "argument")
        if base.type not in ("dyn",) and not base.type.startswith(("list", "map")):
            raise _CheckError(f"expression of type '{base.type}' cannot be range of a comprehension "
                              "(must be list, map, or dynamic)", *_pos(t))
        size = base.size or MAX_ATTRIBUTE_LEN
        element = _Val("dyn") if base.type != ATTRS_OUTER and base.type != CAPS_OUTER else _Val("string")
        self.scopes.append({var: element})
        try:
            body = self.visit(args[1])
        finally:
            self.scopes.pop()
        if name in ("all", "exists", "exists_one", "filter") and body.type not in ("bool", "dyn"):
            raise _overload("_&&_" if name == "all" else "_||_", [body], t)
        cost = base.cost + size * (body.cost + 2) + 1
        return _Val(_MACROS[name], min(cost, _UNBOUNDED), size if name in ("map", "filter") else 0)

    # -- primaries -----------------------------------------------------------------------------------------------
    def v_ident(self, t: lark.Tree[Any]) -> _Val:
        name = str(t.children[0])
        for scope in reversed(self.scopes):
            if name in scope:
                v = scope[name]
                return _Val(v.type, 1, v.size, v.strlen)
        if name == "device":
            return _Val(DEVICE, 1)
        raise _undeclared(name, t.children[0])

    def v_dot_ident(self, t: lark.Tree[Any]) -> _Val:
        return self.v_ident(t)

    def v_ident_arg(self, t: lark.Tree[Any]) -> _Val:
        name_tok = t.children[0]
        args = list(t.children[1].children) if len(t.children) > 1 and t.children[1] is not None else []
        name = str(name_tok)
        if name == "has":
            if len(args) != 1 or not list(args[0].find_data("member_dot")):
                raise _CheckError("invalid argument to has() macro", *_pos(t))
            inner = self.visit(args[0])
            return _Val("bool", inner.cost)
        if name not in _GLOBAL_FUNCTIONS:
            raise _undeclared(name, name_tok)
        values = [self.visit(a) for a in args]
        return _Val(_GLOBAL_FUNCTIONS[name], sum(v.cost for v in values) + 1)

    def v_dot_ident_arg(self, t: lark.Tree[Any]) -> _Val:
        return self.v_ident_arg(t)

    def v_paren_expr(self, t: lark.Tree[Any]) -> _Val:
        return self.visit(t.children[0])

    def v_list_lit(self, t: lark.Tree[Any]) -> _Val:
        items = list(t.children[0].children) if t.children and t.children[0] is not None else []
        values = [self.visit(i) for i in items]
        types = {v.type for v in values}
        elem = types.pop() if len(types) == 1 else "dyn"
        return _Val(f"list({elem})", 10 + sum(v.cost for v in values), len(values))

    def v_map_lit(self, t: lark.Tree[Any]) -> _Val:
        items = list(t.children[0].children) if t.children and t.children[0] is not None else []
        values = [self.visit(i) for i in items]
        return _Val("map(dyn, dyn)", 30 + sum(v.cost for v in values), len(values) // 2)

    def v_member_object(self, t: lark.Tree[Any]) -> _Val:
        raise _undeclared(self._var_name(t.children[0], "message name"), t)

    def v_literal(self, t: lark.Tree[Any]) -> _Val:
        tok = t.children[0]
        kind = getattr(tok, "type", "")
        typ = {"INT_LIT": "int", "UINT_LIT": "uint", "FLOAT_LIT": "double", "STRING_LIT": "string",
               "MLSTRING_LIT": "string", "BYTES_LIT": "bytes", "BOOL_LIT": "bool", "NULL_LIT": "null_type"}.get(kind, "dyn")
        text = str(tok)
        if typ in ("string", "bytes"):
            text = _literal_value(text)
        return _Val(typ, 0, strlen=len(text))


_ESCAPE = re.compile(r"\\(?:[0-7]{3}|x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)")


def _literal_value(token: str) -> str:
    """A string or bytes literal's value as far as its length goes: prefix and quotes off, each escape sequence one
    character (the cost of string functions follows the value's size, not the source text's)."""
    body = token.lstrip("rRbB")
    raw = "r" in token[: len(token) - len(body)].lower()
    quote = 3 if body[:3] in ('"""', "'''") else 1
    body = body[quote:-quote]
    return body if raw else _ESCAPE.sub("x", body)


def _render(expression: str, message: str, line: int, column: int) -> str:
    lines = expression.split("\n")
    text = lines[line - 1] if 0 < line <= len(lines) else expression
    return f"ERROR: <input>:{line}:{column}: {message}\n | {text}\n | {'.' * max(0, column - 1)}^"


def compile_selector(expression: str, *, consumable_capacity: bool = False) -> CompileResult:
    """Check `expression` as the API server does for a DRA selector. `consumable_capacity`: whether the
    environment declares `device.allowMultipleAllocations` (DRAConsumableCapacity on, or a stored expression)."""
    if not expression.strip():
        return CompileResult(expression, CompileIssue("Required", ""), 0)
    if len(expression) > MAX_EXPRESSION_LEN:
        return CompileResult(expression, CompileIssue("Invalid", f"longer than {MAX_EXPRESSION_LEN} bytes"))
    try:
        tree = _parse(expression)
    except Exception as err:  # celpy's CELParseError, caused by lark's Unexpected* carrying the position
        reason, line, column = _syntax_error(expression, err)
        detail = "compilation failed: " + _render(expression, "Syntax error: " + reason, line, column)
        return CompileResult(expression, CompileIssue("Invalid", detail), _UNBOUNDED)
    try:
        result = _Checker(consumable_capacity).check(tree)
    except _CheckError as err:
        detail = "compilation failed: " + _render(expression, err.message, err.line, err.column)
        return CompileResult(expression, CompileIssue("Invalid", detail), _UNBOUNDED)
    if result.type not in ("bool", "dyn"):
        return CompileResult(expression, CompileIssue(
            "Invalid", f"must evaluate to bool or the unknown type, not {result.type}"), _UNBOUNDED)
    return CompileResult(expression, None, result.cost)


def _syntax_error(expression: str, err: Exception) -> tuple[str, int, int]:
    """(reason, line, column) in cel-go's words where they map onto lark's: the end of input is `<EOF>` one past the
    last character (cel-go's position), an unknown character a "token recognition error"."""
    cause = err.__cause__ or err.__context__ or err
    line = getattr(cause, "line", None) or getattr(err, "line", None) or 1
    column = getattr(cause, "column", None) or getattr(err, "column", None) or 1
    if isinstance(cause, lark.exceptions.UnexpectedCharacters):
        return f"token recognition error at: '{cause.char}'", line, column
    token = getattr(cause, "token", None)
    if isinstance(cause, lark.exceptions.UnexpectedEOF) or (token is not None and str(token) == ""):
        lines = expression.split("\n")
        return "mismatched input '<EOF>'", len(lines), len(lines[-1]) + 1
    if token is not None:
        return f"mismatched input '{token}'", line, column
    return "unexpected input", line, column


__all__ = ["CompileIssue", "CompileResult", "MAX_COST", "compile_selector"]
