"""Callers that are not a well-behaved kubelet: huge or malformed requests, too many streams, IDs of the wrong side.

Each test drives the real daemon over its real unix socket. The time bounds are generous (the measured figures,
printed with `pytest -s`, are far below them); what they rule out is a call that runs for minutes or never ends.
"""

from __future__ import annotations

import logging
import time
import urllib.request

import grpc
import pytest

from bridge.ledger import Side
from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as pb
from bridge.inventory.simulated import SimulatedSource
from bridge.grpcserver import DEFAULT_MAX_STREAMS
from bridge.sandbox.kubelet import KubeletSimulator

from .conftest import RESOURCE, NodeFactory, wait_until

ANSWER_BOUND_S = 10.0
# gRPC's default limit on received metadata is 8 KiB; the status message travels in a trailer.
MESSAGE_LIMIT = 1000


def preferred(available: list[str], size: int, must: list[str] | None = None) -> pb.PreferredAllocationRequest:
    return pb.PreferredAllocationRequest(container_requests=[pb.ContainerPreferredAllocationRequest(
        available_deviceIDs=available, must_include_deviceIDs=must or [], allocation_size=size)])


def allocate(*containers: list[str]) -> pb.AllocateRequest:
    return pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=c) for c in containers])


def timed_error(call, request) -> tuple[grpc.RpcError, float]:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    with pytest.raises(grpc.RpcError) as err:
        call(request, timeout=60)
    return err.value, time.monotonic() - start


# ---- item 1: no request can pin a worker ---------------------------------------------------------------------------

def test_preferred_allocation_over_10000_unknown_ids_is_refused_at_once_naming_a_few(make_node: NodeFactory,
                                                                                    dp_stub) -> None:  # type: ignore[no-untyped-def]
    daemon = make_node("8xH100-80GB")
    stub = dp_stub(daemon.plugin.socket_path)
    err, took = timed_error(stub.GetPreferredAllocation, preferred([f"GPU-fake-{i:05d}" for i in range(10_000)], 5_000))
    print(f"\nGetPreferredAllocation(10,000 unknown IDs, size 5,000) refused in {took * 1000:.0f} ms")
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and took < ANSWER_BOUND_S
    assert "10,000 device ID(s) are not in this node's inventory: 'GPU-fake-00000'" in err.details()
    assert "and 9,995 more" in err.details() and len(err.details()) < MESSAGE_LIMIT
    # The worker is free again: the next call is answered normally.
    gpus = [d.uuid for d in daemon.source.devices()]
    assert list(stub.GetPreferredAllocation(preferred(gpus, 2), timeout=10).container_responses[0].deviceIDs) \
        == gpus[:2]


def test_preferred_allocation_on_the_largest_inventory_answers_in_bounded_time(make_node: NodeFactory,
                                                                               dp_stub) -> None:  # type: ignore[no-untyped-def]
    daemon = make_node("1024xV100-32GB", register=False)  # the simulated source's maximum
    gpus = [d.uuid for d in daemon.source.devices()]
    stub = dp_stub(daemon.plugin.socket_path)
    start = time.monotonic()
    resp = stub.GetPreferredAllocation(preferred(gpus * 2, 512), timeout=60)  # duplicates too
    took = time.monotonic() - start
    print(f"\nGetPreferredAllocation(1,024 GPUs listed twice, size 512) answered in {took * 1000:.0f} ms")
    ids = list(resp.container_responses[0].deviceIDs)
    assert took < ANSWER_BOUND_S and len(ids) == len(set(ids)) == 512 and set(ids) <= set(gpus)


# ---- item 7: never return what may not be allocated; per-container means per-container ----------------------------

def test_preferred_allocation_never_returns_dra_side_or_unhealthy_devices(make_node: NodeFactory,
                                                                         dp_stub) -> None:  # type: ignore[no-untyped-def]
    source = SimulatedSource.from_spec("4xH100-80GB", "node-a")
    gpus = [d.uuid for d in source.devices()]
    daemon = make_node(source=source, side_of=lambda d: Side.DRA if d == gpus[0] else Side.LEGACY)
    source.set_unhealthy(gpus[1])
    wait_until(lambda: daemon.table is not None and daemon.table.refusal(gpus[1]) is not None, what="health event")
    stub = dp_stub(daemon.plugin.socket_path)

    resp = stub.GetPreferredAllocation(preferred(gpus, 2), timeout=10)
    assert list(resp.container_responses[0].deviceIDs) == [gpus[2], gpus[3]]
    # Asked for more than it may give: a shorter hint (the kubelet fills the rest, Allocate guards), never gpu 0/1.
    resp = stub.GetPreferredAllocation(preferred(gpus, 3), timeout=10)
    assert list(resp.container_responses[0].deviceIDs) == [gpus[2], gpus[3]]

    err, _ = timed_error(stub.GetPreferredAllocation, preferred(gpus, 2, must=[gpus[0]]))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "owned by the dra side" in err.details()
    err, _ = timed_error(stub.GetPreferredAllocation, preferred([*gpus, "GPU-other-node"], 2))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "'GPU-other-node'" in err.details()


