"""Label and field selectors, parsed once per request and matched against plain object dicts.

Label selector grammar (as kube-apiserver accepts it): comma-separated requirements `k`, `!k`, `k=v`, `k==v`,
`k!=v`, `k in (a,b)`, `k notin (a,b)`, `k>1`, `k<1`. `!=` and `notin` also match objects without the label, like the
real server. Field selectors support `=`, `==`, `!=` on the labels `ResourceType.field_labels` allows; a missing
field reads as "" (so `spec.nodeName=` selects unscheduled pods). Parse errors are 400 BadRequest whose messages are
apimachinery's own (the label parser below is a port of its lexer and parser, error texts included), because
clients and people match on them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import names
from .status import ApiError, bad_request

Obj = dict[str, Any]

@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", ">", "<"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if self.op in (">", "<"):
            try:
                have, want = int(value or ""), int(self.values[0])
            except ValueError:
                return False
            return have > want if self.op == ">" else have < want
        return False


# -- label selectors: a port of apimachinery's labels lexer/parser, so errors read exactly like the real server's --
_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")
_TOKENS = {")": ")", ",": ",", "!": "!", "==": "==", "=": "=", ">": ">", "in": "in", "<": "<", "!=": "!=",
           "notin": "notin", "(": "("}
_ID, _END, _ERR = "identifier", "end", "error"
_BINARY_OPERATORS = "in, notin, =, ==, !=, gt, lt"


def _lex(text: str) -> list[tuple[str, str]]:
    """(token, literal) pairs; `in`/`notin` are keywords here and read as identifiers where a value is expected."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _WHITESPACE:
            i += 1
        if i >= n:
            out.append((_END, ""))
            return out
        if text[i] in _SPECIAL:
            buf, last, j = "", None, i
            while j < n and text[j] in _SPECIAL:
                buf += text[j]
                if buf in _TOKENS:
                    last, j = (_TOKENS[buf], buf), j + 1
                elif last is not None:
                    break
                else:
                    j += 1
            if last is None:
                out.append((_ERR, f"error expected: keyword found '{buf}'"))
                i = j
            else:
                out.append(last)
                i = j
            continue
        j = i
        while j < n and text[j] not in _SPECIAL and text[j] not in _WHITESPACE:
            j += 1
        word = text[i:j]
        out.append((word, word) if word in ("in", "notin") else (_ID, word))
        i = j


class _LabelParser:
    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.pos = 0

    def _look(self, values: bool = True) -> tuple[str, str]:
        tok, lit = self.items[self.pos]
        return (_ID, lit) if values and tok in ("in", "notin") else (tok, lit)

    def _take(self, values: bool = True) -> tuple[str, str]:
        tok, lit = self._look(values)
        if self.pos < len(self.items) - 1:
            self.pos += 1
        return tok, lit

    def parse(self) -> tuple[Requirement, ...]:
        reqs: list[Requirement] = []
        while True:
            tok, lit = self._look()
            if tok in (_ID, "!"):
                try:
                    reqs.append(self._requirement())
                except ValueError as err:
                    raise ValueError(f"unable to parse requirement: {err}") from None
                t, lit = self._take()
                if t == _END:
                    return tuple(reqs)
                if t == ",":
                    t2, lit2 = self._look()
                    if t2 not in (_ID, "!"):
                        raise ValueError(f"found '{lit2}', expected: identifier after ','")
                else:
                    raise ValueError(f"found '{lit}', expected: ',' or 'end of string'")
            elif tok == _END:
                return tuple(reqs)
            else:
                raise ValueError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def _requirement(self) -> Requirement:
        tok, lit = self._take()
        negated = tok == "!"
        if negated:
            tok, lit = self._take()
        if tok != _ID:
            raise ValueError(f"found '{lit}', expected: identifier")
        _check_key(lit, "<nil>")
        key = lit
        if negated or self._look()[0] in (_END, ","):
            # `!key` is complete by itself; whatever follows it is the caller's "expected ',' or end" error.
            return _requirement(key, "!" if negated else "exists", ())
        tok, lit = self._take(values=False)
        ops = {"in": "in", "notin": "notin", "=": "=", "==": "=", "!=": "!=", ">": ">", "<": "<"}
        if tok not in ops:
            raise ValueError(f"found '{lit}', expected: {_BINARY_OPERATORS}")
        op = ops[tok]
        values = self._set_values() if op in ("in", "notin") else self._exact_value()
        return _requirement(key, op, values)

    def _set_values(self) -> tuple[str, ...]:
        tok, lit = self._take()
        if tok != "(":
            raise ValueError(f"found '{lit}' expected: '('")
        tok, lit = self._look()
        if tok == ")":
            self._take()
            return ("",)
        if tok not in (_ID, ","):
            raise ValueError(f"found '{lit}', expected: ',', ')' or identifier")
        values: list[str] = []
        while True:
            t, l = self._take()
            if t == _ID:
                values.append(l)
                t2, l2 = self._look()
                if t2 == ",":
                    continue
                if t2 == ")":
                    break
                raise ValueError(f"found '{l2}', expected: ',' or ')'")
            elif t == ",":
                if not values:
                    values.append("")
                t2, _ = self._look()
                if t2 == ")":
                    values.append("")
                    break
                if t2 == ",":
                    self._take()
                    values.append("")
            else:
                raise ValueError(f"found '{l}', expected: ',', or identifier")
        if self._take()[0] != ")":
            raise ValueError(f"found '{lit}', expected: ')'")
        return tuple(sorted(set(values)))

    def _exact_value(self) -> tuple[str, ...]:
        tok, _ = self._look()
        if tok in (_END, ","):
            return ("",)
        tok, lit = self._take()
        if tok == _ID:
            return (lit,)
        raise ValueError(f"found '{lit}', expected: identifier")


