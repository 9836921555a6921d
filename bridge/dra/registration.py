"""The plugin-registration server the kubelet's plugin watcher talks to (`plugins_registry/<driver>-reg.sock`).

Contract (k8s.io/kubelet pkg/apis/pluginregistration/v1; the kubelet's pkg/kubelet/pluginmanager): `GetInfo` answers
type `"DRAPlugin"`, the driver name, the *absolute* path of the DRA service socket and the advertised versions,
`v1.DRAPlugin` first because the kubelet takes the first entry of the plugin's list that it supports.
`NotifyRegistrationStatus` tells us whether the kubelet accepted us; it is logged and kept (a rejection is an ERROR:
the node serves no DRA until it is fixed).

Invariant: this server answers for the whole life of the process. Newer kubelets call `GetInfo` every 10 s on
registered sockets and deregister a plugin after two failures, so the registration socket is never closed early.
The servicer holds no protobuf state beyond the call; `RegistrationState` is plain data for health checks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from bridge._proto.pluginregistration.v1 import pluginregistration_pb2 as pb
from bridge._proto.pluginregistration.v1 import pluginregistration_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
DRA_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
# The health service strings: v1 is preferred by master kubelets, v1alpha1 is what 1.34-1.37 kubelets open.
HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")


def supported_versions(*, health: bool, dra_services: tuple[str, ...] = DRA_SERVICES) -> tuple[str, ...]:
    """What `GetInfo` advertises: the DRA services newest first, then the health services when served."""
    return tuple(dra_services) + (HEALTH_SERVICES if health else ())


@dataclass(frozen=True)
class RegistrationStatus:
    registered: bool
    error: str
    at: float  # time.time() of the notification


class RegistrationServicer(pb_grpc.RegistrationServicer):
    """`GetInfo` + `NotifyRegistrationStatus` for one DRA driver instance."""

    def __init__(self, driver: str, endpoint: str, versions: tuple[str, ...],
                 on_status: Callable[[RegistrationStatus], None] | None = None) -> None:
        """`on_status` is called (on the gRPC thread, after the status is stored) for every
        `NotifyRegistrationStatus`: the daemon republishes its ResourceSlices on each `registered=True`, since a
        (re)registration follows a kubelet start, and the kubelet wipes the node's slices when it starts."""
        if not endpoint.startswith("/"):
            raise ValueError(f"the DRA endpoint must be an absolute socket path, got {endpoint!r}")
        if not versions:
            raise ValueError("a DRA plugin must advertise at least one service version")
        self.driver = driver
        self.endpoint = endpoint
        self.versions = tuple(versions)
        self._lock = threading.Lock()
        self._status: RegistrationStatus | None = None
        self._changed = threading.Condition(self._lock)
        self._on_status = on_status
        self.get_info_calls = 0
        self.notifications = 0

    # -- gRPC -----------------------------------------------------------------------------------------------------

    def GetInfo(self, request: pb.InfoRequest, context: grpc.ServicerContext) -> pb.PluginInfo:  # noqa: N802
        with self._lock:
            self.get_info_calls += 1
        log.debug("GetInfo", extra={"driver": self.driver, "endpoint": self.endpoint})
        return pb.PluginInfo(
            type=PLUGIN_TYPE, name=self.driver, endpoint=self.endpoint, supported_versions=list(self.versions)
        )

    def NotifyRegistrationStatus(  # noqa: N802
        self, request: pb.RegistrationStatus, context: grpc.ServicerContext
    ) -> pb.RegistrationStatusResponse:
        status = RegistrationStatus(registered=request.plugin_registered, error=request.error, at=time.time())
        with self._changed:
            self._status = status
            self.notifications += 1
            self._changed.notify_all()
        if self._on_status is not None:
            try:
                self._on_status(status)
            except Exception:  # noqa: BLE001 - a failing listener must not fail the kubelet's call
                log.exception("registration status listener failed", extra={"driver": self.driver})
        if status.registered:
            log.info("registered with the kubelet", extra={"driver": self.driver, "endpoint": self.endpoint})
        else:
            log.error(
                "the kubelet rejected the DRA plugin registration",
                extra={"driver": self.driver, "error": status.error or "(no reason given)"},
            )
        return pb.RegistrationStatusResponse()

    # -- for the daemon's health checks and tests ------------------------------------------------------------------

    @property
    def status(self) -> RegistrationStatus | None:
        """The last status the kubelet sent, or None before the first notification."""
        with self._lock:
            return self._status

    def wait_for_status(self, timeout: float) -> RegistrationStatus | None:
        """Block until the kubelet has sent a status (or `timeout` seconds passed)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._status is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            return self._status


def add_to_server(servicer: RegistrationServicer, server: grpc.Server) -> None:
    pb_grpc.add_RegistrationServicer_to_server(servicer, server)
