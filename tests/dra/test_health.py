"""The DRAResourceHealth stream (v1alpha1 and v1): full list on connect, on change, and periodically."""

from __future__ import annotations

import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from bridge._proto.drahealth.v1 import drahealth_pb2 as v1
from bridge._proto.drahealth.v1 import drahealth_pb2_grpc as v1_grpc
from bridge._proto.drahealth.v1alpha1 import drahealth_pb2 as v1alpha1
from bridge._proto.drahealth.v1alpha1 import drahealth_pb2_grpc as v1alpha1_grpc
from bridge.dra import health
from bridge.dra.health import HealthBoard, clip_message
from bridge.inventory.model import DeviceID, HealthEvent
from bridge.inventory.simulated import SimulatedSource
from tests.polling import wait_until

NODE = "node-a"


class Stream:
    """Reads a NodeWatchResources stream in a thread, keeping every message."""

    def __init__(self, stub: Any, pb: Any) -> None:
        self.messages: list[Any] = []
        self.call = stub.NodeWatchResources(pb.NodeWatchResourcesRequest())
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for m in self.call:
                self.messages.append(m)
        except grpc.RpcError:
            pass

    def states(self, i: int = -1) -> dict[str, str]:
        names = {0: "Unknown", 1: "Healthy", 2: "Unhealthy"}
        return {d.device.device_name: names[d.health] for d in self.messages[i].devices}


@pytest.fixture
def served(short_tmp: Path):
    source = SimulatedSource.from_spec("4xH100-80GB", NODE)
    board = HealthBoard(NODE, {d.uuid: f"gpu-{d.index}" for d in source.devices()})
    server = grpc.server(futures.ThreadPoolExecutor(8))
    health.add_to_server(board, server, resend_interval=0.3, timeout_seconds=5)
    sock = short_tmp / "h.sock"
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    channel = grpc.insecure_channel(f"unix://{sock}")
    yield source, board, channel
    board.close()
    channel.close()
    server.stop(1).wait()


@pytest.mark.parametrize(("pb", "stub_cls"), [(v1alpha1, v1alpha1_grpc.DRAResourceHealthStub), (v1, v1_grpc.DRAResourceHealthStub)],
                         ids=["v1alpha1", "v1"])
def test_full_list_on_connect_then_on_every_change(served: Any, pb: Any, stub_cls: Any) -> None:
    source, board, channel = served
    stream = Stream(stub_cls(channel), pb)
    wait_until(lambda: stream.messages, what="the first message")
    first = stream.messages[0]
    assert stream.states(0) == {"gpu-0": "Healthy", "gpu-1": "Healthy", "gpu-2": "Healthy", "gpu-3": "Healthy"}
    assert {d.device.pool_name for d in first.devices} == {NODE}
    assert all(d.health_check_timeout_seconds == 5 and d.last_updated_time > 0 for d in first.devices)

    gpu2 = source.devices()[2].uuid
    assert board.apply(HealthEvent(gpu2, False, "XID 79: GPU has fallen off the bus", xid=79))
    msg = wait_until(lambda: next((m for m in stream.messages if len(m.devices) == 4 and
                                   any(d.health == pb.UNHEALTHY for d in m.devices)), None), what="the change")
    bad = [d for d in msg.devices if d.health == pb.UNHEALTHY]
    assert [d.device.device_name for d in bad] == ["gpu-2"] and "XID 79" in bad[0].message
    stream.call.cancel()


def test_full_list_is_resent_periodically_without_changes(served: Any) -> None:
    _, _, channel = served
    stream = Stream(v1alpha1_grpc.DRAResourceHealthStub(channel), v1alpha1)
    wait_until(lambda: len(stream.messages) >= 3, what="periodic resends")
    assert all(len(m.devices) == 4 for m in stream.messages)
    stream.call.cancel()


def test_events_from_the_device_source_reach_the_board(served: Any) -> None:
    source, board, _ = served
    stop = threading.Event()
    feeder = threading.Thread(target=board.feed, args=(source.health_events(stop),), daemon=True)
    feeder.start()
    source.set_unhealthy(source.devices()[1].uuid, "ECC double-bit error")
    wait_until(lambda: dict((e.device, e.health) for e in board.snapshot()[1])["gpu-1"] == "Unhealthy",
               what="the board to see the fault")
    stop.set()
    feeder.join(5)


def test_unknown_gpus_are_ignored_and_no_change_is_not_a_change(served: Any) -> None:
    _, board, _ = served
    assert not board.apply(HealthEvent(DeviceID("GPU-not-ours"), False, "x"))
    version, _ = board.snapshot()
    assert not board.set("gpu-0", "Healthy")
    assert board.snapshot()[0] == version
    with pytest.raises(KeyError, match="unknown DRA device 'gpu-7'"):
        board.set("gpu-7", "Unhealthy")


def test_messages_are_cut_to_the_api_limit() -> None:
    assert clip_message("x" * 2000) == "x" * 1021 + "..."
    assert clip_message("short") == "short"


def test_the_resend_interval_must_stay_below_the_kubelet_staleness_timeout() -> None:
    with pytest.raises(ValueError, match="resend interval"):
        health.HealthStreams(HealthBoard(NODE, {}), resend_interval=45)


def test_closing_the_board_ends_open_streams(served: Any) -> None:
    _, board, channel = served
    stream = Stream(v1_grpc.DRAResourceHealthStub(channel), v1)
    wait_until(lambda: stream.messages, what="the first message")
    board.close()
    stream.thread.join(10)
    assert not stream.thread.is_alive()
