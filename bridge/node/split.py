"""The split controller: the ownership ledger's I/O shell (the layer that composes both halves of the daemon).

The decisions are `bridge.ledger` (pure): which devices move, when a move is done, what the two guards allow.
This class feeds them and carries them out:

* **Inputs.** The Node (one watch, `metadata.name=<node>`): the requested split (`bridge.ledger.requested_split`)
  and `status.allocatable[<resource>]`, which is what the scheduler counts for legacy pods. The holders of both
  sides (`bridge.node.holders`: PodResources, the kubelet's device-manager checkpoint, the pods bound to this node
  and their claims, our prepared claims). What the slice publisher confirmed on the API server. Device health.
* **Evaluations.** On every change of those inputs, when a move's next deadline comes (settle, scheduler grace,
  timeout), every `held_poll_s` while a device waits for a holder (PodResources has no watch), and every
  `resync_s` while the node has not converged: gather facts, `reconcile`, and when sides or
  moves changed persist them through the checkpoint's one `update()` path BEFORE either API hears of it (listeners:
  the device plugin's ListAndWatch, the slice publisher), so a crash never leaves a device offered on a side the
  checkpoint does not record; a move under way is resumed after a restart from the checkpoint.
* **Guards.** `guard_allocate` (device plugin) and `guard_prepare` (NodePrepareResources) run the ledger's guards
  under the same lock as evaluations, so a move and an Allocate or a prepare can never interleave.
* **Visibility.** One log line per evaluation with the requested and the applied split, the `dra_bridge_split_*`
  metrics, Kubernetes Events on the Node (a refused target, a move finished or aborted, a device taken back for a
  claim, and why a device has not moved yet, once per distinct reason), and the split-status annotation
  (`bridge.ledger.status`), written only when its content changes.
* **A checkpoint that cannot be written** (read-only or full state directory, I/O error, lock timeout) loses
  nothing: the change is not applied (no API hears of sides the checkpoint does not record), the evaluation is
  retried after `checkpoint_retry_s`, doubling up to `checkpoint_retry_max_s`, until a write succeeds; meanwhile
  the failure is an ERROR log line and a Warning Event `DRACheckpointWriteFailed` per distinct error,
  `dra_bridge_checkpoint_write_failures_total` / `dra_bridge_checkpoint_unwritable`, and `checkpointError` in the
  split-status annotation (`bridge node status` shows it). The first successful write logs and records
  `DRACheckpointWriteRecovered`.
* **An evaluation that fails** (a holder source or anything else raising) is retried after `evaluation_retry_s`,
  doubling up to `evaluation_retry_max_s`, not at the next timer of the last good decision (up to 300 s) or the next
  annotation change; while it fails, the split-status annotation says so (`evaluationError`, `message` "error: …",
  no longer `converged`), with an ERROR log line and a Warning Event `DRASplitEvaluationFailed` per distinct error
  and `dra_bridge_split_evaluation_failures_total` / `dra_bridge_split_evaluation_failing`.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from bridge.inventory.model import DeviceID, GpuDevice
from bridge.kube.api import NODES, KubeAPI, Obj, WatchEvent
from bridge.kube.errors import KubeError
from bridge.kube.events import record_event
from bridge.kube.watch import Informer
from bridge.kvalues.quantity import QuantityError, quantity_int
from bridge.ledger.checkpoint import Checkpoint, CheckpointError
from bridge.ledger.holders import Facts, HolderKind
from bridge.ledger.ledger import (
    Decision,
    Ledger,
    LedgerConfig,
    MoveEvent,
    Observations,
    Refusal,
    guard_allocate,
    guard_prepare,
    move_deadline,
    reconcile,
)
from bridge.ledger.moves import Phase
from bridge.ledger.sides import Side
from bridge.ledger.status import (
    STATUS_KEY,
    CheckpointErrorStatus,
    EvaluationErrorStatus,
    RefusalStatus,
    SplitStatus,
    build_status,
)
from bridge.ledger.target import SplitError, SplitRequest, SplitTarget, parse_split, requested_split
from bridge.node.metrics import SplitMetrics

log = logging.getLogger("bridge.node.split")

EVENT_COMPONENT = "dra-bridge-node"
Listener = Callable[[Ledger], None]


class FactSource(Protocol):
    def facts(self, *, fresh_claims: bool = False) -> Facts: ...

    def legacy_facts(self) -> Facts: ...

    def wants_poll(self) -> bool:
        """Something the sources can only poll is expected to change soon (a claim not allocated yet): evaluate
        every `held_poll_s` even on a converged node."""
        ...


@dataclass(frozen=True)
class SplitConfig:
    node_name: str
    resource_name: str = "nvidia.com/gpu"
    flag: str | None = None  # the cluster default (`--dra-devices`); the Node overrides it
    ledger: LedgerConfig = field(default_factory=LedgerConfig)
    resync_s: float = 30.0  # evaluate at least this often while the node has not converged
    # ... and this often while a device waits for its holder or for unknown holders to become readable: PodResources
    # and the kubelet checkpoint have no watch, and a pod's status can reach us before PodResources drops it.
    held_poll_s: float = 5.0
    status_interval_s: float = 1.0  # at most one status annotation write per this
    # A split change whose checkpoint write failed is retried after this, doubling per failure up to the max.
    checkpoint_retry_s: float = 1.0
    checkpoint_retry_max_s: float = 30.0
    # A failed evaluation is retried after this, doubling per failure up to the max.
    evaluation_retry_s: float = 1.0
    evaluation_retry_max_s: float = 30.0
    # A wake-up (a pod, claim or Node event, a prepare, an unprepare, a slice write) is evaluated this long after it
    # came, and evaluations start at least this far apart: every wake-up meanwhile is served by that ONE evaluation.
    # One DRA pod start woke the loop about seven times within half a second, the first when the pod was bound, the
    # moment the kubelet calls NodePrepareResources: evaluating at once (a PodResources List while the kubelet starts
    # the pod, the kubelet checkpoint, the claims, the split lock the prepare guard also takes) ran beside every
    # prepare on the same small node. The guards never wait for an evaluation, and a move's deadlines are seconds:
    # the delay moves nothing later that matters. A deadline that comes due (no wake-up) is evaluated at once.
    min_interval_s: float = 0.25


def _now_rfc3339(wall: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall))


class SplitController:
    def __init__(self, devices: Sequence[GpuDevice], config: SplitConfig, *, sources: FactSource,
                 api: KubeAPI | None = None, checkpoint: Checkpoint | None = None, initial: Ledger | None = None,
                 published: Callable[[], frozenset[DeviceID] | None] = lambda: None,
                 unhealthy: Callable[[], frozenset[DeviceID]] = frozenset,
                 listeners: Iterable[Listener] = (), metrics: SplitMetrics | None = None,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        if config.flag is not None and config.flag.strip():
            parse_split(config.flag)  # a bad flag is a configuration error: fail at start
        if config.resync_s <= 0:
            raise ValueError("resync_s must be > 0")
        self.devices = tuple(devices)
        self.config = config
        self.cfg = config.ledger
        self.node_name = config.node_name
        self.api = api
        self.checkpoint = checkpoint
        self.sources = sources
        self.metrics = metrics or SplitMetrics()
        self._published = published
        self._unhealthy = unhealthy
        self._clock = clock
        self._wall = wall
        self._listeners = list(listeners)
        self._ledger = initial or Ledger.all_legacy(self.devices)
        self._lock = threading.RLock()
        self._notify_lock = threading.Lock()
        self._request = requested_split(None, config.flag)
        self._node_obj: Obj | None = None
        self._alloc: int | None = None
        self._alloc_at: float | None = None
        self._informer: Informer | None = None
        self._last: Decision | None = None
        self._last_facts = Facts()
        self.decisions: collections.deque[Decision] = collections.deque(maxlen=50)
        self._refusals: collections.deque[RefusalStatus] = collections.deque(maxlen=5)
        self._queued: list[MoveEvent] = []
        self._told: dict[DeviceID, str] = {}  # the waiting reason last told per device (Event dedupe)
        self._told_stuck: dict[tuple[DeviceID, str], str] = {}  # (device, claim) stuck claims already told
        self._stuck_since: dict[tuple[str, str], str] = {}  # (device name, claim) -> first seen stuck (RFC 3339)
        self._told_refusal = ""
        self._told_conflict = ""
        self._was_converged: bool | None = None
        self._status: SplitStatus | None = None  # last written
        self._status_at = -1e9
        self._status_error = ""
        self._status_dirty = False
        self._eval_lock = threading.Lock()  # one evaluation at a time (the guards take only `_lock`)
        self._who_second, self._who = -1, ""  # _allocate_who's cache (under `_lock`)
        self._save_error: CheckpointErrorStatus | None = None  # set while split changes cannot be saved
        self._save_failures = 0  # consecutive failed split writes (the backoff's exponent)
        self._save_retry_at: float | None = None
        self._told_save_error = ""
        self._eval_error: EvaluationErrorStatus | None = None  # set while evaluations fail
        self._eval_failures = 0  # consecutive failed evaluations (the backoff's exponent)
        self._eval_retry_at: float | None = None
        self._told_eval_error = ""
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._loop_started = -1e9  # time.monotonic() when the loop last started an evaluation (min_interval_s)
        self.loop_evaluations = 0  # evaluations the loop ran (tests, benchmarks)
        self._threads: list[threading.Thread] = []
        self._publish_metrics(self._ledger)

    # ---- seams others read -------------------------------------------------------------------------------------

    @property
    def ledger(self) -> Ledger:
        return self._ledger

    @property
    def last(self) -> Decision | None:
        return self._last

    @property
    def request(self) -> SplitRequest:
        return self._request

    @property
    def status(self) -> SplitStatus | None:
        """The status document last written to the Node (or built, without an API)."""
        return self._status

    def side_of(self, uuid: DeviceID) -> Side | None:
        return self._ledger.side_of(uuid)

    def node_allocatable(self) -> Mapping[str, object] | None:
        """The Node's `status.allocatable` as last seen (every resource, not only ours), None while the Node has
        not been read or its watch is down: which extended resources a device plugin serves on this node
        (`bridge.node.nodepods`). Takes no lock (holder sources call it from inside the guards): the object is
        replaced on each event, never changed in place."""
        node, informer = self._node_obj, self._informer
        if node is None or (informer is not None and not informer.healthy):
            return None
        allocatable = (node.get("status") or {}).get("allocatable")
        return allocatable if isinstance(allocatable, Mapping) else {}

    def dra_uuids(self) -> tuple[DeviceID, ...]:
        return tuple(g.uuid for g in self._ledger.on(Side.DRA))

    def set_ledger_config(self, cfg: LedgerConfig) -> None:
        """Replace the timings (`--split-grace auto` resolved once the API server's version is known)."""
        with self._lock:
            self.cfg = cfg
        self.kick("the split timings changed")

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def kick(self, reason: str = "") -> None:
        """Evaluate soon (a holder went away, the slice was published, health changed)."""
        if reason:
            log.debug("split evaluation requested: %s", reason)
        self._wake.set()

    # ---- the guards --------------------------------------------------------------------------------------------

    def guard_allocate(self, ids: Sequence[str]) -> list[Refusal]:
        """The device plugin's Allocate guard: [] = allowed (and recorded as a holder), else the refusals."""
        now = self._clock()
        with self._lock:
            new, refusals, events = guard_allocate(self._ledger, ids, now, self.cfg, who=self._allocate_who())
            if refusals:
                self._note_refusals("allocate", refusals)
                return refusals
            if events:
                try:
                    self._commit(new)
                except CheckpointError as err:  # the restart's verify finds the holder through PodResources
                    self.metrics.checkpoint_failures.labels("allocate").inc()
                    log.error("could not record an aborted move in the checkpoint: %s", err,
                              extra={"node": self.node_name})
            changed, self._ledger = new is not self._ledger, new
        if events:
            self._after_guard(events)
        elif changed:
            # a new holder recorded: the evaluation loop may be sleeping for minutes, and the status should name
            # the pod once PodResources lists it (polled every held_poll_s while an answered Allocate is unseen)
            self.kick()
        return []

    def _allocate_who(self) -> str:
        """The holder text of an answered Allocate, stamped to the second (built once per second: the hot path)."""
        second = int(self._wall())
        if second != self._who_second:
            self._who_second, self._who = second, f"a device-plugin Allocate at {_now_rfc3339(second)}"
        return self._who

    def guard_prepare(self, uuids: Sequence[str], claim: str, uid: str) -> list[Refusal]:
        """NodePrepareResources' guard for one claim ("ns/name", UID): [] = allowed, else per-device refusals.
        Call `prepare_done(uid)` when the prepare ended, whatever its outcome."""
        facts: Facts | None = None
        if any(self._ledger.side_of(u) is not Side.DRA for u in uuids):
            facts = self.sources.legacy_facts()  # outside the lock: I/O (the ledger's own holders are merged in)
        now = self._clock()
        with self._lock:
            new, refusals, events = guard_prepare(self._ledger, uuids, claim, uid,
                                                  lambda: facts if facts is not None else self.sources.legacy_facts(),
                                                  now, self.cfg)
            if refusals:
                self._note_refusals("prepare", refusals)
                return refusals
            if events:
                try:
                    self._commit(new)
                except CheckpointError as err:
                    self.metrics.checkpoint_failures.labels("prepare").inc()
                    return [Refusal(e.device, e.name, Side.LEGACY, f"could not record taking {e.name} back for "
                                    f"ResourceClaim {claim} in the checkpoint: {err}; retried") for e in events]
            self._ledger = new
        if events:
            for e in events:
                if e.kind == "reclaimed":
                    self.metrics.reclaims.inc()
            self._after_guard(events)
        return []

    def prepare_done(self, uid: str) -> None:
        with self._lock:
            self._ledger = self._ledger.prepare_done(uid)
        self.kick()

    def _after_guard(self, events: Sequence[MoveEvent]) -> None:
        self._notify()
        with self._lock:
            self._queued.extend(events)  # logged, counted and recorded as Events by the evaluation this wakes
        self.kick("a guard changed sides")

    def _note_refusals(self, api: Literal["allocate", "prepare"], refusals: Sequence[Refusal]) -> None:
        stamp = _now_rfc3339(self._wall())
        with self._lock:
            for r in refusals:
                self.metrics.refusals.labels(api).inc()
                self._refusals.append(RefusalStatus(stamp, api, r.name, r.message))
        self.kick()  # the status annotation shows the refusal

    # ---- evaluation --------------------------------------------------------------------------------------------

    def evaluate(self, node: Obj | None = None) -> Decision:
        """One evaluation now (see the module docstring). `node`: a Node object just read (else the last seen)."""
        with self._eval_lock:
            return self._evaluate(node)

    def _evaluate(self, node: Obj | None) -> Decision:
        if node is not None:
            self._observe_node(node)
        request = self._request
        target: SplitTarget | SplitError
        try:
            target = parse_split(request.text)
        except SplitError as err:
            target = err
        fresh = any(m.target is Side.LEGACY and m.phase in (Phase.SCHEDULER, Phase.VERIFY)
                    for m in self._ledger.moves.values())
        facts = self.sources.facts(fresh_claims=fresh)
        with self._lock:
            before = self._ledger
            decision = reconcile(before, target, facts, self._observations(), self.cfg)
            changed = decision.ledger.sides != before.sides or decision.ledger.stored_moves() != before.stored_moves()
            saved: bool | None = None  # None: nothing to save
            failure = ""
            if changed:
                try:
                    self._commit(decision.ledger, request.text)
                    saved = True
                except CheckpointError as err:
                    saved = False
                    failure = str(err)
                    decision = replace(decision, ledger=before, events=())
                    changed = False
            self._ledger = decision.ledger
            self._last = decision
            self._last_facts = facts
            self.decisions.append(decision)
            queued, self._queued = self._queued, []
        if changed:
            self._notify()
        if saved is False:
            self._save_failed(failure)
        elif self._save_error is not None:
            self._save_recovered(saved is True)
        if self._eval_error is not None:
            self._evaluation_recovered()
        self._report(request, decision, queued)
        self._write_status(request, decision, facts)
        return decision

    def _save_failed(self, error: str) -> None:
        """A split change could not be written: keep the old sides, retry with backoff, tell people."""
        cfg = self.config
        self._save_failures += 1
        delay = min(cfg.checkpoint_retry_s * 2 ** (self._save_failures - 1), cfg.checkpoint_retry_max_s)
        self._save_retry_at = self._clock() + delay
        if self._save_error is None:
            self._save_error = CheckpointErrorStatus(_now_rfc3339(self._wall()), error)
        elif self._save_error.message != error:
            self._save_error = replace(self._save_error, message=error)
        self.metrics.checkpoint_failures.labels("split").inc()
        self.metrics.checkpoint_failing.set(1)
        if error != self._told_save_error:
            self._told_save_error = error
            message = (f"DRA split change not applied: the checkpoint could not be written ({error}); the current "
                       f"sides stay and the change is retried (next in {delay:g} s, backing off to "
                       f"{cfg.checkpoint_retry_max_s:g} s)")
            log.error("%s", message, extra={"node": self.node_name, "failures": self._save_failures})
            self._event("DRACheckpointWriteFailed", message, "Warning")
        else:
            log.debug("checkpoint still not writable (%d failures); next retry in %g s", self._save_failures, delay,
                      extra={"node": self.node_name})

    def _save_recovered(self, written: bool) -> None:
        """The waiting change was written (`written`), or no change waits any more (the target went back)."""
        since = self._save_error.since if self._save_error is not None else "?"
        if written:
            message = (f"the checkpoint is writable again (it failed {self._save_failures} time(s) since {since}); "
                       "the waiting split change is applied")
            log.info("%s", message, extra={"node": self.node_name})
            self._event("DRACheckpointWriteRecovered", message, "Normal")
        else:
            log.info("no split change waits for the checkpoint any more (the target asks for the saved split)",
                     extra={"node": self.node_name})
        self._save_error, self._save_failures, self._save_retry_at, self._told_save_error = None, 0, None, ""
        self.metrics.checkpoint_failing.set(0)

    def _evaluation_failed(self, err: Exception) -> None:
        """An evaluation raised: retry with backoff, tell people, and say so in the status annotation."""
        cfg = self.config
        self._eval_failures += 1
        delay = min(cfg.evaluation_retry_s * 2 ** (self._eval_failures - 1), cfg.evaluation_retry_max_s)
        self._eval_retry_at = self._clock() + delay
        error = f"{type(err).__name__}: {err}"[:1000]
        if self._eval_error is None or self._eval_error.message != error:
            since = self._eval_error.since if self._eval_error is not None else _now_rfc3339(self._wall())
            self._eval_error = EvaluationErrorStatus(since, error)
        self.metrics.evaluation_failures.inc()
        self.metrics.evaluation_failing.set(1)
        if error != self._told_eval_error:
            self._told_eval_error = error
            message = (f"evaluating the DRA split {self._request.describe()} failed ({error}); the current sides "
                       f"stay and it is retried (next in {delay:g} s, backing off to {cfg.evaluation_retry_max_s:g} s)")
            log.error("%s", message, exc_info=err, extra={"node": self.node_name, "failures": self._eval_failures})
            self._event("DRASplitEvaluationFailed", message, "Warning")
        else:
            log.debug("split evaluation still failing (%d failures); next retry in %g s", self._eval_failures, delay,
                      extra={"node": self.node_name})
        try:
            self._publish(self._error_status())
        except Exception:  # noqa: BLE001 - the retry is what matters; the next failure tries the status again
            log.exception("could not write the evaluation error into the split status", extra={"node": self.node_name})

    def _error_status(self) -> SplitStatus:
        """The last status with the evaluation error: what it shows was not re-evaluated (see bridge.ledger.status)."""
        assert self._eval_error is not None
        base = self._status
        if base is None:  # no evaluation ever succeeded: the sides from the checkpoint, nothing else known
            with self._lock:
                refusals = tuple(self._refusals)
            base = build_status(node=self.node_name, request=self._request,
                                decision=Decision(self._ledger, "converging", None), facts=Facts(), refusals=refusals,
                                updated="", checkpoint_error=self._save_error)
        return replace(base, updated=_now_rfc3339(self._wall()),
                       state="converging" if base.state == "converged" else base.state,
                       message=f"error: {self._eval_error.message}", evaluation_error=self._eval_error)

    def _evaluation_recovered(self) -> None:
        log.info("DRA split evaluation works again (it failed %d time(s) since %s)", self._eval_failures,
                 self._eval_error.since if self._eval_error is not None else "?", extra={"node": self.node_name})
        self._eval_error, self._eval_failures, self._eval_retry_at, self._told_eval_error = None, 0, None, ""
        self.metrics.evaluation_failing.set(0)

    def _observations(self) -> Observations:
        live = self._informer.healthy if self._informer is not None else self._node_obj is not None
        return Observations(now=self._clock(), node_allocatable=self._alloc if live else None,
                            node_changed_at=self._alloc_at, published_dra=self._published(),
                            unhealthy=self._unhealthy())

    def _commit(self, ledger: Ledger, split: str | None = None) -> None:
        if self.checkpoint is not None:
            text = split if split is not None else self._request.text
            self.checkpoint.update(lambda d: d.with_sides(ledger.sides, split=text, moves=ledger.stored_moves()))

    def _notify(self) -> None:
        with self._notify_lock:
            snapshot = self._ledger
            self._publish_metrics(snapshot)
            for listener in list(self._listeners):
                try:
                    listener(snapshot)
                except Exception:  # noqa: BLE001 - one broken listener must not block the others
                    log.exception("split listener %r failed", listener)

    def _publish_metrics(self, ledger: Ledger) -> None:
        for side in Side:
            self.metrics.devices.labels(side.value).set(len(ledger.on(side)))
        self.metrics.applied.set(len(ledger.on(Side.DRA)))

    # ---- telling people ----------------------------------------------------------------------------------------

    def _report(self, request: SplitRequest, d: Decision, queued: Sequence[MoveEvent]) -> None:
        node = self.node_name
        if request.conflict and request.conflict != self._told_conflict:
            log.warning("%s", request.conflict, extra={"node": node})
        self._told_conflict = request.conflict
        dra = len(d.ledger.on(Side.DRA))
        total = len(self.devices)
        m = self.metrics
        m.evaluations.labels(d.state).inc()
        m.requested.set(-1 if d.wanted is None else d.wanted)
        m.set_target(request.text, request.source, d.state)
        m.waiting.set(len(d.waiting))
        tail = f"; the target puts {d.wanted} there" if d.wanted is not None and d.wanted != dra else ""
        moving = f"; {len(d.ledger.moves)} moving" if d.ledger.moves else ""
        held = sum(1 for w in d.waiting if w.phase in ("held", "unknown", "cooldown"))
        log.info("DRA split %s: requested %s, applied %d of %d GPUs on DRA%s%s%s", d.state, request.describe(), dra,
                 total, tail, moving, f"; {held} waiting for their holders" if held else "",
                 extra={"node": node, "requested": request.text, "source": request.source, "applied": dra,
                        "wanted": d.wanted, "state": d.state})
        if d.state == "refused":
            if d.refusal != self._told_refusal:
                self._told_refusal = d.refusal
                m.refusals.labels("split").inc()
                message = (f"DRA device split {request.describe()} refused: {d.refusal}. The current split stays "
                           f"({dra} of {total} GPUs on DRA).")
                log.error("%s", message, extra={"node": node})
                with self._lock:
                    self._refusals.append(RefusalStatus(_now_rfc3339(self._wall()), "split", "", message))
                self._event("DRASplitRefused", message, "Warning")
        else:
            self._told_refusal = ""
        for e in (*queued, *d.events):
            m.moves.labels(e.direction, {"reclaimed": "finished"}.get(e.kind, e.kind)).inc()
            if e.kind == "started":
                log.info("%s", e.describe(), extra={"node": node, "device": e.name})
            elif e.kind == "finished":
                log.info("%s", e.describe(), extra={"node": node, "device": e.name})
                self._event("DRADeviceMoved", f"{e.name} moved from {e.source} to {e.target}", "Normal")
            elif e.kind == "aborted":
                log.warning("%s", e.describe(), extra={"node": node, "device": e.name})
                self._event("DRADeviceMoveAborted", e.describe(), "Warning")
            else:
                log.warning("%s", e.describe(), extra={"node": node, "device": e.name})
                self._event("DRADeviceReclaimed", e.describe(), "Normal")
        self._report_stuck(d)
        waiting_now: dict[DeviceID, str] = {}
        for w in d.waiting:
            if w.phase not in ("held", "unknown", "cooldown"):
                continue
            waiting_now[w.device] = w.reason
            if self._told.get(w.device) != w.reason:
                log.info("%s not moved to %s yet: %s", w.name, w.target, w.reason, extra={"node": node, "device": w.name})
                self._event("DRADeviceNotMoved", w.reason, "Normal")
        self._told = waiting_now
        converged = d.state == "converged"
        if converged and self._was_converged is False:
            self._event("DRASplitApplied", f"DRA device split {request.describe()} applied: {dra} of {total} GPUs "
                                           "serve DRA", "Normal")
        self._was_converged = converged

    def _report_stuck(self, d: Decision) -> None:
        """A claim allocated a GPU that a legacy pod holds: say so once where its user looks (a Warning Event on the
        claim's pod, and on the Node), and log it. Metric `dra_bridge_split_stuck_claims`."""
        now: dict[tuple[DeviceID, str], str] = {}
        for w in d.waiting:
            if w.phase != Phase.RECLAIM or not w.blockers:
                continue
            for claim in w.claims:
                key = (w.device, claim.who)
                now[key] = w.reason
                if key in self._told_stuck:
                    continue
                log.warning("%s", w.reason, extra={"node": self.node_name, "device": w.name})
                self._event("DRAClaimStuck", w.reason, "Warning")
                if claim.pod:
                    ns, _, name = claim.pod.partition("/")
                    meta = {"name": name, "namespace": ns, **({"uid": claim.pod_uid} if claim.pod_uid else {})}
                    self._event("DRAClaimStuck", w.reason, "Warning",
                                involved={"apiVersion": "v1", "kind": "Pod", "metadata": meta})
        self._told_stuck = now
        self.metrics.stuck.set(len({claim for _, claim in now}))

    def _event(self, reason: str, message: str, type_: Literal["Normal", "Warning"], *,
               involved: Obj | None = None) -> None:
        if self.api is None:
            return
        if involved is None:
            meta = (self._node_obj or {}).get("metadata") or {"name": self.node_name}
            involved = {"apiVersion": "v1", "kind": "Node",
                        "metadata": {k: meta[k] for k in ("name", "uid") if k in meta}}
        try:
            record_event(self.api, involved, reason, message, type_, EVENT_COMPONENT, host=self.node_name)
        except KubeError as err:
            log.warning("could not record Event %s on %s %s: %s", reason, involved["kind"],
                        involved["metadata"].get("name"), err.message)

    def _write_status(self, request: SplitRequest, d: Decision, facts: Facts) -> None:
        with self._lock:
            refusals = tuple(self._refusals)
        now = _now_rfc3339(self._wall())
        stuck = {(w.name, c.who) for w in d.waiting if w.phase == Phase.RECLAIM and w.blockers for c in w.claims}
        self._stuck_since = {k: self._stuck_since.get(k, now) for k in stuck}
        built = build_status(node=self.node_name, request=request, decision=d, facts=facts, refusals=refusals,
                             updated=now, checkpoint_error=self._save_error, stuck_since=self._stuck_since)
        self._publish(built)

    def _publish(self, built: SplitStatus) -> None:
        """Write `built` to the Node when its content changed (at most once per `status_interval_s`)."""
        self._status_dirty = False
        if built.same_content(self._status):
            return
        if self.api is None:
            self._status = built
            return
        if self._clock() < self._status_at + self.config.status_interval_s:
            self._status_dirty = True  # the loop comes back for it (see _next_wait)
            return
        self._status_at = self._clock()
        try:
            self.api.patch(NODES, self.node_name, {"metadata": {"annotations": {STATUS_KEY: built.encode()}}})
        except KubeError as err:
            if err.message != self._status_error:
                log.warning("could not write the split status annotation %s on node %s: %s (retried)", STATUS_KEY,
                            self.node_name, err.message, extra={"node": self.node_name})
            self._status_error = err.message
            return
        self._status_error = ""
        self._status = built

    # ---- following the Node ------------------------------------------------------------------------------------

    def _observe_node(self, node: Obj) -> bool:
        """Take the request and the allocatable count from a Node object; True when either changed."""
        request = requested_split(node, self.config.flag)
        alloc: int | None = None
        allocatable = (node.get("status") or {}).get("allocatable")
        if isinstance(allocatable, Mapping):
            try:
                alloc = quantity_int(allocatable.get(self.config.resource_name))
            except QuantityError:
                alloc = None
        with self._lock:
            self._node_obj = node
            changed = request != self._request or alloc != self._alloc
            if alloc != self._alloc:
                self._alloc_at = self._clock()
            self._alloc = alloc
            self._request = request
        return changed

    def _on_node_event(self, ev: WatchEvent) -> None:
        if ev.type == "DELETED":
            return
        if self._observe_node(ev.object):
            self.kick("the Node's split or allocatable changed")

    # ---- lifecycle (NodeComponent) -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._threads:
            return
        self._stop.clear()
        if self.api is not None:
            self._informer = Informer(self.api, NODES, field_selector=f"metadata.name={self.node_name}",
                                      on_event=self._on_node_event, relist_after_failure=True)
            self._threads.append(threading.Thread(target=self._informer.run, args=(self._stop,), name="split-node",
                                                  daemon=True))
        self._threads.append(threading.Thread(target=self._loop, name="split-loop", daemon=True))
        for t in self._threads:
            t.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop evaluating. A move under way stays recorded in the checkpoint and resumes at the next start."""
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout)
        self._threads = []

    def liveness(self) -> Mapping[str, Callable[[], str | None]]:
        return {}

    def readiness(self) -> Mapping[str, Callable[[], str | None]]:
        """Ready even while a split is refused or converging: the node serves its current sides safely."""
        return {}

    def _loop(self) -> None:
        self._wake.set()
        first = True
        while not self._stop.is_set():
            woken = self._wake.wait(self._next_wait())
            # real time, not self._clock: these are sleeps, and tests drive the ledger's clock by hand
            now = time.monotonic()
            at = max(now + self.config.min_interval_s if woken and not first else now,
                     self._loop_started + self.config.min_interval_s)
            first = False
            if at > now and self._stop.wait(at - now):
                return
            self._wake.clear()  # after the gap: every wake-up up to here is served by this evaluation
            if self._stop.is_set():
                return
            self._loop_started = time.monotonic()
            self.loop_evaluations += 1
            try:
                self.evaluate()
            except Exception as err:  # noqa: BLE001 - keep evaluating: retried with backoff, shown in the status
                self._evaluation_failed(err)

    def _next_wait(self) -> float:
        """Seconds until the next evaluation is due without a wake-up (deadlines of moves, cooldowns, holders the
        ledger recorded, the status write, and the resync while not converged)."""
        d = self._last
        now = self._clock()
        if self._eval_retry_at is not None and (d is None or self._eval_retry_at <= now):
            return max(0.0, self._eval_retry_at - now)
        if d is None:
            return 0.0
        cfg = self.cfg
        due: list[float] = []
        led = self._ledger
        for mv in led.moves.values():
            if mv.phase is Phase.RECLAIM:
                continue  # no deadline: re-checked every held_poll_s below
            due.append(move_deadline(mv, cfg))
            if mv.phase is Phase.NODE_STATUS:
                due.append(mv.started_at + cfg.settle_s)
                if self._alloc_at is not None:
                    due.append(self._alloc_at + cfg.settle_s)
            elif mv.phase is Phase.SCHEDULER:
                due.append(mv.phase_since + cfg.scheduler_grace_s)
        due += list(led.cooldown.values()) + [p.expires for p in led.pending]
        if d.state != "converged":
            due.append(now + self.config.resync_s)
        if self._save_retry_at is not None:
            due.append(self._save_retry_at)
        if self._eval_retry_at is not None:
            due.append(self._eval_retry_at)
        if any(w.phase in ("held", "unknown", Phase.RECLAIM) for w in d.waiting) or self.sources.wants_poll() or any(
                p.holder.kind is HolderKind.ALLOCATE for p in led.pending):
            due.append(now + self.config.held_poll_s)
        if self._status is None or self._status_error or self._status_dirty:
            due.append(self._status_at + max(self.config.status_interval_s, 5.0 if self._status_error else 0.0))
        future = [t for t in due if t > now]
        if any(t <= now for t in due):
            return 0.05
        return min([self.config.resync_s * 10, *[t - now + 0.01 for t in future]])


def publisher_listener(set_dra_devices: Callable[[Iterable[str]], None]) -> Listener:
    """Adapter: feed the DRA-side UUIDs of each new ledger snapshot to `SlicePublisher.set_dra_devices`."""
    return lambda led: set_dra_devices([g.uuid for g in led.on(Side.DRA)])


__all__ = ["EVENT_COMPONENT", "FactSource", "SplitConfig", "SplitController", "publisher_listener"]
