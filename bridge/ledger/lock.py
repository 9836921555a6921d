"""Cross-process file locks with an acquire timeout (`fcntl.flock` on a dedicated lock file).

`flock` locks belong to an open file description, so two `FileLock` objects on the same path exclude each other
whether they live in two processes (a rolling update runs two daemon instances at once) or in two threads of
one process. The lock is released by the kernel when the holder dies, so a SIGKILLed daemon never leaves a stale
lock behind (unlike lock files that are created and deleted). Not re-entrant: taking the same lock twice in one
thread waits for the timeout and fails, loudly.

`serialize_lock(state_dir)` is the node-wide Prepare/Unprepare lock (NVIDIA's `pu.lock`, 10 s acquire timeout):
Prepare and Unprepare never interleave, across instances too.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from bridge.atomicfile import in_directory

SERIALIZE_LOCK_NAME = "pu.lock"
SERIALIZE_TIMEOUT_S = 10.0


class LockTimeout(TimeoutError):
    """The lock was not acquired in time; the message names the file and the wait."""


class FileLock:
    def __init__(self, path: str | Path, timeout_s: float = 10.0, *, poll_s: float = 0.01) -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s
        self._poll_s = poll_s
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            raise RuntimeError(f"lock {self.path} is already held by this object")
        fd = in_directory(self.path.parent, lambda: os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._fd = fd
                return
            except OSError as err:
                if err.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                    os.close(fd)
                    raise
            if time.monotonic() >= deadline:
                os.close(fd)
                raise LockTimeout(f"could not lock {self.path} within {self.timeout_s:g}s: another bridge process "
                                  "or thread holds it (a Prepare/Unprepare or checkpoint update still running?)")
            time.sleep(self._poll_s)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def serialize_lock(state_dir: str | Path, timeout_s: float = SERIALIZE_TIMEOUT_S) -> FileLock:
    """The node-wide lock held around every NodePrepareResources / NodeUnprepareResources."""
    return FileLock(Path(state_dir) / SERIALIZE_LOCK_NAME, timeout_s)
