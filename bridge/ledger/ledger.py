"""The ownership ledger: one side per device, moves that converge, and the two guards (pure: no I/O, no clock).

Everything that decides where a GPU serves lives here; `bridge.node.split` gathers the facts and observations,
calls these functions under one lock, persists the result (checkpoint) and tells both APIs. Time comes in as
`Observations.now` (monotonic seconds), so every decision is deterministic and the state-machine test drives
exactly this code.

* `reconcile(ledger, target, facts, obs)`: one evaluation. Moves under way advance (or abort); devices on the
  wrong side start moving when they are free on their side and that side's holders are known; devices that cannot
  move yet are listed with the reason ("gpu-2 held by pod ml/train-7 container init (legacy init container); will
  move when free"). Targets converge device by device: free devices move now, busy ones when they free up.
  Before any of that, a legacy-side device that a ResourceClaim was allocated (a late allocation: the scheduler
  decided on a slice that still had it and wrote the allocation after it left DRA) is taken back for the claim,
  whatever the target: at once when it is free on the legacy side; otherwise it is withdrawn from the device plugin
  (`Phase.RECLAIM`, no new legacy pod gets it) and becomes DRA when its legacy holders are gone. Such a claim is
  *stuck* meanwhile: `Waiting` names the claim, its pod and the legacy holder, and what to do.
* `guard_allocate(ledger, ids)`: the device plugin's last line of defence. Only legacy-side devices may be
  allocated, except a device whose move to DRA has not finished: the kubelet chose it before it saw the
  withdrawal, the device was never offered to DRA, so the Allocate wins and the move is aborted. Every answered
  Allocate is recorded as a holder until PodResources (or the kubelet's checkpoint) shows it, or for
  `pending_allocate_s` (a pod that failed admission afterwards never shows).
* `guard_prepare(ledger, ids, claim)`: NodePrepareResources' last line of defence, and the rule that an allocated
  claim is never stranded: a device on the DRA side is fine; one whose move to legacy has not finished comes back;
  one on the legacy side (or moving to DRA) that is free there is taken back at once (withdraw, verify, DRA); one
  held there is refused, per claim, naming the holder, and the kubelet's retry succeeds once it frees.
* Pods placed on this node for the device plugin's resource that the kubelet has not admitted yet
  (`Facts.admitting`: bound, or nominated, since the scheduler counted the Node's allocatable of that moment) keep
  as many free legacy devices on the legacy side as they ask for: the kubelet admits a pod with the devices
  healthy at that instant and fails it (`UnexpectedAdmissionError`, kubernetes/kubernetes pkg/kubelet/cm/
  devicemanager/manager.go `devicesToAllocate`: "requested number of devices unavailable") when too few are
  left, which a withdrawal can cause until the scheduler sees the smaller allocatable. So a move to DRA starts only
  with a free legacy device to spare, and when such pods need more than the free legacy devices, moves to DRA not
  offered there yet are aborted (newest first), as a grab by `Allocate` aborts them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Literal

from bridge.inventory.model import DeviceID, GpuDevice
from bridge.ledger.choice import choose_dra
from bridge.ledger.holders import Facts, Holder, HolderKind, describe_all, distinct
from bridge.ledger.moves import Move, Phase
from bridge.ledger.sides import Side, device_name, parse_side
from bridge.ledger.target import SplitError, SplitTarget, fit_target

State = Literal["converged", "converging", "refused"]


@dataclass(frozen=True)
class LedgerConfig:
    """Timings (seconds). Defaults are derived from the kubelet's and the scheduler's periods:

    * `scheduler_grace_s` 5: after the slice without a device is published, the scheduler's informer sees it well
      within a second, and a binding it decided on the old slice takes two API calls (PreBind writes the claim's
      allocation, then Bind), each under the API server's 1 s p99 mutating-call SLO; 5 s covers both with margin.
    * `settle_s` 1: the scheduler's informer lag after a Node status change; also how long a withdrawn device's
      Unhealthy report needs to reach the kubelet's device manager (a ListAndWatch push, milliseconds).
    * `move_timeout_s` 60: six `nodeStatusUpdateFrequency` periods (10 s each); the kubelet posts an allocatable
      change within one, so a move still waiting after six is stuck (kubelet down, API unreachable): it aborts.
      A move to legacy gets `scheduler_grace_s` on top (`move_deadline`): its grace is a wait by design.
    * `cooldown_s` 30: a device whose move timed out waits this long before it is tried again.
    * `pending_allocate_s` 30: an answered Allocate is a holder this long even if PodResources does not show it
      (the kubelet records it within milliseconds; a pod that fails admission afterwards never shows).
    * `pending_prepare_s` 120: a NodePrepareResources past the guard is a holder until it ends (the kubelet's
      deadline is 45 s) or this long.
    """

    scheduler_grace_s: float = 5.0
    settle_s: float = 1.0
    move_timeout_s: float = 60.0
    cooldown_s: float = 30.0
    pending_allocate_s: float = 30.0
    pending_prepare_s: float = 120.0

    def __post_init__(self) -> None:
        for name in ("scheduler_grace_s", "settle_s", "cooldown_s", "pending_allocate_s", "pending_prepare_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.move_timeout_s <= 0:
            raise ValueError("move_timeout_s must be > 0")


@dataclass(frozen=True)
class Observations:
    """What the daemon sees of the scheduler's inputs now. `None` means unknown (watch down, not yet read)."""

    now: float
    node_allocatable: int | None = None  # the Node's status.allocatable for our resource
    node_changed_at: float | None = None  # when that value was first seen
    published_dra: frozenset[DeviceID] | None = None  # devices the API server's ResourceSlices hold (confirmed)
    unhealthy: frozenset[DeviceID] = frozenset()  # physically unhealthy: the device plugin does not offer them


