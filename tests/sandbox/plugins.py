"""Device-plugin doubles for the kubelet simulator's tests: a minimal DevicePlugin servicer on a real unix socket
(a fixed device list whose health the test flips; Allocate calls recorded), and helpers to register it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as pb
from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from bridge.sandbox.kubelet import KubeletSimulator

RES = "example.com/widget"


class FakePlugin(pb_grpc.DevicePluginServicer):
    """A minimal device plugin: a fixed device list whose health the test flips; records Allocate calls."""

    def __init__(self, ids: list[str], preferred: list[str] | None = None) -> None:
        self.health = {i: "Healthy" for i in ids}
        self.preferred = preferred
        self.allocations: list[list[str]] = []
        self.cond = threading.Condition()
        self.version = 0
        self.closed = threading.Event()
        self.streams_open = 0  # ListAndWatch streams currently open (the kubelet's connection to us)
        self.options_calls = 0
        self.allocating = threading.Event()  # set when an Allocate call is in the plugin
        self.gate: threading.Event | None = None  # when set by a test: Allocate answers only once it is set

    def set(self, device: str, health: str) -> None:
        with self.cond:
            self.health[device] = health
            self.version += 1
            self.cond.notify_all()

    def GetDevicePluginOptions(self, request, context):  # type: ignore[no-untyped-def]
        self.options_calls += 1
        return pb.DevicePluginOptions(get_preferred_allocation_available=self.preferred is not None)

    def ListAndWatch(self, request, context):  # type: ignore[no-untyped-def]
        seen = -1
        with self.cond:
            self.streams_open += 1
        try:
            while context.is_active() and not self.closed.is_set():
                with self.cond:
                    if self.version == seen:
                        self.cond.wait(0.1)
                        continue
                    seen = self.version
                    msg = pb.ListAndWatchResponse(devices=[
                        pb.Device(ID=i, health=h, topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=n % 2)]))
                        for n, (i, h) in enumerate(sorted(self.health.items()))])
                yield msg
        finally:
            with self.cond:
                self.streams_open -= 1

    def GetPreferredAllocation(self, request, context):  # type: ignore[no-untyped-def]
        size = request.container_requests[0].allocation_size
        return pb.PreferredAllocationResponse(container_responses=[
            pb.ContainerPreferredAllocationResponse(deviceIDs=(self.preferred or [])[:size])])

    def Allocate(self, request, context):  # type: ignore[no-untyped-def]
        ids = list(request.container_requests[0].devices_ids)
        self.allocations.append(ids)
        self.allocating.set()
        if self.gate is not None:
            self.gate.wait(30)
        return pb.AllocateResponse(container_responses=[
            pb.ContainerAllocateResponse(envs={"IDS": ",".join(ids)})])


class Served:
    def __init__(self, path: Path, servicer: FakePlugin) -> None:
        self.path = path
        self.servicer = servicer
        self.pool = ThreadPoolExecutor(8)
        self.server = grpc.server(self.pool)
        pb_grpc.add_DevicePluginServicer_to_server(servicer, self.server)
        self.server.add_insecure_port("unix:" + str(path))
        self.server.start()

    def stop(self) -> None:
        self.servicer.closed.set()
        self.server.stop(0).wait()
        self.pool.shutdown()


def register(kubelet: KubeletSimulator, endpoint: str, resource: str = RES, version: str = "v1beta1") -> None:
    with grpc.insecure_channel(f"unix://{kubelet.kubelet_socket}") as ch:
        pb_grpc.RegistrationStub(ch).Register(pb.RegisterRequest(
            version=version, endpoint=endpoint, resource_name=resource,
            options=pb.DevicePluginOptions()), timeout=15)


def start_plugin(kubelet: KubeletSimulator, served: list[Served], ids: list[str], name: str = "w.sock",
                 preferred: list[str] | None = None) -> FakePlugin:
    plugin = FakePlugin(ids, preferred)
    served.append(Served(kubelet.device_plugin_dir / name, plugin))
    updates = kubelet.devices.resource(RES).updates
    register(kubelet, name)
    # Registered and its first device list (all healthy) received.
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).updates > updates
                                    and m.resource(RES).allocatable == len(ids), 20)
    return plugin


def stop_plugin(served: list[Served], plugin: FakePlugin) -> None:
    """Stop one plugin instance's server (its ListAndWatch stream ends, as when its pod goes away)."""
    for s in served:
        if s.servicer is plugin:
            s.stop()


@pytest.fixture
def served(kubelet: KubeletSimulator) -> Iterator[list[Served]]:
    out: list[Served] = []
    yield out
    for s in out:
        s.stop()