def _check_key(key: str, path: str) -> None:
    errs = names.qualified_label_key(path, key)
    if errs:
        raise ValueError(f"{path}: Invalid value: {json.dumps(key)}: " + "; ".join(e.detail for e in errs))


def _requirement(key: str, op: str, values: tuple[str, ...]) -> Requirement:
    """apimachinery's NewRequirement: the key again (path `key`), operator arity, label-value syntax."""
    errors: list[str] = []
    for e in names.qualified_label_key("key", key):
        errors.append(f"key: Invalid value: {json.dumps(key)}: {e.detail}")
    if op in (">", "<"):
        for i, v in enumerate(values):
            if not re.fullmatch(r"[+-]?\d+", v):
                errors.append(f"values[{i}]: Invalid value: {json.dumps(v)}: for 'Gt', 'Lt' operators, the value must be an integer")
    for i, v in enumerate(values):
        bad = names.label_value("", v)
        if bad:
            errors.append(f"values[{i}][{key}]: Invalid value: {json.dumps(v)}: " + "; ".join(e.detail for e in bad))
    if errors:
        raise ValueError(errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
    return Requirement(key, op, values)


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    """400 BadRequest with apimachinery's parser message on a syntax error."""
    if not text or not text.strip():
        return ()
    try:
        return _LabelParser(text).parse()
    except ValueError as err:
        raise bad_request(str(err)) from None


def labels_match(reqs: tuple[Requirement, ...], obj: Obj) -> bool:
    if not reqs:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in reqs)


def match_label_selector_object(selector: Obj | None, labels: dict[str, str]) -> bool:
    """A `metav1.LabelSelector` object (matchLabels + matchExpressions); None/{} selects everything."""
    if not selector:
        return True
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    negate: bool
    value: str


def _split_field_terms(text: str) -> list[str]:
    """apimachinery's splitTerms: split on unescaped commas."""
    terms, start, escaped = [], 0, False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_field_term(term: str) -> tuple[str, str, str] | None:
    """The first `!=`, `==` or `=` splits the term; nothing is trimmed (as in apimachinery's splitTerm)."""
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op):]
    return None


def _unescape_field_value(value: str) -> str:
    out, escaped = [], False
    for ch in value:
        if escaped:
            if ch not in "\\,=":
                raise bad_request(f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in ",=":
            # Go prints the rune with %v: its code point.
            raise bad_request(f"invalid field selector: unescaped character in value: {ord(ch)}")
        else:
            out.append(ch)
    if escaped:
        raise bad_request("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def parse_field_selector(
    text: str | None, allowed: Callable[[str], bool], unsupported: Callable[[str], str] | None = None
) -> tuple[FieldRequirement, ...]:
    """`allowed(label)` says whether the kind selects on a field; `unsupported(label)` words the 400 for one it
    does not (each kind's field-label conversion has its own wording on the real server)."""
    if not text:
        return ()
    reqs = []
    for part in sorted(_split_field_terms(text)):
        if part == "":
            continue
        split = _split_field_term(part)
        if split is None:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        path, op, raw = split
        value = _unescape_field_value(raw)
        if not allowed(path):
            raise bad_request(unsupported(path) if unsupported else f"field label not supported: {path}")
        reqs.append(FieldRequirement(path, op == "!=", value))
    return tuple(reqs)


def field_value(obj: Obj, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, dict):
        # Event `source` selects on source.component.
        return str(cur.get("component", ""))
    return str(cur)


def fields_match(reqs: tuple[FieldRequirement, ...], obj: Obj) -> bool:
    for r in reqs:
        if (field_value(obj, r.path) == r.value) == r.negate:
            return False
    return True


__all__ = [
    "ApiError",
    "FieldRequirement",
    "Requirement",
    "field_value",
    "fields_match",
    "labels_match",
    "match_label_selector_object",
    "parse_field_selector",
    "parse_label_selector",
]
