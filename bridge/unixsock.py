"""Unix sockets, for every socket the node daemon serves (device plugin, DRA service, DRA registration) and for the
kubelet simulator's: path checks, identity, and the one way we serve a gRPC server on a path (`serve_unix`).

Below both halves of the daemon and the sandbox (`bridge.deviceplugin`, `bridge.dra`, `bridge.node`,
`bridge.sandbox.kubelet` all use it); it imports nothing of the project.

Invariants:
* A unix socket path is limited by `sockaddr_un.sun_path` (108 bytes on Linux, including the terminating NUL), so
  107 bytes is the longest usable path. gRPC fails late and cryptically on a longer one; we check every path
  before creating anything and fail with the path and its length.
* A socket is never reachable with the process umask's mode: `serve_unix` binds (gRPC creates the file at
  `add_insecure_port`), sets the mode, and only then starts the server (before `listen` every connect is refused).
  Under umask 0 a socket would otherwise be world-writable, and anyone on the node could call it (e.g. tell the DRA
  plugin the kubelet unregistered it).
* We only ever delete *our own* socket files, and only when they are sockets: never another plugin's socket and
  never a regular file that happens to have our name. `remove_own_socket` also checks the identity (inode, device,
  ctime) we recorded when we created it, so a socket someone else created at the same path since is left alone.
* gRPC itself unlinks a unix socket's PATH when its server stops, whoever's socket is there by then (grpc/grpc
  src/core/lib/iomgr/tcp_server_posix.cc `deactivated_all_ports` calls `grpc_unlink_if_unix_domain_socket`,
  src/core/lib/iomgr/unix_sockets_posix.cc, on the address it bound; tests/test_unixsock.py shows it). So a server that must be replaced is always stopped
  BEFORE a new socket is bound at its path, never after.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import grpc

MAX_SOCKET_PATH_BYTES = 107


class SocketPathError(ValueError):
    """A configured unix socket path cannot be used (too long, or a non-socket file is in the way)."""


class SocketVanished(SocketPathError):
    """The socket file was removed between bind and chmod (or before the server started): someone cleaned the
    directory (a restarting kubelet deletes every socket in `device-plugins/`). Not a configuration error: serving
    again is the answer."""


@dataclass(frozen=True)
class SocketIdentity:
    """Which socket file a path names: a re-created socket gets a new ctime even when its inode number is reused."""

    inode: int
    device: int
    ctime_ns: int


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


def socket_identity(path: str | os.PathLike[str]) -> SocketIdentity | None:
    """The identity of the unix socket at `path`, or None when there is no socket there."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISSOCK(st.st_mode):
        return None
    return SocketIdentity(st.st_ino, st.st_dev, st.st_ctime_ns)


def is_socket(path: str | os.PathLike[str]) -> bool:
    return socket_identity(path) is not None


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


def remove_own_socket(path: str | os.PathLike[str], identity: SocketIdentity | None) -> bool:
    """Remove the socket at `path` only if it is still the one we created (`identity`). True if removed."""
    if identity is None or socket_identity(path) != identity:
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def serve_unix(server: grpc.Server, path: str | os.PathLike[str], mode: int) -> SocketIdentity:
    """Serve `server` on the unix socket `path` with file mode `mode`, and return the socket's identity.

    Checks the path's length, removes a stale socket of ours there (refusing any other kind of file), binds, sets
    the mode, then starts the server. SocketPathError (naming the path) when any step is impossible, its subclass
    SocketVanished when the file was removed meanwhile (serve again, with a new server); the caller then stops
    `server`."""
    text = check_socket_path(path)
    remove_stale_socket(text)
    try:
        port = server.add_insecure_port("unix:" + text)
    except RuntimeError as err:  # newer grpcio raises instead of returning 0
        raise SocketPathError(f"cannot listen on unix socket {text} (is the directory writable?): {err}") from err
    if port == 0:
        raise SocketPathError(f"cannot listen on unix socket {text} (is the directory writable?)")
    try:
        os.chmod(text, mode)
    except FileNotFoundError as err:
        raise SocketVanished(f"unix socket {text} was removed before its mode could be set (the directory was "
                             "cleaned, e.g. by a restarting kubelet): serve again") from err
    except OSError as err:
        raise SocketPathError(f"cannot set mode {mode:o} on unix socket {text}: {err.strerror or err}") from err
    identity = socket_identity(text)
    if identity is None:
        raise SocketVanished(f"unix socket {text} disappeared while it was being served: serve again")
    server.start()
    return identity


def url_dial_problem(path: str) -> str | None:
    """Why a gRPC client given `"unix:" + path` (as the kubelet dials plugins) would not dial `path` as written, or
    None. gRPC parses it as a URL (Go's url.Parse in the kubelet): `//` starts a host, `?` a query, `#` a fragment,
    `%xx` is decoded, a control character is an error (kubernetes pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go
    `validateEndpoint`, v1.38.0-beta.0, refuses all of these)."""
    odd = [c for c in ("?", "#", "%") if c in path]
    if odd:
        return f"contains {' and '.join(repr(c) for c in odd)}"
    if path.startswith("//"):
        return "starts with '//'"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        return "contains a control character"
    return None


def unix_target(path: str | os.PathLike[str]) -> str:
    """The gRPC target for a unix socket path."""
    return "unix://" + os.path.abspath(os.fspath(path))


__all__ = ["MAX_SOCKET_PATH_BYTES", "SocketIdentity", "SocketPathError", "check_socket_path", "is_socket",
           "remove_own_socket", "remove_stale_socket", "serve_unix", "socket_identity", "unix_target",
           "url_dial_problem"]
