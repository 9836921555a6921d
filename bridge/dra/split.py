"""The static split: which GPUs of this node serve DRA, from the node's label/annotation or the `--dra-devices` flag.

Where the target comes from (first match wins):
1. the Node annotation `dra-bridge.io/dra-devices` (any value, including device lists: `gpu-6,gpu-7`);
2. the Node label `dra-bridge.io/dra-devices` (`0`, `N`, `all`; label values cannot hold commas, so one device at
   most: `gpu-7`);
3. the daemon's `--dra-devices` flag (`BRIDGE_NODE_DRA_DEVICES`);
4. the default `0`: every GPU stays with the device plugin (see `bridge.ledger.ownership` for why).

The node wins over the flag. The flag is set once for a whole DaemonSet, so it is the cluster's default; the node
is where an operator (or, later, a cluster controller) decides for one machine, and it must be able to override
that default without redeploying the DaemonSet. Rejected: "flag wins", which would make per-node migration
impossible wherever the flag is set. When label and annotation disagree the annotation wins and a warning says so.

Applying a target (`bridge.ledger.plan_static_split` decides; this module does the I/O around it):
* a target that does not fit the node (bad syntax, more devices than the node has, an unknown device) or that would
  move a device in use on its current side is **refused as a whole**: nothing changes, the reason is logged and
  recorded as a Warning Event on the Node (once per distinct reason), and the refused target is retried every
  `retry_interval_s` so it applies as soon as the devices are free;
* otherwise the moving devices are first **withdrawn** (offered to neither API: the device plugin reports them
  Unhealthy, the ResourceSlice drops them), then after `grace_s` the in-use check is **repeated** (a grab during
  the grace aborts the move and restores the previous sides), then they are **offered** to their new side. Every
  step is persisted through the checkpoint's `update(mutate)` before listeners hear of it, so a crash never leaves
  a device offered on a side the checkpoint does not record.

`side_of` is the seam the device plugin and the DRA prepare guard read; listeners (`add_listener`) get every new
`Ownership` snapshot (the slice publisher's `set_dra_devices`, the device table's refresh).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from bridge.inventory.model import DeviceID, GpuDevice
from bridge.kube.api import NODES, KubeAPI, Obj, WatchEvent
from bridge.kube.errors import KubeError
from bridge.kube.events import record_event
from bridge.kube.watch import Informer
from bridge.ledger.checkpoint import Checkpoint, CheckpointError
from bridge.ledger.ownership import (
    DEFAULT_SPLIT,
    Ownership,
    OwnershipError,
    Side,
    SplitPlan,
    SplitRefused,
    parse_split,
    plan_static_split,
)

log = logging.getLogger(__name__)

SPLIT_KEY = "dra-bridge.io/dra-devices"
EVENT_COMPONENT = "dra-bridge-node"

InUse = Callable[[], Mapping[str, str]]
Listener = Callable[[Ownership], None]


@dataclass(frozen=True)
class SplitRequest:
    text: str
    origin: str  # for messages: where the value came from

    def describe(self) -> str:
        return f"{self.text!r} (from {self.origin})"


def requested_split(node: Obj | None, flag: str | None = None) -> SplitRequest:
    """The split this node asks for, by the precedence in the module docstring."""
    meta = (node or {}).get("metadata") or {}
    annotation = (meta.get("annotations") or {}).get(SPLIT_KEY)
    label = (meta.get("labels") or {}).get(SPLIT_KEY)
    if annotation is not None and annotation.strip():
        if label is not None and label.strip() != annotation.strip():
            log.warning("node %s: annotation %s=%r and label %s=%r disagree; the annotation wins",
                        meta.get("name"), SPLIT_KEY, annotation, SPLIT_KEY, label)
        return SplitRequest(annotation.strip(), f"node annotation {SPLIT_KEY}")
    if label is not None and label.strip():
        return SplitRequest(label.strip(), f"node label {SPLIT_KEY}")
    if flag is not None and flag.strip():
        return SplitRequest(flag.strip(), "--dra-devices")
    return SplitRequest(DEFAULT_SPLIT, "default (node says nothing)")


@dataclass(frozen=True)
class SplitOutcome:
    request: SplitRequest
    applied: bool  # the node now has the requested split
    moves: tuple[tuple[DeviceID, Side, Side], ...] = ()
    message: str = ""

    @property
    def refused(self) -> bool:
        return not self.applied


@dataclass
class _Last:
    request: SplitRequest | None = None
    refusal: str = ""
    outcomes: list[SplitOutcome] = field(default_factory=list)


class StaticSplit:
    def __init__(
        self,
        devices: Sequence[GpuDevice],
        *,
        node_name: str,
        api: KubeAPI | None = None,
        flag: str | None = None,
        initial: Ownership | None = None,
        checkpoint: Checkpoint | None = None,
        in_use_legacy: InUse = dict,
        in_use_dra: InUse = dict,
        listeners: Iterable[Listener] = (),
        grace_s: float = 5.0,
        retry_interval_s: float = 30.0,
    ) -> None:
        """`initial`: the ledger as adopted from the checkpoint (default: all legacy). `in_use_legacy` /
        `in_use_dra` return uuid -> holder now (PodResources; prepared claims). `grace_s`: how long withdrawn
        devices are offered to neither API before the in-use check is repeated; 5 s covers a ListAndWatch push
        (well under 1 s) and the scheduler's informer catching up with a ResourceSlice change."""
        if flag is not None and flag.strip():
            parse_split(flag)  # a bad flag is a configuration error: fail at start, not at the first node event
        if grace_s < 0 or retry_interval_s <= 0:
            raise ValueError("grace_s must be >= 0 and retry_interval_s > 0")
        self.devices = tuple(devices)
        self.node_name = node_name
        self.api = api
        self.flag = flag
        self.checkpoint = checkpoint
        self.in_use_legacy = in_use_legacy
        self.in_use_dra = in_use_dra
        self.grace_s = grace_s
        self.retry_interval_s = retry_interval_s
        self._ownership = initial or Ownership.all_legacy(self.devices)
        self._listeners = list(listeners)
        self._lock = threading.RLock()  # serializes evaluate/apply
        self._last = _Last()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._node_obj: Obj | None = None

    # ---- the seams others read ---------------------------------------------------------------------------------

    @property
    def ownership(self) -> Ownership:
        return self._ownership

    def side_of(self, uuid: DeviceID) -> str:
        return self._ownership.side_of(uuid) or "unknown"

    def dra_uuids(self) -> tuple[DeviceID, ...]:
        return tuple(g.uuid for g in self._ownership.dra_devices())

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    @property
    def outcomes(self) -> tuple[SplitOutcome, ...]:
        return tuple(self._last.outcomes)

    # ---- applying ----------------------------------------------------------------------------------------------

    def evaluate(self, node: Obj | None = None) -> SplitOutcome:
        """Read the Node (unless given) and converge to what it asks for. Raises KubeError only when the Node
        cannot be read; every refusal is a returned outcome."""
        if node is None:
            if self.api is None:
                raise ValueError("StaticSplit.evaluate needs a Node object or an API client")
            node = self.api.get(NODES, self.node_name)
        self._node_obj = node
        return self.apply(requested_split(node, self.flag))

    def apply(self, request: SplitRequest) -> SplitOutcome:
        with self._lock:
            outcome = self._apply(request)
            self._last.request = request
            self._last.outcomes.append(outcome)
            del self._last.outcomes[:-50]
            if outcome.refused:
                if outcome.message != self._last.refusal:
                    self._last.refusal = outcome.message
                    log.error("%s", outcome.message, extra={"node": self.node_name})
                    self._event("DRASplitRefused", outcome.message, "Warning")
            else:
                self._last.refusal = ""
                if outcome.moves:
                    log.info("%s", outcome.message, extra={"node": self.node_name})
                    self._event("DRASplitApplied", outcome.message, "Normal")
            return outcome

    def _apply(self, request: SplitRequest) -> SplitOutcome:
        try:
            target = parse_split(request.text)
            plan = plan_static_split(self._ownership, target, self.in_use_legacy(), self.in_use_dra())
        except OwnershipError as err:
            return SplitOutcome(request, False, message=f"DRA device split {request.describe()} refused: {err}. "
                                                        "Nothing was changed.")
        if isinstance(plan, SplitRefused):
            return SplitOutcome(request, False, message=f"{plan.message} (requested by {request.origin})")
        if not plan.moves:
            return SplitOutcome(request, True, message=f"DRA device split {request.describe()} already in effect")
        before = self._ownership
        moving = {uuid: "withdrawn" for uuid, _, _ in plan.moves}
        try:
            if self.grace_s > 0:
                self._commit(before.with_sides(moving), request.text)  # type: ignore[arg-type]
                if self._stop.wait(self.grace_s):
                    self._commit(before, self._checkpoint_split())
                    return SplitOutcome(request, False, message=f"DRA device split {request.describe()} aborted: "
                                                                "the daemon is stopping")
                # verify: nothing grabbed a withdrawn device during the grace
                again = plan_static_split(before, parse_split(request.text), self.in_use_legacy(), self.in_use_dra())
                if isinstance(again, SplitRefused):
                    self._commit(before, self._checkpoint_split())
                    return SplitOutcome(request, False, message=f"{again.message} (grabbed during the grace "
                                                                f"period; previous sides restored)")
                plan = again if isinstance(again, SplitPlan) else plan
            self._commit(plan.ownership, request.text)
        except CheckpointError as err:
            return SplitOutcome(request, False, message=f"DRA device split {request.describe()} not applied: "
                                                        f"the checkpoint could not be written: {err}")
        names = {g.uuid: f"gpu-{g.index}" for g in self.devices}
        moved = ", ".join(f"{names.get(u, u)} {a}->{b}" for u, a, b in plan.moves)
        return SplitOutcome(request, True, plan.moves,
                            message=f"DRA device split {request.describe()} applied: {moved}; "
                                    f"{len(plan.ownership.dra_devices())} of {len(self.devices)} GPUs serve DRA")

    def _checkpoint_split(self) -> str:
        return self._last.request.text if self._last.request else DEFAULT_SPLIT

    def _commit(self, ownership: Ownership, split: str) -> None:
        if self.checkpoint is not None:
            self.checkpoint.update(lambda d: d.with_sides(ownership.sides, split=split))
        self._ownership = ownership
        for listener in list(self._listeners):
            try:
                listener(ownership)
            except Exception:  # noqa: BLE001 - one broken listener must not block the others
                log.exception("split listener %r failed", listener)

    def _event(self, reason: str, message: str, type_: str) -> None:
        if self.api is None:
            return
        node = self._node_obj or {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node_name}}
        node = {"apiVersion": "v1", "kind": "Node", **{k: v for k, v in node.items() if k == "metadata"}}
        try:
            record_event(self.api, node, reason, message, "Warning" if type_ == "Warning" else "Normal",
                         EVENT_COMPONENT, host=self.node_name)
        except KubeError as err:
            log.warning("could not record Event %s on node %s: %s", reason, self.node_name, err.message)

    # ---- following the Node ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Follow the Node: re-evaluate when the split label/annotation changes, and retry a refused split every
        `retry_interval_s`. Needs `api`."""
        if self.api is None:
            raise ValueError("StaticSplit.start needs an API client to watch the Node")
        if self._threads:
            return
        self._stop.clear()
        informer = Informer(self.api, NODES, field_selector=f"metadata.name={self.node_name}",
                            on_event=self._on_node_event)
        self._threads = [threading.Thread(target=informer.run, args=(self._stop,), name="split-watch", daemon=True),
                         threading.Thread(target=self._retry_loop, name="split-retry", daemon=True)]
        for t in self._threads:
            t.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout)
        self._threads = []

    def liveness(self) -> Mapping[str, Callable[[], str | None]]:
        return {}

    def readiness(self) -> Mapping[str, Callable[[], str | None]]:
        """Ready even while a split is refused (the node serves its current split safely); the refusal is in the
        logs, the Event and `outcomes`."""
        return {}

    def _on_node_event(self, ev: WatchEvent) -> None:
        if ev.type == "DELETED":
            return
        request = requested_split(ev.object, self.flag)
        with self._lock:
            unchanged = request == self._last.request and not self._last.refusal
        if not unchanged:
            self.evaluate(ev.object)

    def kick(self) -> None:
        """Retry a refused split now instead of at the next interval (call when a device was released, e.g. after
        NodeUnprepareResources), so a split refused because of that device applies at once."""
        self._wake.set()

    def _retry_loop(self) -> None:
        while True:
            self._wake.wait(self.retry_interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            with self._lock:
                pending = self._last.request if self._last.refusal else None
            if pending is not None:
                try:
                    self.apply(pending)
                except Exception:  # noqa: BLE001 - keep retrying; the next pass logs again if it still fails
                    log.exception("retrying DRA device split %s failed", pending.describe())


def ownership_listener_for_publisher(set_dra_devices: Callable[[Iterable[str]], None]) -> Listener:
    """Adapter: feed the DRA-side UUIDs of each new ledger snapshot to `SlicePublisher.set_dra_devices`."""
    return lambda own: set_dra_devices([g.uuid for g in own.dra_devices()])


__all__ = [
    "SPLIT_KEY",
    "SplitOutcome",
    "SplitRequest",
    "StaticSplit",
    "ownership_listener_for_publisher",
    "requested_split",
]
