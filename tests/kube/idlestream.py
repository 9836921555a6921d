"""A fake watch stream for informer tests: open and idle until closed (what `Informer.stop` does to a real one)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from bridge.kube.api import WatchEvent


class BlockingStream:
    """Stays open until closed, like an idle watch (at most 30 s)."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def __iter__(self) -> Iterator[WatchEvent]:
        self.closed.wait(30)
        return iter(())

    def close(self) -> None:
        self.closed.set()
