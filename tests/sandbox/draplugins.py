"""DRA plugin doubles for the kubelet simulator's tests, on real unix sockets: a real registration server from
`bridge.dra.registration` (optionally slow to answer GetInfo) and a scripted `DRAPlugin` v1 servicer that records
its calls and can drop claims, answer for unknown UIDs, fail claims or be slow."""

from __future__ import annotations

import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bridge._proto.dra.v1 import dra_pb2 as pb
from bridge._proto.dra.v1 import dra_pb2_grpc as pb_grpc
from bridge._proto.pluginregistration.v1 import pluginregistration_pb2 as reg_pb
from bridge.dra import health
from bridge.dra.registration import RegistrationServicer, add_to_server, supported_versions
from tests.dra.cluster import NODE

DRIVER = "gpu.dra-bridge.io"
OTHER = "nic.example.com"


@dataclass
class Script:
    """What the scripted plugin does with each call; records what it was asked."""

    drop: set[str] = field(default_factory=set)  # claim UIDs left out of the answer
    extra_uid: str = ""  # an answer for a UID nobody asked for
    errors: dict[str, str] = field(default_factory=dict)  # claim UID -> per-claim error
    delay_s: float = 0.0
    calls: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)  # (rpc, claim UIDs)


class ScriptedDra(pb_grpc.DRAPluginServicer):
    def __init__(self, script: Script) -> None:
        self.script = script

    def NodePrepareResources(self, request: pb.NodePrepareResourcesRequest,  # noqa: N802
                             context: grpc.ServicerContext) -> pb.NodePrepareResourcesResponse:
        s = self.script
        s.calls.append(("prepare", tuple(c.uid for c in request.claims)))
        time.sleep(s.delay_s)
        out = pb.NodePrepareResourcesResponse()
        for c in request.claims:
            if c.uid in s.drop:
                continue
            if c.uid in s.errors:
                out.claims[c.uid].error = s.errors[c.uid]
            else:
                out.claims[c.uid].devices.add(pool_name=NODE, device_name="gpu-0",
                                              cdi_device_ids=[f"k8s.{DRIVER}/claim={c.uid}-gpu-0"])
        if s.extra_uid:
            out.claims[s.extra_uid].SetInParent()
        return out

    def NodeUnprepareResources(self, request: pb.NodeUnprepareResourcesRequest,  # noqa: N802
                               context: grpc.ServicerContext) -> pb.NodeUnprepareResourcesResponse:
        s = self.script
        s.calls.append(("unprepare", tuple(c.uid for c in request.claims)))
        out = pb.NodeUnprepareResourcesResponse()
        for c in request.claims:
            if c.uid not in s.drop:
                out.claims[c.uid].error = s.errors.get(c.uid, "")
        return out


class SlowRegistration(RegistrationServicer):
    def __init__(self, *args: object, get_info_delay_s: float, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.get_info_delay_s = get_info_delay_s

    def GetInfo(self, request: reg_pb.InfoRequest, context: grpc.ServicerContext) -> reg_pb.PluginInfo:  # noqa: N802
        time.sleep(self.get_info_delay_s)
        return super().GetInfo(request, context)


class ScriptedPlugin:
    """A DRA plugin double on real sockets: `<root>/plugins_registry/<driver>-reg.sock` + `<root>/<driver>.sock`."""

    def __init__(self, root: Path, driver: str, script: Script, *, get_info_delay_s: float = 0.0,
                 board: health.HealthBoard | None = None) -> None:
        """`board`: also serve DRAResourceHealth from it (the bridge's own stream logic)."""
        self.script = script
        self.board = board
        endpoint = root / f"{driver}.sock"
        (root / "plugins_registry").mkdir(parents=True, exist_ok=True)
        self.registration = SlowRegistration(driver, str(endpoint), supported_versions(health=board is not None),
                                             get_info_delay_s=get_info_delay_s)
        self.dra = grpc.server(futures.ThreadPoolExecutor(8))
        pb_grpc.add_DRAPluginServicer_to_server(ScriptedDra(script), self.dra)
        if board is not None:
            health.add_to_server(board, self.dra, resend_interval=0.5)
        self.dra.add_insecure_port(f"unix://{endpoint}")
        self.reg = grpc.server(futures.ThreadPoolExecutor(2))
        add_to_server(self.registration, self.reg)
        self.reg.add_insecure_port(f"unix://{root / 'plugins_registry' / f'{driver}-reg.sock'}")
        self.dra.start()
        self.reg.start()

    def stop(self) -> None:
        if self.board is not None:
            self.board.close()
        self.reg.stop(0)
        self.dra.stop(0)
