"""Unix-socket hygiene shared by every socket the node daemon (device plugin, DRA, registration) creates.

Invariants:
* A unix socket path is limited by `sockaddr_un.sun_path` (108 bytes on Linux, including the terminating NUL), so
  107 bytes is the longest usable path. gRPC fails late and cryptically on a longer one; we check every path
  before creating anything and fail with the path and its length.
* We only ever delete *our own* socket files, and only when they are sockets: never another plugin's socket and
  never a regular file that happens to have our name.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_SOCKET_PATH_BYTES = 107


class SocketPathError(ValueError):
    """A configured unix socket path cannot be used (too long, or a non-socket file is in the way)."""


def check_socket_path(path: str | os.PathLike[str]) -> str:
    """Return `path` as an absolute string, or raise SocketPathError when it exceeds the unix socket limit."""
    text = os.path.abspath(os.fspath(path))
    size = len(os.fsencode(text))
    if size > MAX_SOCKET_PATH_BYTES:
        raise SocketPathError(
            f"unix socket path {text!r} is {size} bytes long; the limit is {MAX_SOCKET_PATH_BYTES} bytes "
            f"(sockaddr_un.sun_path): choose a shorter --kubelet-root or socket name"
        )
    return text


def is_socket(path: str | os.PathLike[str]) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def remove_stale_socket(path: str | os.PathLike[str]) -> bool:
    """Remove a leftover socket at `path` before listening there. Returns True if one was removed.

    Raises SocketPathError if something that is not a socket occupies the path (we refuse to delete it)."""
    p = Path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketPathError(f"{p} exists and is not a unix socket; refusing to replace it")
    try:
        p.unlink()
    except FileNotFoundError:
        return False
    return True


def unix_target(path: str | os.PathLike[str]) -> str:
    """The gRPC target for a unix socket path."""
    return "unix://" + os.path.abspath(os.fspath(path))
