"""The kubelet simulator's device manager and PodResources server behave like the kubelet's (real sockets).

These tests drive the simulator with minimal hand-written plugins (a bare DevicePlugin servicer), so the
simulator's own rules are checked independently of the bridge's device plugin.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import grpc
import pytest

from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as pb
from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from bridge._proto.podresources.v1 import podresources_pb2 as prpb
from bridge._proto.podresources.v1 import podresources_pb2_grpc as prpb_grpc
from bridge.deviceplugin.registration import is_extended_resource_name
from bridge.sandbox.kubelet import AllocationFailed, Assignment, DynamicAssignment, KubeletSimulator
from tests.sandbox.plugins import RES, FakePlugin, Served, register, served, start_plugin  # noqa: F401 (fixture)


@pytest.mark.parametrize("name,ok", [
    ("nvidia.com/gpu", True), ("example.com/widget", True), ("a.b-c.io/x_y.z", True),
    ("gpu", False), ("kubernetes.io/gpu", False), ("node.kubernetes.io/gpu", False), ("requests.nvidia.com/gpu",
                                                                                      False),
    ("Nvidia.com/gpu", False), ("nvidia.com/", False), ("nvidia.com/-gpu", False), ("nvidia.com/" + "g" * 64, False),
])
def test_extended_resource_names_follow_kubernetes_rules(name: str, ok: bool) -> None:
    assert is_extended_resource_name(name) is ok


def test_register_rejects_unsupported_versions_and_bad_resource_names(kubelet: KubeletSimulator) -> None:
    with pytest.raises(grpc.RpcError) as err:
        register(kubelet, "w.sock", version="v1alpha")
    # The kubelet answers with plain Go errors (gRPC code Unknown) worded as in devicemanager/plugin/v1beta1/api.go.
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    assert err.value.details() == ('requested API version "v1alpha" is not supported by kubelet. '
                                   'Supported version is ["v1beta1"]')
    with pytest.raises(grpc.RpcError) as err:
        register(kubelet, "w.sock", resource="kubernetes.io/widget")
    assert err.value.details() == 'the ResourceName "kubernetes.io/widget" is invalid'
    assert kubelet.devices.resource("kubernetes.io/widget").registrations == 0


def test_register_fails_when_the_plugin_endpoint_cannot_be_dialled(kubelet: KubeletSimulator) -> None:
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(kubelet.device_plugin_dir / "dead.sock"))
    kubelet.devices.dial_timeout_s = 1.0  # the kubelet's is 10 s; the behaviour is the same, only shorter
    try:
        with pytest.raises(grpc.RpcError) as err:
            register(kubelet, "dead.sock")
        assert err.value.code() == grpc.StatusCode.UNKNOWN
        assert err.value.details().startswith("failed to dial device plugin:")
        assert kubelet.devices.resource(RES).registrations == 0
    finally:
        dead.close()


class _Slow(FakePlugin):
    """Answers GetDevicePluginOptions after `delay` seconds; records the deadline each call came with."""

    def __init__(self, delay: float) -> None:
        super().__init__(["w0"])
        self.delay = delay
        self.deadlines: list[float | None] = []

    def GetDevicePluginOptions(self, request, context):  # type: ignore[no-untyped-def]
        self.deadlines.append(context.time_remaining())
        time.sleep(self.delay)
        return super().GetDevicePluginOptions(request, context)


def test_get_device_plugin_options_runs_under_the_register_calls_deadline(kubelet: KubeletSimulator,
                                                                          served: list[Served]) -> None:
    """As the real kubelet v1.37.2 (its GetDevicePluginOptions came with what was left of the plugin's Register
    deadline): the dial and the call run under Register's context (server.go `Register` -> `connectClient(ctx)`)."""
    plugin = _Slow(0.0)
    served.append(Served(kubelet.device_plugin_dir / "w.sock", plugin))
    register(kubelet, "w.sock")  # timeout=15
    (left,) = plugin.deadlines
    assert left is not None and 10 < left < 16  # 15 s less the time spent, as both clocks see it
    slow = _Slow(3.0)
    served.append(Served(kubelet.device_plugin_dir / "slow.sock", slow))
    with grpc.insecure_channel(f"unix://{kubelet.kubelet_socket}") as ch, pytest.raises(grpc.RpcError) as err:
        pb_grpc.RegistrationStub(ch).Register(pb.RegisterRequest(
            version="v1beta1", endpoint="slow.sock", resource_name="example.com/slow"), timeout=1)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert kubelet.devices.wait_for(lambda m: any("failed to get device plugin options" in e
                                                  for e in m.register_errors), 10)


def test_capacity_and_allocatable_follow_listandwatch_and_drop_to_zero_when_the_stream_ends(
        kubelet: KubeletSimulator, served: list[Served]) -> None:
    plugin = start_plugin(kubelet, served, ["w0", "w1", "w2"])
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 3, 20)
    plugin.set("w1", "Unhealthy")
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 2, 20)
    served[0].stop()
    assert kubelet.devices.wait_for(lambda m: not m.resource(RES).connected, 20)
    state = kubelet.devices.resource(RES)
    assert state.capacity == 3 and state.allocatable == 0


