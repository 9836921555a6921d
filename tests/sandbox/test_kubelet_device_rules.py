"""The simulated device manager follows the real kubelet's rules that a device plugin cannot see coming:
who gets disconnected when an old instance's stream ends (by release), that a re-registration leaves the old
client running, the 5-minute removal, the node status it feeds, and what PodResources leaves out.

Each test here failed against the simulator before issue 14 (which closed the old client on re-registration,
ignored an old stream ending, never removed a resource, posted no node status and reported init containers).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from bridge._proto.podresources.v1 import podresources_pb2 as prpb
from bridge._proto.podresources.v1 import podresources_pb2_grpc as prpb_grpc
from bridge.kube import NODES, KubeAPI, connect
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.kubelet import KubeletConfig, KubeletSimulator
from bridge.sandbox.kubelet.nodestatus import UPDATE_FREQUENCY_S
from tests.polling import wait_until
from tests.sandbox.plugins import RES, FakePlugin, Served, start_plugin, stop_plugin

IDS = ["w0", "w1", "w2", "w3"]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def make_kubelet(short_tmp: Path) -> Iterator[Callable[..., KubeletSimulator]]:
    sims: list[KubeletSimulator] = []

    def make(version: str = "1.34", **kw: object) -> KubeletSimulator:
        sim = KubeletSimulator(short_tmp / f"k{len(sims)}", config=KubeletConfig(version=version), **kw)  # type: ignore[arg-type]
        sims.append(sim.start())
        return sim

    yield make
    for s in sims:
        s.stop()


@pytest.fixture
def served() -> Iterator[list[Served]]:
    out: list[Served] = []
    yield out
    for s in out:
        s.stop()


def surge_rollout(kubelet: KubeletSimulator, served: list[Served]) -> tuple[FakePlugin, FakePlugin]:
    """Instance A registers, instance B (new socket, same resource) registers, A goes away."""
    a = start_plugin(kubelet, served, IDS, name="a.sock")
    b = start_plugin(kubelet, served, IDS, name="b.sock")
    assert kubelet.devices.endpoint(RES) == str(kubelet.device_plugin_dir / "b.sock")
    stop_plugin(served, a)
    return a, b


def test_through_1_36_the_old_instance_ending_disconnects_the_new_one_and_allocatable_drops_to_zero(
        make_kubelet: Callable[..., KubeletSimulator], served: list[Served]) -> None:
    kubelet = make_kubelet("1.36")
    _, b = surge_rollout(kubelet, served)
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 0, 20)
    state = kubelet.devices.resource(RES)
    assert state.capacity == 4 and not state.connected and state.stopped_at is not None
    # B is alive and serving, yet the kubelet closed its connection and keeps no client for the resource.
    assert kubelet.devices.clients(RES) == []
    wait_until(lambda: b.streams_open == 0, 20, "the kubelet to close B's ListAndWatch")
    b.set("w0", "Healthy")  # nothing listens any more: allocatable stays 0 until the plugin registers again
    time.sleep(0.3)
    assert kubelet.devices.resource(RES).allocatable == 0


def test_from_1_37_only_the_instance_whose_stream_ended_is_disconnected(
        make_kubelet: Callable[..., KubeletSimulator], served: list[Served]) -> None:
    kubelet = make_kubelet("1.37")
    _, b = surge_rollout(kubelet, served)
    b_sock = str(kubelet.device_plugin_dir / "b.sock")
    assert kubelet.devices.wait_for(lambda m: m.clients(RES) == [b_sock], 20)
    state = kubelet.devices.resource(RES)
    assert state.allocatable == 4 and state.connected and state.stopped_at is None
    assert kubelet.devices.endpoint(RES) == b_sock and b.streams_open == 1
    b.set("w3", "Unhealthy")  # B's stream still feeds the kubelet
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 3, 20)


def test_from_1_37_a_second_registration_on_a_connected_socket_is_refused_and_orphans_the_first(
        make_kubelet: Callable[..., KubeletSimulator], served: list[Served]) -> None:
    """manager.go PluginConnected (v1.37.2, v1.38.0-beta.0): the kubelet dials the socket and asks its options, then
    refuses ("device plugin already connected: <path>"); handler.go's deregisterClient then drops every client on
    that path, the connected one's too. So when that plugin's stream ends, nothing is disconnected: the resource
    keeps its devices healthy, and the same path is refused again for good (seen on real kubelets:
    tests/real/test_real_nodes.py)."""
    from tests.sandbox.plugins import register

    kubelet = make_kubelet("1.37")
    plugin = start_plugin(kubelet, served, IDS, name="a.sock")
    asked = plugin.options_calls
    socket_path = kubelet.device_plugin_dir / "a.sock"
    with pytest.raises(grpc.RpcError) as err:
        register(kubelet, "a.sock")
    assert err.value.details() == f"device plugin already connected: {socket_path}"
    assert plugin.options_calls == asked + 1  # dialled and asked before it refused
    assert kubelet.devices.clients(RES) == []
    served[0].stop()  # the plugin goes away: its stream ends, and no client of the path is left to disconnect
    time.sleep(1.0)
    state = kubelet.devices.resource(RES)
    assert state.connected and state.allocatable == len(IDS)
    served.append(Served(socket_path, FakePlugin(IDS)))
    with pytest.raises(grpc.RpcError) as again:
        register(kubelet, "a.sock")  # a plugin that retries on the same path is refused for good
    assert "device plugin already connected" in (again.value.details() or "")


def test_a_re_registration_does_not_stop_the_old_instance_whose_stream_keeps_feeding_the_resource(
        make_kubelet: Callable[..., KubeletSimulator], served: list[Served]) -> None:
    kubelet = make_kubelet("1.36")
    a = start_plugin(kubelet, served, IDS, name="a.sock")
    start_plugin(kubelet, served, IDS, name="b.sock")
    assert a.streams_open == 1, "registerClient overwrote the client; nothing stopped A"
    a.set("w1", "Unhealthy")  # PluginListAndWatchReceiver is keyed by resource name: A's update counts
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 3, 20)


def test_a_stopped_resource_is_removed_after_the_five_minute_grace_unless_it_registers_again(
        make_kubelet: Callable[..., KubeletSimulator], served: list[Served]) -> None:
    kubelet = make_kubelet()
    clock = FakeClock()
    kubelet.devices.clock = clock
    assert kubelet.devices.stop_grace_period_s == 300.0  # types.go endpointStopGracePeriod
    a = start_plugin(kubelet, served, IDS, name="a.sock")
    stop_plugin(served, a)
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 0, 20)
    clock.now += 299
    cap = kubelet.devices.capacity()
    assert (cap.capacity, cap.allocatable, cap.removed) == ({RES: 4}, {RES: 0}, ())
    clock.now += 2
    cap = kubelet.devices.capacity()
    assert (cap.capacity, cap.allocatable, cap.removed) == ({}, {}, (RES,))

    # Within the grace period a new registration restores the resource for good.
    b = start_plugin(kubelet, served, IDS, name="b.sock")
    assert b.streams_open == 1
    stop_plugin(served, b)
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 0, 20)
    clock.now += 200
    start_plugin(kubelet, served, IDS, name="c.sock")
    clock.now += 200
    cap = kubelet.devices.capacity()
    assert (cap.capacity, cap.allocatable, cap.removed) == ({RES: 4}, {RES: 4}, ())


@pytest.fixture
def api_kubelet(short_tmp: Path) -> Iterator[tuple[KubeAPI, Callable[..., KubeletSimulator]]]:
    sims: list[KubeletSimulator] = []
    with ApiServer() as srv:
        api = connect(str(srv.write_kubeconfig(short_tmp / "kubeconfig")))

        def make(**config: object) -> KubeletSimulator:
            sim = KubeletSimulator(short_tmp / "kl", kube=api, node_name="node-a",
                                   config=KubeletConfig(register_node=True, **config))  # type: ignore[arg-type]
            sims.append(sim.start())
            return sim

        yield api, make
        for s in sims:
            s.stop()


OTHER = "example.com/other"  # an extended resource no plugin of this kubelet reports


def node_counts(api: KubeAPI) -> tuple[str | None, str | None]:
    status = api.get(NODES, "node-a").get("status") or {}
    return (status.get("capacity") or {}).get(RES), (status.get("allocatable") or {}).get(RES)


def test_the_node_status_shows_all_devices_as_capacity_and_healthy_ones_as_allocatable(
        api_kubelet: tuple[KubeAPI, Callable[..., KubeletSimulator]], served: list[Served]) -> None:
    api, make = api_kubelet
    assert UPDATE_FREQUENCY_S == 10.0  # nodeStatusUpdateFrequency's default
    kubelet = make(node_status_frequency=0.2)
    assert kubelet.node_status is not None and kubelet.node_status.wait_registered(20)
    node = api.get(NODES, "node-a")
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "node-a"
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.34.0"
    clock = FakeClock()
    kubelet.devices.clock = clock
    plugin = start_plugin(kubelet, served, ["w0", "w1", "w2"])
    plugin.set("w2", "Unhealthy")
    wait_until(lambda: node_counts(api) == ("3", "2"), 20, "capacity 3, allocatable 2")
    stop_plugin(served, plugin)
    wait_until(lambda: node_counts(api) == ("3", "0"), 20, "allocatable 0 at once, capacity kept")
    clock.now += 301
    wait_until(lambda: node_counts(api) == ("0", "0"), 20, "capacity 0 after the grace period")


def test_device_changes_reach_the_node_only_with_the_next_periodic_status_update(
        api_kubelet: tuple[KubeAPI, Callable[..., KubeletSimulator]], served: list[Served]) -> None:
    api, make = api_kubelet
    kubelet = make(node_status_frequency=3600.0)  # one post at registration, the next in an hour
    reporter = kubelet.node_status
    assert reporter is not None and reporter.wait_registered(20)
    wait_until(lambda: reporter.patches >= 1, 20, "the first status update")
    start_plugin(kubelet, served, ["w0", "w1"])
    time.sleep(0.5)
    assert node_counts(api) == (None, None)  # the device manager knows, the Node does not yet
    assert reporter.sync_once()  # the periodic tryUpdateNodeStatus
    assert node_counts(api) == ("2", "2")
    assert not reporter.sync_once()  # unchanged (heartbeats aside): no PATCH before the report interval


def test_registering_over_an_existing_node_keeps_its_annotations_and_zeroes_stale_extended_resources(
        api_kubelet: tuple[KubeAPI, Callable[..., KubeletSimulator]]) -> None:
    api, make = api_kubelet
    api.create(NODES, {"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": "node-a", "annotations": {"dra-bridge.io/dra-devices": "2"},
                                    "labels": {"team": "a"}}})
    node = api.get(NODES, "node-a")
    node["status"] = {"capacity": {RES: "8"}, "allocatable": {RES: "8"}}
    api.update(NODES, node, subresource="status")
    kubelet = make(node_status_frequency=3600.0)
    assert kubelet.node_status is not None and kubelet.node_status.wait_registered(20)
    wait_until(lambda: node_counts(api) == ("0", "0"), 20, "the stale device count zeroed")
    meta = api.get(NODES, "node-a")["metadata"]
    assert meta["annotations"]["dra-bridge.io/dra-devices"] == "2" and meta["labels"]["team"] == "a"
    assert meta["labels"]["kubernetes.io/os"] == "linux"


def test_a_kubelet_started_again_on_its_own_directory_keeps_the_nodes_other_extended_resources(
        api_kubelet: tuple[KubeAPI, Callable[..., KubeletSimulator]], served: list[Served]) -> None:
    """`ShouldResetExtendedResourceCapacity` asks whether the device-plugin directory lists any checkpoint (any
    entry not starting with "."). After a restart it holds the checkpoint the device manager wrote, so extended
    resources on the Node that no plugin here reports are left alone, whether or not a pod holds a device (the
    simulator used to zero them when none did). The plugin's own resource shows 0 until it registers again (the
    checkpoint's resources start with no healthy device: manager.go `readCheckpoint`)."""
    api, make = api_kubelet
    kubelet = make(node_status_frequency=0.2)
    start_plugin(kubelet, served, ["w0", "w1"])
    wait_until(lambda: node_counts(api) == ("2", "2"), 20, "the devices on the Node")
    kubelet.stop()
    node = api.get(NODES, "node-a")
    node["status"]["capacity"][OTHER] = node["status"]["allocatable"][OTHER] = "5"
    api.update(NODES, node, subresource="status")
    kubelet.start()
    assert kubelet.node_status is not None and kubelet.node_status.wait_registered(20)
    wait_until(lambda: node_counts(api) == ("0", "0"), 20, "the plugin's resource at 0 until it registers again")
    status = api.get(NODES, "node-a")["status"]
    assert status["capacity"][OTHER] == status["allocatable"][OTHER] == "5"


