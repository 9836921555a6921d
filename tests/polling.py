"""The one polling helper every test uses to wait for something a server, daemon or thread does on its own time.

Tests wait with generous timeouts and never assert on how fast a thing happened: speed is the benchmarks' job."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

DEFAULT_TIMEOUT_S = 30.0


def wait_until(cond: Callable[[], Any], timeout: float = DEFAULT_TIMEOUT_S, what: str = "condition",
               interval: float = 0.05) -> Any:
    """Call `cond` until it returns something truthy and return that; AssertionError naming `what` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
