"""Child processes of a sandbox cluster (node daemons, the webhook): started with a death signal tied to the
cluster's process, logs to a file, stopped with SIGTERM and, after a grace period, SIGKILL.

Children run in their own session, so a Ctrl-C in the terminal reaches only the cluster process, which then stops
them in order (webhook and daemons before the API emulator); `orphanguard` makes them go if the cluster dies.

`spawn` is the parent half of that guard: it runs `subprocess.Popen` on this process's **spawner thread**, a daemon
thread started on first use that lives as long as the process, because the parent-death signal follows the
*thread* that forked the child (Linux man page prctl(2), `PR_SET_PDEATHSIG`, CAVEATS: "the 'parent' in this case is
considered to be the thread that created this process"; the details are in `orphanguard`). Whichever thread calls
`ChildProcess.start`, the child is forked by that one thread. A forked interpreter (`os.fork`) gets a spawner of its
own on first use, since threads do not survive a fork.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger(__name__)
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


def _get() -> _Spawner:
    global _spawner
    with _lock:
        if _spawner is None or _spawner.pid != os.getpid():
            _spawner = _Spawner()
        return _spawner


def spawner_thread() -> threading.Thread:
    """The thread every guarded child is forked from (started here if need be)."""
    return _get().thread


def spawn(start: Callable[[], _T]) -> _T:
    """Run `start` (a `subprocess.Popen(guarded(...), ...)`) on the spawner thread and return its result; its
    exception is raised here."""
    return _get().call(start)


def guarded(argv: list[str]) -> list[str]:
    """`argv` run under `orphanguard`, tied to this process."""
    return [sys.executable, "-m", "bridge.sandbox.cluster.orphanguard", str(os.getpid()), "--", *argv]


class ChildProcess:
    def __init__(self, name: str, argv: list[str], log_path: Path, *, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> ChildProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            # forked by the spawner thread, whichever thread calls start: the death signal follows the thread
            # that forked, and that one lives as long as this process
            self.proc = spawn(lambda: subprocess.Popen(
                guarded(self.argv),
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, **(self.env or {})},
            ))
        log.info("started %s (pid %d), log %s", self.name, self.proc.pid, self.log_path)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM, wait up to `grace` seconds, then SIGKILL. Returns the exit code (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0fs after SIGTERM: killing it", self.name, grace)
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
