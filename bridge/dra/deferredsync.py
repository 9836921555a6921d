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

# The thread ends after this long without a request, or at `close()`. Long, because starting a thread is in the
# kubelet's path: `Thread.start` waits until the new thread runs, which on a busy node took milliseconds (py-spy
# over bench/real_pod_start_bench.py); a node that prepares more often than this never starts one.
IDLE_EXIT_S = 300.0


class DeferredSync:
    def __init__(self, sync: Callable[[], None], *, name: str = "dra-claims-sync",
                 idle_exit_s: float = IDLE_EXIT_S) -> None:
        """`sync`: make every write so far durable; an OSError it raises is logged (the next sync retries)."""
        self._sync = sync
        self._name = name
        self.idle_exit_s = idle_exit_s
        self._closing = False
        self._cond = threading.Condition()
        self._pending = False
        self._running = False
        self._thread: threading.Thread | None = None
        self.syncs = 0  # completed sync calls (tests, benchmark)
        self.failures = 0

    def request(self) -> None:
        """Sync soon (returns at once)."""
        with self._cond:
            self._pending, self._closing = True, False
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until every requested sync is done (stop, tests); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._running, timeout)

    def close(self) -> None:
        """End the thread once it has nothing to do (a requested sync still runs); a later request starts it again."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._cond.wait_for(lambda: self._pending or self._closing, timeout=self.idle_exit_s) \
                        or not self._pending:
                    self._thread = None  # idle or closed: end; the next request starts a new thread
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
