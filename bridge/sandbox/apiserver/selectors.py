"""Label and field selectors, parsed once per request and matched against plain object dicts.

Label selector grammar (as kube-apiserver accepts it): comma-separated requirements `k`, `!k`, `k=v`, `k==v`,
`k!=v`, `k in (a,b)`, `k notin (a,b)`, `k>1`, `k<1`. `!=` and `notin` also match objects without the label, like the
real server. Field selectors support `=`, `==`, `!=` on the labels `ResourceType.field_labels` allows; a missing
field reads as "" (so `spec.nodeName=` selects unscheduled pods). Parse errors are 400 BadRequest.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .status import ApiError, bad_request

Obj = dict[str, Any]

_KEY = r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*$")
_OP_RE = re.compile(rf"^\s*({_KEY})\s*(==|!=|=|>|<)\s*({_VALUE})\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")
_VALUE_RE = re.compile(rf"^{_VALUE}$")


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


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    if not text or not text.strip():
        return ()
    reqs = []
    for part in _split_top_level(text):
        if not part.strip():
            raise bad_request(f"unable to parse requirement: found '', expected: identifier (in {text!r})")
        if m := _SET_RE.match(part):
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            for v in values:
                if not _VALUE_RE.match(v):
                    raise bad_request(f"unable to parse requirement: invalid label value: {v!r}")
            reqs.append(Requirement(m.group(1), m.group(2), values))
        elif m := _OP_RE.match(part):
            op = "=" if m.group(2) == "==" else m.group(2)
            if op in (">", "<") and not m.group(3).lstrip("-").isdigit():
                raise bad_request(f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer: {part!r}")
            reqs.append(Requirement(m.group(1), op, (m.group(3),)))
        elif m := _EXISTS_RE.match(part):
            reqs.append(Requirement(m.group(2), "!" if m.group(1) else "exists"))
        else:
            raise bad_request(f"unable to parse requirement: {part.strip()!r} in label selector {text!r}")
    return tuple(reqs)


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


def parse_field_selector(text: str | None, allowed: Callable[[str], bool]) -> tuple[FieldRequirement, ...]:
    if not text or not text.strip():
        return ()
    reqs = []
    for part in re.split(r"(?<!\\),", text):
        part = part.strip()
        m = re.match(r"^([^=!\s]+)\s*(==|!=|=)\s*(.*)$", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        path, op, value = m.group(1), m.group(2), m.group(3).replace("\\,", ",").replace("\\=", "=")
        if not allowed(path):
            raise bad_request(f'field label not supported: {path}')
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
