"""Bounded decoding of the documents the bridge reads from the cluster (pure): the JSON in annotations (the node
daemon's split status, the controller's decision record, the webhook's shadow record) and the JSON or YAML in
ConfigMaps (the controller's policy, the device plugin's configs the report reads), and files of the same kind.

Anyone who can write one of these (a node daemon writes its own Node's annotations; a namespace admin, a ConfigMap)
must not be able to stop a reader for everyone else. Python's decoders are not bounded by themselves:

* `json.loads` of a 200 KB `[[[…]]]` raises RecursionError, which callers catching ValueError let escape (one
  node's status once failed every controller decision in the cluster);
* YAML aliases expand: a 516-byte document whose `version: *a` points at nested lists of lists took 87 s and
  5.65 GB in `str()`, and a 373-byte one a 597 MiB peak;
* a deeply nested YAML document overflows the pure-Python composer's recursion.

So every document goes through one of these decoders, and every failure is a `DocumentError` (a ValueError) that
names the document and what is wrong, never RecursionError or MemoryError:

* **size**: at most `max_bytes` (defaults: `ANNOTATION_BYTES`, 256 KiB, what all of an object's annotations may
  hold together, k8s.io/apimachinery pkg/api/validation/objectmeta.go `TotalAnnotationSizeLimitB`; and
  `CONFIGMAP_BYTES`, 1 MiB, a ConfigMap's limit, pkg/apis/core/validation `MaxSecretSize` reused for ConfigMaps);
* **depth**: at most `max_depth` nested arrays/objects (default `MAX_DEPTH`, 64; the bridge's own documents nest
  four deep). JSON is checked before it is parsed, on its brackets outside strings (C-speed operations, and only
  when it has more brackets than `max_depth`: a 200 KB hostile document costs about 20 ms); YAML on its event stream (libyaml's, where PyYAML has it), before any
  node is composed;
* **YAML aliases are refused** (`*name`, merge keys `<<: *name` included): nothing the bridge reads needs them, and
  refusing them is the only way to bound what a small document expands to. Anchors without aliases are harmless.

Decided against: catching RecursionError around `json.loads` alone (the limit then depends on the caller's stack
depth, and a document just under it still costs a deep C recursion per read); bounding the expanded size of YAML
instead of refusing aliases (needs a walk of the composed graph, which is exactly what explodes).
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

import yaml

ANNOTATION_BYTES = 256 * 1024
CONFIGMAP_BYTES = 1024 * 1024
MAX_DEPTH = 64

try:
    _Loader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on the PyYAML build
    _Loader = yaml.SafeLoader

_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DELTA = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")  # as signed bytes: +1, -1
_OPEN = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSE = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


class DocumentError(ValueError):
    """A document that cannot be read: over the size or depth limit, not JSON/YAML, YAML with aliases."""


def _size(text: str | bytes) -> int:
    return len(text) if isinstance(text, bytes) or text.isascii() else len(text.encode())


def _check_size(text: str | bytes, what: str, max_bytes: int) -> None:
    size = _size(text)
    if size > max_bytes:
        raise DocumentError(f"{what} is {size} bytes, over the {max_bytes}-byte limit")


def _check_json_depth(text: str, what: str, max_depth: int) -> None:
    """Refuse JSON nested deeper than `max_depth`, from its brackets outside strings: each opening bracket counts +1,
    each closing one -1 (a signed byte each), and the deepest running sum is the depth."""
    if text.count("[") + text.count("{") <= max_depth:  # the common case: it cannot be deeper than it has brackets
        return
    skeleton = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text)).encode().translate(_DELTA)
    if max(accumulate(memoryview(skeleton).cast("b")), default=0) > max_depth:
        raise DocumentError(f"{what} is nested deeper than {max_depth} levels")


def load_json(text: str | bytes, what: str, *, max_bytes: int = ANNOTATION_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value in `text`; `DocumentError` naming `what` when it is too large, too deep or not JSON."""
    _check_size(text, what, max_bytes)
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError as err:
            raise DocumentError(f"{what} is not JSON: not UTF-8 ({err.reason} at byte {err.start})") from err
    _check_json_depth(text, what, max_depth)
    try:
        return json.loads(text)
    except RecursionError as err:  # pragma: no cover - the depth check comes first
        raise DocumentError(f"{what} is nested too deeply") from err
    except ValueError as err:
        raise DocumentError(f"{what} is not JSON: {err}") from err


def _yaml_error(what: str, err: yaml.YAMLError) -> DocumentError:
    return DocumentError(f"{what} is not valid YAML: {' '.join(str(err).split())[:300]}")


def _check_yaml_events(text: str, what: str, max_depth: int) -> None:
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent):
            mark = event.start_mark
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise DocumentError(f"{what}: YAML aliases are not accepted{where}: write the value out")
        if isinstance(event, _OPEN):
            depth += 1
            if depth > max_depth:
                raise DocumentError(f"{what} is nested deeper than {max_depth} levels")
        elif isinstance(event, _CLOSE):
            depth -= 1


def load_yaml(text: str, what: str, *, max_bytes: int = CONFIGMAP_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """The one YAML document in `text` (None when empty); `DocumentError` naming `what` when it is too large, too
    deep, has aliases or is not YAML."""
    _check_size(text, what, max_bytes)
    try:
        _check_yaml_events(text, what, max_depth)
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader (CSafeLoader or SafeLoader)
    except yaml.YAMLError as err:
        raise _yaml_error(what, err) from err
    except RecursionError as err:  # pragma: no cover - the depth check comes first
        raise DocumentError(f"{what} is nested too deeply") from err


__all__ = ["ANNOTATION_BYTES", "CONFIGMAP_BYTES", "DocumentError", "MAX_DEPTH", "load_json", "load_yaml"]
