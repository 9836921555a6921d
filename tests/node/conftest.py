"""Fixtures for node-daemon tests: a kubelet simulator in a short temp dir and a daemon factory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bridge.inventory.simulated import SimulatedSource
from bridge.node.daemon import NodeConfig, NodeDaemon
from bridge.node.podresources import Adoption
from tests.polling import wait_until  # noqa: F401  (re-exported to the tests here)

RESOURCE = "nvidia.com/gpu"


@pytest.fixture
def node_daemon(short_tmp: Path) -> Iterator[Callable[..., NodeDaemon]]:
    started: list[NodeDaemon] = []

    def make(source: SimulatedSource | None = None, *,
             on_adopted: Callable[[Adoption], None] | None = None) -> NodeDaemon:
        src = source or SimulatedSource.from_spec("8xH100-80GB", "node-a")
        cfg = NodeConfig(node_name="node-a", kubelet_root=short_tmp, http_address=("127.0.0.1", 0))
        daemon = NodeDaemon(cfg, src, on_adopted=on_adopted)
        started.append(daemon)
        daemon.start()
        return daemon

    yield make
    for d in reversed(started):
        d.stop()