@dataclass(frozen=True)
class Pending:
    """A holder the ledger recorded itself (an answered Allocate, a prepare in progress) until it expires."""

    device: DeviceID
    holder: Holder
    expires: float
    token: str = ""  # the claim UID of a prepare


@dataclass(frozen=True)
class Refusal:
    """One device an API call may not use, and why (gRPC errors, per-claim errors, Events, the status)."""

    device: DeviceID
    name: str
    owner: Side | None  # None: not a device of this node
    message: str
    holders: tuple[Holder, ...] = ()


@dataclass(frozen=True)
class MoveEvent:
    device: DeviceID
    name: str
    source: Side
    target: Side
    kind: Literal["started", "finished", "aborted", "reclaimed"]
    reason: str = ""

    @property
    def direction(self) -> str:
        return f"{self.source}->{self.target}"

    def describe(self) -> str:
        what = {"started": "withdrawn, moving", "finished": "moved", "aborted": "move aborted",
                "reclaimed": "taken back"}[self.kind]
        tail = f": {self.reason}" if self.reason else ""
        return f"{self.name} {what} {self.source}->{self.target}{tail}"


@dataclass(frozen=True)
class Waiting:
    """A device not on the side the target asks for, and why it has not arrived yet."""

    device: DeviceID
    name: str
    side: Side
    target: Side
    phase: str  # a move Phase value, or "held", "unknown", "cooldown"
    reason: str
    # A stuck claim (phase `waiting-legacy-holder`): the claims waiting for the device and who holds it on legacy.
    claims: tuple[Holder, ...] = ()
    blockers: tuple[Holder, ...] = ()


_CLAIM_KINDS = (HolderKind.ALLOCATED, HolderKind.PREPARED, HolderKind.PREPARING)


def _claims_of(ledger: Ledger, uuid: DeviceID, facts: Facts) -> tuple[Holder, ...]:
    """The DRA claims allocated (or prepared, or being prepared) on this very device (INCOMING pods name none)."""
    return tuple(h for h in ledger.holders(uuid, Side.DRA, facts) if h.kind in _CLAIM_KINDS)


def stuck_reason(name: str, claims: Sequence[Holder], blockers: Sequence[Holder]) -> str:
    """For people (status, Events, the per-claim error): which claim waits for which legacy holder, and what to do."""
    pods = [h.pod for h in distinct(claims) if h.pod]
    them = f"pod {pods[0]}" if len(pods) == 1 else "its pods" if pods else "the claim's pod"
    return (f"{name} was allocated to {describe_all(claims)} after it had moved to the device plugin, and is held there "
            f"by {describe_all(blockers)}: {them} starts once that holder ends (delete it to free {name} now, or "
            f"delete {them} so the scheduler picks another GPU); {name} is withdrawn from the device plugin "
            "meanwhile")


