"""The gRPC `v1beta1.DevicePlugin` service: protobuf in, protobuf out; all decisions are delegated.

* ListAndWatch sends the full device table at once and again after every change; any number of concurrent
  streams each get every update. A stream ends when the client goes away or the servicer is stopped (`stop()`),
  so stopping the gRPC server never waits on a blocked generator.
* Allocate answers one container response per container request, or fails the whole call: unknown, unhealthy and
  not-legacy IDs are refused with INVALID_ARGUMENT (unknown) or FAILED_PRECONDITION (unhealthy / other owner),
  the message naming the device and the reason; refusals are logged at WARNING and counted.
* GetPreferredAllocation is the pure `preferred_allocation`; PreStartContainer returns empty.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import grpc

from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as pb
from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from bridge.deviceplugin.allocate import AllocationConfig, ContainerAllocation, container_allocation
from bridge.deviceplugin.metrics import DevicePluginMetrics
from bridge.deviceplugin.preferred import PreferredAllocationError, Topology, preferred_allocation
from bridge.deviceplugin.state import DeviceTable
from bridge.logs import ContextLogger

log = logging.getLogger("bridge.deviceplugin")

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

# How often a blocked ListAndWatch generator re-checks whether its RPC is still alive, as a safety net on top of
# the wake-ups from RPC termination callbacks and stop().
_STREAM_POLL_S = 1.0


def options() -> pb.DevicePluginOptions:
    # PreStartContainer has nothing to do for whole GPUs, so the kubelet need not call it on every container start.
    return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)


def to_proto(alloc: ContainerAllocation) -> pb.ContainerAllocateResponse:
    return pb.ContainerAllocateResponse(
        envs=alloc.envs,
        mounts=[pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
                for m in alloc.mounts],
        devices=[pb.DeviceSpec(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
                 for d in alloc.devices],
        annotations=alloc.annotations,
        cdi_devices=[pb.CDIDevice(name=n) for n in alloc.cdi_devices],
    )


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    def __init__(self, table: DeviceTable, config: AllocationConfig, metrics: DevicePluginMetrics) -> None:
        self._table = table
        self._config = config
        self._metrics = metrics
        self._topology = Topology.from_devices(table.devices)
        self._stopped = threading.Event()
        self._log = ContextLogger(log, {"resource": config.resource_name})

    def stop(self) -> None:
        """End every ListAndWatch stream (used before the gRPC server is stopped)."""
        self._stopped.set()
        self._table.wake()

    # -- RPCs ---------------------------------------------------------------------------------------------------

    def GetDevicePluginOptions(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.DevicePluginOptions:
        return options()

    def ListAndWatch(self, request: pb.Empty, context: grpc.ServicerContext) -> Iterator[pb.ListAndWatchResponse]:
        context.add_callback(self._table.wake)  # wake the generator when the client goes away
        seen = -1
        self._log.info("ListAndWatch stream opened")
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
        responses = []
        for creq in request.container_requests:
            try:
                ids = preferred_allocation(
                    list(creq.available_deviceIDs), list(creq.must_include_deviceIDs), creq.allocation_size,
                    self._topology,
                )
            except PreferredAllocationError as err:
                self._log.warning("GetPreferredAllocation refused: %s", err)
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"GetPreferredAllocation: {err}")
            self._log.info("GetPreferredAllocation", extra={"size": creq.allocation_size, "devices": ",".join(ids)})
            responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return pb.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        resource = self._config.resource_name
        if not request.container_requests:
            self._metrics.allocations.labels(resource, "invalid").inc()
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "Allocate: the request has no container requests")
        # Validate every container request before answering any: the call succeeds or fails as a whole.
        requests = [list(creq.devices_ids) for creq in request.container_requests]
        for ids in requests:
            if not ids:
                self._metrics.allocations.labels(resource, "invalid").inc()
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "Allocate: a container request lists no devices")
            if len(set(ids)) != len(ids):
                self._metrics.allocations.labels(resource, "invalid").inc()
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Allocate: duplicate device IDs in {ids}")
            for device_id in ids:
                refusal = self._table.refusal(device_id)
                if refusal is None:
                    continue
                kind, message = refusal
                self._metrics.allocations.labels(resource, f"refused-{kind}").inc()
                self._log.warning("Allocate refused: %s", message, extra={"device": device_id, "request": ",".join(ids)})
                code = grpc.StatusCode.INVALID_ARGUMENT if kind == "unknown" else grpc.StatusCode.FAILED_PRECONDITION
                context.abort(code, f"Allocate refused for {resource}: {message}")
        responses = []
        for ids in requests:
            devices = [d for d in (self._table.device(i) for i in ids) if d is not None]
            try:
                allocation = container_allocation(devices, self._config)
            except (ValueError, OSError) as err:  # the CDI side: a GPU without its device node, a spec not written
                self._metrics.allocations.labels(resource, "cdi-error").inc()
                self._log.error("Allocate failed: %s", err, extra={"request": ",".join(ids)})
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"Allocate for {resource}: CDI: {err}")
            responses.append(to_proto(allocation))
            self._metrics.allocations.labels(resource, "ok").inc()
            self._log.info("Allocate", extra={"devices": ",".join(ids)})
        return pb.AllocateResponse(container_responses=responses)

    def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()
