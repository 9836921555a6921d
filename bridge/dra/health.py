"""Per-device health for the DRA side: a board fed from the device source and the `DRAResourceHealth` stream.

Contract (k8s.io/kubelet pkg/apis/dra-health; the kubelet's pkg/kubelet/cm/dra/healthinfo.go): `NodeWatchResources`
is server-streaming; every message is the *complete* list of the driver's devices. The kubelet marks a device
Unknown when it was not reported within its timeout (30 s default), so the stream sends the full list on connect, on
every change, and at least every `resend_interval` seconds (10 s by default) even when nothing changed, and sets
`health_check_timeout_seconds` (1.35+ kubelets) to a value comfortably above the resend interval. Messages are cut
to 1024 characters (1021 + "...") as the API requires.

v1alpha1 (what 1.34-1.37 kubelets open) and v1 (master kubelets) have identical messages but distinct generated
types: `HealthStreams` holds the one stream logic, and one thin servicer per version (a subclass of that version's
generated `DRAResourceHealthServicer`) only builds its own messages. `HealthBoard` is plain data
behind a lock with a change counter; streams wait on it and never hold the lock while sending.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Literal

import grpc

from bridge._proto.drahealth.v1 import drahealth_pb2 as v1_pb
from bridge._proto.drahealth.v1 import drahealth_pb2_grpc as v1_grpc
from bridge._proto.drahealth.v1alpha1 import drahealth_pb2 as v1alpha1_pb
from bridge._proto.drahealth.v1alpha1 import drahealth_pb2_grpc as v1alpha1_grpc
from bridge.inventory.model import DeviceID, HealthEvent
from bridge.grpcserver import DEFAULT_MAX_STREAMS, StreamSlots

log = logging.getLogger(__name__)

Health = Literal["Healthy", "Unhealthy", "Unknown"]
MAX_MESSAGE_CHARS = 1024
DEFAULT_RESEND_INTERVAL_S = 10.0
DEFAULT_HEALTH_TIMEOUT_S = 30


def clip_message(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."


@dataclass(frozen=True)
class DeviceHealthEntry:
    pool: str
    device: str  # the ResourceSlice device name, e.g. "gpu-3"
    health: Health
    updated: int  # unix seconds of the last change
    message: str = ""


class HealthBoard:
    """The latest health of every DRA device of this node, with a change counter streams can wait on."""

    def __init__(self, pool: str, devices: Mapping[DeviceID, str], *, clock: Callable[[], float] = time.time) -> None:
        """`devices` maps GPU UUID -> device name; every device starts Healthy."""
        self.pool = pool
        self._by_uuid = dict(devices)
        now = int(clock())
        self._clock = clock
        self._entries = {name: DeviceHealthEntry(pool, name, "Healthy", now) for name in devices.values()}
        self._cond = threading.Condition()
        self._version = 0
        self._closed = False

    def snapshot(self) -> tuple[int, tuple[DeviceHealthEntry, ...]]:
        with self._cond:
            return self._version, tuple(sorted(self._entries.values(), key=lambda e: _device_sort_key(e.device)))

    def set(self, device: str, health: Health, message: str = "") -> bool:
        """Record a device's health; returns True (and wakes the streams) only when something changed."""
        with self._cond:
            old = self._entries.get(device)
            if old is None:
                raise KeyError(f"unknown DRA device {device!r} in pool {self.pool!r}")
            if old.health == health and old.message == message:
                return False
            self._entries[device] = replace(old, health=health, message=clip_message(message),
                                            updated=int(self._clock()))
            self._version += 1
            self._cond.notify_all()
        log.info("device health changed", extra={"device": device, "health": health, "reason": message})
        return True

    def apply(self, event: HealthEvent) -> bool:
        """Apply an inventory health event (by GPU UUID). Events for GPUs we do not serve over DRA are ignored."""
        name = self._by_uuid.get(event.uuid)
        if name is None:
            return False
        return self.set(name, "Healthy" if event.healthy else "Unhealthy", event.reason)

    def feed(self, events: Iterable[HealthEvent]) -> None:
        """Consume a health-event iterator (e.g. `source.health_events(stop)`) until it ends."""
        for event in events:
            self.apply(event)

    def wait_for_change(self, seen: int, timeout: float) -> int:
        """Block until the version differs from `seen`, the board closes, or `timeout` passes; return the version."""
        with self._cond:
            if self._version == seen and not self._closed:
                self._cond.wait(timeout)
            return self._version

    def wake(self) -> None:
        """Wake every waiting stream without a change, so one whose call has ended notices at once (registered as
        each stream's RPC termination callback: a server stopped to re-create its socket ends its streams now)."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """End every open stream promptly (daemon shutdown)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed


def _device_sort_key(name: str) -> tuple[str, int]:
    prefix, _, num = name.rpartition("-")
    return (prefix, int(num)) if num.isdigit() else (name, -1)


