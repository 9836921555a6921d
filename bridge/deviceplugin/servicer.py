"""The gRPC `v1beta1.DevicePlugin` service: protobuf in, protobuf out; all decisions are delegated.

* ListAndWatch sends the full device table at once and again after every change; every open stream gets every
  update. A stream ends when the client goes away or the servicer is stopped (`stop()`), so stopping the gRPC server
  never waits on a blocked generator. A stream holds a worker thread for its life, so each takes a slot of
  `self.streams` (`bridge.grpcserver.StreamSlots`): beyond the limit (a kubelet opens one per registration) a
  stream is refused with RESOURCE_EXHAUSTED, and the unary calls keep workers of their own.
* Allocate answers one container response per container request, or fails the whole call: malformed requests
  (no devices, the same ID twice in one container or in two containers of the call) are INVALID_ARGUMENT before any
  device is looked at (`requests.allocate_problem`); unknown, unhealthy and not-legacy IDs are refused with
  INVALID_ARGUMENT (unknown) or FAILED_PRECONDITION (unhealthy / other owner), the message naming the device and
  the reason; refusals are logged at WARNING and counted.
* GetPreferredAllocation answers only IDs of this node's inventory that the device plugin may allocate: an ID the
  inventory does not know is INVALID_ARGUMENT, an unhealthy or other-side must-include ID is FAILED_PRECONDITION,
  and unhealthy or other-side available IDs (a kubelet one ListAndWatch update behind) are left out, the hint then
  shorter than asked (the kubelet fills the rest itself, and Allocate is the guard). The search is the pure
  `preferred_allocation`, bounded by `PREFERRED_BUDGET_S` per call (half the time left when the call has a
  nearer deadline) and ended as soon as the call is cancelled.
* Every error message stays under `requests.MAX_MESSAGE_CHARS` whatever the request (gRPC carries it in a trailer
  that a peer refuses past its metadata limit); each call logs one INFO line, not one per container.
  PreStartContainer returns empty.
  The ownership check is the ledger's (`DeviceTable.claim`), made once for the whole call after the request is
  validated, so an allowed Allocate is recorded as a holder in the same step.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import NoReturn

import grpc
from prometheus_client import Counter

from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as pb
from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from bridge.deviceplugin.allocate import (
    AllocationConfig,
    ContainerAllocation,
    DeviceNodeSpec,
    MountSpec,
    container_allocation,
)
from bridge.deviceplugin.metrics import DevicePluginMetrics
from bridge.deviceplugin.preferred import PreferredAllocationError, Topology, check_request, preferred_allocation
from bridge.deviceplugin.requests import allocate_problem, clip, name_ids
from bridge.deviceplugin.state import DeviceTable
from bridge.logs import ContextLogger
from bridge.grpcserver import DEFAULT_MAX_STREAMS, StreamSlots

log = logging.getLogger("bridge.deviceplugin")

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

# How often a blocked ListAndWatch generator re-checks whether its RPC is still alive, as a safety net on top of
# the wake-ups from RPC termination callbacks and stop().
_STREAM_POLL_S = 1.0
# Search time one GetPreferredAllocation call may use (a hint; the kubelet calls it without a deadline).
PREFERRED_BUDGET_S = 1.0


def options() -> pb.DevicePluginOptions:
    # PreStartContainer has nothing to do for whole GPUs, so the kubelet need not call it on every container start.
    return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, clip(message))


def to_proto(alloc: ContainerAllocation) -> pb.ContainerAllocateResponse:
    """The message for one container. Built once per distinct content (a node hands out a few device sets again and
    again, and building the message is half an Allocate's own cost): the caller copies it into its response (a
    repeated message field copies what it is given) and must not change it."""
    return _message(tuple(alloc.envs.items()), alloc.mounts, alloc.devices, tuple(alloc.annotations.items()),
                    alloc.cdi_devices)


@functools.lru_cache(maxsize=256)
def _message(envs: tuple[tuple[str, str], ...], mounts: tuple[MountSpec, ...], devices: tuple[DeviceNodeSpec, ...],
             annotations: tuple[tuple[str, str], ...], cdi_devices: tuple[str, ...]) -> pb.ContainerAllocateResponse:
    return pb.ContainerAllocateResponse(
        envs=dict(envs),
        mounts=[pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
                for m in mounts],
        devices=[pb.DeviceSpec(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
                 for d in devices],
        annotations=dict(annotations),
        cdi_devices=[pb.CDIDevice(name=n) for n in cdi_devices],
    )


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    def __init__(self, table: DeviceTable, config: AllocationConfig, metrics: DevicePluginMetrics, *,
                 max_streams: int = DEFAULT_MAX_STREAMS, preferred_budget_s: float = PREFERRED_BUDGET_S) -> None:
        self._table = table
        self._config = config
        self._metrics = metrics
        self._topology = Topology.from_devices(table.devices)
        self._stopped = threading.Event()
        self._log = ContextLogger(log, {"resource": config.resource_name})
        self._preferred_budget_s = preferred_budget_s
        resource = config.resource_name
        self.streams = StreamSlots(max_streams, "ListAndWatch", on_refused=metrics.streams_refused.labels(resource).inc)
        self._open_streams = metrics.streams_open.labels(resource)
        self._allocated_ok: Counter | None = None

    def stop(self) -> None:
        """End every ListAndWatch stream (used before the gRPC server is stopped)."""
        self._stopped.set()
        self._table.wake()

    # -- RPCs ---------------------------------------------------------------------------------------------------

    def GetDevicePluginOptions(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.DevicePluginOptions:
        return options()

    def ListAndWatch(self, request: pb.Empty, context: grpc.ServicerContext) -> Iterator[pb.ListAndWatchResponse]:
        with self.streams.hold(context):
            self._open_streams.inc()
            try:
                yield from self._list_and_watch(context)
            finally:
                self._open_streams.dec()

    def _list_and_watch(self, context: grpc.ServicerContext) -> Iterator[pb.ListAndWatchResponse]:
        context.add_callback(self._table.wake)  # wake the generator when the client goes away
        seen = -1
        self._log.info("ListAndWatch stream opened", extra={"streams": self.streams.open_streams})
        try:
            while not self._stopped.is_set() and context.is_active():
                version, reports = self._table.snapshot()
                if version != seen:
                    seen = version
                    devices = [
                        pb.Device(
                            ID=r.id,
                            health=HEALTHY if r.healthy else UNHEALTHY,
                            topology=(pb.TopologyInfo(nodes=[pb.NUMANode(ID=r.numa_node)])
                                      if r.numa_node is not None else None),
                        )
                        for r in reports
                    ]
                    self._metrics.listandwatch_updates.labels(self._config.resource_name).inc()
                    unhealthy = sum(not r.healthy for r in reports)
                    self._log.info("ListAndWatch update", extra={"devices": len(reports), "unhealthy": unhealthy})
                    yield pb.ListAndWatchResponse(devices=devices)
                    continue
                self._table.wait_for_change(seen, _STREAM_POLL_S)
        finally:
            self._log.info("ListAndWatch stream closed")

    def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        remaining = context.time_remaining()
        budget = self._preferred_budget_s if remaining is None else min(self._preferred_budget_s, remaining / 2)
        deadline = time.monotonic() + budget
        cut_short: list[bool] = []

        def expired() -> bool:
            if time.monotonic() < deadline and context.is_active():
                return False
            cut_short.append(True)
            return True

        responses: list[pb.ContainerPreferredAllocationResponse] = []
        sizes: list[str] = []
        answers: list[str] = []
        for creq in request.container_requests:
            ids = self._preferred(list(creq.available_deviceIDs), list(creq.must_include_deviceIDs),
                                  creq.allocation_size, context, expired)
            sizes.append(str(creq.allocation_size))
            answers.append(",".join(ids))
            responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        extra: dict[str, object] = {"containers": len(responses), "size": ";".join(sizes),
                                    "devices": clip(";".join(answers))}
        if cut_short:
            self._metrics.preferred_cut_short.labels(self._config.resource_name).inc()
            extra["cut_short"] = "time budget, deadline or cancellation"
        self._log.info("GetPreferredAllocation", extra=extra)
        return pb.PreferredAllocationResponse(container_responses=responses)

    def _preferred(self, available: list[str], must: list[str], size: int, context: grpc.ServicerContext,
                   expired: Callable[[], bool]) -> list[str]:
        """One container's hint, from IDs of the inventory that the device plugin may allocate only."""
        def refuse(code: grpc.StatusCode, message: str) -> NoReturn:
            self._log.warning("GetPreferredAllocation refused: %s", clip(message))
            _abort(context, code, f"GetPreferredAllocation: {message}")

        asked = list(dict.fromkeys(available + must))
        unknown = [i for i in asked if self._table.device(i) is None]
        if unknown:
            refuse(grpc.StatusCode.INVALID_ARGUMENT,
                   f"{len(unknown):,} device ID(s) are not in this node's inventory: {name_ids(unknown)}")
        try:
            check_request(available, must, size)
        except PreferredAllocationError as err:
            refuse(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        blocked = [why for i in dict.fromkeys(must) if (why := self._table.refusal(i)) is not None]
        if blocked:
            more = f" (and {len(blocked) - 1:,} more)" if len(blocked) > 1 else ""
            refuse(grpc.StatusCode.FAILED_PRECONDITION, f"a must-include device cannot be allocated: {blocked[0][1]}{more}")
        must_set = set(must)
        usable: list[str] = []
        left_out: list[str] = []
        for i in dict.fromkeys(available):
            (usable if i in must_set or self._table.refusal(i) is None else left_out).append(i)
        if left_out:
            self._log.warning("GetPreferredAllocation: left out %d available device(s) that are unhealthy or on "
                              "another side: %s", len(left_out), name_ids(left_out),
                              extra={"usable": len(usable), "size": size})
        return preferred_allocation(usable, must, min(size, len(usable)), self._topology, expired)

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        resource = self._config.resource_name
        # Validate every container request before answering any: the call succeeds or fails as a whole.
        requests = [list(creq.devices_ids) for creq in request.container_requests]
        problem = allocate_problem(requests)
        if problem is not None:
            self._metrics.allocations.labels(resource, "invalid").inc()
            self._log.warning("Allocate refused: %s", problem, extra={"containers": len(requests)})
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"Allocate: {problem}")
        for ids in requests:
            for device_id in ids:
                refusal = self._table.refusal(device_id, allocating=True)
                if refusal is None:
                    continue
                kind, message = refusal
                self._metrics.allocations.labels(resource, f"refused-{kind}").inc()
                self._log.warning("Allocate refused: %s", clip(message), extra={"device": clip(device_id, 80),
                                                                               "request": name_ids(ids)})
                code = grpc.StatusCode.INVALID_ARGUMENT if kind == "unknown" else grpc.StatusCode.FAILED_PRECONDITION
                _abort(context, code, f"Allocate refused for {resource}: {message}")
        claimed = self._table.claim([i for ids in requests for i in ids])
        if claimed is not None:
            kind, message = claimed
            self._metrics.allocations.labels(resource, f"refused-{kind}").inc()
            self._log.warning("Allocate refused: %s", clip(message), extra={"request": name_ids(
                [i for r in requests for i in r])})
            code = grpc.StatusCode.INVALID_ARGUMENT if kind == "unknown" else grpc.StatusCode.FAILED_PRECONDITION
            _abort(context, code, f"Allocate refused for {resource}: {message}")
        responses = []
        for ids in requests:
            devices = [d for d in (self._table.device(i) for i in ids) if d is not None]
            try:
                allocation = container_allocation(devices, self._config)
            except (ValueError, OSError) as err:  # the CDI side: a GPU without its device node, a spec not written
                self._metrics.allocations.labels(resource, "cdi-error").inc()
                self._log.error("Allocate failed: %s", err, extra={"request": ",".join(ids)})
                _abort(context, grpc.StatusCode.FAILED_PRECONDITION, f"Allocate for {resource}: CDI: {err}")
            responses.append(to_proto(allocation))
            if self._allocated_ok is None:  # its series appears with the first answered Allocate, not before
                self._allocated_ok = self._metrics.allocations.labels(resource, "ok")
            self._allocated_ok.inc()
        self._log.info("Allocate", extra={"containers": len(requests), "devices": ";".join(",".join(i) for i in requests)})
        return pb.AllocateResponse(container_responses=responses)

    def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()
