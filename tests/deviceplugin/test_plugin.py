"""The device plugin over real gRPC on real unix sockets, driven by the kubelet simulator (and a raw client)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import grpc
import pytest

from bridge.ledger import Side
from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as pb
from bridge.deviceplugin.allocate import CDI_ANNOTATIONS, CDI_CRI, ENVVAR, VOLUME_MOUNTS
from bridge.inventory.model import DeviceID
from bridge.inventory.simulated import SimulatedSource
from bridge.unixsock import SocketPathError
from bridge.sandbox.kubelet import AllocationFailed, KubeletSimulator

from .conftest import RESOURCE, NodeFactory, wait_until


def test_plugin_serves_then_registers_and_the_kubelet_sees_every_gpu(kubelet: KubeletSimulator,
                                                                      make_node: NodeFactory) -> None:
    daemon = make_node("8xH100-80GB")
    assert daemon.plugin is not None
    sock = Path(daemon.plugin.socket_path)
    assert sock.parent == kubelet.device_plugin_dir and sock.name == "dra-bridge-nvidia.com-gpu.sock"
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 8, 20)
    state = kubelet.devices.resource(RESOURCE)
    assert state.connected and state.registrations == 1
    assert state.capacity == 8 and state.allocatable == 8
    assert set(state.devices) == {d.uuid for d in daemon.source.devices()}
    assert state.options is not None and state.options.get_preferred_allocation_available
    numa = {d.uuid: (d.numa_node,) for d in daemon.source.devices()}
    assert {i: d.numa_nodes for i, d in state.devices.items()} == numa


def test_an_unhealthy_gpu_is_pushed_to_the_kubelet_and_allocatable_drops_by_one(
        kubelet: KubeletSimulator, make_node: NodeFactory) -> None:
    source = SimulatedSource.from_spec("8xH100-80GB", "node-a")
    make_node(source=source)
    assert kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 8, 20)
    sick = source.devices()[3].uuid
    assert source.inject_xid(sick, 79)  # GPU fell off the bus
    assert kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 7, 20)
    state = kubelet.devices.resource(RESOURCE)
    assert state.capacity == 8 and not state.devices[sick].healthy
    source.set_healthy(sick)
    assert kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 8, 20)


def test_ignored_xids_do_not_take_a_gpu_away(kubelet: KubeletSimulator, make_node: NodeFactory) -> None:
    source = SimulatedSource.from_spec("2xH100-80GB", "node-a")
    make_node(source=source)
    assert not source.inject_xid(source.devices()[0].uuid, 13)  # an application fault, not a GPU fault
    assert kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 2, 20)


@pytest.mark.parametrize("count", [1, 2, 8])
def test_kubelet_allocation_returns_env_device_nodes_and_records_the_assignment(
        kubelet: KubeletSimulator, make_node: NodeFactory, count: int) -> None:
    daemon = make_node("8xH100-80GB")
    kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 8, 20)
    resp = kubelet.devices.allocate("pod-1", "main", RESOURCE, count)
    (assigned,) = kubelet.devices.assignments()
    assert len(assigned.device_ids) == count
    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(assigned.device_ids)
    minors = {d.uuid: d.minor for d in daemon.source.devices()}
    assert [d.container_path for d in resp.devices] == (
        [f"/dev/nvidia{minors[DeviceID(i)]}" for i in assigned.device_ids]
        + ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"])


def test_allocation_fails_when_not_enough_gpus_are_free(kubelet: KubeletSimulator, make_node: NodeFactory) -> None:
    make_node("2xH100-80GB")
    kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 2, 20)
    kubelet.devices.allocate("pod-1", "main", RESOURCE, 2)
    with pytest.raises(AllocationFailed, match="Requested: 1, Available: 0"):
        kubelet.devices.allocate("pod-2", "main", RESOURCE, 1)
    kubelet.devices.remove_pod("pod-1")
    kubelet.devices.allocate("pod-2", "main", RESOURCE, 1)


@pytest.mark.parametrize("strategies", [
    frozenset({CDI_CRI}), frozenset({CDI_ANNOTATIONS}), frozenset({VOLUME_MOUNTS}), frozenset({ENVVAR, CDI_CRI})])
def test_each_device_list_strategy_reaches_the_kubelet(kubelet: KubeletSimulator, make_node: NodeFactory,
                                                       strategies: frozenset[str]) -> None:
    make_node("8xH100-80GB", strategies=strategies)
    kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 8, 20)
    resp = kubelet.devices.allocate("pod-1", "main", RESOURCE, 2)
    ids = kubelet.devices.assignments()[0].device_ids
    cdi_names = [f"k8s.device-plugin.dra-bridge.io/gpu={i}" for i in ids]  # our vendor, never nvidia.com
    assert [c.name for c in resp.cdi_devices] == (cdi_names if CDI_CRI in strategies else [])
    assert dict(resp.annotations) == (
        {"cdi.k8s.io/dra-bridge_nvidia.com-gpu": ",".join(cdi_names)} if CDI_ANNOTATIONS in strategies else {})
    if VOLUME_MOUNTS in strategies:
        assert [m.container_path for m in resp.mounts] == [f"/var/run/nvidia-container-devices/{i}" for i in ids]
    expected_env = ("/var/run/nvidia-container-devices" if VOLUME_MOUNTS in strategies
                    else ",".join(ids) if ENVVAR in strategies else "void")
    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == expected_env


def test_preferred_allocation_over_grpc_follows_nvlink(kubelet: KubeletSimulator, make_node: NodeFactory,
                                                       dp_stub) -> None:  # type: ignore[no-untyped-def]
    daemon = make_node("8xV100-32GB")  # DGX-1 hybrid cube-mesh
    gpus = [d.uuid for d in daemon.source.devices()]
    stub = dp_stub(daemon.plugin.socket_path)
    resp = stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=list(reversed(gpus)),
                                               must_include_deviceIDs=[gpus[5]], allocation_size=2),
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=gpus, allocation_size=4),
    ]), timeout=10)
    assert [list(r.deviceIDs) for r in resp.container_responses] == [[gpus[5], gpus[6]], gpus[0:4]]
    # And the kubelet's device manager follows the hint.
    kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 8, 20)
    kubelet.devices.allocate("pod-1", "main", RESOURCE, 2)
    assert kubelet.devices.assignments()[0].device_ids == (gpus[0], gpus[3])

    with pytest.raises(grpc.RpcError) as err:
        stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=gpus[:1], allocation_size=2)]), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "exceeds the 1 available" in err.value.details()


def test_allocate_refuses_unknown_ids_naming_the_device(make_node: NodeFactory, dp_stub) -> None:  # type: ignore[no-untyped-def]
    daemon = make_node("2xH100-80GB")
    stub = dp_stub(daemon.plugin.socket_path)
    good = daemon.source.devices()[0].uuid
    with pytest.raises(grpc.RpcError) as err:
        stub.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[good, "GPU-not-here"])]), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'GPU-not-here' is not in this node's inventory" in err.value.details()
    metrics = daemon.metrics.registry
    assert metrics.get_sample_value("dra_bridge_deviceplugin_allocations_total",
                                    {"resource": RESOURCE, "outcome": "refused-unknown"}) == 1


def test_allocate_refuses_unhealthy_and_dra_side_devices(make_node: NodeFactory, dp_stub) -> None:  # type: ignore[no-untyped-def]
    source = SimulatedSource.from_spec("4xH100-80GB", "node-a")
    gpus = [d.uuid for d in source.devices()]
    dra_side = {gpus[2]}
    daemon = make_node(source=source, side_of=lambda d: Side.DRA if d in dra_side else Side.LEGACY)
    stub = dp_stub(daemon.plugin.socket_path)

    with pytest.raises(grpc.RpcError) as err:
        stub.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[gpus[2]])]),
                      timeout=10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"device {gpus[2]} (GPU 2) is owned by the dra side" in err.value.details()

    source.inject_xid(gpus[1], 48)
    wait_until(lambda: daemon.table is not None and daemon.table.refusal(gpus[1]) is not None, what="health event")
    with pytest.raises(grpc.RpcError) as err:
        stub.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[gpus[1]])]),
                      timeout=10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "is unhealthy" in err.value.details() and "double-bit ECC" in err.value.details()

    ok = stub.Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=[gpus[0]]), pb.ContainerAllocateRequest(devices_ids=[gpus[3]])]),
        timeout=10)
    assert [r.envs["NVIDIA_VISIBLE_DEVICES"] for r in ok.container_responses] == [gpus[0], gpus[3]]


def test_dra_side_devices_are_reported_unhealthy_to_the_kubelet(kubelet: KubeletSimulator,
                                                                make_node: NodeFactory) -> None:
    source = SimulatedSource.from_spec("4xH100-80GB", "node-a")
    gpus = [d.uuid for d in source.devices()]
    dra_side: set[str] = set()
    daemon = make_node(source=source, side_of=lambda d: Side.DRA if d in dra_side else Side.LEGACY)
    assert kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 4, 20)
    dra_side.add(gpus[0])
    daemon.ownership_changed()
    assert kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 3, 20)
    assert kubelet.devices.resource(RESOURCE).capacity == 4
    assert not kubelet.devices.resource(RESOURCE).devices[gpus[0]].healthy


def test_every_concurrent_listandwatch_stream_gets_each_update(make_node: NodeFactory, dp_stub) -> None:  # type: ignore[no-untyped-def]
    source = SimulatedSource.from_spec("2xH100-80GB", "node-a")
    daemon = make_node(source=source)
    streams = [dp_stub(daemon.plugin.socket_path).ListAndWatch(pb.Empty(), timeout=30) for _ in range(3)]
    first = [next(s) for s in streams]
    assert all(len(m.devices) == 2 and all(d.health == "Healthy" for d in m.devices) for m in first)
    source.set_unhealthy(source.devices()[1].uuid)
    second = [next(s) for s in streams]
    for m in second:
        assert [d.health for d in m.devices] == ["Healthy", "Unhealthy"]
    for s in streams:
        s.cancel()


def test_prestart_and_options_answer(make_node: NodeFactory, dp_stub) -> None:  # type: ignore[no-untyped-def]
    daemon = make_node("1xH100-80GB", register=False)
    stub = dp_stub(daemon.plugin.socket_path)
    opts = stub.GetDevicePluginOptions(pb.Empty(), timeout=10)
    assert opts.get_preferred_allocation_available and not opts.pre_start_required
    assert stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=["x"]), timeout=10) == \
        pb.PreStartContainerResponse()


def test_stop_ends_the_kubelet_stream_and_leaves_no_socket(kubelet: KubeletSimulator,
                                                           make_node: NodeFactory) -> None:
    daemon = make_node("2xH100-80GB")
    kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 2, 20)
    daemon.stop()
    assert kubelet.devices.wait_for(lambda m: not m.resource(RESOURCE).connected, 20)
    state = kubelet.devices.resource(RESOURCE)
    assert state.allocatable == 0 and state.capacity == 2  # the kubelet's view of a plugin that went away
    # the kubelet's own files stay: its socket and its device-manager checkpoint
    leftovers = [p.name for p in kubelet.device_plugin_dir.iterdir()
                 if p.name not in ("kubelet.sock", "kubelet_internal_checkpoint")]
    assert leftovers == []


def test_a_socket_path_over_107_bytes_is_a_clear_error_before_anything_starts(make_node: NodeFactory,
                                                                              short_tmp: Path) -> None:
    from bridge.node.daemon import NodeConfig, NodeDaemon

    deep = short_tmp / ("k" * 90)
    cfg = NodeConfig(node_name="node-a", kubelet_root=deep, http_address=None)
    daemon = NodeDaemon(cfg, SimulatedSource.from_spec("1xH100-80GB", "node-a"))
    with pytest.raises(SocketPathError) as err:
        daemon.start()
    path = str(deep / "device-plugins" / "dra-bridge-nvidia.com-gpu.sock")
    assert f"unix socket path {path!r} is {len(path)} bytes long; the limit is 107 bytes" in str(err.value)
    assert not deep.exists()


def test_cdi_strategies_write_the_node_spec_that_defines_every_allocated_name(
        kubelet: KubeletSimulator, make_node: NodeFactory, short_tmp: Path) -> None:
    import json

    make_node("4xH100-80GB", strategies=frozenset({CDI_CRI}))
    specs = list((short_tmp / "cdi").glob("*.json"))
    assert len(specs) == 1
    spec = json.loads(specs[0].read_text())
    defined = {f"{spec['kind']}={d['name']}" for d in spec["devices"]}
    kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 4, 20)
    resp = kubelet.devices.allocate("pod-1", "main", RESOURCE, 3)
    assert len(resp.cdi_devices) == 3 and {c.name for c in resp.cdi_devices} <= defined


def test_envvar_strategy_writes_no_cdi_spec(make_node: NodeFactory, short_tmp: Path) -> None:
    make_node("1xH100-80GB")
    assert not (short_tmp / "cdi").exists()


def test_one_refused_container_request_fails_the_whole_allocate_call(make_node: NodeFactory, dp_stub) -> None:  # type: ignore[no-untyped-def]
    daemon = make_node("2xH100-80GB")
    stub = dp_stub(daemon.plugin.socket_path)
    good = daemon.source.devices()[0].uuid
    for bad_request, message in (([good, good], "duplicate device IDs"), ([], "lists no devices"),
                                 (["GPU-x"], "not in this node's inventory")):
        with pytest.raises(grpc.RpcError) as err:
            stub.Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=[good]),
                pb.ContainerAllocateRequest(devices_ids=bad_request)]), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in err.value.details()
    assert daemon.metrics.registry.get_sample_value(
        "dra_bridge_deviceplugin_allocations_total", {"resource": RESOURCE, "outcome": "ok"}) is None


def test_gpus_without_a_known_numa_node_are_listed_without_topology(kubelet: KubeletSimulator,
                                                                    make_node: NodeFactory) -> None:
    from dataclasses import replace

    from bridge.inventory.simulated import devices_from_spec

    gpus = [replace(d, numa_node=None) for d in devices_from_spec("2xL4", "node-a")]
    make_node(source=SimulatedSource(gpus))
    assert kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 2, 20)
    assert [d.numa_nodes for d in kubelet.devices.resource(RESOURCE).devices.values()] == [(), ()]


def test_log_lines_carry_both_the_component_context_and_the_call_context(
        kubelet: KubeletSimulator, make_node: NodeFactory, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    source = SimulatedSource.from_spec("4xH100-80GB", "node-a")
    with caplog.at_level(logging.INFO):
        make_node(source=source)
        kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 4, 20)
        kubelet.devices.allocate("pod-1", "main", RESOURCE, 2)
        sick = source.devices()[3].uuid
        source.inject_xid(sick, 79)
        kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 3, 20)
        # The health thread logs the change after the table took it, and the kubelet may see the new device list
        # first: wait for the line (inside the capture's level, which ends with this block).
        wait_until(lambda: any(r.getMessage().startswith(f"device {sick} is now unhealthy") for r in caplog.records),
                   30, "the health thread's log line")
    ids = ",".join(kubelet.devices.assignments()[0].device_ids)

    def record(message: str) -> logging.LogRecord:
        return next(r for r in caplog.records if r.getMessage().startswith(message))

    allocate = record("Allocate")
    assert (getattr(allocate, "resource", None), getattr(allocate, "devices", None)) == (RESOURCE, ids)
    registered = record("registered with the kubelet")
    assert getattr(registered, "endpoint", None) == "dra-bridge-nvidia.com-gpu.sock"
    sick_line = record(f"device {sick} is now unhealthy")
    assert (getattr(sick_line, "node", None), getattr(sick_line, "device", None), getattr(sick_line, "xid", None)) \
        == ("node-a", sick, 79)
    update = [r for r in caplog.records if r.getMessage() == "ListAndWatch update"][-1]
    assert (getattr(update, "devices", None), getattr(update, "unhealthy", None)) == (4, 1)


def test_with_host_device_checks_on_allocate_passes_only_control_nodes_that_exist(
        kubelet: KubeletSimulator, short_tmp: Path) -> None:
    from bridge.cdi import CdiOptions
    from bridge.node.daemon import NodeConfig, NodeDaemon
    from tests.fakedriver import make_dev

    source = SimulatedSource.from_spec("2xH100-80GB", "node-a")
    host = make_dev(short_tmp / "host", [d.minor for d in source.devices()], control=("nvidiactl",))
    daemon = NodeDaemon(NodeConfig(node_name="node-a", kubelet_root=short_tmp, http_address=None,
                                   cdi=CdiOptions(check_device_nodes=True, host_root=host)), source)
    daemon.start()
    try:
        kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 2, 20)
        resp = kubelet.devices.allocate("pod-1", "main", RESOURCE, 1)
    finally:
        daemon.stop()
    (gpu,) = kubelet.devices.assignments()[0].device_ids
    minor = next(d.minor for d in source.devices() if d.uuid == gpu)
    # /dev/nvidia-uvm* and /dev/nvidia-modeset do not exist on this host: a device spec for them would fail the
    # container; host paths are the host's (no view prefix)
    assert [d.host_path for d in resp.devices] == [f"/dev/nvidia{minor}", "/dev/nvidiactl"]