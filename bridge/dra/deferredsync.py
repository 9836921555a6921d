"""Making prepared-claim writes durable right AFTER the kubelet's answer, on one background thread.

Why the kubelet need not wait for it (the argument in full is in `bridge.dra.prepare`): prepared-claim records are
void after a reboot (new boot ID: discarded at start, the kubelet prepares every claim again), and a process crash
keeps the page cache, so no claim record ever needs to be on disk for its own sake. The fsync of the checkpoint
file and its directory only closes the window in which a power cut could leave a renamed-but-unsynced checkpoint
unreadable on a filesystem that does not order renames after data (then the corrupt-file path rebuilds the
ownership sides from the API and the kubelet). That window stays as short as before: the sync starts as soon as
the call's writes are done, instead of inside the call. Requests made while a sync runs are coalesced into the
next one, so concurrent calls share one fsync pair.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from bridge.dra.crashpoints import crash_point

log = logging.getLogger(__name__)

IDLE_EXIT_S = 2.0  # the thread ends after this long without a request


class DeferredSync:
    def __init__(self, sync: Callable[[], None], *, name: str = "dra-claims-sync") -> None:
        """`sync`: make every write so far durable; an OSError it raises is logged (the next sync retries)."""
        self._sync = sync
        self._name = name
        self._cond = threading.Condition()
        self._pending = False
        self._running = False
        self._thread: threading.Thread | None = None
        self.syncs = 0  # completed sync calls (tests, benchmark)
        self.failures = 0

    def request(self) -> None:
        """Sync soon (returns at once)."""
        with self._cond:
            self._pending = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until every requested sync is done (stop, tests); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._running, timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._cond.wait_for(lambda: self._pending, timeout=IDLE_EXIT_S):
                    self._thread = None  # idle: end; the next request starts a new thread
                    return
                self._pending, self._running = False, True
            try:
                crash_point("claims-before-sync")
                self._sync()
                self.syncs += 1
            except OSError as err:
                self.failures += 1
                log.error("could not make the prepared-claim records durable (fsync); the next write retries",
                          extra={"error": str(err)})
            finally:
                with self._cond:
                    self._running = False
                    self._cond.notify_all()
