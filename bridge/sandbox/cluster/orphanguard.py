"""Children that go when the sandbox goes: a parent-death signal, and one long-lived thread that forks them all.

Child side: `python -m bridge.sandbox.cluster.orphanguard PARENT_PID -- COMMAND...` asks the kernel for SIGTERM when
its parent dies (Linux `prctl(PR_SET_PDEATHSIG)`), checks that the parent is still PARENT_PID, then execs COMMAND
(the setting survives `execve` for anything that is not set-user-ID or file-capability, which `bridge` is not).

Parent side: `spawn` runs `subprocess.Popen` on this process's **spawner thread**, a daemon thread started on
first use that lives as long as the process. That matters because the Linux man page prctl(2) (man-pages,
`PR_SET_PDEATHSIG`, now also PR_SET_PDEATHSIG(2const)) says the parent-death signal "is sent upon subsequent
termination of the parent thread", and warns that the "parent" is the *thread* that created the child, not the
process: a child forked from a short-lived thread (a reconciler's worker, a test's helper thread, a
`ThreadPoolExecutor` worker that the pool retires) would get SIGTERM the moment that thread returned, while the
sandbox lives on. With every fork done by one thread that never returns, the signal comes exactly when the process
dies (SIGKILL, a crash, a normal exit: threads end with their process). A forked interpreter (`os.fork`) gets a
spawner of its own on first use, since threads do not survive a fork.

The sandbox cluster and the guide tests start their node daemons, controller and webhook through this, so a
sandbox killed with SIGKILL (or crashing) leaves no daemons behind. On systems without prctl the command simply
runs; `SandboxCluster.stop` still ends it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

PR_SET_PDEATHSIG = 1
_T = TypeVar("_T")


class _Spawner:
    """One daemon thread that runs the callables handed to it, in order (see the module docstring)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="orphanguard-spawner", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            job, done = self._jobs.get()
            if not done.set_running_or_notify_cancel():
                continue
            try:
                done.set_result(job())
            except BaseException as err:  # noqa: BLE001 - handed back to the caller, who raises it
                done.set_exception(err)

    def call(self, job: Callable[[], _T]) -> _T:
        if threading.current_thread() is self.thread:
            return job()
        done: Future[_T] = Future()
        self._jobs.put((job, done))
        return done.result()


_lock = threading.Lock()
_spawner: _Spawner | None = None


def spawner_thread() -> threading.Thread:
    """The thread every guarded child is forked from (started here if need be)."""
    return _get().thread


def _get() -> _Spawner:
    global _spawner
    with _lock:
        if _spawner is None or _spawner.pid != os.getpid():
            _spawner = _Spawner()
        return _spawner


def spawn(start: Callable[[], _T]) -> _T:
    """Run `start` (a `subprocess.Popen(...)` of `command(...)`) on the spawner thread and return its result; its
    exception is raised here."""
    return _get().call(start)


def command(argv: list[str]) -> list[str]:
    """`argv` run under the guard, tied to this process."""
    return [sys.executable, "-m", "bridge.sandbox.cluster.orphanguard", str(os.getpid()), "--", *argv]


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m bridge.sandbox.cluster.orphanguard PARENT_PID -- COMMAND...", file=sys.stderr)
        return 2
    parent = int(argv[0])
    command_ = argv[2:]
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        return 1
    os.execvp(command_[0], command_)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
