"""RFC 6902 JSON Patch application (add, remove, replace, test), for checking what the webhook's patches do.

The API server applies the webhook's patch itself; this implementation exists so tests and `bridge namespace`
previews can see the resulting pod without a server. It follows the RFC strictly: `add` on an array index inserts
(`-` appends), `add` on an object member replaces, `remove`/`replace` require the target to exist. The input
document is never modified; errors raise `PatchError` naming the failing operation.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any


class PatchError(ValueError):
    pass


def _tokens(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"path {path!r} must start with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise PatchError(f"array index {token!r} is not a number")
    i = int(token)
    limit = len(container) if for_add else len(container) - 1
    if i > limit:
        raise PatchError(f"array index {i} is out of range")
    return i


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for t in tokens:
        if isinstance(node, dict):
            if t not in node:
                raise PatchError(f"member {t!r} does not exist")
            node = node[t]
        elif isinstance(node, list):
            node = node[_index(node, t, for_add=False)]
        else:
            raise PatchError(f"cannot descend into {type(node).__name__} at {t!r}")
    return node


def apply_patch(doc: Any, patch: Sequence[dict[str, Any]]) -> Any:
    out = copy.deepcopy(doc)
    for n, op in enumerate(patch):
        try:
            kind, tokens = op["op"], _tokens(op["path"])
        except (KeyError, TypeError) as err:
            raise PatchError(f"operation {n} is malformed: {op!r}") from err
        if not tokens:
            if kind in ("add", "replace"):
                out = copy.deepcopy(op["value"])
                continue
            raise PatchError(f"operation {n}: cannot {kind} the whole document")
        try:
            parent, last = _parent(out, tokens[:-1]), tokens[-1]
            if kind == "add":
                if isinstance(parent, dict):
                    parent[last] = copy.deepcopy(op["value"])
                elif isinstance(parent, list):
                    parent.insert(_index(parent, last, for_add=True), copy.deepcopy(op["value"]))
                else:
                    raise PatchError(f"cannot add into {type(parent).__name__}")
            elif kind in ("remove", "replace"):
                if isinstance(parent, dict):
                    if last not in parent:
                        raise PatchError(f"member {last!r} does not exist")
                    if kind == "remove":
                        del parent[last]
                    else:
                        parent[last] = copy.deepcopy(op["value"])
                elif isinstance(parent, list):
                    i = _index(parent, last, for_add=False)
                    if kind == "remove":
                        del parent[i]
                    else:
                        parent[i] = copy.deepcopy(op["value"])
                else:
                    raise PatchError(f"cannot {kind} inside {type(parent).__name__}")
            elif kind == "test":
                value = parent[last] if isinstance(parent, dict) else parent[_index(parent, last, for_add=False)]
                if value != op["value"]:
                    raise PatchError("test failed")
            else:
                raise PatchError(f"unsupported op {kind!r}")
        except PatchError as err:
            raise PatchError(f"operation {n} ({kind} {op['path']}): {err}") from err
        except (KeyError, IndexError) as err:
            raise PatchError(f"operation {n} ({kind} {op['path']}): {err}") from err
    return out
