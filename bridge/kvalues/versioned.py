"""Reading the versioned JSON documents the bridge keeps in annotations (pure): one shape of errors for all (the node
daemon's split status, bridge/ledger/status.py, and the controller's decision record, bridge/controller/record.py).

A reader accepts every version up to the one it knows and refuses a newer one by name, so an old controller or
report never half-understands a document a newer dra-bridge wrote. The text goes through the bounded decoder
(`bridge.kvalues.documents.load_json`: an annotation's size, 64 levels), so a hostile document is an `error` like any
other unreadable one, never a RecursionError that stops the reader for every node.
"""

from __future__ import annotations

from typing import Any

from bridge.humantext import clip
from bridge.kvalues.documents import DocumentError, load_json


def load_versioned(text: str, key: str, known: int, error: type[ValueError], newer: str) -> dict[str, Any]:
    """The JSON object in annotation `key`; `error` (naming `key`) when it is not JSON, not an object, has no
    version, or has a version above `known` (`newer` is appended to that message: what to do about it)."""
    try:
        doc = load_json(text, key)
    except DocumentError as err:
        raise error(str(err)) from err
    if not isinstance(doc, dict):
        raise error(f"{key}: expected a JSON object")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise error(f"{key}: missing or bad version {clip(version)}")
    if version > known:
        raise error(f"{key} has schema version {version}; this one reads version {known} ({newer})")
    return doc


__all__ = ["load_versioned"]
