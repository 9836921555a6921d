"""Linux inotify through ctypes: the file events the kubelet's plugin watcher gets from fsnotify.

The kubelet watches `plugins_registry` with fsnotify (kubernetes/kubernetes
pkg/kubelet/pluginmanager/pluginwatcher/plugin_watcher.go), which on Linux is inotify. fsnotify reports
`IN_CREATE`/`IN_MOVED_TO` as Create and `IN_DELETE`/`IN_DELETE_SELF` as Remove (a move *out* of the directory is a
Rename, which the plugin watcher ignores). Events name the path, so a socket deleted and re-created under the same
name is two events even when the new socket gets the old inode number: identity is the event, not the inode.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import struct
from dataclasses import dataclass

IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ISDIR = 0x40000000
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000

WATCH_MASK = IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_DELETE_SELF | IN_MOVED_FROM
_HEADER = struct.Struct("iIII")


class InotifyUnavailable(OSError):
    pass


@dataclass(frozen=True)
class FileEvent:
    path: str
    created: bool  # fsnotify Create (IN_CREATE, IN_MOVED_TO)
    removed: bool  # fsnotify Remove (IN_DELETE, IN_DELETE_SELF)
    is_dir: bool
    overflow: bool = False  # the kernel queue overflowed: events were lost, rescan


def _libc() -> ctypes.CDLL:
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        libc.inotify_init1  # noqa: B018 - probe that the symbol exists
    except (OSError, AttributeError) as err:
        raise InotifyUnavailable(f"inotify is not available on this system: {err}") from err
    return libc


class Inotify:
    """One inotify instance; `add_watch` directories, then `read` events (with a timeout)."""

    def __init__(self) -> None:
        self._libc = _libc()
        fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            e = ctypes.get_errno()
            raise InotifyUnavailable(e, f"inotify_init1: {os.strerror(e)}")
        self.fd: int | None = fd
        self._dirs: dict[int, str] = {}

    def add_watch(self, directory: str) -> None:
        if self.fd is None:
            raise ValueError("inotify instance is closed")
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(directory), WATCH_MASK)
        if wd < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"inotify_add_watch {directory}: {os.strerror(e)}")
        self._dirs[wd] = directory

    def read(self, timeout: float) -> list[FileEvent]:
        """Events that arrived within `timeout` seconds (an empty list when none did)."""
        if self.fd is None:
            return []
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return []
        try:
            data = os.read(self.fd, 64 * 1024)
        except OSError as err:
            if err.errno in (errno.EAGAIN, errno.EINTR):
                return []
            raise
        events: list[FileEvent] = []
        offset = 0
        while offset + _HEADER.size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
            raw = data[offset + _HEADER.size: offset + _HEADER.size + length]
            offset += _HEADER.size + length
            if mask & IN_Q_OVERFLOW:
                events.append(FileEvent("", False, False, False, overflow=True))
                continue
            directory = self._dirs.get(wd)
            if mask & IN_IGNORED:
                self._dirs.pop(wd, None)
                continue
            if directory is None:
                continue
            name = os.fsdecode(raw.split(b"\0", 1)[0])
            path = os.path.join(directory, name) if name else directory
            events.append(FileEvent(path, bool(mask & (IN_CREATE | IN_MOVED_TO)),
                                    bool(mask & (IN_DELETE | IN_DELETE_SELF)), bool(mask & IN_ISDIR)))
        return events

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
            self._dirs.clear()
