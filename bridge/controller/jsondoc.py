"""Reading the versioned JSON documents the bridge keeps in annotations (pure): one shape of errors for all.

A reader accepts every version up to the one it knows and refuses a newer one by name, so an old controller or
report never half-understands a document a newer dra-bridge wrote.
"""

from __future__ import annotations

import json
from typing import Any


def load_versioned(text: str, key: str, known: int, error: type[ValueError], newer: str) -> dict[str, Any]:
    """The JSON object in annotation `key`; `error` (naming `key`) when it is not JSON, not an object, has no
    version, or has a version above `known` (`newer` is appended to that message: what to do about it)."""
    try:
        doc = json.loads(text)
    except ValueError as err:
        raise error(f"{key} is not JSON: {err}") from err
    if not isinstance(doc, dict):
        raise error(f"{key}: expected a JSON object")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise error(f"{key}: missing or bad version {version!r}")
    if version > known:
        raise error(f"{key} has schema version {version}; this one reads version {known} ({newer})")
    return doc


__all__ = ["load_versioned"]
