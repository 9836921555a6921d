"""Suite-wide fixtures. Topic fixtures live in each tests/<topic>/conftest.py."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from bridge.sandbox.kubelet import KubeletSimulator

# The whole-cluster fixture (`sandbox_cluster`) for every topic's whole-flow tests.
pytest_plugins = ["tests.sandbox_cluster", "tests.imagebuilt"]


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temp directory with a short path: unix socket paths must stay under 107 bytes, and pytest's tmp_path
    can be long on some machines."""
    with tempfile.TemporaryDirectory(prefix="br-", dir="/tmp" if os.path.isdir("/tmp") else None) as d:
        yield Path(d)


@pytest.fixture(autouse=True)
def _restore_root_logging() -> Iterator[None]:
    """Commands run in-process (click's CliRunner) call `setup_logging`, which sets the root logger's level and
    handlers for the whole process. Put them back after each test, so no test inherits another's logging (an INFO
    root level makes pytest's log capture keep every record, which e.g. memory-flatness tests would measure)."""
    import logging

    root = logging.getLogger()
    level, handlers = root.level, root.handlers[:]
    yield
    root.setLevel(level)
    root.handlers[:] = handlers


@pytest.fixture
def kubelet(short_tmp: Path) -> Iterator["KubeletSimulator"]:
    """A kubelet simulator (device manager + PodResources, no API side) in a short temp dir."""
    from bridge.sandbox.kubelet import KubeletSimulator

    sim = KubeletSimulator(short_tmp).start()
    yield sim
    sim.stop()


@pytest.fixture
def unreachable_kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig naming an API server on a loopback port nobody listens on (connection refused at once)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    return kubeconfig_for(f"http://127.0.0.1:{port}", tmp_path / "unreachable.kubeconfig")


def kubeconfig_for(server: str, path: Path) -> Path:
    """Write a token kubeconfig for the API server at `server` (a URL) to `path`."""
    import yaml

    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": server}}],
        "users": [{"name": "x", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}))
    return path
