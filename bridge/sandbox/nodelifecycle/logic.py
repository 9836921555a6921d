"""The node lifecycle controller's rules (pure), from kubernetes/kubernetes v1.37.2
pkg/controller/nodelifecycle/node_lifecycle_controller.go, pkg/controller/nodelifecycle/scheduler/
rate_limited_queue.go, pkg/controller/util/node/controller_utils.go and pkg/util/taints/taints.go."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
EXCLUDE_DISRUPTION = "node.kubernetes.io/exclude-disruption"
ZONE_LABELS = ("topology.kubernetes.io/region", "topology.kubernetes.io/zone")
ZONE_LABELS_BETA = ("failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone")

# nodeConditionToTaintKeyStatusMap: {condition type: {status: taint key}} (the NoSchedule taints)
CONDITION_TAINTS: Mapping[str, Mapping[str, str]] = {
    "Ready": {"False": NOT_READY, "Unknown": UNREACHABLE},
    "MemoryPressure": {"True": "node.kubernetes.io/memory-pressure"},
    "DiskPressure": {"True": "node.kubernetes.io/disk-pressure"},
    "NetworkUnavailable": {"True": "node.kubernetes.io/network-unavailable"},
    "PIDPressure": {"True": "node.kubernetes.io/pid-pressure"},
}
CONDITION_TAINT_KEYS = frozenset(k for m in CONDITION_TAINTS.values() for k in m.values())
# what a kubelet that stopped posting gets: every condition but NetworkUnavailable (a control plane's)
UNKNOWN_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")

INITIAL, NORMAL, FULL, PARTIAL = "Initial", "Normal", "FullDisruption", "PartialDisruption"


def condition(node: Mapping[str, Any], ctype: str) -> Obj | None:
    for c in (node.get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == ctype:
            return c
    return None


def ready_status(node: Mapping[str, Any]) -> str | None:
    c = condition(node, "Ready")
    return None if c is None else str(c.get("status"))


def zone_key(node: Mapping[str, Any]) -> str:
    """`nodetopology.GetZoneKey` (component-helpers node/topology): "region:\\x00:zone", each from the beta label
    when the Node has it (even empty), else the GA one; "" without either."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    region, zone = (str(labels[b] if b in labels else labels.get(ga) or "")
                    for b, ga in zip(ZONE_LABELS_BETA, ZONE_LABELS))
    return f"{region}:\x00:{zone}" if region or zone else ""


def excluded_from_disruption(node: Mapping[str, Any]) -> bool:
    return EXCLUDE_DISRUPTION in ((node.get("metadata") or {}).get("labels") or {})


def mark_unknown(node: Obj, now: str) -> Obj:
    """`tryUpdateNodeHealth` past the grace period: a copy of the Node's status whose Ready and pressure conditions
    are Unknown. A condition the kubelet never posted is added ("NodeStatusNeverUpdated", heartbeat at the Node's
    creation); one not yet Unknown becomes Unknown ("NodeStatusUnknown", transition now, heartbeat kept); one already
    Unknown is left as it is."""
    status = copy.deepcopy(node.get("status") or {})
    conditions = status.setdefault("conditions", [])
    created = (node.get("metadata") or {}).get("creationTimestamp")
    for ctype in UNKNOWN_CONDITIONS:
        c = next((c for c in conditions if c.get("type") == ctype), None)
        if c is None:
            conditions.append({"type": ctype, "status": "Unknown", "lastHeartbeatTime": created,
                               "lastTransitionTime": now, "reason": "NodeStatusNeverUpdated",
                               "message": "Kubelet never posted node status."})
        elif c.get("status") != "Unknown":
            c.update(status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status.",
                     lastTransitionTime=now)
    return status


def _match(a: Mapping[str, Any], key: str, effect: str) -> bool:
    return a.get("key") == key and a.get("effect") == effect


def condition_taints(node: Mapping[str, Any]) -> tuple[list[Obj], list[Obj]]:
    """`doNoScheduleTaintingPass`: the NoSchedule taints the Node's conditions (and `spec.unschedulable`) call for,
    against those of the same keys it carries. Returns (to add, to remove), each a taint `{key, effect}`."""
    wanted = []
    for c in (node.get("status") or {}).get("conditions") or ():
        key = (CONDITION_TAINTS.get(str(c.get("type"))) or {}).get(str(c.get("status")))
        if key:
            wanted.append({"key": key, "effect": "NoSchedule"})
    if (node.get("spec") or {}).get("unschedulable"):
        wanted.append({"key": UNSCHEDULABLE, "effect": "NoSchedule"})
    have = [t for t in (node.get("spec") or {}).get("taints") or ()
            if t.get("effect") == "NoSchedule" and (t.get("key") == UNSCHEDULABLE or t.get("key") in
                                                    CONDITION_TAINT_KEYS)]
    add = [t for t in wanted if not any(_match(h, t["key"], t["effect"]) for h in have)]
    remove = [{"key": h["key"], "effect": h["effect"]} for h in have
              if not any(_match(w, str(h.get("key")), str(h.get("effect"))) for w in wanted)]
    return add, remove


