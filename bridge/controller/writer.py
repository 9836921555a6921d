"""Writes a decision: one merge patch per changed Node (the split key and its decision record together), an Event
per change, Warning Events for blocked pods. Everything it sends is counted (`api_requests_total{verb}`).

Safety of a write:
* **Leader only, checked right before each request** (`is_leader`, which turns false once a renewal is overdue:
  bridge.kube.leaderelection), so a replica that lost its lease mid-decision stops between two nodes.
* **Optimistic concurrency**: the patch carries the `metadata.resourceVersion` of the Node the decision was made
  from; if anything changed on the Node since (an operator pinned it, the daemon reported a new holder), the API
  server answers 409 and the node is left alone until the next decision, which reads the fresh state. Rejected:
  retrying with a fresh resourceVersion, which would write a target decided on stale facts.
* Under `--dry-run` only the decision record is written (`dryRun: true`) and a `SplitTargetWouldChange` Event is
  recorded, each once per distinct would-be target; the split key is never touched.

Speed: the Node patches go one after another in the decision thread, each after its leader check; a change's Event
goes out on a thread of its own while the decision thread sends the next patch (`_Alongside`), and `apply` returns
once every Event it started is sent or has failed (so it still returns with everything written). Against a real
kube-apiserver each request takes 2-3 ms, so a decision's writes approach the time of its patches alone instead of
its patches and Events in a row: 1.3-1.6x faster on the 2-core bench machine, where the API server, etcd and the
controller share the cores (bench/real_controller_write_bench.py). Only the Events overlap: the patches stay in
order, one in flight at a time, so a replica that stops leading stops between two patches as before, and the API
server sees at most two requests of the controller's writes at once.
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bridge.controller.metrics import ControllerMetrics
from bridge.controller.model import Blocked, NodeView, TargetChange
from bridge.controller.nodestatus import SPLIT_KEY
from bridge.controller.record import (
    DECISION_KEY,
    EVENT_COMPONENT,
    MAX_BLOCKED_EVENTS,
    MAX_PODS,
    REASON_BLOCKED,
    REASON_CHANGED,
    REASON_UNREADABLE,
    REASON_WOULD_CHANGE,
    DecisionRecord,
)
from bridge.kube.api import NODES, KubeAPI, Obj
from bridge.kube.errors import Conflict, KubeError, NotFound
from bridge.kube.events import record_event

log = logging.getLogger(__name__)

_MAX_REMEMBERED = 50_000  # blocked (pod, reason) pairs already reported


def _now_rfc3339() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Alongside:
    """Runs the calls it is given, in order, on a thread of its own, until `close`, which waits for all of them. A
    call that raises is logged and the next one runs (an Event is best effort; `Writer._event` already logs the API's
    refusals)."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[..., object], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="controller-events", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        self._calls.put((fn, args))

    def close(self) -> None:
        self._calls.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (call := self._calls.get()) is not None:
            fn, args = call
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - one Event's bug must not stop the others
                log.exception("an Event of the decision was not recorded")