def test_podresources_does_not_report_the_devices_of_ordinary_init_containers(
        make_kubelet: Callable[..., KubeletSimulator], served: list[Served]) -> None:
    kubelet = make_kubelet()
    start_plugin(kubelet, served, ["w0", "w1", "w2", "w3"])
    d = kubelet.devices
    # Spec order: the sidecar, then an ordinary init container, then the app container.
    d.allocate("uid-1", "sidecar", RES, 1, namespace="ns", pod_name="p", init=True, restartable=True)
    d.allocate("uid-1", "init", RES, 2, namespace="ns", pod_name="p", init=True)
    d.allocate("uid-1", "main", RES, 2, namespace="ns", pod_name="p")
    init_ids = set(d.container_devices("uid-1", "init")[RES])
    # The app container reuses the init container's devices (devicesToReuse); the sidecar keeps its own.
    assert set(d.container_devices("uid-1", "main")[RES]) == init_ids
    assert not set(d.container_devices("uid-1", "sidecar")[RES]) & init_ids
    with grpc.insecure_channel(f"unix://{kubelet.podresources_socket}") as ch:
        (pod,) = prpb_grpc.PodResourcesListerStub(ch).List(prpb.ListPodResourcesRequest(), timeout=10).pod_resources
    reported = {c.name: {i for dev in c.devices for i in dev.device_ids} for c in pod.containers}
    assert set(reported) == {"sidecar", "main"}, "the init container is not listed"
    assert reported["main"] == init_ids
