"""`bridge.unixsock`: how every socket of the daemon is served, and what of a socket path we may delete."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from bridge.unixsock import (
    SocketPathError,
    check_socket_path,
    remove_own_socket,
    serve_unix,
    socket_identity,
    url_dial_problem,
)


@pytest.fixture
def umask_zero() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def server() -> Iterator[grpc.Server]:
    srv = grpc.server(futures.ThreadPoolExecutor(1))
    yield srv
    srv.stop(0).wait()


def test_a_socket_served_under_umask_zero_has_the_mode_asked_for_not_world_writable(
        short_tmp: Path, umask_zero: None, server: grpc.Server) -> None:
    path = short_tmp / "reg.sock"
    identity = serve_unix(server, path, 0o660)
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o660
    assert identity == socket_identity(path)


def test_a_stale_socket_of_ours_is_replaced_but_a_regular_file_is_refused(short_tmp: Path,
                                                                          server: grpc.Server) -> None:
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(short_tmp / "a.sock"))
    stale.close()
    identity = serve_unix(server, short_tmp / "a.sock", 0o600)
    assert socket_identity(short_tmp / "a.sock") == identity

    (short_tmp / "b.sock").write_text("not a socket")
    other = grpc.server(futures.ThreadPoolExecutor(1))
    with pytest.raises(SocketPathError, match="is not a unix socket; refusing to replace it"):
        serve_unix(other, short_tmp / "b.sock", 0o600)
    assert (short_tmp / "b.sock").read_text() == "not a socket"


def test_a_path_over_107_bytes_is_refused_naming_its_length(short_tmp: Path) -> None:
    path = short_tmp / ("x" * 120 + ".sock")
    with pytest.raises(SocketPathError, match=r"is \d+ bytes long; the limit is 107 bytes"):
        check_socket_path(path)


def test_we_remove_only_the_socket_we_created_not_one_created_since_at_the_same_path(short_tmp: Path,
                                                                                     server: grpc.Server) -> None:
    path = short_tmp / "dp.sock"
    ours = serve_unix(server, path, 0o600)
    os.unlink(path)
    theirs = socket.socket(socket.AF_UNIX)
    theirs.bind(str(path))
    try:
        assert not remove_own_socket(path, ours)
        assert socket_identity(path) is not None
        assert remove_own_socket(path, socket_identity(path))
        assert not path.exists()
    finally:
        theirs.close()


def test_grpc_unlinks_the_path_of_a_stopped_server_whoever_owns_the_socket_there_now(short_tmp: Path) -> None:
    # Why a replaced server is always stopped BEFORE its successor binds the path (bridge.unixsock docstring).
    srv = grpc.server(futures.ThreadPoolExecutor(1))
    path = short_tmp / "g.sock"
    serve_unix(srv, path, 0o600)
    os.unlink(path)
    other = socket.socket(socket.AF_UNIX)
    other.bind(str(path))
    try:
        srv.stop(0).wait()
        assert not path.exists()
    finally:
        other.close()


@pytest.mark.parametrize(("path", "problem"), [
    ("/var/lib/kubelet/plugins/d/dra.sock", None),
    ("/var/lib/kube let/x.sock", None),  # a space is dialled as written
    ("//var/lib/kubelet/x.sock", "starts with '//'"),
    ("/var/lib/kube%41let/x.sock", "contains '%'"),
    ("/a?b#c", "contains '?' and '#'"),
    ("/a\tb", "contains a control character"),
])
def test_a_path_gRPC_would_not_dial_as_written_says_why(path: str, problem: str | None) -> None:
    assert url_dial_problem(path) == problem
