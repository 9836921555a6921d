"""The three patch formats, as pure functions over JSON values (inputs are never mutated).

* JSON merge patch (RFC 7386, `application/merge-patch+json`): maps merge recursively, `null` deletes, anything
  else (lists included) replaces.
* JSON patch (RFC 6902, `application/json-patch+json`): add, remove, replace, move, copy, test.
* Strategic merge patch (`application/strategic-merge-patch+json`, the official Python client's default for dict
  bodies): merge-patch semantics plus the list rules of the built-in types that matter in practice: lists of
  objects with a known merge key (`containers` by name, `conditions` by type, `ownerReferences` by uid,
  `reservedFor` by uid, ...) merge element-wise (`$patch: delete` removes an element), `finalizers` is a merged set
  of strings (so `finalizers: []` changes nothing, exactly as on a real server; clear with `null` or
  `$deleteFromPrimitiveList/finalizers`), every other list is replaced. `$retainKeys` is accepted and ignored.
  This is a documented simplification of apimachinery's schema-driven SMP (the set of merged fields is fixed here).

  The ORDER of a merged list is apimachinery's (k8s.io/apimachinery pkg/util/strategicpatch/patch.go
  `normalizeElementOrder` and `mergeSortedSlice`), not "append what is new": the patch's items (kept or added) come
  in the patch's order, the live object's other items in their live order, and the two are interleaved by walking
  both and taking the next live-only item first only when it and the next patch item are both in the live list
  with the live-only one earlier there. So an item the patch adds comes BEFORE the live items that follow it:
  patching reservedFor `[a, b]` with `[c]` gives `[c, a, b]` (observed on kube-apiserver v1.37.2 by
  tests/real/test_differential.py), finalizers `[x, y]` + `[z]` give `[z, x, y]`. A `$setElementOrder/<field>`
  list replaces the patch's order (kubectl apply sends one); its consistency checks are not modelled.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from .status import ApiError, bad_request

Json = Any


class PatchError(ValueError):
    """A JSON patch does not apply to the document. The handler answers 422 Invalid with apimachinery's generic text
    and no details (k8s.io/apiserver pkg/endpoints/handlers/patch.go `applyJSPatch`: `NewGenericServerResponse(422,
    ...)`, "the server rejected our request due to an error in our request"; kube-apiserver v1.37.2, observed by
    tests/real/test_differential.py): the reason in this error's text is for logs, not the answer."""


def merge_patch(target: Json, patch: Json) -> Json:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# field name -> merge key for lists of objects (the built-in types' patchMergeKey tags).
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "conditions": "type",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "reservedFor": "uid",
    "resourceClaimStatuses": "name",
    "addresses": "type",
}
_PRIMITIVE_SETS = frozenset({"finalizers"})


def strategic_merge_patch(target: Json, patch: Json) -> Json:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            drop = set(value or [])
            out[field] = [v for v in out.get(field) or [] if v not in drop]
            continue
        if key.startswith("$"):
            continue
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list) and key in _PRIMITIVE_SETS:
            live = list(out.get(key) or [])
            merged = live + [v for v in value if v not in live]
            out[key] = _element_order(merged, value, live, _same)
        elif isinstance(value, list) and key in _MERGE_KEYS or key == "ports" and isinstance(value, list):
            out[key] = _merge_list(out.get(key), value, _merge_key(key, value, out.get(key)))
        elif isinstance(value, dict):
            out[key] = strategic_merge_patch(out.get(key), value)
        else:
            out[key] = copy.deepcopy(value)
    for key, order in patch.items():
        field = key.split("/", 1)[1] if key.startswith("$setElementOrder/") else None
        if field is None or not isinstance(order, list) or not isinstance(out.get(field), list):
            continue
        before = target.get(field) if isinstance(target, dict) else None
        if field in _PRIMITIVE_SETS:
            out[field] = _element_order(out[field], order, list(before or []), _same)
        elif field in _MERGE_KEYS or field == "ports":
            merge_key = _merge_key(field, out[field], before)
            out[field] = _element_order(out[field], order, list(before or []), _by_key(merge_key))
    return out


def _same(value: Json) -> Json:
    return value


def _by_key(key: str) -> Any:
    def ident(element: Json) -> Json:
        return element.get(key) if isinstance(element, dict) else element
    return ident


def _element_order(merged: list[Json], order: list[Json], live: list[Json], ident: Any) -> list[Json]:
    """`merged` (the list's items after the patch) in apimachinery's order: the items named in `order` (the patch's
    list, or its $setElementOrder) sorted by it, the others sorted by `live` (the list before the patch), then
    interleaved: a live-only item goes before the next patch item only if both are in `live`, the live-only one
    first. See the module docstring."""
    def key(item: Json) -> str:
        return json.dumps(ident(item), sort_keys=True)

    def positions(items: list[Json]) -> dict[str, int]:
        first: dict[str, int] = {}
        for i, item in enumerate(items):
            first.setdefault(key(item), i)
        return first

    in_order, in_live = positions(order), positions(live)
    keyed = [(key(m), m) for m in merged]
    named = sorted((km for km in keyed if km[0] in in_order), key=lambda km: in_order[km[0]])
    rest = sorted((km for km in keyed if km[0] not in in_order), key=lambda km: in_live.get(km[0], len(live)))
    out: list[Json] = []
    i = j = 0
    while i < len(rest) or j < len(named):
        r = in_live.get(rest[i][0]) if i < len(rest) else None
        n = in_live.get(named[j][0]) if j < len(named) else None
        if j >= len(named) or (r is not None and n is not None and r < n):
            out.append(rest[i][1])
            i += 1
        else:
            out.append(named[j][1])
            j += 1
    return out


