"""The controller's domain values (pure, frozen): what a node offers, what a pending pod asks, what was decided.

Everything is counted in whole GPUs. A node is described by the split it will have once the moves already under
way land (`dra`), and by how many devices on each side cannot move because a pod or an allocated claim holds them
(`dra_held`, `legacy_held`). From those:

    legacy      = total - dra
    free_dra    = dra - dra_held        (>= 0)
    free_legacy = legacy - legacy_held  (>= 0)

Topology: `groups` says how a node's free devices fall into topology groups (`FreeGroup`: an NVLink island, else a
NUMA node, as the daemon publishes them; bridge.inventory.model.topology_group), so the core can prefer nodes where
a pod's GPUs are one group. It is a preference only: the counts above decide what is safe and what fits.

A count target `N` is safe exactly when `dra_held <= N <= total - legacy_held`: the node daemon picks which devices
move (free ones first, bridge.ledger's choice), and there are enough free ones on the side that shrinks. So the
controller never needs device names to keep the one-owner invariant, and a target outside that range is never
written (`NodeView.safe_range`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal, NamedTuple

from bridge.kvalues.placement import Constraints, Taint

Api = Literal["legacy", "dra"]
APIS: tuple[Api, ...] = ("legacy", "dra")
Direction = Literal["to-dra", "to-legacy"]

# Why the controller leaves a node's target alone (the node still offers its free GPUs to pods):
# pinned     an operator owns the target (see bridge.controller.nodestatus for the pin forms)
# settling   the daemon has not yet acted on the current target, or moves are in flight both ways
# unknown    no readable split status (no daemon, unreadable, newer schema): never touched, offers nothing
Frozen = Literal["", "pinned", "settling", "unknown"]


def other(api: Api) -> Api:
    return "dra" if api == "legacy" else "legacy"


def direction_to(api: Api) -> Direction:
    return "to-dra" if api == "dra" else "to-legacy"


@dataclass(frozen=True)
class FreeGroup:
    """The free devices of one topology group of a node, per side. `name` is the group's key ("nvlink-1" for NVLink
    island 1, "numa-0" for NUMA node 0; bridge.inventory.model.topology_group), "" when unknown."""

    name: str
    legacy: int = 0
    dra: int = 0

    def __post_init__(self) -> None:
        if self.legacy < 0 or self.dra < 0:
            raise ValueError(f"group {self.name!r}: negative free count")

    def free(self, api: Api) -> int:
        return self.dra if api == "dra" else self.legacy


def describe_group(name: str) -> str:
    """"nvlink-1" -> "NVLink island 1", "numa-0" -> "NUMA node 0" (for reasons and Events)."""
    kind, _, ident = name.partition("-")
    if kind == "nvlink":
        return f"NVLink island {ident}"
    return f"NUMA node {ident}" if kind == "numa" else name


@dataclass(frozen=True)
class NodeView:
    name: str
    total: int
    dra: int  # devices on the DRA side once the moves under way land
    dra_held: int = 0  # DRA-side devices a pod or an allocated claim holds (or whose holders are unknown)
    legacy_held: int = 0
    pool: str = ""
    target: str = ""  # the split value the Node carries now ("" when it says nothing)
    frozen: Frozen = ""
    frozen_reason: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    # Free devices per topology group (NVLink island, else NUMA node), largest first; () when the daemon does not
    # say (the node's free devices then count as one group). The counts may lag `free()` (a binding the daemon has
    # not reported yet): the core trusts `free()` and fits the groups to it (bridge.controller.decide).
    groups: tuple[FreeGroup, ...] = ()
    # Bindings the groups do not count yet, oldest first, as (API, GPUs) of each pod: the youngest legacy pods bound
    # to the node whose GPUs make up what the daemon's status does not count yet (`node_view`). Where they make up
    # the groups' surplus exactly, the core takes them off the groups one pod at a time, as the daemon's choice takes
    # each pod's GPUs; else the surplus comes off as one take.
    unreported: tuple[tuple[Api, int], ...] = ()
    # The direction of moves under way (they count as landed in `dra`); the node may move further that way now,
    # the other way only once they have landed.
    moving: Direction | None = None
    # Why the daemon's published status could not be read ("" when it could, or when there is none): such a node
    # is `unknown` (left alone), and the controller records an Event and a metric about it.
    unreadable: str = ""

    def __post_init__(self) -> None:
        if self.total < 0 or not 0 <= self.dra <= self.total:
            raise ValueError(f"node {self.name}: dra={self.dra} outside 0..{self.total}")
        if self.dra_held < 0 or self.legacy_held < 0:
            raise ValueError(f"node {self.name}: negative held count")
        if any(n <= 0 for _, n in self.unreported):
            raise ValueError(f"node {self.name}: an unreported binding of no GPUs")

    @property
    def legacy(self) -> int:
        return self.total - self.dra

    def count(self, api: Api) -> int:
        return self.dra if api == "dra" else self.legacy

    def held(self, api: Api) -> int:
        return self.dra_held if api == "dra" else self.legacy_held

    def free(self, api: Api) -> int:
        if self.frozen == "unknown":
            return 0
        return max(0, self.count(api) - self.held(api))

    @property
    def safe_range(self) -> tuple[int, int]:
        """The DRA counts a target may ask for without moving a held device (lo may exceed hi when the node is
        over-committed; then only the current count is safe)."""
        return self.dra_held, self.total - self.legacy_held

    def is_safe(self, dra: int) -> bool:
        lo, hi = self.safe_range
        return dra == self.dra or lo <= dra <= hi


@dataclass(frozen=True)
class PendingPod:
    key: str  # namespace/name
    api: Api
    gpus: int
    namespace: str = ""
    priority: int = 0
    since: float = 0.0  # creation (or first seen pending), seconds; older pods are served first
    constraints: Constraints = field(default_factory=Constraints)

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"pod {self.key}: a pending GPU pod asks for at least one GPU, not {self.gpus}")


@dataclass(frozen=True)
class PoolPolicy:
    min_legacy_share: float = 0.0  # fraction of the pool's GPUs that stay on the legacy side


@dataclass(frozen=True)
class Policy:
    """Cluster policy (bridge.controller.policy parses and validates it)."""

    min_legacy_share: float = 0.0  # for pools not listed in `pools`
    pools: Mapping[str, PoolPolicy] = field(default_factory=dict)
    max_moves_per_minute: int = 32
    cooldown_s: float = 120.0
    # GPUs one decision moves at most; the rest waits for the next decision (so at most 12 times this a minute at
    # the loop's 5 s interval). Binds only where the rate limit allows more. It bounds what one decision writes: a
    # change per node, 3.5 ms each against a kube-apiserver on the same host (bench/real_controller_write_bench.py),
    # so 500 take under 2 s, inside the interval with room for a control plane across a network; and what it plans:
    # step 3 of a decision that plans thousands of moves is planned again for a new pod in 100-200 ms at 5,000 nodes
    # (bench/controller_bench.py).
    max_moves_per_decision: int = 500

    def share(self, pool: str) -> float:
        p = self.pools.get(pool)
        return p.min_legacy_share if p is not None else self.min_legacy_share

    def min_legacy(self, pool: str, total: int) -> int:
        """GPUs of a pool of `total` that stay legacy: the share rounded up, read as the decimal an operator wrote
        (0.3 x 10 is 3, not 4 as float arithmetic would round it)."""
        return math.ceil(Fraction(self.share(pool)).limit_denominator(10**6) * total)


# How a decision's plan was reached (bridge.controller.decide.decide_how): it went on from the last decision's plan,
# planned step 3 again from where that plan's step 1 ended, or planned from scratch.
PLANS = ("went-on", "step-3-again", "from-scratch")

BlockReason = Literal["no-capacity", "no-matching-node", "min-legacy-share", "cooldown", "rate-limit", "frozen",
                      "invalid-count"]
BLOCK_REASONS: tuple[BlockReason, ...] = (
    "no-capacity", "no-matching-node", "min-legacy-share", "cooldown", "rate-limit", "frozen", "invalid-count")


class Blocked(NamedTuple):
    """A pending pod the decision leaves pending, and why. A named tuple, as `Placement`: a decision makes one per pod
    it cannot place (5,600 in the controller bench's `constrained*`), and a frozen dataclass costs five times as much
    to make (1.2 us against 0.24 us on the bench machine, about 5 ms of such a decision)."""

    pod: str
    api: Api
    gpus: int
    reason: BlockReason
    message: str


@dataclass(frozen=True)
class TargetChange:
    node: str
    previous: int  # DRA count before (the planning baseline)
    dra: int  # the DRA count to write
    previous_target: str  # the split value the Node carried
    reason: str  # one human sentence: who needs what, and what this node had
    pods: tuple[str, ...] = ()  # pending pods this change serves (namespace/name)
    # The topology groups the moved GPUs come from, as the core planned them (the daemon's device choice takes them
    # from there: bridge/ledger/choice.py); () when the node publishes no topology.
    groups: tuple[str, ...] = ()

    @property
    def moves(self) -> int:
        return abs(self.dra - self.previous)

    @property
    def direction(self) -> Direction:
        return "to-dra" if self.dra > self.previous else "to-legacy"

    @property
    def target(self) -> str:
        """The split value to write: always a count, so the daemon picks free devices (bridge.ledger's choice)."""
        return str(self.dra)


class Placement(NamedTuple):
    """Where a pending pod goes (a named tuple: see `Blocked`)."""

    pod: str
    node: str
    moves: int  # GPUs this pod needs moved on that node (0: it fits what is free)


@dataclass(frozen=True)
class Decision:
    changes: tuple[TargetChange, ...]
    blocked: tuple[Blocked, ...]
    placements: tuple[Placement, ...]
    pending_pods: Mapping[Api, int]
    pending_gpus: Mapping[Api, int]
    free_gpus: Mapping[Api, int]  # before the changes

    @property
    def moves(self) -> int:
        return sum(c.moves for c in self.changes)


@dataclass(frozen=True)
class Memory:
    """What the core remembers between decisions (pure; the shell keeps the latest one): the last change per node
    (time, direction) for the cool-down, and the recent moves for the rate limit. `dry_run`: the shell writes and
    remembers nothing (`bridge controller --dry-run`), so every decision plans from where this one does; the core only
    words what it tells blocked pods accordingly."""

    last_change: Mapping[str, tuple[float, Direction]] = field(default_factory=dict)
    recent_moves: tuple[tuple[float, int], ...] = ()
    dry_run: bool = False

    def budget(self, policy: Policy, now: float) -> int:
        """GPUs a decision at `now` may move: what the last 60 s left of the rate limit, at most the limit per
        decision."""
        return min(self.window_left(policy, now), policy.max_moves_per_decision)

    def window_left(self, policy: Policy, now: float) -> int:
        """What the moves of the last 60 s left of `max_moves_per_minute`."""
        used = sum(n for t, n in self.recent_moves if now - t < 60.0)
        return max(0, policy.max_moves_per_minute - used)

    def in_cooldown(self, node: str, direction: Direction, policy: Policy, now: float) -> float:
        """Seconds left before `node` may change in `direction` (0 when it may): only a reversal waits."""
        last = self.last_change.get(node)
        if last is None or last[1] == direction:
            return 0.0
        return max(0.0, last[0] + policy.cooldown_s - now)

    def after(self, decision: Decision, now: float) -> Memory:
        changes = dict(self.last_change)
        for c in decision.changes:
            changes[c.node] = (now, c.direction)
        recent = tuple((t, n) for t, n in self.recent_moves if now - t < 60.0)
        if decision.moves:
            recent += ((now, decision.moves),)
        return Memory(changes, recent, self.dry_run)

    def forget(self, nodes: set[str], policy: Policy, now: float) -> Memory:
        """Drop nodes that are gone and cool-downs that have run out (keeps the memory small)."""
        kept = {n: v for n, v in self.last_change.items() if n in nodes and now - v[0] < policy.cooldown_s}
        return Memory(kept, tuple((t, n) for t, n in self.recent_moves if now - t < 60.0), self.dry_run)


__all__ = [
    "APIS",
    "Api",
    "BLOCK_REASONS",
    "BlockReason",
    "Blocked",
    "Decision",
    "Direction",
    "FreeGroup",
    "Frozen",
    "Memory",
    "NodeView",
    "PLANS",
    "PendingPod",
    "Placement",
    "Policy",
    "PoolPolicy",
    "TargetChange",
    "describe_group",
    "direction_to",
    "other",
]
