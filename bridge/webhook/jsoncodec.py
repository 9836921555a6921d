"""JSON on the review path: orjson (a dependency of the package) with the standard library as the fallback, the
same documents either way.

Why: reading the AdmissionReview and writing the JSONPatch, the translation record and the response were 60% of the
instructions a review of a new pod costs with the standard library's codec (counted under callgrind on the
`bench/webhook_bench.py` pod: parse about 150k, encodes about 235k of about 670k). orjson does each several times
faster.

* `loads` reads bytes or str. orjson reads integers beyond 64 bits as floats, silently: a document with a run of 20
  or more digits anywhere (u64's largest value has 20) is read by the standard library instead, which keeps every
  integer exact. Where orjson refuses a document the standard library accepts (nesting deeper than orjson's limit,
  lone surrogates), the standard library reads it too. So any JSON the API server sends (Go's encoding/json) is
  understood as before; what neither reads raises `ValueError`.
* `load_review` reads an AdmissionReview keeping only the fields the review reads (`_Review` below), with
  msgspec (a dependency of the package): the rest of the pod (images, commands, env, volumes, probes, ...) is
  scanned but never turned into Python objects, which made parsing and freeing the body the largest single cost of
  reviewing a new pod. Integers are read exactly. A body that does not fit the shape (not an object, a field of
  another JSON type than the review expects, JSON msgspec refuses) is read whole by `loads` instead, so malformed
  reviews get the same answers as before; without msgspec every body is read by `loads`.
* `dumps` writes compact JSON (no spaces, keys in insertion order), as `json.JSONEncoder(separators=(",", ":"))`
  does, as UTF-8 bytes. Non-ASCII characters are written as UTF-8 rather than `\\u` escapes: the same JSON text.
* `dumps_sorted` writes with sorted keys, as a str (the translation record annotation: deterministic bytes).
"""

from __future__ import annotations

import json
import re
from typing import Any, TypedDict

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency; this keeps a broken install working, slower
    orjson = None  # type: ignore[assignment]

try:
    import msgspec
except ImportError:  # pragma: no cover - msgspec is a dependency; without it reviews parse the whole body
    msgspec = None  # type: ignore[assignment]

_STD_ENCODE = json.JSONEncoder(separators=(",", ":")).encode
_STD_SORTED = json.JSONEncoder(separators=(",", ":"), sort_keys=True).encode
FAST = orjson is not None
_LONG_DIGITS = re.compile(r"[0-9]{20}")
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_TWENTY_ZEROS = b"0" * 20


def _exact_for_orjson(data: bytes | bytearray | str) -> bool:
    """No run of 20 digits. For bytes (what the server reads) two C-speed passes: every digit becomes '0', then a
    substring search; a regular expression would cost more than the parse it protects."""
    if isinstance(data, str):
        return _LONG_DIGITS.search(data) is None
    return data.translate(_DIGITS_TO_ZERO).find(_TWENTY_ZEROS) < 0


def loads(data: bytes | bytearray | str) -> Any:
    if orjson is not None and _exact_for_orjson(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # the standard library decides: it reads what orjson refuses (huge integers, deep nesting)
    return json.loads(data)


# What the review, the translation, the policy and the Events read of an AdmissionReview (bridge/webhook/review.py,
# translate.py, policy.py, nodes.py, effects.py, bridge/kvalues/podgpu.py). Subtrees typed `Any` are kept whole.
# tests/webhook/test_slim_review.py reviews every pod of the test corpora from both readings and compares.
class _Container(TypedDict, total=False):
    name: Any
    resources: Any
    restartPolicy: Any


class _PodSpec(TypedDict, total=False):
    containers: list[_Container]
    initContainers: list[_Container]
    nodeSelector: Any
    affinity: Any
    tolerations: Any
    nodeName: Any
    schedulerName: Any
    resourceClaims: Any


class _PodMeta(TypedDict, total=False):
    name: Any
    generateName: Any
    namespace: Any
    uid: Any
    annotations: Any
    ownerReferences: Any


class _Pod(TypedDict, total=False):
    apiVersion: Any
    kind: Any
    metadata: _PodMeta
    spec: _PodSpec


class _Request(TypedDict, total=False):
    uid: Any
    kind: Any
    name: Any
    namespace: Any
    operation: Any
    subResource: Any
    dryRun: Any
    object: _Pod


class _Review(TypedDict, total=False):
    apiVersion: Any
    kind: Any
    request: _Request


_SLIM = msgspec.json.Decoder(_Review) if msgspec is not None else None
_SLIM_REFUSED = (msgspec.ValidationError, msgspec.DecodeError) if msgspec is not None else ()


def load_review(data: bytes | bytearray | str) -> Any:
    """An AdmissionReview with only the fields the review reads (see the module docstring); `loads` when the body
    does not fit that shape. Raises `ValueError` (as `loads`) for what is not JSON."""
    if _SLIM is not None:
        try:
            return _SLIM.decode(data)
        except _SLIM_REFUSED:
            pass  # not the shape, or not JSON msgspec reads: the whole body, as before
    return loads(data)


def dumps(obj: Any) -> bytes:
    if orjson is not None:
        return orjson.dumps(obj)
    return _STD_ENCODE(obj).encode()


def dumps_sorted(obj: Any) -> str:
    if orjson is not None:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS).decode()
    return _STD_SORTED(obj)


__all__ = ["FAST", "dumps", "dumps_sorted", "load_review", "loads"]