def _merge_key(field: str, patch: list[Json], current: Json) -> str:
    if field != "ports":
        return _MERGE_KEYS[field]
    sample = [e for e in list(patch) + list(current or []) if isinstance(e, dict)]
    return "containerPort" if any("containerPort" in e for e in sample) else "port"


def _merge_list(current: Json, patch: list[Json], key: str) -> list[Json]:
    if not all(isinstance(e, dict) for e in patch):
        return copy.deepcopy(patch)
    plain = [e for e in patch if "$patch" not in e]
    if any(e.get("$patch") == "replace" for e in patch):  # the list becomes the patch's other elements
        return copy.deepcopy(plain)
    deleted = {json.dumps(e.get(key)) for e in patch if e.get("$patch") == "delete"}  # every element with the key
    live = [e for e in current or [] if not (isinstance(e, dict) and json.dumps(e.get(key)) in deleted)]
    return _element_order(_merge_elements(list(live), plain, key), plain, live, _by_key(key))


def _merge_elements(items: list[Json], patch: list[Json], key: str) -> list[Json]:
    for element in patch:
        ident = element.get(key)
        idx = next((i for i, e in enumerate(items) if isinstance(e, dict) and e.get(key) == ident), None)
        if idx is None:
            items.append(strategic_merge_patch({}, element))
        else:
            items[idx] = strategic_merge_patch(items[idx], element)
    return items


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _split_pointer(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"invalid JSON pointer {pointer!r}")
    return [_unescape(t) for t in pointer[1:].split("/")]


def _walk(doc: Json, tokens: list[str], pointer: str) -> Json:
    cur = doc
    for t in tokens:
        if isinstance(cur, dict):
            if t not in cur:
                raise PatchError(f"doc is missing path: {pointer!r}")
            cur = cur[t]
        elif isinstance(cur, list):
            try:
                cur = cur[int(t)]
            except (ValueError, IndexError):
                raise PatchError(f"doc is missing path: {pointer!r}") from None
        else:
            raise PatchError(f"doc is missing path: {pointer!r}")
    return cur


def _add(doc: Json, pointer: str, value: Json, replace: bool) -> Json:
    tokens = _split_pointer(pointer)
    if not tokens:
        return value
    parent = _walk(doc, tokens[:-1], pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchError(f"replace operation does not apply: doc is missing key: {pointer}")
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(value)
            return doc
        try:
            idx = int(last)
        except ValueError:
            raise PatchError(f"invalid array index {last!r} in {pointer!r}") from None
        if replace:
            if not 0 <= idx < len(parent):
                raise PatchError(f"replace operation does not apply: index out of range: {pointer}")
            parent[idx] = value
        else:
            if not 0 <= idx <= len(parent):
                raise PatchError(f"add operation does not apply: index out of range: {pointer}")
            parent.insert(idx, value)
    else:
        raise PatchError(f"doc is missing path: {pointer!r}")
    return doc


def _remove(doc: Json, pointer: str) -> tuple[Json, Json]:
    tokens = _split_pointer(pointer)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _walk(doc, tokens[:-1], pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"remove operation does not apply: doc is missing path: {pointer!r}")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        try:
            return doc, parent.pop(int(last))
        except (ValueError, IndexError):
            raise PatchError(f"remove operation does not apply: doc is missing path: {pointer!r}") from None
    raise PatchError(f"remove operation does not apply: doc is missing path: {pointer!r}")


def json_patch(doc: Json, ops: Json) -> Json:
    if not isinstance(ops, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid JSON patch operation {op!r}")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"missing value for {kind} operation on {path!r}")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]), replace=False)
        elif kind == "replace":
            doc = _add(doc, path, copy.deepcopy(op["value"]), replace=True)
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "move":
            doc, value = _remove(doc, op["from"])
            doc = _add(doc, path, value, replace=False)
        elif kind == "copy":
            value = copy.deepcopy(_walk(doc, _split_pointer(op["from"]), op["from"]))
            doc = _add(doc, path, value, replace=False)
        elif kind == "test":
            if _walk(doc, _split_pointer(path), path) != op["value"]:
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"unexpected kind of JSON patch operation: {kind!r}")
    return doc


MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"


def apply_patch(content_type: str, current: Json, body: bytes) -> Json:
    """Apply a patch body of the given media type to `current`; BadRequest on unparsable input."""
    ctype = content_type.split(";")[0].strip().lower()
    try:
        patch = json.loads(body or b"null")
    except ValueError as err:
        if ctype == APPLY:
            import yaml

            try:
                patch = yaml.safe_load(body)
            except yaml.YAMLError as yerr:
                raise bad_request(f"error decoding YAML: {yerr}") from yerr
        else:
            # k8s.io/apiserver pkg/endpoints/handlers/patch.go: `json.Valid` fails -> "invalid JSON patch" (400), for
            # all three JSON patch types alike (kube-apiserver v1.37.2, observed by tests/real/test_differential.py)
            raise bad_request("invalid JSON patch") from err
    if ctype == JSON_PATCH:
        return json_patch(current, patch)
    if not isinstance(patch, dict):
        raise bad_request(f"patch body must be a JSON object for {ctype}, got {type(patch).__name__}")
    if ctype in (MERGE, APPLY):
        return merge_patch(current, patch)
    if ctype == STRATEGIC:
        return strategic_merge_patch(current, patch)
    # go-restful refuses the Content-Type before the handler runs, with its own text (kube-apiserver v1.37.2,
    # observed by tests/real/test_differential.py)
    raise ApiError(415, "UnsupportedMediaType", "415: Unsupported Media Type")