def test_a_containers_device_health_is_as_the_plugin_reported_it_even_after_its_endpoint_went_away(
        kubelet: KubeletSimulator, served: list[Served]) -> None:
    """`allocatedResourcesStatus` reads `allDevices[...].Health`; a disconnected endpoint empties the healthy set
    (`markResourceUnhealthy`: nothing more is allocated) but leaves that, so running pods still show Healthy."""
    plugin = start_plugin(kubelet, served, ["w0", "w1"])
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 2, 20)
    kubelet.devices.allocate("uid-1", "main", RES, 2)
    plugin.set("w1", "Unhealthy")
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 1, 20)
    assert sorted(kubelet.devices.container_health("uid-1", "main")[RES]) == [("w0", True), ("w1", False)]
    served[0].stop()
    assert kubelet.devices.wait_for(lambda m: not m.resource(RES).connected, 20)
    assert kubelet.devices.resource(RES).allocatable == 0
    assert sorted(kubelet.devices.container_health("uid-1", "main")[RES]) == [("w0", True), ("w1", False)]
    assert kubelet.devices.container_health("uid-2", "main") == {}


def test_allocate_uses_the_preferred_hint_and_one_container_request(kubelet: KubeletSimulator,
                                                                    served: list[Served]) -> None:
    plugin = start_plugin(kubelet, served, ["w0", "w1", "w2", "w3"], preferred=["w3", "w1"])
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 4, 20)
    resp = kubelet.devices.allocate("uid-1", "main", RES, 2)
    assert resp.envs["IDS"] == "w3,w1" and plugin.allocations == [["w3", "w1"]]
    # The hint names taken devices now, so the kubelet falls back to its own choice among the free ones.
    kubelet.devices.allocate("uid-2", "main", RES, 2)
    assert plugin.allocations[1] == ["w0", "w2"]
    with pytest.raises(AllocationFailed, match="Requested: 1, Available: 0"):
        kubelet.devices.allocate("uid-3", "main", RES, 1)
    assert [a.device_ids for a in kubelet.devices.remove_pod("uid-1")] == [("w3", "w1")]
    kubelet.devices.allocate("uid-3", "main", RES, 1)


def test_allocate_of_an_unregistered_resource_fails(kubelet: KubeletSimulator) -> None:
    with pytest.raises(AllocationFailed, match="unregistered device nvidia.com/gpu"):
        kubelet.devices.allocate("uid-1", "main", "nvidia.com/gpu", 1)


def test_restart_deletes_sockets_only_keeps_files_and_serves_a_new_kubelet_sock(
        kubelet: KubeletSimulator, served: list[Served]) -> None:
    start_plugin(kubelet, served, ["w0"])
    kubelet.devices.seed_assignment(Assignment("uid-1", "ns", "p", "c", RES, ("w0",)))
    d = kubelet.device_plugin_dir
    assert (d / "kubelet_internal_checkpoint").is_file()  # written with the allocation, as the kubelet does
    (d / "DEPRECATION").write_text("x")
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(str(d / "other-vendor.sock"))
    before = os.stat(kubelet.kubelet_socket)
    try:
        kubelet.restart()
    finally:
        other.close()
    assert sorted(p.name for p in d.iterdir()) == ["DEPRECATION", "kubelet.sock", "kubelet_internal_checkpoint"]
    after = os.stat(kubelet.kubelet_socket)
    assert (after.st_ino, after.st_ctime_ns) != (before.st_ino, before.st_ctime_ns)
    state = kubelet.devices.resource(RES)
    assert not state.connected and state.allocatable == 0
    assert kubelet.devices.assignments()[0].device_ids == ("w0",)  # survives, as through the checkpoint


def test_podresources_list_get_and_allocatable(kubelet: KubeletSimulator, served: list[Served]) -> None:
    start_plugin(kubelet, served, ["w0", "w1", "w2"])
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 3, 20)
    kubelet.devices.allocate("uid-1", "main", RES, 2, namespace="team", pod_name="p1")

    class Dra:
        def dynamic_assignments(self) -> list[DynamicAssignment]:
            return [DynamicAssignment("team", "p1", "main", "claim-a", "team", "gpu.example.com", "node-a", "gpu-0",
                                      ("gpu.example.com/gpu=claim-a-gpu-0",))]

    kubelet.podresources.add_dynamic_source(Dra())
    with grpc.insecure_channel(f"unix://{kubelet.podresources_socket}") as ch:
        stub = prpb_grpc.PodResourcesListerStub(ch)
        listed = stub.List(prpb.ListPodResourcesRequest(), timeout=10)
        (pod,) = listed.pod_resources
        assert (pod.namespace, pod.name) == ("team", "p1")
        (container,) = pod.containers
        # w0 and w1 sit on different NUMA nodes, so the kubelet reports one ContainerDevices per node.
        assert [(list(c.device_ids), [n.ID for n in c.topology.nodes]) for c in container.devices] == [
            (["w0"], [0]), (["w1"], [1])]
        (dyn,) = container.dynamic_resources
        assert dyn.claim_name == "claim-a" and dyn.claim_resources[0].device_name == "gpu-0"
        got = stub.Get(prpb.GetPodResourcesRequest(pod_name="p1", pod_namespace="team"), timeout=10)
        assert got.pod_resources == pod
        with pytest.raises(grpc.RpcError) as err:
            stub.Get(prpb.GetPodResourcesRequest(pod_name="nope", pod_namespace="team"), timeout=10)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        alloc = stub.GetAllocatableResources(prpb.AllocatableResourcesRequest(), timeout=10)
        assert sorted(i for d in alloc.devices for i in d.device_ids) == ["w0", "w1", "w2"]


def test_the_simulator_refuses_a_root_too_long_for_unix_sockets(short_tmp: Path) -> None:
    from bridge.unixsock import SocketPathError

    with pytest.raises(SocketPathError, match="bytes long; the limit is 107 bytes"):
        KubeletSimulator(short_tmp / ("x" * 100)).start()

