"""gRPC adapters: the v1 and v1beta1 `DRAPlugin` services over ONE prepare/unprepare core.

The two protos have identical messages except `Device.share_id` (v1 only, 1.35+), so one adapter class,
parametrised by the generated module, converts requests into `ClaimRef`s and core outcomes back into messages.
Invariants:
* exactly one response entry per requested claim UID (duplicates in a request collapse to one);
* per-claim failures are that claim's `error`; an exception escaping the core is turned into per-claim errors
  for the whole batch (never a gRPC failure the kubelet would read as "all claims failed without a reason");
* one INFO log line per RPC with counts; payloads at DEBUG.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

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
    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareOutcome]:
        """One outcome per distinct claim UID."""
        ...

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """Claim UID -> error ("" = success), one per distinct UID."""
        ...


def _refs(claims: Any) -> list[ClaimRef]:
    seen: dict[str, ClaimRef] = {}
    for c in claims:
        seen.setdefault(c.uid, ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid))
    return list(seen.values())


class DraServicer:
    """`NodePrepareResources` / `NodeUnprepareResources` for one generated DRA module."""

    def __init__(self, core: PrepareCore, pb: ModuleType) -> None:
        self._core = core
        self._pb = pb
        self._api = pb.__name__.split(".")[-2]  # "v1" | "v1beta1"

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        start = time.perf_counter()
        refs = _refs(request.claims)
        try:
            outcomes = self._core.prepare(refs)
        except Exception as err:  # a core bug: still one answer per claim, and loud
            log.exception("prepare failed unexpectedly", extra={"api": self._api, "claims": len(refs)})
            outcomes = {r.uid: PrepareOutcome(error=f"internal error in the DRA driver: {err}") for r in refs}
        pb = self._pb
        response = pb.NodePrepareResourcesResponse()
        for ref in refs:
            outcome = outcomes.get(ref.uid) or PrepareOutcome(error="internal error: the driver produced no result")
            entry = response.claims[ref.uid]
            if outcome.error:
                entry.error = outcome.error
                continue
            for d in outcome.devices:
                entry.devices.append(
                    pb.Device(
                        request_names=list(d.request_names),
                        pool_name=d.pool,
                        device_name=d.device,
                        cdi_device_ids=list(d.cdi_ids),
                    )
                )
        failed = sum(1 for r in refs if response.claims[r.uid].error)
        log.info(
            "NodePrepareResources",
            extra={"api": self._api, "claims": len(refs), "failed": failed,
                   "ms": round((time.perf_counter() - start) * 1000, 2)},
        )
        log.debug("NodePrepareResources response", extra={"response": str(response)})
        return response

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        start = time.perf_counter()
        refs = _refs(request.claims)
        try:
            errors = self._core.unprepare(refs)
        except Exception as err:
            log.exception("unprepare failed unexpectedly", extra={"api": self._api, "claims": len(refs)})
            errors = {r.uid: f"internal error in the DRA driver: {err}" for r in refs}
        response = self._pb.NodeUnprepareResourcesResponse()
        for ref in refs:
            response.claims[ref.uid].error = errors.get(ref.uid, "")
        failed = sum(1 for r in refs if response.claims[r.uid].error)
        log.info(
            "NodeUnprepareResources",
            extra={"api": self._api, "claims": len(refs), "failed": failed,
                   "ms": round((time.perf_counter() - start) * 1000, 2)},
        )
        return response


def add_to_server(core: PrepareCore, server: grpc.Server) -> tuple[DraServicer, DraServicer]:
    """Serve both DRA API versions over `core`; returns (v1, v1beta1) servicers."""
    ga, beta = DraServicer(core, v1_pb), DraServicer(core, v1beta1_pb)
    v1_grpc.add_DRAPluginServicer_to_server(ga, server)
    v1beta1_grpc.add_DRAPluginServicer_to_server(beta, server)
    return ga, beta
