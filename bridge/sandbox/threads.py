"""A stand-in's worker threads: a controller's informers and loops started together, joining several on stop within
one deadline, and one started and stopped with its component."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol


class _Informer(Protocol):
    def start(self, stop: threading.Event) -> threading.Thread: ...

    def wait_synced(self, timeout: float | None = None) -> bool: ...


def start_controller(informers: Iterable[_Informer], stop: threading.Event,
                     loops: Iterable[tuple[str, Callable[[], None]]], prefix: str,
                     sync_timeout: float = 30.0) -> list[threading.Thread]:
    """A controller's start, as client-go controllers' `Run`: its informers started, then waited for (each up to
    `sync_timeout`), then its loops, each in a daemon thread named `<prefix>-<name>`. Returns every thread started,
    for `join_all` at stop."""
    informers = list(informers)
    threads = [inf.start(stop) for inf in informers]
    for inf in informers:
        inf.wait_synced(sync_timeout)
    for name, target in loops:
        t = threading.Thread(target=target, name=f"{prefix}-{name}", daemon=True)
        t.start()
        threads.append(t)
    return threads


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
