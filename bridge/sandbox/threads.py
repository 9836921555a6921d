"""A stand-in's worker threads: joining several on stop within one deadline, and one started and stopped with its
component."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable


def join_all(threads: list[threading.Thread], timeout: float, who: str, log: logging.Logger) -> list[threading.Thread]:
    """Join every thread within `timeout` seconds in total; return (and log) those still running."""
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    alive = [t for t in threads if t.is_alive()]
    if alive:
        log.warning("%s: %d threads still running after %.1fs", who, len(alive), timeout)
    return alive


class Worker:
    """A stand-in component's one background thread: `start` runs `target` in a new daemon thread (the `stopping`
    event cleared first), `stop` sets the event and joins the thread. `target` loops until `stopping` is set."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, target: Callable[[], None]) -> None:
        self.stopping.clear()
        self._thread = threading.Thread(target=target, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 15.0) -> None:
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None