@dataclass(frozen=True)
class Ledger:
    """An immutable snapshot: devices, their sides, moves under way, holders the ledger recorded itself."""

    devices: tuple[GpuDevice, ...]
    sides: Mapping[DeviceID, Side]
    moves: Mapping[DeviceID, Move] = field(default_factory=dict)
    pending: tuple[Pending, ...] = ()
    cooldown: Mapping[DeviceID, float] = field(default_factory=dict)  # no new move before this time
    # Derived, never passed: the devices on each side, computed once per ledger value. A ledger is immutable (its
    # `sides` are frozen below) and replaced whole on every change, so this snapshot is swapped atomically with the
    # sides it was computed from and can never disagree with them; the guards' common case is one set lookup here.
    by_side: Mapping[Side, frozenset[DeviceID]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.sides) != len(self.devices) or any(g.uuid not in self.sides for g in self.devices):
            known = {g.uuid for g in self.devices}
            raise ValueError(f"ledger sides do not match the devices: missing {sorted(known - set(self.sides))}, "
                             f"unknown {sorted(set(self.sides) - known)}")
        for uuid, side in self.sides.items():
            if not isinstance(side, Side):  # callers parse stored values (`adopt`, the checkpoint) first
                parse_side(side, f"side of {uuid}")
                raise ValueError(f"side of {uuid}: {side!r} is a string, not a Side")
        for uuid, mv in self.moves.items():
            if self.sides.get(uuid) is not Side.WITHDRAWN:
                raise ValueError(f"a move of {uuid} is recorded but the device is {self.sides.get(uuid)}")
        # A private read-only copy: a caller that mutates the mapping it passed cannot change this ledger's sides
        # behind `by_side`'s back.
        sides = MappingProxyType(dict(self.sides))
        on: dict[Side, list[DeviceID]] = {side: [] for side in Side}
        for uuid, side in sides.items():
            on[side].append(uuid)
        object.__setattr__(self, "sides", sides)
        object.__setattr__(self, "by_side", MappingProxyType({side: frozenset(u) for side, u in on.items()}))

    # ---- construction ------------------------------------------------------------------------------------------

    @classmethod
    def all_legacy(cls, devices: Sequence[GpuDevice]) -> Ledger:
        """The default for a node that says nothing: every device with the device plugin."""
        return cls(tuple(devices), {g.uuid: Side.LEGACY for g in devices})

    @classmethod
    def adopt(cls, devices: Sequence[GpuDevice], sides: Mapping[DeviceID, Side],
              moves: Mapping[DeviceID, tuple[Side, Side]] = {}, *, now: float = 0.0) -> Ledger:
        """From a checkpoint: stored sides for known devices (new devices start legacy; vanished ones are dropped),
        and stored moves resumed from their first phase (the restart may have missed anything)."""
        out: dict[DeviceID, Side] = {g.uuid: parse_side(sides.get(g.uuid, Side.LEGACY), f"side of {g.uuid}")
                                     for g in devices}
        resumed: dict[DeviceID, Move] = {}
        for uuid, (source, target) in moves.items():
            if out.get(uuid) is Side.WITHDRAWN and target in (Side.LEGACY, Side.DRA) and source != target:
                resumed[uuid] = Move.begin(uuid, source, target, now)
        return cls(tuple(devices), out, resumed)

    # ---- queries -----------------------------------------------------------------------------------------------

    def side_of(self, uuid: str) -> Side | None:
        return self.sides.get(DeviceID(uuid))

    def name_of(self, uuid: str) -> str:
        gpu = next((g for g in self.devices if g.uuid == uuid), None)
        return device_name(gpu) if gpu else uuid

    def on(self, side: Side) -> tuple[GpuDevice, ...]:
        return tuple(g for g in self.devices if self.sides[g.uuid] is side)

    def effective(self, uuid: DeviceID) -> Side:
        """Where the device is headed: a move's target, else its side (WITHDRAWN only without a move)."""
        mv = self.moves.get(uuid)
        return mv.target if mv is not None else self.sides[uuid]

    def holders(self, uuid: DeviceID, side: Side, facts: Facts) -> tuple[Holder, ...]:
        mine = tuple(p.holder for p in self.pending if p.device == uuid and p.holder.side is side)
        return facts.of(uuid, side) + tuple(h for h in mine if h not in facts.of(uuid, side))

    def with_pending(self, pending: tuple[Pending, ...]) -> Ledger:
        """This ledger with other self-recorded holders. Sides, moves, cooldowns and `by_side` are shared, not
        rebuilt: they did not change, so they need no new validation and no new snapshot (the guards' hot path)."""
        new = object.__new__(Ledger)
        new.__dict__.update(self.__dict__)
        new.__dict__["pending"] = pending
        return new

    def stored_moves(self) -> dict[DeviceID, tuple[Side, Side]]:
        """What the checkpoint records of moves under way (source, target)."""
        return {u: (m.source, m.target) for u, m in self.moves.items()}

    def legacy_offered(self, unhealthy: Iterable[DeviceID] = ()) -> int:
        """Devices the device plugin reports Healthy: legacy side and physically healthy."""
        bad = set(unhealthy)
        return sum(1 for g in self.devices if self.sides[g.uuid] is Side.LEGACY and g.uuid not in bad)

    def expired(self, now: float) -> Ledger:
        pending = tuple(p for p in self.pending if p.expires > now)
        cooldown = {u: t for u, t in self.cooldown.items() if t > now}
        if len(pending) == len(self.pending) and len(cooldown) == len(self.cooldown):
            return self
        return replace(self, pending=pending, cooldown=cooldown)

    def seen_in(self, facts: Facts) -> Ledger:
        """Drop answered Allocates that PodResources (or the kubelet's checkpoint) now shows: from here on that
        visible holder is the fact, and the device is free as soon as it goes away."""
        def visible(p: Pending) -> bool:
            return p.holder.kind is HolderKind.ALLOCATE and any(
                h.kind in (HolderKind.CONTAINER, HolderKind.INIT_CONTAINER) for h in facts.of(p.device, Side.LEGACY))

        pending = tuple(p for p in self.pending if not visible(p))
        return self if len(pending) == len(self.pending) else replace(self, pending=pending)

    def prepare_done(self, token: str) -> Ledger:
        """A NodePrepareResources ended (its records are in the checkpoint, or it failed): drop its holders."""
        pending = tuple(p for p in self.pending if not (p.token == token and p.holder.kind is HolderKind.PREPARING))
        return self if len(pending) == len(self.pending) else replace(self, pending=pending)


