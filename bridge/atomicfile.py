"""Atomic file replacement, for every file the node daemon must never leave half-written: the checkpoint
(`bridge.ledger.checkpoint`) and the CDI specs (`bridge.cdi.writer`); and the one bounded reader of files that
someone else may have replaced (`read_regular`). It imports nothing of the project.

Invariant: a reader sees either the previous complete file or the new complete file, never a partial one, and
after a power cut the file is one of the two. The data goes to a temp file in the same directory (same filesystem),
which is fsynced and renamed over the target; then the directory is fsynced so the rename itself is durable.
**Bounded reads.** `read_regular` reads a regular file of at most `limit` bytes, or says why not: the daemon's own
checkpoint, the kubelet's device-manager checkpoint (read on every evaluation) and the report's snapshot files all go
through it. A path replaced by a symlink to /dev/zero (once 2.1 GiB of daemon memory), a FIFO (an `open` that blocks
for ever), a device or a file of gigabytes is refused before it is read: opened with O_NONBLOCK (and O_NOFOLLOW
unless links are allowed), the type and size checked on the descriptor (no race with a swapped path), and at most
`limit + 1` bytes read (a file that grows while read is refused too).

A writer whose directory may be missing wraps its write in `in_directory` (the directory is made when the write
finds it missing, not by a `mkdir` before every write); the node lock does the same.

Temp files are named `.<final name>.tmp-<random>` (hidden, no `.json` suffix, so a CDI registry watching the
directory never parses one); a crash may leave one behind, and the owners sweep theirs (`TEMP_MARK`) at start.

`durable=False` keeps the first half of that invariant (readers, and a process killed at any point, see the old or
the new complete file: the rename is atomic and the page cache survives a process crash) and drops the second
(after a power cut the file may be empty or missing): for files that a reboot makes void anyway, which their owner
removes or rewrites at start (the per-claim CDI specs, `bridge.cdi.writer`). It costs two page-cache operations
instead of two fsyncs, which on a busy disk are milliseconds each.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

TEMP_MARK = ".tmp-"
T = TypeVar("T")


def in_directory(directory: Path, op: Callable[[], T]) -> T:
    """`op()`, which creates a file in `directory`; when that fails because the directory is missing (first use, or
    removed while running), the directory is made and `op` runs once more. A `mkdir` before every write would be a
    syscall on every call (a checkpoint write, a lock, a CDI spec: the kubelet waits for them)."""
    try:
        return op()
    except FileNotFoundError:
        directory.mkdir(parents=True, exist_ok=True)
        return op()


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


class UnreadableFile(OSError):
    """A file `read_regular` refuses: not a regular file (`kind` says what it is) or over the limit. An OSError, so
    callers that treat "cannot read" alike need no new except clause."""

    def __init__(self, path: str | os.PathLike[str], reason: str, kind: str, size: int | None = None) -> None:
        super().__init__(errno.EINVAL, reason, str(path))
        self.reason = reason
        self.kind = kind  # "symlink", "not-regular", "too-large"
        self.size = size  # the size found, for "too-large" (None: it grew while read)

    def __str__(self) -> str:
        return f"{self.filename}: {self.reason}"


def file_type(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO")."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def _open_regular(path: str | os.PathLike[str], limit: int, follow_links: bool) -> tuple[int, int] | None:
    """(descriptor, size) of the regular file at `path` of at most `limit` bytes; None when it does not exist
    (`read_regular`)."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == errno.ELOOP and not follow_links:
            raise UnreadableFile(path, "a symbolic link, not a regular file", "symlink") from err
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableFile(path, f"{file_type(info.st_mode)}, not a regular file", "not-regular")
        if info.st_size > limit:
            raise UnreadableFile(path, f"{info.st_size} bytes, over the {limit}-byte limit", "too-large",
                                 info.st_size)
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def _grew(path: str | os.PathLike[str], limit: int) -> UnreadableFile:
    return UnreadableFile(path, f"grew while read to over the {limit}-byte limit", "too-large")


def _rest(path: str | os.PathLike[str], fd: int, limit: int, total: int) -> list[bytes]:
    """The file from where `total` bytes were read on to its end, in chunks (it grew while read)."""
    chunks = []
    while chunk := os.read(fd, min(1 << 20, limit + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise _grew(path, limit)
    return chunks


def read_regular(path: str | os.PathLike[str], limit: int, *, follow_links: bool = False) -> bytes | None:
    """The bytes of the regular file at `path` (at most `limit`); None when it does not exist. Raises
    `UnreadableFile` for a symlink (unless `follow_links`), anything but a regular file, or more than `limit`
    bytes, and OSError when it cannot be read (see the module docstring)."""
    opened = _open_regular(path, limit, follow_links)
    if opened is None:
        return None
    fd, size = opened
    try:
        # The whole file in one read when it does not grow (one buffer, no join: a snapshot's files are hundreds of
        # MB), then on to its end in chunks.
        first = os.read(fd, min(size + 1, limit + 1))
        if len(first) > limit:  # grew while we read
            raise _grew(path, limit)
        return b"".join([first, *_rest(path, fd, limit, len(first))]) if first else first
    finally:
        os.close(fd)


class ReadBuffer:
    """Memory `read_regular_into` reuses from file to file: `data` starts with the last file read; the rest holds
    bytes of earlier files, or zeros (so when all of `data` is ASCII, the last file is)."""

    def __init__(self) -> None:
        self.data = bytearray()


def read_regular_into(path: str | os.PathLike[str], limit: int, buffer: ReadBuffer, *,
                      follow_links: bool = False) -> memoryview | None:
    """`read_regular` into `buffer`: a view of the file's bytes at the start of `buffer.data` (`ReadBuffer`). The
    view is valid until the next read into the same buffer and must be released before it. Reading many large files
    into one buffer saves a fresh allocation per file, and the page faults of first touching it (a 150,000-pod
    snapshot is 230 MB of JSON)."""
    opened = _open_regular(path, limit, follow_links)
    if opened is None:
        return None
    fd, size = opened
    try:
        want = min(size + 1, limit + 1)
        data = buffer.data
        if len(data) < want:
            data.extend(bytes(want - len(data)))
        view = memoryview(data)
        try:
            total = 0
            while total < want and (n := os.readv(fd, [view[total:want]])):
                total += n
        finally:
            view.release()
        if total > limit:  # grew while we read
            raise _grew(path, limit)
        if total == want:  # grew past its size while we read: on to its end
            rest = b"".join(_rest(path, fd, limit, total))
            if len(data) < total + len(rest):
                data.extend(bytes(total + len(rest) - len(data)))
            data[total:total + len(rest)] = rest
            total += len(rest)
    finally:
        os.close(fd)
    return memoryview(data)[:total]


__all__ = ["TEMP_MARK", "ReadBuffer", "UnreadableFile", "atomic_write_bytes", "file_type", "fsync_dir", "in_directory",
           "read_regular", "read_regular_into", "temp_name"]