def has_taint(node: Mapping[str, Any], key: str, effect: str) -> bool:
    return any(_match(t, key, effect) for t in (node.get("spec") or {}).get("taints") or ())


def swapped_taints(taints: Sequence[Mapping[str, Any]], add: Iterable[Mapping[str, Any]],
                   remove: Iterable[Mapping[str, Any]]) -> list[Obj] | None:
    """`AddOrUpdateTaint` of each taint in `add` (one of the same key and effect replaced unless identical), then
    `RemoveTaint` of each in `remove` (by key and effect); None when nothing changes."""
    out = [dict(t) for t in taints]
    changed = False
    for t in add:
        i = next((i for i, o in enumerate(out) if _match(o, t["key"], t["effect"])), None)
        if i is None:
            out.append(dict(t))
            changed = True
        elif out[i] != dict(t):
            out[i] = dict(t)
            changed = True
    for t in remove:
        kept = [o for o in out if not _match(o, t["key"], t["effect"])]
        changed = changed or len(kept) != len(out)
        out = kept
    return out if changed else None


def zone_state(ready: Sequence[str | None], unhealthy_threshold: float = 0.55) -> tuple[int, str]:
    """`ComputeZoneState` from the Ready statuses of a zone's nodes: (not ready, state). No Ready node: full
    disruption; more than two not ready and at least `unhealthy_threshold` of them: partial; else normal."""
    not_ready = sum(1 for s in ready if s != "True")
    ready_n = len(ready) - not_ready
    if ready_n == 0 and not_ready > 0:
        return not_ready, FULL
    if not_ready > 2 and not_ready / len(ready) >= unhealthy_threshold:
        return not_ready, PARTIAL
    return not_ready, NORMAL


def mark_pod_not_ready(pod: Obj, now: str) -> Obj | None:
    """`MarkPodsNotReady` for one pod: its status with the Ready condition False (transition now, reason and message
    kept), or None when it has no Ready condition or it is False already."""
    status = copy.deepcopy(pod.get("status") or {})
    for c in status.get("conditions") or ():
        if c.get("type") == "Ready":
            if c.get("status") == "False":
                return None
            c.update(status="False", lastTransitionTime=now)
            return status
    return None


class TokenBucket:
    """client-go's token bucket (golang.org/x/time/rate): `qps` tokens a second, at most `burst`, full at creation.
    A `qps` of 0 never accepts (`NewFakeNeverRateLimiter`), and reports a rate of 1 (client-go
    util/flowcontrol/throttle.go, `fakeNeverRateLimiter.QPS`): see `TaintQueue.swap_limiter`."""

    def __init__(self, qps: float, now: float, burst: int = 1) -> None:
        self.qps = qps
        self.burst = burst
        self.tokens = float(burst)
        self.at = now

    @property
    def reported_qps(self) -> float:
        return self.qps if self.qps > 0 else 1.0

    def try_accept(self, now: float) -> bool:
        if self.qps <= 0:
            return False
        self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.qps)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


@dataclass
class _Timed:
    uid: str
    process_at: float


class TaintQueue:
    """A zone's `RateLimitedTimedQueue` of nodes to taint NoExecute (its `UniqueQueue`): a node is queued once; once
    tainted it leaves the queue but stays a member, so it is not queued again (nor its taint re-stamped) until
    `remove`d, which the controller does when the node's taint is gone or the node is Ready. `try_each` takes a
    token for each node it looks at, so a zone taints at most `qps` nodes a second."""

    def __init__(self, qps: float, now: float) -> None:
        self.limiter = TokenBucket(qps, now)
        self.items: dict[str, _Timed] = {}
        self.members: set[str] = set()

    def add(self, name: str, uid: str, now: float) -> bool:
        if name in self.members:
            return False
        self.members.add(name)
        self.items[name] = _Timed(uid, now)
        return True

    def remove(self, name: str) -> bool:
        """`Remove`: out of the queue and of the members (True when it was a member)."""
        self.items.pop(name, None)
        if name not in self.members:
            return False
        self.members.discard(name)
        return True

    def swap_limiter(self, qps: float, now: float) -> None:
        """`SwapLimiter`: a new bucket for a new rate; when the old one has no token now, the new one starts drained
        (so a zone leaving full disruption taints its next node one period later, not at once). The rate compared
        is the one the old limiter reports, and the stopped one reports 1: with `--node-eviction-rate=1` a zone
        that was fully disrupted stays stopped (upstream behaves so; nothing taints NoExecute there again)."""
        if self.limiter.reported_qps == qps:
            return
        new = TokenBucket(qps, now)
        if qps > 0 and not self.limiter.try_accept(now):
            new.try_accept(now)
        self.limiter = new

    def try_each(self, now: float, fn: Any) -> None:
        """`Try`: for the head node while a token is there and it is due, `fn(name) -> (done, retry_after)`."""
        while self.items:
            if not self.limiter.try_accept(now):
                return
            name = min(self.items, key=lambda n: self.items[n].process_at)  # the queue's heap head
            item = self.items[name]
            if now < item.process_at:
                return
            done, wait = fn(name)
            if done:
                self.items.pop(name, None)  # `RemoveFromQueue`: still a member
            else:
                item.process_at = now + wait
