"""Fixtures for device-plugin tests: a kubelet simulator and node daemons on real unix sockets in a short dir."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from bridge.deviceplugin.allocate import ENVVAR
from bridge.deviceplugin.state import SideOf, all_legacy
from bridge.inventory.simulated import SimulatedSource
from bridge.node.daemon import NodeConfig, NodeDaemon
from bridge.sandbox.kubelet import KubeletSimulator
from tests.polling import wait_until  # noqa: F401  (re-exported to the tests here)

RESOURCE = "nvidia.com/gpu"
WAIT_S = 20.0


NodeFactory = Callable[..., NodeDaemon]


@pytest.fixture
def make_node(short_tmp: Path, kubelet: KubeletSimulator) -> Iterator[NodeFactory]:
    """Start a node daemon with simulated GPUs against the simulated kubelet in `short_tmp` (stopped at teardown)."""
    started: list[NodeDaemon] = []

    def make(spec: str = "8xH100-80GB", *, strategies: frozenset[str] = frozenset({ENVVAR}),
             side_of: SideOf = all_legacy, node_name: str = "node-a", register: bool = True,
             source: SimulatedSource | None = None) -> NodeDaemon:
        src = source or SimulatedSource.from_spec(spec, node_name)
        cfg = NodeConfig(node_name=node_name, kubelet_root=short_tmp, cdi_root=short_tmp / "cdi",
                         state_dir=short_tmp / "state", device_list_strategy=strategies,
                         http_address=("127.0.0.1", 0))
        daemon = NodeDaemon(cfg, src, side_of=side_of)
        daemon.start()
        started.append(daemon)
        if register:
            assert daemon.wait_registered(WAIT_S), "the device plugin did not register with the kubelet"
        return daemon

    yield make
    for d in reversed(started):
        d.stop()


@pytest.fixture
def dp_stub() -> Iterator[Callable[[str], pb_grpc.DevicePluginStub]]:
    """Open a DevicePlugin client on a socket path, like the kubelet does (closed at teardown)."""
    channels: list[grpc.Channel] = []

    def open_(path: str) -> pb_grpc.DevicePluginStub:
        ch = grpc.insecure_channel("unix://" + path)
        channels.append(ch)
        return pb_grpc.DevicePluginStub(ch)

    yield open_
    for ch in channels:
        ch.close()
