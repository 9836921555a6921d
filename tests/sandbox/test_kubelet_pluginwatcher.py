"""The simulated plugin watcher sees registration sockets the way the kubelet does: by name and inotify event
(pkg/kubelet/pluginmanager/pluginwatcher/plugin_watcher.go, reconciler/reconciler.go), so a plugin that restarts
and re-creates its socket is registered again even when the new socket gets the old inode number (issue 16
item 8: the watcher that compared inodes never noticed)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from bridge.dra.registration import RegistrationServicer, add_to_server, supported_versions
from bridge.sandbox.kubelet.pluginwatcher import PluginWatcher
from tests.polling import wait_until

DRIVER = "gpu.example.com"


class Recorder:
    """A plugin handler that accepts everything and records the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def validate_plugin(self, name: str, endpoint: str, versions: list[str]) -> None:
        pass

    def register_plugin(self, name: str, endpoint: str, versions: list[str]) -> None:
        with self.lock:
            self.calls.append(("register", name))

    def deregister_plugin(self, name: str, endpoint: str) -> None:
        with self.lock:
            self.calls.append(("deregister", name))

    def count(self, what: str) -> int:
        with self.lock:
            return sum(1 for c, _ in self.calls if c == what)


class RegServer:
    """A real plugin registration server on `path` (what a DRA driver's registrar serves)."""

    def __init__(self, path: Path, name: str = DRIVER) -> None:
        self.server = grpc.server(futures.ThreadPoolExecutor(2))
        add_to_server(RegistrationServicer(name, f"/run/{name}.sock", supported_versions(health=False)), self.server)
        self.server.add_insecure_port(f"unix://{path}")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(0).wait()  # grpc removes the socket file


@pytest.fixture
def watched(short_tmp: Path) -> Iterator[tuple[Path, Recorder]]:
    registry = short_tmp / "plugins_registry"
    handler = Recorder()
    watcher = PluginWatcher(registry, {"DRAPlugin": handler}, poll_interval=0.05)
    watcher.start()
    yield registry, handler
    watcher.stop()


def test_a_plugin_that_recreates_its_socket_with_the_same_inode_is_registered_again(
        watched: tuple[Path, Recorder]) -> None:
    registry, handler = watched
    path = registry / f"{DRIVER}-reg.sock"
    first = RegServer(path)
    wait_until(lambda: handler.count("register") == 1, 30, "the first registration")
    inode = os.stat(path).st_ino
    # The plugin restarts: its socket disappears and comes back at once, and the filesystem hands the new
    # socket the inode number the old one had (ext4 and tmpfs reuse a freed inode straight away).
    first.stop()
    second = RegServer(path)
    try:
        reused = os.stat(path).st_ino == inode
        wait_until(lambda: handler.count("register") == 2, 30, "the registration of the restarted plugin")
        assert handler.calls == [("register", DRIVER), ("deregister", DRIVER), ("register", DRIVER)]
        if not reused:
            pytest.skip("the filesystem gave the new socket a new inode; the reuse case was not exercised")
    finally:
        second.stop()


def test_a_removed_socket_deregisters_and_dot_files_and_plain_files_are_ignored(
        watched: tuple[Path, Recorder]) -> None:
    registry, handler = watched
    (registry / "notes.txt").write_text("not a socket")
    hidden = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hidden.bind(str(registry / ".hidden.sock"))
    (registry / "sub").mkdir()
    server = RegServer(registry / "sub" / f"{DRIVER}-reg.sock")  # sockets below new directories are watched too
    wait_until(lambda: handler.count("register") == 1, 30, "the plugin in the sub-directory")
    server.stop()
    wait_until(lambda: handler.count("deregister") == 1, 30, "the deregistration")
    hidden.close()
    assert handler.calls == [("register", DRIVER), ("deregister", DRIVER)]


def test_sockets_present_before_the_watcher_starts_count_as_created(short_tmp: Path) -> None:
    registry = short_tmp / "plugins_registry"
    registry.mkdir()
    server = RegServer(registry / f"{DRIVER}-reg.sock")
    handler = Recorder()
    watcher = PluginWatcher(registry, {"DRAPlugin": handler}, poll_interval=0.05)
    watcher.start()
    try:
        wait_until(lambda: handler.count("register") == 1, 30, "registration of the existing socket")
    finally:
        watcher.stop()
        server.stop()
