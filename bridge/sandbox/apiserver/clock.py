"""Timestamps as the API server writes them (RFC 3339, seconds, UTC)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def now_rfc3339(delta_seconds: float = 0, *, now: float | None = None) -> str:
    """Now (or `now`, epoch seconds) plus `delta_seconds`."""
    base = time.time() if now is None else now
    return datetime.fromtimestamp(base + delta_seconds, UTC).strftime(_FORMAT)


def parse_rfc3339(text: str) -> float:
    """Epoch seconds of a timestamp this module wrote (fractions of a second, as other writers add, are accepted)."""
    head = text.split(".")[0].rstrip("Z")
    return datetime.strptime(head + "Z", _FORMAT).replace(tzinfo=UTC).timestamp()
