"""Timestamps as the API server writes them (RFC 3339, seconds, UTC)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def now_rfc3339(delta_seconds: float = 0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=delta_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch_of(rfc3339: str) -> float:
    """Seconds since the epoch of a timestamp the API server wrote (RFC 3339, UTC, optional fraction)."""
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
