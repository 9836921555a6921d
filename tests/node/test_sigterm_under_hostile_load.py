"""SIGTERM ends `bridge node` promptly and cleanly however its gRPC servers are being used.

Before: a `GetPreferredAllocation` listing 10,000 IDs with size 5,000 ran a greedy search for hours, and SIGTERM then
waited on that worker for ever (the gRPC worker pool was shut down with `wait=True`, and `ThreadPoolExecutor` threads
are joined at interpreter exit anyway), so the kubelet had to SIGKILL the daemon and its sockets stayed behind. Now
every request is bounded, and every server (device plugin, DRA service, DRA registration) stops within its grace
and abandons a stuck worker instead of waiting for it. The bound is generous; the measured figure is printed."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as dp_pb
from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as dp_grpc
from bridge._proto.dra.v1 import dra_pb2 as dra_pb
from bridge._proto.dra.v1 import dra_pb2_grpc as dra_grpc
from bridge._proto.drahealth.v1alpha1 import drahealth_pb2 as health_pb
from bridge._proto.drahealth.v1alpha1 import drahealth_pb2_grpc as health_grpc
from bridge._proto.pluginregistration.v1 import pluginregistration_pb2 as reg_pb
from bridge._proto.pluginregistration.v1 import pluginregistration_pb2_grpc as reg_grpc
from bridge.kube import NODES, connect
from bridge.sandbox.apiserver import ApiServer
from tests.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
NODE = "node-hostile"
SHUTDOWN_BOUND_S = 20.0


def sockets(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if stat.S_ISSOCK(os.lstat(p).st_mode)]


def test_sigterm_under_hostile_load_exits_within_seconds_and_removes_every_socket(short_tmp: Path) -> None:
    kubelet_root = short_tmp / "kl"
    dp_sock = kubelet_root / "device-plugins" / "dra-bridge-nvidia.com-gpu.sock"
    dra_sock = kubelet_root / "plugins" / "gpu.dra-bridge.io" / "dra.sock"
    reg_sock = kubelet_root / "plugins_registry" / "gpu.dra-bridge.io-reg.sock"
    with ApiServer() as srv:
        kubeconfig = srv.write_kubeconfig(short_tmp / "kc")
        with connect(kubeconfig) as api:
            api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", "node", "--node-name", NODE, "--devices", "simulated:8xH100-80GB",
             "--kubelet-root", str(kubelet_root),
             "--device-plugin-dir", str(kubelet_root / "device-plugins"), "--state-dir", str(short_tmp / "st"),
             "--cdi-root", str(short_tmp / "cdi"), "--kubeconfig", str(kubeconfig), "--dra", "on",
             "--http-address", "off"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        channels: list[grpc.Channel] = []
        try:
            wait_until(lambda: proc.poll() is not None or all(p.is_socket() for p in (dp_sock, dra_sock, reg_sock)),
                       timeout=60, what="the daemon's three sockets")
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            dp_ch, dra_ch, reg_ch = (grpc.insecure_channel(f"unix://{p}") for p in (dp_sock, dra_sock, reg_sock))
            channels += [dp_ch, dra_ch, reg_ch]
            dp, health = dp_grpc.DevicePluginStub(dp_ch), health_grpc.DRAResourceHealthStub(dra_ch)

            hostile = dp.GetPreferredAllocation.future(dp_pb.PreferredAllocationRequest(container_requests=[
                dp_pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=[f"GPU-fake-{i:05d}" for i in range(10_000)], allocation_size=5_000)]),
                timeout=120)
            streams = [dp.ListAndWatch(dp_pb.Empty(), timeout=120) for _ in range(20)]
            streams += [health.NodeWatchResources(health_pb.NodeWatchResourcesRequest(), timeout=120)
                        for _ in range(20)]
            with pytest.raises(grpc.RpcError) as err:
                hostile.result(timeout=60)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            # Streams beyond the limit are refused, and everyone else is still served while the rest are held.
            refused = 0
            for s in streams:
                try:
                    next(s)
                except grpc.RpcError as stream_err:
                    assert stream_err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                    refused += 1
            assert refused == 2 * (20 - 4)
            reg_grpc.RegistrationStub(reg_ch).GetInfo(reg_pb.InfoRequest(), timeout=5)
            dp.GetDevicePluginOptions(dp_pb.Empty(), timeout=5)
            assert dra_grpc.DRAPluginStub(dra_ch).NodePrepareResources(dra_pb.NodePrepareResourcesRequest(),
                                                                        timeout=5).claims == {}

            start = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(SHUTDOWN_BOUND_S + 30)
            except subprocess.TimeoutExpired:
                pytest.fail(f"bridge node still running {SHUTDOWN_BOUND_S + 30:.0f} s after SIGTERM")
            took = time.monotonic() - start
            print(f"\nSIGTERM to exit under hostile load: {took:.2f}s")
            assert rc == 0, proc.stderr.read() if proc.stderr else ""
            assert took < SHUTDOWN_BOUND_S
            assert sockets(kubelet_root) == [], "every socket of ours must be gone"
            for s in streams:
                s.cancel()
        finally:
            for ch in channels:
                ch.close()
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