class Writer:
    def __init__(self, api: KubeAPI, *, identity: str, dry_run: bool, metrics: ControllerMetrics,
                 wall_clock: Callable[[], str] = _now_rfc3339) -> None:
        self.api = api
        self.identity = identity
        self.dry_run = dry_run
        self.metrics = metrics
        self.wall_clock = wall_clock
        self._dry_recorded: dict[str, tuple[str, str]] = {}
        self._blocked_seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._blocked_reported: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._unreadable_told: dict[str, str] = {}  # node -> the unreadable-status reason an Event reported

    @property
    def mode(self) -> str:
        return "dry-run" if self.dry_run else "apply"

    def _count(self, verb: str) -> None:
        self.metrics.api_requests.labels(verb=verb).inc()

    def record_for(self, change: TargetChange) -> DecisionRecord:
        return DecisionRecord(time=self.wall_clock(), controller=self.identity, dry_run=self.dry_run,
                              previous=change.previous_target, target=change.target, from_dra=change.previous,
                              to_dra=change.dra, direction=change.direction, reason=change.reason,
                              pods=change.pods[:MAX_PODS], pod_count=len(change.pods))

    def apply(self, changes: Sequence[TargetChange], nodes: Mapping[str, Obj],
              is_leader: Callable[[], bool]) -> list[TargetChange]:
        """Write the changes; returns those written (under dry-run: those recorded, or already recorded), once their
        Events are sent too (each alongside the next patch: `_Alongside`)."""
        done: list[TargetChange] = []
        events: _Alongside | None = None  # started by the first write
        try:
            for change in changes:
                node = nodes.get(change.node)
                if node is None:
                    continue
                if self.dry_run and self._dry_recorded.get(change.node) == (change.previous_target, change.target):
                    done.append(change)
                    continue
                if not is_leader():
                    log.warning("not the leader any more: %d target change(s) not written", len(changes) - len(done))
                    break
                events = events or _Alongside()
                if self._write(change, node, events):
                    done.append(change)
        finally:
            if events is not None:
                events.close()
        return done

    def _write(self, change: TargetChange, node: Obj, events: _Alongside) -> bool:
        """Patch the Node; on success, hand its Event to `events` and say True."""
        meta = node.get("metadata") or {}
        record = self.record_for(change)
        annotations: dict[str, Any] = {DECISION_KEY: record.encode()}
        if not self.dry_run:
            annotations[SPLIT_KEY] = change.target
        patch = {"metadata": {"resourceVersion": meta.get("resourceVersion"), "annotations": annotations}}
        try:
            self._count("patch")
            stored = self.api.patch(NODES, change.node, patch)
        except Conflict:
            self.metrics.write_failures.labels(reason="conflict").inc()
            log.info("node %s changed since the decision; leaving it for the next one", change.node)
            return False
        except NotFound:
            self.metrics.write_failures.labels(reason="gone").inc()
            return False
        except KubeError as err:
            self.metrics.write_failures.labels(reason="error").inc()
            log.error("node %s: writing the split target failed: %s", change.node, err.message)
            return False
        verb = "would set" if self.dry_run else "set"
        log.info("node %s: %s %s %s -> %s (%d GPUs %s): %s", change.node, verb, SPLIT_KEY,
                 change.previous_target or "(none)", change.target, change.moves, change.direction, change.reason,
                 extra={"node": change.node, "dry_run": self.dry_run})
        self.metrics.changes.labels(mode=self.mode).inc()
        self.metrics.moves.labels(direction=change.direction, mode=self.mode).inc(change.moves)
        if self.dry_run:
            self._dry_recorded[change.node] = (change.previous_target, change.target)
        reason = REASON_WOULD_CHANGE if self.dry_run else REASON_CHANGED
        message = (f"{'would set' if self.dry_run else 'set'} {SPLIT_KEY} {change.previous_target or '(none)'} -> "
                   f"{change.target} ({change.moves} GPU{'s' if change.moves != 1 else ''} {change.direction}): "
                   f"{change.reason}")
        events.submit(self._event, stored, reason, message, "Normal")
        return True

    def _event(self, involved: Obj, reason: str, message: str, kind: str) -> None:
        try:
            self._count("create-event")
            record_event(self.api, involved, reason, message, "Warning" if kind == "Warning" else "Normal",
                         EVENT_COMPONENT)
        except KubeError as err:
            log.warning("event %s on %s failed: %s", reason, (involved.get("metadata") or {}).get("name"),
                        err.message)

    def report_blocked(self, blocked: Sequence[Blocked], pods: Mapping[str, Obj],
                       is_leader: Callable[[], bool]) -> int:
        """Warning Events for pods that became blocked (once per pod and reason, at most MAX_BLOCKED_EVENTS per
        decision: the rest follow in later decisions); returns how many were sent."""
        sent = 0
        current: set[tuple[str, str]] = {(b.pod, b.reason) for b in blocked}
        for b in blocked:
            key: tuple[str, str] = (b.pod, b.reason)
            if key not in self._blocked_seen:
                self._blocked_seen[key] = None
                self.metrics.blocked_total.labels(reason=b.reason).inc()
            if key in self._blocked_reported or sent >= MAX_BLOCKED_EVENTS or not is_leader():
                continue
            self._blocked_reported[key] = None
            pod = pods.get(b.pod.partition("#")[0])
            if pod is None:
                continue
            self._event(pod, REASON_BLOCKED, f"dra-bridge controller cannot make room ({b.reason}): {b.message}",
                        "Warning")
            sent += 1
        # Forget pods that are no longer blocked for that reason, so a recurrence is reported again.
        for seen in (self._blocked_seen, self._blocked_reported):
            for gone in [k for k in seen if k not in current]:
                del seen[gone]
            while len(seen) > _MAX_REMEMBERED:
                seen.popitem(last=False)
        return sent

    def report_unreadable(self, views: Sequence[NodeView], nodes: Mapping[str, Obj],
                          is_leader: Callable[[], bool]) -> None:
        """A Warning Event `SplitStatusUnreadable` on each Node whose published status cannot be read, once per
        node and reason (the node is left alone; the others are decided as usual), and the gauge of such nodes."""
        current = {v.name: v.unreadable for v in views if v.unreadable}
        self.metrics.unreadable_nodes.set(len(current))
        for name, why in sorted(current.items()):
            if self._unreadable_told.get(name) == why or not is_leader():
                continue
            node = nodes.get(name)
            if node is None:
                continue
            self._unreadable_told[name] = why
            log.warning("node %s: %s; the node is left alone", name, why)
            self._event(node, REASON_UNREADABLE, f"dra-bridge controller cannot read this node's split status "
                        f"({why}); it leaves the node alone until the node daemon publishes a readable one",
                        "Warning")
        for gone in [n for n in self._unreadable_told if n not in current]:
            del self._unreadable_told[gone]

    def forget_dry_runs_except(self, nodes: set[str]) -> None:
        """Forget the would-be changes recorded for every node but `nodes` (the ones the last decision changes):
        a node the controller stopped wanting to change gets its record again when it wants to once more."""
        for node in [n for n in self._dry_recorded if n not in nodes]:
            del self._dry_recorded[node]


__all__ = ["Writer"]
