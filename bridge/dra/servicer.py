"""gRPC adapters: the v1 and v1beta1 `DRAPlugin` services over ONE prepare/unprepare core.

The two protos have identical messages except `Device.share_id` (v1 only, 1.35+) but distinct generated types:
`DraCalls` converts requests into `ClaimRef`s and runs the core once for both, and one thin servicer per version
(a subclass of that version's generated `DRAPluginServicer`) only builds its own response messages.
Invariants:
* exactly one response entry per requested claim UID (duplicates in a request collapse to one);
* per-claim failures are that claim's `error` (the core keeps every failure it can attribute to one claim, bad
  references included, to that claim); only an exception escaping the core (a bug) is turned into the same error
  for every claim of the batch, never a gRPC failure the kubelet would read as "all claims failed without a reason";
* the caller's deadline reaches the core (`time_left`), which budgets its API reads and lock wait from it;
* one INFO log line per RPC with counts; payloads at DEBUG.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc

from bridge._proto.dra.v1 import dra_pb2 as v1_pb
from bridge._proto.dra.v1 import dra_pb2_grpc as v1_grpc
from bridge._proto.dra.v1beta1 import dra_pb2 as v1beta1_pb
from bridge._proto.dra.v1beta1 import dra_pb2_grpc as v1beta1_grpc
from bridge.dra.claims import ClaimRef

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreparedDevice:
    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


@dataclass(frozen=True)
class PrepareOutcome:
    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


class PrepareCore(Protocol):
    def prepare(self, claims: Sequence[ClaimRef], time_left: float | None = None) -> dict[str, PrepareOutcome]:
        """One outcome per distinct claim UID. `time_left`: seconds until the caller's deadline (None: none set);
        the core must answer well before it."""
        ...

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """Claim UID -> error ("" = success), one per distinct UID."""
        ...


class _ClaimMessage(Protocol):
    """The `Claim` message of either API version."""

    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...


def _refs(claims: Iterable[_ClaimMessage]) -> list[ClaimRef]:
    seen: dict[str, ClaimRef] = {}
    for c in claims:
        seen.setdefault(c.uid, ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid))
    return list(seen.values())


class DraCalls:
    """The version-independent half of both RPCs: requests in as claim messages, one plain answer per distinct
    claim UID out (in request order), core exceptions turned into per-claim errors, one INFO line per call."""

    def __init__(self, core: PrepareCore, api: str) -> None:
        self._core = core
        self.api = api  # "v1" | "v1beta1"

    def prepare(self, claims: Iterable[_ClaimMessage],
                time_left: float | None = None) -> list[tuple[str, PrepareOutcome]]:
        """`time_left`: the gRPC deadline's remaining seconds (`ServicerContext.time_remaining()`)."""
        start = time.perf_counter()
        refs = _refs(claims)
        try:
            outcomes = self._core.prepare(refs, time_left)
        except Exception as err:  # a core bug: still one answer per claim, and loud
            log.exception("prepare failed unexpectedly", extra={"api": self.api, "claims": len(refs)})
            outcomes = {r.uid: PrepareOutcome(error=f"internal error in the DRA driver: {err}") for r in refs}
        answers = [(r.uid, outcomes.get(r.uid) or PrepareOutcome(error="internal error: the driver produced no "
                                                                        "result")) for r in refs]
        log.info(
            "NodePrepareResources",
            extra={"api": self.api, "claims": len(refs), "failed": sum(1 for _, o in answers if o.error),
                   "ms": round((time.perf_counter() - start) * 1000, 2)},
        )
        return answers

    def unprepare(self, claims: Iterable[_ClaimMessage]) -> list[tuple[str, str]]:
        start = time.perf_counter()
        refs = _refs(claims)
        try:
            errors = self._core.unprepare(refs)
        except Exception as err:
            log.exception("unprepare failed unexpectedly", extra={"api": self.api, "claims": len(refs)})
            errors = {r.uid: f"internal error in the DRA driver: {err}" for r in refs}
        answers = [(r.uid, errors.get(r.uid, "")) for r in refs]
        log.info(
            "NodeUnprepareResources",
            extra={"api": self.api, "claims": len(refs), "failed": sum(1 for _, e in answers if e),
                   "ms": round((time.perf_counter() - start) * 1000, 2)},
        )
        return answers


class DraServicerV1(v1_grpc.DRAPluginServicer):
    """`v1.DRAPlugin` (1.34+ kubelets try it first)."""

    def __init__(self, core: PrepareCore) -> None:
        self.calls = DraCalls(core, "v1")

    def NodePrepareResources(  # noqa: N802
        self, request: v1_pb.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1_pb.NodePrepareResourcesResponse:
        response = v1_pb.NodePrepareResourcesResponse()
        for uid, outcome in self.calls.prepare(request.claims, context.time_remaining()):
            entry = response.claims[uid]
            if outcome.error:
                entry.error = outcome.error
            else:
                entry.devices.extend(v1_pb.Device(request_names=d.request_names, pool_name=d.pool,
                                                  device_name=d.device, cdi_device_ids=d.cdi_ids)
                                     for d in outcome.devices)
        if log.isEnabledFor(logging.DEBUG):  # the text form of a response costs more than building it
            log.debug("NodePrepareResources response", extra={"response": str(response)})
        return response

    def NodeUnprepareResources(  # noqa: N802
        self, request: v1_pb.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1_pb.NodeUnprepareResourcesResponse:
        response = v1_pb.NodeUnprepareResourcesResponse()
        for uid, error in self.calls.unprepare(request.claims):
            response.claims[uid].error = error
        return response


class DraServicerV1Beta1(v1beta1_grpc.DRAPluginServicer):
    """`v1beta1.DRAPlugin` (older kubelets); same messages as v1 minus `Device.share_id`."""

    def __init__(self, core: PrepareCore) -> None:
        self.calls = DraCalls(core, "v1beta1")

    def NodePrepareResources(  # noqa: N802
        self, request: v1beta1_pb.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1_pb.NodePrepareResourcesResponse:
        response = v1beta1_pb.NodePrepareResourcesResponse()
        for uid, outcome in self.calls.prepare(request.claims, context.time_remaining()):
            entry = response.claims[uid]
            if outcome.error:
                entry.error = outcome.error
            else:
                entry.devices.extend(v1beta1_pb.Device(request_names=d.request_names, pool_name=d.pool,
                                                       device_name=d.device, cdi_device_ids=d.cdi_ids)
                                     for d in outcome.devices)
        if log.isEnabledFor(logging.DEBUG):  # the text form of a response costs more than building it
            log.debug("NodePrepareResources response", extra={"response": str(response)})
        return response

    def NodeUnprepareResources(  # noqa: N802
        self, request: v1beta1_pb.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1_pb.NodeUnprepareResourcesResponse:
        response = v1beta1_pb.NodeUnprepareResourcesResponse()
        for uid, error in self.calls.unprepare(request.claims):
            response.claims[uid].error = error
        return response


def add_to_server(core: PrepareCore, server: grpc.Server) -> tuple[DraServicerV1, DraServicerV1Beta1]:
    """Serve both DRA API versions over `core`; returns (v1, v1beta1) servicers."""
    ga, beta = DraServicerV1(core), DraServicerV1Beta1(core)
    v1_grpc.add_DRAPluginServicer_to_server(ga, server)
    v1beta1_grpc.add_DRAPluginServicer_to_server(beta, server)
    return ga, beta
