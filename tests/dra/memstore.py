"""An in-memory `ClaimStore` for unit tests of the prepare core (the durable one is tested in the crash tests)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from bridge.dra.prepare import ClaimRecord
from bridge.ledger.lock import LockTimeout


class MemoryClaimStore:
    def __init__(self) -> None:
        self.records: dict[str, ClaimRecord] = {}
        self.lock = threading.Lock()
        self.history: list[tuple[str, str, str]] = []  # (op, uid, "state durability")
        self.commits = 0
        self.syncs = 0

    @contextmanager
    def serialized(self, timeout: float) -> Iterator[None]:
        if not self.lock.acquire(timeout=timeout):
            raise LockTimeout(f"the node's prepare/unprepare lock is held by someone else for more than {timeout:g}s")
        try:
            yield
        finally:
            self.lock.release()

    def load(self) -> dict[str, ClaimRecord]:
        return dict(self.records)

    def commit(self, put: Sequence[ClaimRecord] = (), remove: Sequence[str] = (), *, durable: bool = True) -> None:
        for uid in remove:
            self.records.pop(uid, None)
            self.history.append(("remove", uid, "durable" if durable else "unsynced"))
        for record in put:
            self.records[record.uid] = record
            self.history.append(("put", record.uid, f"{record.state} {'durable' if durable else 'unsynced'}"))
        self.commits += 1

    def sync(self) -> None:
        self.history.append(("sync", "", ""))
        self.syncs += 1
