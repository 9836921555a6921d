"""The taint eviction controller's rules (pure): which pods a node's NoExecute taints evict, and when.

Written from kubernetes/kubernetes v1.37.2 pkg/controller/tainteviction/taint_eviction.go (`processPodOnNode`,
`getNoExecuteTaints`, `getMinTolerationTime`, `addConditionAndDeletePod`), timed_workers.go (`TimedWorkerQueue`) and
pkg/apis/core/v1/helper/helpers.go (`GetMatchingTolerations`); the same in v1.35.4 and v1.38.0-beta.0.

The surprising parts, each kept here:
* Each taint is matched by the pod's **first** toleration that tolerates it, and only that one's `tolerationSeconds`
  counts: `[{unreachable, NoExecute}, {unreachable, NoExecute, 60}]` tolerates forever.
* The shortest `tolerationSeconds` among the matched tolerations decides; one of 0 or less evicts at once; a matched
  toleration without seconds does not cap the others (all without seconds: never evicted).
* A node's taints changing while a pod's eviction is scheduled keeps the earlier schedule: the eviction stays at its
  first creation time plus its first toleration, even when the new toleration is longer or shorter. Only a node
  losing every NoExecute taint (or a pod no longer tolerating one, which evicts now) cancels it.
* Only an eviction waiting on its timer is "cancelled" with an Event; one due at once (nothing tolerated) is not.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge.kvalues.placement import toleration_tolerates

Obj = dict[str, Any]
REASON = "DeletionByTaintManager"
MESSAGE = "Taint manager: deleting due to NoExecute taint"
NEVER = -1.0  # `getMinTolerationTime`'s "tolerated forever"


def no_execute_taints(node: Mapping[str, Any] | None) -> tuple[tuple[str, str], ...]:
    """`getNoExecuteTaints`: the node's NoExecute taints as (key, value), in their order."""
    taints = ((node or {}).get("spec") or {}).get("taints") or ()
    return tuple((str(t.get("key") or ""), str(t.get("value") or "")) for t in taints
                 if isinstance(t, dict) and t.get("effect") == "NoExecute")


def tolerations_of(pod: Mapping[str, Any]) -> tuple[Obj, ...]:
    tolerations = (pod.get("spec") or {}).get("tolerations") or ()
    return tuple(t for t in tolerations if isinstance(t, dict))


def matching_tolerations(taints: Sequence[tuple[str, str]], tolerations: Sequence[Mapping[str, Any]]
                         ) -> list[Mapping[str, Any]] | None:
    """`GetMatchingTolerations`: for each taint the first toleration tolerating it; None when one is not tolerated."""
    used: list[Mapping[str, Any]] = []
    for key, value in taints:
        first = next((t for t in tolerations
                      if toleration_tolerates(str(t.get("key") or ""), str(t.get("operator") or ""),
                                              str(t.get("value") or ""), str(t.get("effect") or ""),
                                              key, value, "NoExecute")), None)
        if first is None:
            return None
        used.append(first)
    return used


def min_toleration_seconds(used: Iterable[Mapping[str, Any]]) -> float:
    """`getMinTolerationTime`: 0 for no tolerations or any with seconds <= 0, NEVER when none has seconds, else the
    least."""
    used = list(used)
    if not used:
        return 0.0
    least: float | None = None
    for t in used:
        seconds = t.get("tolerationSeconds")
        if isinstance(seconds, int) and not isinstance(seconds, bool):
            if seconds <= 0:
                return 0.0
            least = seconds if least is None else min(least, seconds)
    return NEVER if least is None else float(least)