@dataclass(frozen=True)
class Decision:
    ledger: Ledger
    state: State
    wanted: int | None  # devices the target puts on DRA; None when refused
    events: tuple[MoveEvent, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    refusal: str = ""


# ---- reconcile -------------------------------------------------------------------------------------------------

def desired_dra(ledger: Ledger, target: SplitTarget, facts: Facts) -> frozenset[DeviceID]:
    """The devices `target` puts on DRA now; raises `SplitError` when it does not fit the node."""
    inventory = [(device_name(g), str(g.uuid)) for g in ledger.devices]
    fit = fit_target(target, inventory)
    if fit.pinned is not None:
        by_name = {device_name(g): g.uuid for g in ledger.devices}
        return frozenset(by_name[n] for n in fit.pinned)
    busy = set()
    for g in ledger.devices:
        side = ledger.sides[g.uuid]
        if g.uuid in ledger.moves or side is Side.WITHDRAWN:
            continue
        if not facts.known(side) or ledger.holders(g.uuid, side, facts):
            busy.add(g.uuid)
    on_dra = {g.uuid for g in ledger.devices if ledger.effective(g.uuid) is Side.DRA}
    in_flight = set(ledger.moves) | {g.uuid for g in ledger.on(Side.WITHDRAWN)}
    return choose_dra(ledger.devices, fit.count, on_dra=on_dra, busy=busy, in_flight=in_flight)


class _Pass:
    """The mutable working copy of one reconcile pass."""

    def __init__(self, ledger: Ledger, facts: Facts, obs: Observations, cfg: LedgerConfig) -> None:
        self.base = ledger
        self.facts = facts
        self.obs = obs
        self.cfg = cfg
        self.sides = dict(ledger.sides)
        self.moves = dict(ledger.moves)
        self.cooldown = dict(ledger.cooldown)
        self.events: list[MoveEvent] = []
        self.waiting: list[Waiting] = []
        self.expected_legacy = ledger.legacy_offered(obs.unhealthy)

    def name(self, uuid: DeviceID) -> str:
        return self.base.name_of(uuid)

    def wait(self, uuid: DeviceID, target: Side, phase: str, reason: str) -> None:
        self.waiting.append(Waiting(uuid, self.name(uuid), self.sides[uuid], target, phase, reason))

    def finish(self, mv: Move) -> None:
        self.sides[mv.device] = mv.target
        del self.moves[mv.device]
        self.events.append(MoveEvent(mv.device, self.name(mv.device), mv.source, mv.target, "finished"))

    def abort(self, mv: Move, reason: str, *, back_to: Side | None = None, cool: bool = False) -> None:
        home = back_to or mv.source
        self.sides[mv.device] = home  # WITHDRAWN when the source is unknown and nothing says otherwise
        del self.moves[mv.device]
        if cool:
            self.cooldown[mv.device] = self.obs.now + self.cfg.cooldown_s
        self.events.append(MoveEvent(mv.device, self.name(mv.device), mv.source, mv.target, "aborted", reason))

    def legacy_free(self) -> int:
        """Devices the kubelet could give a legacy pod it admits now: on the legacy side (this pass), not moving,
        physically healthy, held by nobody there."""
        bad = self.obs.unhealthy
        return sum(1 for g in self.base.devices
                   if self.sides[g.uuid] is Side.LEGACY and g.uuid not in self.moves and g.uuid not in bad
                   and not self.base.holders(g.uuid, Side.LEGACY, self.facts))

    def keep_for_admission(self) -> set[DeviceID]:
        """When the pods waiting for the kubelet's admission need more legacy devices than are free, the moves to DRA
        that can still go back (withdrawn, not offered to DRA, not taken back for a claim), newest first, to abort."""
        if not self.facts.admitting or not self.facts.known(Side.LEGACY):
            return set()
        short = self.facts.admitting_gpus() - self.legacy_free()
        if short <= 0:
            return set()
        back = sorted((mv for mv in self.moves.values()
                       if mv.source is Side.LEGACY and mv.target is Side.DRA and mv.phase is not Phase.RECLAIM),
                      key=lambda mv: (-mv.started_at, self.name(mv.device)))
        return {mv.device for mv in back[:short]}

    def admission_reason(self) -> str:
        n = self.facts.admitting_gpus()
        return (f"kept on legacy for {describe_all(h for h, _ in self.facts.admitting)}: the kubelet admits "
                f"{'it' if len(self.facts.admitting) == 1 else 'them'} with {n} free legacy GPU{'s' if n != 1 else ''}"
                f" and fails a pod that finds too few")

    def start(self, uuid: DeviceID, source: Side, target: Side) -> None:
        self.sides[uuid] = Side.WITHDRAWN
        self.moves[uuid] = Move.begin(uuid, source, target, self.obs.now)
        self.events.append(MoveEvent(uuid, self.name(uuid), source, target, "started"))

    def reclaim_step(self, mv: Move) -> None:
        """`Phase.RECLAIM`: DRA once the legacy holders are gone; back to legacy if the claim went first."""
        claims = _claims_of(self.base, mv.device, self.facts)
        if self.facts.known(Side.DRA) and not claims:
            self.abort(mv, "the claim that was allocated it is gone; back to legacy")
            return
        self.moves[mv.device] = mv
        if not self.facts.known(Side.LEGACY):
            self.wait(mv.device, mv.target, mv.phase, f"taken back for {describe_all(claims)}: its legacy holders "
                      f"cannot be read now ({self.facts.unknown[Side.LEGACY]})")
            return
        held = self.base.holders(mv.device, Side.LEGACY, self.facts)
        if held:
            self.waiting.append(Waiting(mv.device, self.name(mv.device), self.sides[mv.device], mv.target, mv.phase,
                                        stuck_reason(self.name(mv.device), claims, held), claims, held))
            return
        self.sides[mv.device] = Side.DRA
        del self.moves[mv.device]
        self.events.append(MoveEvent(mv.device, self.name(mv.device), Side.LEGACY, Side.DRA, "reclaimed",
                                     f"its legacy holder is gone; taken back for {describe_all(claims)}"))

    def take_back(self, uuid: DeviceID) -> bool:
        """A legacy-side device a claim was allocated: reclaim it now if free, else withdraw it (`Phase.RECLAIM`).
        True when the device is handled here (the target does not move it this pass)."""
        claims = _claims_of(self.base, uuid, self.facts)
        if not claims:
            return False
        if self.facts.known(Side.LEGACY) and not self.base.holders(uuid, Side.LEGACY, self.facts):
            self.sides[uuid] = Side.DRA
            self.events.append(MoveEvent(uuid, self.name(uuid), Side.LEGACY, Side.DRA, "reclaimed",
                                         f"allocated to {describe_all(claims)} while it served the device plugin, "
                                         "and free there: taken back"))
            return True
        mv = Move.reclaim(uuid, self.obs.now)
        self.sides[uuid] = Side.WITHDRAWN
        self.events.append(MoveEvent(uuid, self.name(uuid), Side.LEGACY, Side.DRA, "started",
                                     f"allocated to {describe_all(claims)} while it served the device plugin: "
                                     "withdrawn from it until its legacy holders are gone"))
        self.reclaim_step(mv)
        return True

    def advance(self, mv: Move) -> None:
        obs, cfg, now = self.obs, self.cfg, self.obs.now
        if mv.phase is Phase.RECLAIM:
            self.reclaim_step(mv)
            return
        if now >= move_deadline(mv, cfg):
            self.abort(mv, self._timeout_reason(mv), cool=True)
            return
        if mv.phase is Phase.NODE_STATUS:
            shown = obs.node_allocatable
            fresh = obs.node_changed_at is not None and now >= obs.node_changed_at + cfg.settle_s
            if shown is None or shown > self.expected_legacy or not fresh or now < mv.started_at + cfg.settle_s:
                seen = "unknown" if shown is None else str(shown)
                self.wait(mv.device, mv.target, mv.phase, f"waiting for the Node's allocatable to drop to "
                          f"{self.expected_legacy} (it shows {seen}; the kubelet posts node status every 10 s)")
                return
            mv = mv.at(Phase.VERIFY, now)
        if mv.phase is Phase.SLICE:
            if obs.published_dra is None or mv.device in obs.published_dra:
                self.moves[mv.device] = mv
                self.wait(mv.device, mv.target, mv.phase, "waiting for the ResourceSlice without it to be published")
                return
            mv = mv.at(Phase.SCHEDULER, now)
        if mv.phase is Phase.SCHEDULER:
            if now < mv.phase_since + cfg.scheduler_grace_s:
                self.moves[mv.device] = mv
                left = mv.phase_since + cfg.scheduler_grace_s - now
                self.wait(mv.device, mv.target, mv.phase, f"published without it; {left:.1f} s of scheduler grace "
                          "left for bindings decided on the old slice")
                return
            mv = mv.at(Phase.VERIFY, now)
        self.moves[mv.device] = mv
        for side in mv.sides_to_verify:
            if not self.facts.known(side):
                self.wait(mv.device, mv.target, mv.phase,
                          f"cannot verify it is free: {side} holders unknown ({self.facts.unknown[side]})")
                return
        for side in mv.sides_to_verify:
            held = self.base.holders(mv.device, side, self.facts)
            if held:
                self.abort(mv, f"taken by {describe_all(held)} while withdrawn; back to {side}", back_to=side)
                return
        self.finish(mv)

    def _timeout_reason(self, mv: Move) -> str:
        t = f"{move_deadline(mv, self.cfg) - mv.started_at:g} s"
        if mv.phase is Phase.NODE_STATUS:
            shown = self.obs.node_allocatable
            return (f"the Node's allocatable still shows {'an unknown count' if shown is None else shown} "
                    f"(> {self.expected_legacy}) after {t}: is the kubelet posting node status? Retried in "
                    f"{self.cfg.cooldown_s:g} s")
        if mv.phase is Phase.SLICE:
            return f"the ResourceSlice without it was not confirmed published within {t}; retried later"
        side = next((s for s in mv.sides_to_verify if not self.facts.known(s)), mv.source)
        why = self.facts.unknown.get(side, "unknown")
        return f"its {side} holders could not be verified within {t} ({why}); retried later"


def move_deadline(mv: Move, cfg: LedgerConfig) -> float:
    """When a move aborts (`move_timeout_s`). A move to legacy also waits `scheduler_grace_s` on purpose, which can be
    longer than the timeout (`--split-grace auto` holds 605 s before 1.35): the grace does not count against it, else
    every such move would abort in its grace and the device never reach the device plugin."""
    grace = cfg.scheduler_grace_s if mv.target is Side.LEGACY else 0.0
    return mv.started_at + cfg.move_timeout_s + grace


def reconcile(ledger: Ledger, target: SplitTarget | SplitError, facts: Facts, obs: Observations,
              cfg: LedgerConfig = LedgerConfig()) -> Decision:
    """One evaluation (see the module docstring). `target` is the parsed request, or the error parsing it raised."""
    ledger = ledger.expired(obs.now).seen_in(facts)
    refusal = ""
    want: frozenset[DeviceID] | None = None
    if isinstance(target, SplitError):
        refusal = str(target)
    else:
        try:
            want = desired_dra(ledger, target, facts)
        except SplitError as err:
            refusal = str(err)
    p = _Pass(ledger, facts, obs, cfg)

    def wanted_side(uuid: DeviceID, default: Side) -> Side:
        return default if want is None else (Side.DRA if uuid in want else Side.LEGACY)

    kept = p.keep_for_admission()
    for uuid in sorted(ledger.moves, key=lambda u: p.name(u)):
        mv = ledger.moves[uuid]
        if uuid in kept:
            p.abort(mv, f"{p.admission_reason()}; back to legacy (never offered to DRA)")
            continue
        goal = wanted_side(uuid, mv.target)
        if mv.phase is Phase.RECLAIM:  # a claim's device: the target does not decide where it goes
            p.advance(mv)
            continue
        if goal is not mv.target:
            if mv.source is goal:
                p.abort(mv, "the target changed before the move finished; it was never offered on the other side")
            else:  # unknown source: head for the new goal from the start
                p.moves[uuid] = Move.begin(uuid, mv.source, goal, mv.started_at)
                p.advance(p.moves[uuid])
            continue
        p.advance(mv)
    for gpu in ledger.devices:
        if p.sides[gpu.uuid] is Side.LEGACY and gpu.uuid not in p.moves and facts.known(Side.DRA):
            p.take_back(gpu.uuid)
    if want is not None:
        spare = p.legacy_free() - facts.admitting_gpus() if facts.known(Side.LEGACY) else 0
        for gpu in ledger.devices:
            uuid = gpu.uuid
            if uuid in p.moves or uuid in {e.device for e in p.events}:
                continue
            side = p.sides[uuid]
            goal = wanted_side(uuid, side)
            if side is goal:
                continue
            if uuid in p.cooldown:
                p.wait(uuid, goal, "cooldown", f"its last move timed out; retried in "
                       f"{p.cooldown[uuid] - obs.now:.0f} s")
                continue
            if side is Side.WITHDRAWN:
                p.moves[uuid] = Move.begin(uuid, Side.WITHDRAWN, goal, obs.now)
                p.events.append(MoveEvent(uuid, p.name(uuid), Side.WITHDRAWN, goal, "started",
                                          "withdrawn with no recorded move: both sides are checked"))
                continue
            if not facts.known(side):
                p.wait(uuid, goal, "unknown", f"{p.name(uuid)} stays {side}: its {side} holders are unknown "
                       f"({facts.unknown[side]}); it moves once they can be read")
                continue
            held = ledger.holders(uuid, side, facts)
            if held:
                p.wait(uuid, goal, "held", f"{p.name(uuid)} held by {describe_all(held)}; will move when free")
                continue
            if side is Side.LEGACY and uuid not in obs.unhealthy:
                if spare <= 0:
                    p.wait(uuid, goal, "held", f"{p.name(uuid)} {p.admission_reason()}; will move once admitted")
                    continue
                spare -= 1
            p.start(uuid, side, goal)
    new = Ledger(ledger.devices, p.sides, p.moves, ledger.pending, p.cooldown)
    if refusal:
        state: State = "refused"
    elif new.moves or any(new.sides[u] is not wanted_side(u, new.sides[u]) for u in new.sides):
        state = "converging"
    else:
        state = "converged"
    return Decision(new, state, None if want is None else len(want), tuple(p.events), tuple(p.waiting), refusal)


# ---- guards ----------------------------------------------------------------------------------------------------

def guard_allocate(ledger: Ledger, ids: Iterable[str], now: float,
                   cfg: LedgerConfig = LedgerConfig(), *, who: str = "a device-plugin Allocate"
                   ) -> tuple[Ledger, list[Refusal], list[MoveEvent]]:
    """May the device plugin hand out `ids`? All or nothing: with any refusal the ledger is unchanged.

    The common case is one set lookup in the ledger's per-side snapshot (`Ledger.by_side`): every device on the
    legacy side, so nothing is refused and no move is aborted, and only the answer is recorded. Anything else takes
    the per-device rules (`allocate_per_device`), which give the same answer in the common case too (the property
    tests check it after every kind of ledger change)."""
    wanted = [DeviceID(i) for i in ids]
    if ledger.by_side[Side.LEGACY].issuperset(wanted):
        return ledger.with_pending(_allocate_recorded(ledger.pending, wanted, now, cfg, who)), [], []
    return allocate_per_device(ledger, wanted, now, cfg, who=who)


def allocate_per_device(ledger: Ledger, ids: Iterable[str], now: float,
                        cfg: LedgerConfig = LedgerConfig(), *, who: str = "a device-plugin Allocate"
                        ) -> tuple[Ledger, list[Refusal], list[MoveEvent]]:
    """`guard_allocate`'s rules, device by device: only legacy-side devices may be allocated, and a device whose move
    away from legacy has not reached DRA is taken back (the Allocate wins, the move aborts)."""
    refusals: list[Refusal] = []
    grabs: list[Move] = []
    wanted = [DeviceID(i) for i in ids]
    for uuid in dict.fromkeys(wanted):  # each device once (the device plugin refuses repeated IDs before this)
        side = ledger.sides.get(uuid)
        mv = ledger.moves.get(uuid)
        if side is Side.LEGACY:
            continue
        if side is Side.WITHDRAWN and mv is not None and mv.source is Side.LEGACY and mv.phase is not Phase.RECLAIM:
            grabs.append(mv)  # the kubelet chose it before the withdrawal reached it; never offered to DRA
            continue
        if side is None:
            refusals.append(Refusal(uuid, uuid, None, f"device {uuid} is not a GPU of this node; device-plugin "
                                                       "Allocate refused"))
        else:
            name = ledger.name_of(uuid)
            refusals.append(Refusal(uuid, name, side, f"device {name} ({uuid}) is on the {side} side of the "
                                                      f"ownership ledger, not legacy; device-plugin Allocate refused"))
    if refusals:
        return ledger, refusals, []
    sides = dict(ledger.sides)
    moves = dict(ledger.moves)
    events = []
    for mv in grabs:
        sides[mv.device] = Side.LEGACY
        del moves[mv.device]
        events.append(MoveEvent(mv.device, ledger.name_of(mv.device), mv.source, mv.target, "aborted",
                                f"taken by {who} before the kubelet saw the withdrawal"))
    pending = _allocate_recorded(ledger.pending, wanted, now, cfg, who)
    return Ledger(ledger.devices, sides, moves, pending, ledger.cooldown), [], events


def _allocate_recorded(pending: tuple[Pending, ...], wanted: Sequence[DeviceID], now: float, cfg: LedgerConfig,
                       who: str) -> tuple[Pending, ...]:
    """The ledger's own holders once an Allocate of `wanted` is answered (expired ones dropped). One answered
    Allocate per device is enough: the kubelet hands a device to one container at a time, so a newer answer replaces
    an older one (and the table stays as small as the node)."""
    holder = _allocate_holder(who)
    expires = now + cfg.pending_allocate_s
    kept = [p for p in pending if p.expires > now and not (p.holder.kind is HolderKind.ALLOCATE and p.device in wanted)]
    return (*kept, *[Pending(u, holder, expires) for u in wanted])


@functools.lru_cache(maxsize=16)
def _allocate_holder(who: str) -> Holder:
    """One `Holder` value per holder text (the split controller stamps it to the second)."""
    return Holder(HolderKind.ALLOCATE, who)


def guard_prepare(ledger: Ledger, ids: Iterable[str], claim: str, uid: str, legacy_facts: Callable[[], Facts],
                  now: float, cfg: LedgerConfig = LedgerConfig()
                  ) -> tuple[Ledger, list[Refusal], list[MoveEvent]]:
    """May NodePrepareResources prepare `ids` for `claim` ("ns/name", UID `uid`)? All or nothing per claim.

    `legacy_facts` is called (at most once) only when a device must be taken back from the legacy side."""
    refusals: list[Refusal] = []
    changes: dict[DeviceID, MoveEvent] = {}
    facts: Facts | None = None
    wanted = [DeviceID(i) for i in ids]
    for uuid in wanted:
        side = ledger.sides.get(uuid)
        mv = ledger.moves.get(uuid)
        name = ledger.name_of(uuid)
        if side is Side.DRA:
            continue
        if side is None:
            refusals.append(Refusal(uuid, uuid, None, f"device {uuid} is not a GPU of this node; refusing to "
                                                       f"prepare it for ResourceClaim {claim}"))
            continue
        if side is Side.WITHDRAWN and mv is not None and mv.source is Side.DRA:
            changes[uuid] = MoveEvent(uuid, name, Side.DRA, Side.LEGACY, "aborted",
                                      f"ResourceClaim {claim} was allocated it before the scheduler saw the "
                                      "withdrawal; it stays on DRA")
            continue
        if facts is None:
            facts = legacy_facts()
        if not facts.known(Side.LEGACY):
            refusals.append(Refusal(uuid, name, side, f"device {name} ({uuid}) is on the {side} side and cannot be "
                                    f"taken back for ResourceClaim {claim}: its device-plugin holders are unknown "
                                    f"({facts.unknown[Side.LEGACY]}); retried"))
            continue
        held = ledger.holders(uuid, Side.LEGACY, facts)
        if held:
            refusals.append(Refusal(uuid, name, Side.LEGACY, f"device {name} ({uuid}) is held on the legacy side by "
                                    f"{describe_all(held)}; ResourceClaim {claim} is prepared once it is free: "
                                    f"delete that pod to free {name} now, or delete this pod so the scheduler picks "
                                    "another GPU", held))
            continue
        source = mv.source if mv is not None else side
        changes[uuid] = MoveEvent(uuid, name, source if source is not Side.WITHDRAWN else Side.LEGACY, Side.DRA,
                                  "reclaimed", f"free on the device-plugin side; taken back for ResourceClaim {claim}")
    if refusals:
        return ledger, refusals, []
    sides = dict(ledger.sides)
    moves = dict(ledger.moves)
    for uuid in changes:
        sides[uuid] = Side.DRA
        moves.pop(uuid, None)
    holder = Holder(HolderKind.PREPARING, f"claim {claim}")
    kept = tuple(p for p in ledger.expired(now).pending if not (p.holder.kind is HolderKind.PREPARING and p.token == uid))
    pending = kept + tuple(Pending(u, holder, now + cfg.pending_prepare_s, uid) for u in wanted)
    return Ledger(ledger.devices, sides, moves, pending, ledger.cooldown), [], list(changes.values())


__all__ = [
    "Decision",
    "Ledger",
    "LedgerConfig",
    "MoveEvent",
    "Observations",
    "Pending",
    "Refusal",
    "State",
    "Waiting",
    "allocate_per_device",
    "desired_dra",
    "guard_allocate",
    "guard_prepare",
    "reconcile",
    "stuck_reason",
]
