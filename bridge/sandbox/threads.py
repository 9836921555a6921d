"""Joining a stand-in's worker threads on stop, within one deadline."""

from __future__ import annotations

import logging
import threading
import time


def join_all(threads: list[threading.Thread], timeout: float, who: str, log: logging.Logger) -> list[threading.Thread]:
    """Join every thread within `timeout` seconds in total; return (and log) those still running."""
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    alive = [t for t in threads if t.is_alive()]
    if alive:
        log.warning("%s: %d threads still running after %.1fs", who, len(alive), timeout)
    return alive
