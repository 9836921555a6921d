"""Server-side field validation (`?fieldValidation=Ignore|Warn|Strict`): unknown fields in a request body.

Written from kubernetes/apiserver pkg/endpoints/handlers (create.go, update.go, patch.go: the strict decoder and
`fieldValidation`, "Warn" when the parameter is absent) and apimachinery's strict JSON decoding: a field the kind's
schema does not have is an error under Strict (400 BadRequest, `strict decoding error: unknown field "spec.foo"`,
every unknown field listed) and a `Warning: 299` header `unknown field "spec.foo"` under Warn. kubectl relies on it:
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

from collections.abc import Mapping
from typing import Any

from .status import ApiError

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


def mode(query: Mapping[str, str]) -> str:
    value = query.get("fieldValidation", "") or "Warn"
    if value not in MODES:
        raise ApiError(400, "BadRequest", f"fieldValidation parameter unsupported: {value!r} (valid: Ignore, Warn, Strict)")
    return value


def check(defs: Mapping[str, Obj], definition: str | None, kind: str, group_version: str, body: Any,
          query: Mapping[str, str], *, patch: bool = False) -> list[str]:
    """Warnings to send (Warn), nothing (Ignore), or ApiError 400 (Strict with unknown fields)."""
    how = mode(query)
    if how == "Ignore" or definition is None or definition not in defs:
        return []
    found = unknown_fields(defs, defs[definition], body, patch=patch)
    if not found:
        return []
    messages = [f'unknown field "{p}"' for p in found]
    if how == "Strict":
        raise ApiError(400, "BadRequest", f'{kind} in version "{group_version.rpartition("/")[2]}" cannot be handled '
                                          f"as a {kind}: strict decoding error: {', '.join(messages)}")
    return messages