def test_the_same_gpu_in_two_container_requests_of_one_allocate_is_refused_naming_it(make_node: NodeFactory,
                                                                                     dp_stub) -> None:  # type: ignore[no-untyped-def]
    daemon = make_node("2xH100-80GB")
    a, b = (d.uuid for d in daemon.source.devices())
    stub = dp_stub(daemon.plugin.socket_path)
    err, _ = timed_error(stub.Allocate, allocate([a], [b, a]))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"duplicate device IDs (one GPU goes to one container): '{a}' 2 times in container requests 0, 1" \
        in err.details()
    assert daemon.metrics.registry.get_sample_value(
        "dra_bridge_deviceplugin_allocations_total", {"resource": RESOURCE, "outcome": "ok"}) is None


@pytest.mark.parametrize("ids,expected", [
    (["GPU-dup"] * 10_000, "'GPU-dup' 10,000 times in container request 0"),
    ([f"GPU-{i}" for i in range(10_000)] * 2, "and 9,995 more duplicated IDs"),
    (["GPU-" + "x" * 200_000], "(200,004 characters)"),
])
def test_huge_bad_requests_get_their_real_error_in_a_short_message(make_node: NodeFactory, dp_stub, ids,
                                                                   expected) -> None:  # type: ignore[no-untyped-def]
    daemon = make_node("2xH100-80GB")
    stub = dp_stub(daemon.plugin.socket_path)
    err, took = timed_error(stub.Allocate, allocate(ids))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()  # not RESOURCE_EXHAUSTED (trailer too big)
    assert expected in err.details() and len(err.details()) <= MESSAGE_LIMIT and took < ANSWER_BOUND_S


def test_each_call_logs_one_line_whatever_its_container_count(make_node: NodeFactory, dp_stub,
                                                              caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    daemon = make_node("4xH100-80GB")
    gpus = [d.uuid for d in daemon.source.devices()]
    stub = dp_stub(daemon.plugin.socket_path)
    with caplog.at_level(logging.INFO, logger="bridge.deviceplugin"):
        stub.Allocate(allocate(*([g] for g in gpus)), timeout=10)
        stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=gpus, allocation_size=1)] * 3), timeout=10)
    lines = [r for r in caplog.records if r.getMessage() in ("Allocate", "GetPreferredAllocation")]
    assert [r.getMessage() for r in lines] == ["Allocate", "GetPreferredAllocation"]
    assert (getattr(lines[0], "containers", None), getattr(lines[0], "devices", None)) == (4, ";".join(gpus))
    assert getattr(lines[1], "containers", None) == 3


# ---- item 2: streams don't starve the plugin -----------------------------------------------------------------------

def test_twenty_listandwatch_streams_leave_unary_calls_and_healthz_answering(kubelet: KubeletSimulator,
                                                                            make_node: NodeFactory,
                                                                            dp_stub) -> None:  # type: ignore[no-untyped-def]
    daemon = make_node("2xH100-80GB")
    kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 2, 20)  # the kubelet's own stream
    stub = dp_stub(daemon.plugin.socket_path)
    streams = [stub.ListAndWatch(pb.Empty(), timeout=60) for _ in range(20)]
    outcomes: list[str] = []
    for s in streams:
        try:
            next(s)
            outcomes.append("open")
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
            assert f"too many ListAndWatch streams: {DEFAULT_MAX_STREAMS} are open" in err.details()
            outcomes.append("refused")
    assert outcomes.count("open") == DEFAULT_MAX_STREAMS - 1  # the kubelet holds one
    a = daemon.source.devices()[0].uuid
    start = time.monotonic()
    stub.GetDevicePluginOptions(pb.Empty(), timeout=5)
    stub.Allocate(allocate([a]), timeout=5)
    took = time.monotonic() - start
    print(f"\nwith 20 ListAndWatch streams asked for: 2 unary calls answered in {took * 1000:.0f} ms")
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.http.port}/healthz", timeout=10) as r:  # type: ignore[union-attr]
        assert r.status == 200
    assert daemon.metrics.registry.get_sample_value(
        "dra_bridge_deviceplugin_streams_refused_total", {"resource": RESOURCE}) == 20 - outcomes.count("open")
    for s in streams:
        s.cancel()
    # Closed streams give their slots back: the kubelet's next stream (after a re-registration) is served.
    wait_until(lambda: daemon.plugin is not None and daemon.metrics.registry.get_sample_value(
        "dra_bridge_deviceplugin_streams_open", {"resource": RESOURCE}) == 1, what="the cancelled streams to end")
    assert next(stub.ListAndWatch(pb.Empty(), timeout=10)).devices
