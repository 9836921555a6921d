"""The kubelet can stop listening to a device plugin that keeps serving; the plugin notices and registers again.

Through kubelet 1.36 an old instance's ListAndWatch stream ending disconnects the resource's CURRENT endpoint and
marks every device unhealthy (the kubelet simulator's 1.36 rule, tests/sandbox/test_kubelet_device_rules.py): a
plugin that only watches `kubelet.sock` stays cut off for good, allocatable 0, and after 5 minutes the resource
leaves the node. These tests run two real device-plugin instances (`NodeDaemon`s on two socket names, as in a
surge rollout) against that rule, and a hostile kubelet that keeps dropping the plugin.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from prometheus_client import CollectorRegistry

from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as pb
from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from bridge.deviceplugin.allocate import AllocationConfig
from bridge.deviceplugin.metrics import DevicePluginMetrics
from bridge.deviceplugin.plugin import DevicePlugin, PluginConfig
from bridge.deviceplugin.state import DeviceTable
from bridge.inventory.simulated import SimulatedSource, devices_from_spec
from bridge.node.daemon import NodeConfig, NodeDaemon
from bridge.sandbox.kubelet import KubeletConfig, KubeletSimulator

from .conftest import RESOURCE, wait_until

GPUS = 8


@pytest.fixture
def kubelet_at(short_tmp: Path) -> Iterator[Callable[[str], KubeletSimulator]]:
    sims: list[KubeletSimulator] = []

    def make(version: str) -> KubeletSimulator:
        sim = KubeletSimulator(short_tmp, config=KubeletConfig(version=version)).start()
        sims.append(sim)
        return sim

    yield make
    for s in sims:
        s.stop()


@pytest.fixture
def instance(short_tmp: Path) -> Iterator[Callable[[str], NodeDaemon]]:
    """One device-plugin instance of the daemon on its own socket name (what --pod-uid gives each pod)."""
    started: list[NodeDaemon] = []

    def make(name: str) -> NodeDaemon:
        cfg = NodeConfig(node_name="node-a", kubelet_root=short_tmp, cdi_root=short_tmp / "cdi",
                         state_dir=short_tmp / f"st-{name}", http_address=None,
                         device_plugin_socket_name=f"dra-bridge-nvidia.com-gpu-{name}.sock")
        daemon = NodeDaemon(cfg, SimulatedSource.from_spec(f"{GPUS}xH100-80GB", "node-a"))
        started.append(daemon)
        daemon.start()
        assert daemon.wait_registered(20)
        return daemon

    yield make
    for d in reversed(started):
        d.stop()


def allocatable(kubelet: KubeletSimulator) -> int:
    return kubelet.devices.resource(RESOURCE).allocatable


def stays(cond: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not cond():
            return False
        time.sleep(0.02)
    return True


def test_on_a_1_36_kubelet_the_old_instance_stopping_cuts_us_off_and_we_register_again_within_2s(
        kubelet_at: Callable[[str], KubeletSimulator], instance: Callable[[str], NodeDaemon]) -> None:
    kubelet = kubelet_at("1.36")
    old = instance("old")
    new = instance("new")
    assert new.plugin is not None
    assert kubelet.devices.endpoint(RESOURCE) == new.plugin.socket_path
    assert kubelet.devices.wait_for(lambda m: allocatable(kubelet) == GPUS, 20)

    old.stop()  # its stream ends: the 1.36 kubelet disconnects the CURRENT endpoint, ours, and marks all unhealthy
    stopped = time.monotonic()
    assert kubelet.devices.wait_for(
        lambda m: new.plugin is not None and new.plugin.registrations == 2 and allocatable(kubelet) == GPUS
        and m.resource(RESOURCE).connected, 20), "the new instance never registered again"
    took = time.monotonic() - stopped
    print(f"allocatable back to {GPUS} {took:.2f}s after the old instance stopped")
    assert took < 2.0
    assert stays(lambda: allocatable(kubelet) == GPUS, 1.5)
    assert new.plugin.registrations == 2
    assert kubelet.devices.endpoint(RESOURCE) == new.plugin.socket_path
    assert new.metrics.registry.get_sample_value("dra_bridge_deviceplugin_kubelet_disconnects_total",
                                                 {"resource": RESOURCE}) == 1
    # And the endpoint answers: the kubelet allocates through the re-registered instance.
    kubelet.devices.allocate("pod-1", "main", RESOURCE, 2)


def test_on_a_1_37_kubelet_the_old_instance_stopping_leaves_us_alone_and_we_do_not_re_register(
        kubelet_at: Callable[[str], KubeletSimulator], instance: Callable[[str], NodeDaemon]) -> None:
    kubelet = kubelet_at("1.37")
    old = instance("old")
    new = instance("new")
    assert new.plugin is not None
    old.stop()
    assert stays(lambda: allocatable(kubelet) == GPUS and kubelet.devices.resource(RESOURCE).connected, 1.5)
    assert (new.plugin.registrations, new.plugin.disconnects) == (1, 0)


class DroppingKubelet(pb_grpc.RegistrationServicer):
    """A kubelet that accepts every Register, then reads one ListAndWatch message and closes the stream (or, with
    `open_stream=False`, never opens one)."""

    def __init__(self, plugin_dir: Path, *, open_stream: bool) -> None:
        self.plugin_dir = plugin_dir
        self.open_stream = open_stream
        self.registers: list[float] = []
        self._threads: list[threading.Thread] = []

    def Register(self, request, context):  # type: ignore[no-untyped-def]
        self.registers.append(time.monotonic())
        if self.open_stream:
            t = threading.Thread(target=self._drop, args=(request.endpoint,), daemon=True)
            self._threads.append(t)
            t.start()
        return pb.Empty()

    def _drop(self, endpoint: str) -> None:
        with grpc.insecure_channel(f"unix://{self.plugin_dir / endpoint}") as ch:
            stream = pb_grpc.DevicePluginStub(ch).ListAndWatch(pb.Empty(), timeout=10)
            next(stream)
            stream.cancel()

    def join(self) -> None:
        for t in self._threads:
            t.join(10)


@pytest.fixture
def dropping_kubelet(short_tmp: Path) -> Iterator[Callable[[bool], DroppingKubelet]]:
    servers: list[tuple[grpc.Server, DroppingKubelet]] = []

    def make(open_stream: bool) -> DroppingKubelet:
        plugin_dir = short_tmp / "device-plugins"
        plugin_dir.mkdir(exist_ok=True)
        servicer = DroppingKubelet(plugin_dir, open_stream=open_stream)
        server = grpc.server(ThreadPoolExecutor(4))
        pb_grpc.add_RegistrationServicer_to_server(servicer, server)
        server.add_insecure_port(f"unix:{plugin_dir / 'kubelet.sock'}")
        server.start()
        servers.append((server, servicer))
        return servicer

    yield make
    for server, servicer in servers:
        server.stop(0).wait()
        servicer.join()


def bare_plugin(root: Path, **config: float) -> DevicePlugin:
    table = DeviceTable(devices_from_spec("2xL4", "node-a"))
    metrics = DevicePluginMetrics(CollectorRegistry(), RESOURCE)
    return DevicePlugin(table, AllocationConfig(), metrics, PluginConfig(kubelet_root=root, **config))


def test_a_kubelet_that_keeps_dropping_us_is_answered_with_backoff_not_a_register_loop(
        short_tmp: Path, dropping_kubelet: Callable[[bool], DroppingKubelet]) -> None:
    kubelet = dropping_kubelet(True)
    plugin = bare_plugin(short_tmp)
    plugin.start()
    try:
        time.sleep(3.0)
    finally:
        plugin.stop()
    gaps = [b - a for a, b in zip(kubelet.registers, kubelet.registers[1:])]
    print(f"{len(kubelet.registers)} registrations in 3 s, gaps {[round(g, 2) for g in gaps]}")
    # Backoff 0.2 s doubling: about 5 registrations in 3 s (a 100 ms poll without it: ~15-30).
    assert 3 <= len(kubelet.registers) <= 7
    assert gaps[-1] > gaps[0]
    assert plugin.disconnects >= 2


def test_a_registration_whose_stream_never_opens_is_retried(
        short_tmp: Path, dropping_kubelet: Callable[[bool], DroppingKubelet]) -> None:
    kubelet = dropping_kubelet(False)
    plugin = bare_plugin(short_tmp, stream_wait_s=0.5)
    plugin.start()
    try:
        wait_until(lambda: len(kubelet.registers) >= 2, 10, "a second Register after no stream came")
        assert plugin.disconnects >= 1
    finally:
        plugin.stop()


def test_when_the_kubelet_holds_our_socket_path_we_register_again_on_a_fresh_socket(
        kubelet_at: Callable[[str], KubeletSimulator], instance: Callable[[str], NodeDaemon]) -> None:
    """A copy of our Register that the kubelet completed after we had given up on it (our 15 s timeout) leaves a
    1.37+ kubelet holding an endpoint on our path whose client it dropped (the simulator plays it, as the real
    kubelets v1.37.2 and v1.38.0-beta.0 do: tests/real/test_real_nodes.py). Every later Register on that path is
    refused for good ("device plugin already connected"): after our socket is re-created we must move to a fresh
    one, or the node keeps a device list nobody updates."""
    kubelet = kubelet_at("1.37")
    daemon = instance("a")
    plugin = daemon.plugin
    assert plugin is not None
    first = Path(plugin.socket_path)
    with grpc.insecure_channel(f"unix://{kubelet.kubelet_socket}") as ch, pytest.raises(grpc.RpcError) as late:
        pb_grpc.RegistrationStub(ch).Register(pb.RegisterRequest(
            version="v1beta1", endpoint=first.name, resource_name=RESOURCE), timeout=15)
    assert "device plugin already connected" in (late.value.details() or "")
    first.unlink()  # our socket is deleted: the daemon serves again and registers again, on the same path first
    assert wait_until(lambda: plugin.registrations == 2, 20), plugin.readiness()
    assert plugin.rotations == 1 and plugin.socket_path == str(first.with_name(f"{first.stem}-r1.sock"))
    assert daemon.metrics.registry.get_sample_value("dra_bridge_deviceplugin_socket_moves_total",
                                                    {"resource": RESOURCE}) == 1
    assert kubelet.devices.endpoint(RESOURCE) == plugin.socket_path
    assert kubelet.devices.wait_for(lambda m: allocatable(kubelet) == GPUS and m.resource(RESOURCE).connected, 20)
    kubelet.devices.allocate("pod-1", "main", RESOURCE, 2)  # through the new endpoint
