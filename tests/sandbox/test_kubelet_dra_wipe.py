"""The simulated kubelet wipes ResourceSlices when and how the real one does (pkg/kubelet/cm/dra/manager.go
`defaultWipingDelay`, plugin/dra_plugin_manager.go `wipeResourceSlices`, `sync`): all of the node's slices at
start, in the background and only once the Node exists, so the wipe can land after a driver registered and
published; and a driver's slices `wiping_delay` (30 s) after its last instance stopped being reachable, unless it
comes back in time. Before issue 14 the simulator wiped synchronously before the watcher started and never after."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from bridge._proto.dra.v1 import dra_pb2_grpc as pb_grpc
from bridge.kube import NODES, KubeAPI, connect
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.kubelet.dramanager import DraManager
from bridge.sandbox.kubelet.slicewipe import WIPING_DELAY_S
from tests.polling import wait_until
from tests.sandbox.conftest import resource_slice
from tests.sandbox.draplugins import DRIVER, OTHER, Script, ScriptedDra, ScriptedPlugin

NODE = "node-a"


@dataclass
class World:
    api: KubeAPI
    root: Path
    kubeconfig: Path

    def node(self, name: str = NODE) -> None:
        self.api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})

    def slice(self, name: str, node: str = NODE, driver: str = DRIVER) -> None:
        self.api.create(self.api.resource_api().slices, resource_slice(name, node=node, driver=driver))

    def slices(self) -> set[str]:
        return {s["metadata"]["name"] for s in self.api.list(self.api.resource_api().slices)["items"]}

    def kubelet(self, **kw: float) -> DraManager:
        return DraManager(connect(str(self.kubeconfig)), NODE, str(self.root / "plugins_registry"),
                          poll_interval=0.05, **kw)


@pytest.fixture
def world(short_tmp: Path) -> Iterator[World]:
    with ApiServer() as srv:
        kubeconfig = srv.write_kubeconfig(short_tmp / "kubeconfig")
        yield World(connect(str(kubeconfig)), short_tmp, kubeconfig)


def test_the_startup_wipe_waits_for_the_node_and_can_delete_slices_a_driver_published_after_registering(
        world: World) -> None:
    kubelet = world.kubelet(wipe_backoff=0.1)
    kubelet.start()
    plugin = ScriptedPlugin(world.root, DRIVER, Script())
    try:
        kubelet.wait_for_plugin(DRIVER, 30)
        world.slice("published-after-registration")  # the driver publishes as soon as it is registered
        time.sleep(0.5)
        assert "published-after-registration" in world.slices(), "no Node yet: the wipe keeps retrying"
        world.node()  # the kubelet's own registration lands
        wait_until(lambda: "published-after-registration" not in world.slices(), 30,
                   "the startup wipe to delete the slice")
        # The wiper notes a wipe once the API server answered it, after the slice is gone for everyone.
        wait_until(lambda: kubelet.wiper.wipes, 30, "the wiper to note its wipe")
        assert [d for d, _ in kubelet.wiper.wipes] == [""]  # one wipe of all drivers' slices
    finally:
        kubelet.stop()
        plugin.stop()


class DraService:
    """Only the DRA service socket of a driver (what goes away when the driver's process dies)."""

    def __init__(self, endpoint: Path) -> None:
        self.server = grpc.server(futures.ThreadPoolExecutor(2))
        pb_grpc.add_DRAPluginServicer_to_server(ScriptedDra(Script()), self.server)
        self.server.add_insecure_port(f"unix://{endpoint}")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(0).wait()


def test_a_drivers_slices_are_wiped_after_its_last_instance_is_gone_for_the_wiping_delay(world: World) -> None:
    assert WIPING_DELAY_S == 30.0  # pkg/kubelet/cm/dra/manager.go defaultWipingDelay (the test shortens it below)
    world.node()
    world.node("node-b")
    kubelet = world.kubelet(wiping_delay=0.6)
    kubelet.start()
    plugin = ScriptedPlugin(world.root, DRIVER, Script())
    try:
        wait_until(lambda: (c := kubelet.plugin(DRIVER)) is not None and c.connected, 30, "a connected plugin")
        # The startup wipe runs in the background and deletes every slice of this node: publish after it.
        wait_until(lambda: kubelet.wiper.wipes, 30, "the startup wipe")
        world.slice("ours")
        world.slice("ours-elsewhere", node="node-b")
        world.slice("theirs", driver=OTHER)
        plugin.dra.stop(0).wait()  # the driver's process dies: its service socket is gone
        wait_until(lambda: "ours" not in world.slices(), 30, "the driver's slices on this node to be wiped")
        assert {"ours-elsewhere", "theirs"} <= world.slices(), "only this driver's slices on this node"
        # The wiper notes a wipe once the API server answered it, after the slice is gone for everyone.
        wait_until(lambda: [d for d, _ in kubelet.wiper.wipes][-1:] == [DRIVER], 30,
                   "the wiper to note the driver's wipe")
    finally:
        kubelet.stop()
        plugin.stop()


def test_a_driver_that_comes_back_within_the_wiping_delay_keeps_its_slices(world: World) -> None:
    world.node()
    kubelet = world.kubelet(wiping_delay=1.5)
    kubelet.start()
    plugin = ScriptedPlugin(world.root, DRIVER, Script())
    service: DraService | None = None
    try:
        wait_until(lambda: (c := kubelet.plugin(DRIVER)) is not None and c.connected, 30, "a connected plugin")
        wait_until(lambda: kubelet.wiper.wipes, 30, "the startup wipe")  # it runs in the background: publish after it
        world.slice("ours")
        plugin.dra.stop(0).wait()
        wait_until(lambda: kubelet.wiper.pending() == [DRIVER], 30, "a wipe to be scheduled")
        service = DraService(world.root / f"{DRIVER}.sock")  # the driver restarts in time
        wait_until(lambda: kubelet.wiper.pending() == [], 30, "the wipe to be cancelled")
        time.sleep(2.0)  # past the original wipe time
        assert "ours" in world.slices()
    finally:
        kubelet.stop()
        plugin.stop()
        if service is not None:
            service.stop()
