"""The vendor's device plugin for the guide tests: what runs on a GPU node before it is handed to the bridge.

A real gRPC device plugin on the node's kubelet-simulator sockets, with the behaviour of NVIDIA's
(NVIDIA/k8s-device-plugin internal/plugin/server.go) that a hand-over depends on:

* socket `<kubelet-root>/device-plugins/nvidia-gpu.sock`, resource `nvidia.com/gpu`, registered with
  `GetPreferredAllocationAvailable: true`;
* device IDs are the GPUs' UUIDs (`deviceIDStrategy: uuid`, the default and what the GPU Operator's DaemonSet sets),
  the same UUIDs the bridge's simulated source gives the node's GPUs: so a pod the vendor plugin served keeps its
  GPU's identity when the bridge adopts it;
* `ListAndWatch` sends every device, healthy, then waits; `Allocate` answers
  `NVIDIA_VISIBLE_DEVICES=<uuid,...>` (`deviceListStrategy: envvar`) and refuses unknown IDs;
* `stop()` is what the plugin does on SIGTERM when its pod goes away: stop the gRPC server (the kubelet's stream
  ends) and remove the socket.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as pb
from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from bridge.inventory.simulated import devices_from_spec

RESOURCE = "nvidia.com/gpu"
SOCKET = "nvidia-gpu.sock"


class _Servicer(pb_grpc.DevicePluginServicer):
    def __init__(self, devices: list[pb.Device], stopping: threading.Event) -> None:
        self.devices = devices
        self.ids = {d.ID for d in devices}
        self.stopping = stopping
        self.allocated: list[list[str]] = []

    def GetDevicePluginOptions(self, request, context):  # type: ignore[no-untyped-def]
        return pb.DevicePluginOptions(get_preferred_allocation_available=True)

    def ListAndWatch(self, request, context):  # type: ignore[no-untyped-def]
        yield pb.ListAndWatchResponse(devices=self.devices)
        while context.is_active() and not self.stopping.wait(0.1):
            pass

    def GetPreferredAllocation(self, request, context):  # type: ignore[no-untyped-def]
        out = pb.PreferredAllocationResponse()
        for req in request.container_requests:
            chosen = list(req.must_include_deviceIDs)
            for d in sorted(req.available_deviceIDs):
                if len(chosen) >= req.allocation_size:
                    break
                if d not in chosen:
                    chosen.append(d)
            out.container_responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return out

    def Allocate(self, request, context):  # type: ignore[no-untyped-def]
        out = pb.AllocateResponse()
        for req in request.container_requests:
            unknown = [i for i in req.devices_ids if i not in self.ids]
            if unknown:
                context.abort(grpc.StatusCode.UNKNOWN,
                              f"invalid allocation request for '{RESOURCE}': unknown device: {unknown[0]}")
            self.allocated.append(list(req.devices_ids))
            out.container_responses.append(pb.ContainerAllocateResponse(
                envs={"NVIDIA_VISIBLE_DEVICES": ",".join(req.devices_ids)}))
        return out

    def PreStartContainer(self, request, context):  # type: ignore[no-untyped-def]
        return pb.PreStartContainerResponse()


class VendorDevicePlugin:
    """NVIDIA's device plugin on one node of a sandbox cluster (see the module docstring)."""

    def __init__(self, node_name: str, gpus: str, device_plugin_dir: Path) -> None:
        self.node_name = node_name
        self.socket = device_plugin_dir / SOCKET
        self.kubelet_socket = device_plugin_dir / "kubelet.sock"
        devices = devices_from_spec(gpus, node_name)
        self.uuids = [d.uuid for d in devices]
        self._stopping = threading.Event()
        self.servicer = _Servicer([pb.Device(ID=d.uuid, health="Healthy", topology=pb.TopologyInfo(
            nodes=[pb.NUMANode(ID=d.numa_node or 0)])) for d in devices], self._stopping)
        self._pool: ThreadPoolExecutor | None = None
        self._server: grpc.Server | None = None

    def start(self) -> VendorDevicePlugin:
        if self.socket.exists():
            self.socket.unlink()
        self._pool = ThreadPoolExecutor(8, thread_name_prefix=f"vendor-dp-{self.node_name}")
        self._server = grpc.server(self._pool)
        pb_grpc.add_DevicePluginServicer_to_server(self.servicer, self._server)
        self._server.add_insecure_port(f"unix://{self.socket}")
        self._server.start()
        with grpc.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
            pb_grpc.RegistrationStub(channel).Register(pb.RegisterRequest(
                version="v1beta1", endpoint=SOCKET, resource_name=RESOURCE,
                options=pb.DevicePluginOptions(get_preferred_allocation_available=True)), timeout=15)
        return self

    @property
    def running(self) -> bool:
        return self._server is not None

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.stop(1).wait()
            self._server = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        try:
            os.unlink(self.socket)
        except FileNotFoundError:
            pass
        self._stopping = threading.Event()
        self.servicer.stopping = self._stopping
