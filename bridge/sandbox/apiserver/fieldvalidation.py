"""Server-side field validation (`?fieldValidation=Ignore|Warn|Strict`): unknown fields in a request body.

Written from kubernetes/apiserver pkg/endpoints/handlers (create.go, update.go, patch.go: the strict decoder and
`fieldValidation`, "Warn" when the parameter is absent) and apimachinery's strict JSON decoding: a field the kind's
schema does not have is an error under Strict (400 BadRequest, `strict decoding error: unknown field "spec.foo"`,
every unknown field listed; a patch's is 422 Invalid on the field `patch`, see `check`) and a `Warning: 299` header
`unknown field "spec.foo"` under Warn. kubectl relies on it:
with validation on it sends `fieldValidation=Strict` and skips its own client-side check once the OpenAPI document
says the server takes the parameter (openapi.py).

The schemas are the ones the emulator validates with (kubernetes-validate's, through openapi.py). A map
(`additionalProperties`) and a schema with `x-kubernetes-preserve-unknown-fields` accept any key. Checked: create and
update bodies, apply patches (whole objects), and the keys of merge and strategic-merge patches (their `$patch`,
`$retainKeys`, `$setElementOrder/…` and `$deleteFromPrimitiveList/…` directives are not fields). Not checked
(documented limit): JSON patches, whose unknown fields the real server finds in the patched result. Unknown fields
are reported, not pruned: the emulator keeps what it is sent (the real server drops them while decoding).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .status import ApiError, FieldError, invalid

Obj = dict[str, Any]
_REF = "#/$defs/"
MODES = ("Ignore", "Warn", "Strict")


def unknown_fields(defs: Mapping[str, Obj], schema: Obj, value: Any, path: str = "", *, patch: bool = False) -> list[str]:
    """Paths (`spec.containers[0].foo`) of the keys in `value` that `schema` does not define."""
    schema = _resolve(defs, schema)
    out: list[str] = []
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return out
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            if patch and key.startswith("$"):
                continue
            here = f"{path}.{key}" if path else key
            if isinstance(props, dict) and key in props:
                out += unknown_fields(defs, props[key], sub, here, patch=patch)
            elif isinstance(extra, dict):
                out += unknown_fields(defs, extra, sub, f"{path}[{key}]" if path else key, patch=patch)
            elif isinstance(props, dict) or extra is False:
                out.append(here)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            out += unknown_fields(defs, schema["items"], item, f"{path}[{i}]", patch=patch)
    return out


def _resolve(defs: Mapping[str, Obj], schema: Obj) -> Obj:
    seen = 0
    while isinstance(schema.get("$ref"), str) and schema["$ref"].startswith(_REF) and seen < 32:
        schema = defs.get(schema["$ref"][len(_REF):], {})
        seen += 1
    return schema


def mode(query: Mapping[str, str], options: str = "CreateOptions") -> str:
    """The directive; an unknown one is 422 Invalid on the request's options kind (CreateOptions, UpdateOptions or
    PatchOptions in meta.k8s.io), as apimachinery's `ValidateFieldValidation` words it (kube-apiserver v1.37.2,
    observed by tests/real/test_differential.py)."""
    value = query.get("fieldValidation", "")
    if value and value not in MODES:
        raise invalid(options, "meta.k8s.io", "", [FieldError(
            "fieldValidation", "Unsupported value", value,
            "supported values: " + ", ".join(json.dumps(v) for v in ("", *sorted(MODES))))])
    return value or "Warn"


def go_repr(value: Any) -> str:
    """Go's `%+v` of a decoded JSON value (maps with sorted keys: `map[a:1 b:map[c:d]]`), as kube-apiserver renders a
    strategic merge patch in its strict-decoding error."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_repr(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_repr(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def check(defs: Mapping[str, Obj], definition: str | None, kind: str, group_version: str, body: Any,
          query: Mapping[str, str], *, patch: str | None = None, options: str = "CreateOptions") -> list[str]:
    """Warnings to send (Warn), nothing (Ignore), or an ApiError (Strict with unknown fields): 400 BadRequest for a
    create or update body; for a merge or strategic merge patch (`patch` names its media type) 422 Invalid on the
    field `patch` with no kind or name (k8s.io/apiserver pkg/endpoints/handlers/patch.go: the value is the patched
    object's JSON for a merge patch, Go's rendering of the patch map for a strategic one; here the patch body stands
    in for the patched object, which only a reader of the message could tell)."""
    how = mode(query, options)
    if how == "Ignore" or definition is None or definition not in defs:
        return []
    found = unknown_fields(defs, defs[definition], body, patch=patch is not None)
    if not found:
        return []
    messages = [f'unknown field "{p}"' for p in found]
    if how == "Strict":
        decoding = f"strict decoding error: {', '.join(messages)}"
        if patch is not None:
            value = go_repr(body) if patch == "application/strategic-merge-patch+json" else json.dumps(
                body, separators=(",", ":"))
            raise invalid("", "", "", [FieldError("patch", "Invalid value", value, decoding)])
        raise ApiError(400, "BadRequest", f'{kind} in version "{group_version.rpartition("/")[2]}" cannot be handled '
                                          f"as a {kind}: {decoding}")
    return messages