def disruption_status(pod: Mapping[str, Any], now: str, with_generation: bool) -> Obj | None:
    """`addConditionAndDeletePod`'s status: the pod's status with `DisruptionTarget` True (reason
    DeletionByTaintManager), or None when it has that condition already as it would be written (the status write is
    then skipped; an existing condition of the same status keeps its transition time). `with_generation`: the
    condition carries `observedGeneration` (PodObservedGenerationTracking, on by default from 1.34)."""
    status = dict(pod.get("status") or {})
    conditions = [dict(c) for c in status.get("conditions") or () if isinstance(c, dict)]
    wanted: Obj = {"type": "DisruptionTarget", "status": "True", "reason": REASON, "message": MESSAGE,
                   "lastTransitionTime": now}
    generation = (pod.get("metadata") or {}).get("generation")
    old = next((c for c in conditions if c.get("type") == "DisruptionTarget"), None)
    if isinstance(generation, int) and (with_generation or (old or {}).get("observedGeneration")):
        wanted["observedGeneration"] = generation
    if old is None:
        conditions.append(wanted)
    else:
        if old.get("status") == "True":
            wanted["lastTransitionTime"] = old.get("lastTransitionTime")
        if all(old.get(k) == wanted.get(k) for k in ("status", "reason", "message", "lastTransitionTime",
                                                      "lastProbeTime")):
            return None
        conditions[conditions.index(old)] = wanted
    status["conditions"] = conditions
    return status


@dataclass
class Work:
    created: float
    fire_at: float
    timed: bool  # waiting on a timer (False: due at once, already handed to a worker)
    fired: bool = False


@dataclass
class TimedQueue:
    """`TimedWorkerQueue`: one scheduled eviction per pod key. An entry stays from `add` until its work is `done`
    (or it is cancelled), so a pod is never scheduled twice."""

    work: dict[str, Work] = field(default_factory=dict)
    _heap: list[tuple[float, int, str]] = field(default_factory=list)
    _seq: int = 0

    def add(self, key: str, created: float, fire_at: float) -> bool:
        """`AddWork`: schedule unless the key has work already (then nothing changes)."""
        if key in self.work:
            return False
        timed = fire_at > created
        self.work[key] = Work(created, fire_at, timed)
        self._seq += 1
        heapq.heappush(self._heap, (fire_at if timed else float("-inf"), self._seq, key))
        return True

    def cancel(self, key: str) -> bool:
        """`CancelWork`: drop the key's work; True when a timer was stopped (what earns a cancel Event)."""
        work = self.work.pop(key, None)
        return work is not None and work.timed

    def due(self, now: float) -> list[str]:
        """The keys whose time has come, each handed out once (it stays until `done`)."""
        out: list[str] = []
        while self._heap and self._heap[0][0] <= now:
            _, _, key = heapq.heappop(self._heap)
            work = self.work.get(key)
            if work is not None and not work.fired:
                work.fired = True
                out.append(key)
        return out

    def done(self, key: str) -> None:
        self.work.pop(key, None)

    def next_at(self) -> float | None:
        while self._heap and (self._heap[0][2] not in self.work or self.work[self._heap[0][2]].fired):
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None


def schedule(queue: TimedQueue, key: str, taints: Sequence[tuple[str, str]], tolerations: Sequence[Mapping[str, Any]],
             now: float) -> tuple[str, bool]:
    """`processPodOnNode` for a node with NoExecute taints (non-empty). Returns what became of the pod's eviction,
    "now" | "later" | "never" | "kept" (an earlier schedule stands), and whether a waiting eviction was cancelled
    (which the controller reports with an Event)."""
    used = matching_tolerations(taints, tolerations)
    if used is None:
        cancelled = queue.cancel(key)
        queue.add(key, now, now)
        return "now", cancelled
    delay = min_toleration_seconds(used)
    if delay == NEVER:
        return "never", queue.cancel(key)
    start, trigger = now, now + delay
    current = queue.work.get(key)
    cancelled = False
    if current is not None and current.timed:
        start = current.created
        if start + delay < trigger:
            return "kept", False
        cancelled = queue.cancel(key)
    queue.add(key, start, trigger)
    return ("now" if trigger <= start else "later"), cancelled


__all__ = ["MESSAGE", "NEVER", "REASON", "TimedQueue", "Work", "disruption_status",
           "matching_tolerations", "min_toleration_seconds", "no_execute_taints", "schedule", "tolerations_of"]