class HealthStreams:
    """The version-independent part of `NodeWatchResources`: validated timing, and the generator of full device
    lists (on connect, on every change, at least every `resend_interval`). The per-version servicers below turn each
    list into their own generated message type."""

    def __init__(
        self,
        board: HealthBoard,
        *,
        resend_interval: float = DEFAULT_RESEND_INTERVAL_S,
        timeout_seconds: int = DEFAULT_HEALTH_TIMEOUT_S,
        max_streams: int = DEFAULT_MAX_STREAMS,
    ) -> None:
        if resend_interval <= 0 or resend_interval >= DEFAULT_HEALTH_TIMEOUT_S:
            raise ValueError(f"resend interval must be in (0, {DEFAULT_HEALTH_TIMEOUT_S}) seconds: {resend_interval}")
        if timeout_seconds <= resend_interval:
            raise ValueError("health_check_timeout_seconds must exceed the resend interval")
        self._board = board
        self._resend = resend_interval
        self.timeout_seconds = timeout_seconds
        self.streams_opened = 0
        # Both API versions share the slots: each open stream holds a worker of the DRA server for its life.
        self.slots = StreamSlots(max_streams, "DRAResourceHealth")

    def lists(self, context: grpc.ServicerContext, api: str) -> Iterator[tuple[DeviceHealthEntry, ...]]:
        """Full device lists for one open stream, until the client goes away or the board closes. Beyond
        `max_streams` open streams (a kubelet opens one per plugin) the call is refused with RESOURCE_EXHAUSTED."""
        with self.slots.hold(context):
            yield from self._lists(context, api)

    def _lists(self, context: grpc.ServicerContext, api: str) -> Iterator[tuple[DeviceHealthEntry, ...]]:
        self.streams_opened += 1
        context.add_callback(self._board.wake)  # the call ending (client gone, server stopped) ends the loop now
        log.info("health stream opened", extra={"pool": self._board.pool, "api": api})
        version, entries = self._board.snapshot()
        yield entries
        last_sent = time.monotonic()
        while context.is_active() and not self._board.closed:
            # Wake at least every second so a cancelled stream ends promptly.
            wait = min(1.0, max(0.0, last_sent + self._resend - time.monotonic()))
            new_version = self._board.wait_for_change(version, wait)
            if self._board.closed or not context.is_active():
                break
            if new_version != version or time.monotonic() - last_sent >= self._resend:
                version, entries = self._board.snapshot()
                yield entries
                last_sent = time.monotonic()
        log.info("health stream closed", extra={"pool": self._board.pool})


class HealthServicerV1Alpha1(v1alpha1_grpc.DRAResourceHealthServicer):
    """`NodeWatchResources` of `v1alpha1.DRAResourceHealth` (what 1.34-1.37 kubelets open)."""

    def __init__(self, streams: HealthStreams) -> None:
        self.streams = streams

    def NodeWatchResources(  # noqa: N802
        self, request: v1alpha1_pb.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[v1alpha1_pb.NodeWatchResourcesResponse]:
        pb, timeout = v1alpha1_pb, self.streams.timeout_seconds
        status = {"Healthy": pb.HEALTHY, "Unhealthy": pb.UNHEALTHY, "Unknown": pb.UNKNOWN}
        for entries in self.streams.lists(context, "v1alpha1"):
            yield pb.NodeWatchResourcesResponse(devices=[
                pb.DeviceHealth(device=pb.DeviceIdentifier(pool_name=e.pool, device_name=e.device),
                                health=status[e.health], last_updated_time=e.updated,
                                health_check_timeout_seconds=timeout, message=e.message)
                for e in entries
            ])


class HealthServicerV1(v1_grpc.DRAResourceHealthServicer):
    """`NodeWatchResources` of `v1.DRAResourceHealth` (master kubelets); same messages as v1alpha1."""

    def __init__(self, streams: HealthStreams) -> None:
        self.streams = streams

    def NodeWatchResources(  # noqa: N802
        self, request: v1_pb.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[v1_pb.NodeWatchResourcesResponse]:
        pb, timeout = v1_pb, self.streams.timeout_seconds
        status = {"Healthy": pb.HEALTHY, "Unhealthy": pb.UNHEALTHY, "Unknown": pb.UNKNOWN}
        for entries in self.streams.lists(context, "v1"):
            yield pb.NodeWatchResourcesResponse(devices=[
                pb.DeviceHealth(device=pb.DeviceIdentifier(pool_name=e.pool, device_name=e.device),
                                health=status[e.health], last_updated_time=e.updated,
                                health_check_timeout_seconds=timeout, message=e.message)
                for e in entries
            ])


def add_to_server(board: HealthBoard, server: grpc.Server, *,
                  resend_interval: float = DEFAULT_RESEND_INTERVAL_S,
                  timeout_seconds: int = DEFAULT_HEALTH_TIMEOUT_S,
                  max_streams: int = DEFAULT_MAX_STREAMS) -> HealthStreams:
    """Serve both health API versions on `server` from one board; returns the shared stream logic."""
    streams = HealthStreams(board, resend_interval=resend_interval, timeout_seconds=timeout_seconds,
                            max_streams=max_streams)
    v1alpha1_grpc.add_DRAResourceHealthServicer_to_server(HealthServicerV1Alpha1(streams), server)
    v1_grpc.add_DRAResourceHealthServicer_to_server(HealthServicerV1(streams), server)
    return streams
