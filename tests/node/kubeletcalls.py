"""Calls a misbehaving or racing kubelet makes to our sockets directly (outside the simulator's rules)."""

from __future__ import annotations

from pathlib import Path

import grpc

from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as dp_pb
from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as dp_grpc


def allocate_directly(kubelet_root: Path, device_id: str) -> grpc.RpcError | None:
    """Our device plugin's Allocate for one device, as a kubelet calls it that chose the device itself (one that saw
    it Unhealthy, or one that chose it before the update reached it); None when it was allowed."""
    [sock] = [p for p in (kubelet_root / "device-plugins").glob("dra-bridge-*.sock")]
    with grpc.insecure_channel(f"unix://{sock}") as ch:
        try:
            dp_grpc.DevicePluginStub(ch).Allocate(dp_pb.AllocateRequest(
                container_requests=[dp_pb.ContainerAllocateRequest(devices_ids=[device_id])]), timeout=10)
        except grpc.RpcError as err:
            return err
    return None
