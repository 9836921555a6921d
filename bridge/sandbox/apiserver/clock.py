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
    """Epoch seconds of an RFC 3339 timestamp (UTC `Z` or an offset; fractions of a second, as other writers add,
    are accepted)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
