"""Atomic file replacement, for every file the node daemon must never leave half-written: the checkpoint
(`bridge.ledger.checkpoint`) and the CDI specs (`bridge.cdi.writer`). It imports nothing of the project.

Invariant: a reader sees either the previous complete file or the new complete file, never a partial one, and
after a power cut the file is one of the two. The data goes to a temp file in the same directory (same filesystem),
which is fsynced and renamed over the target; then the directory is fsynced so the rename itself is durable.
Temp files are named `.<final name>.tmp-<random>` (hidden, no `.json` suffix, so a CDI registry watching the
directory never parses one); a crash may leave one behind, and the owners sweep theirs (`TEMP_MARK`) at start.

`durable=False` keeps the first half of that invariant (readers, and a process killed at any point, see the old or
the new complete file: the rename is atomic and the page cache survives a process crash) and drops the second
(after a power cut the file may be empty or missing): for files that a reboot makes void anyway, which their owner
removes or rewrites at start (the per-claim CDI specs, `bridge.cdi.writer`). It costs two page-cache operations
instead of two fsyncs, which on a busy disk are milliseconds each.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

TEMP_MARK = ".tmp-"


def temp_name(path: Path) -> Path:
    """A fresh temp file name next to `path`: `.<name>.tmp-<8 hex>`."""
    return path.with_name(f".{path.name}{TEMP_MARK}{secrets.token_hex(4)}")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, *, mode: int = 0o644,
                       fault: Callable[[str], None] | None = None, durable: bool = True) -> None:
    """Write `data` to `path` atomically (temp file, fsync, rename, fsync dir; without either fsync when not
    `durable`). `fault(step)` is a test hook called at each step ("written", "synced" (after the fsync, if any),
    "renamed") to simulate a crash between them."""
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if fault:
                fault("written")
            os.fchmod(fd, mode)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        if fault:
            fault("synced")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if fault:
        fault("renamed")
    if durable:
        fsync_dir(path.parent)


__all__ = ["TEMP_MARK", "atomic_write_bytes", "fsync_dir", "temp_name"]
