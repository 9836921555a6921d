"""The Allocate guard's fast path (one set lookup in `Ledger.by_side`) answers exactly what the per-device rules
(`allocate_per_device`) answer, after every kind of ledger change, and under threads through the split controller.

Why it matters: `guard_allocate` is the device plugin's last line of defence. Its common case was made cheap
(issue 25) by checking a per-side snapshot computed once per ledger value instead of the sides and moves device by
device; a snapshot that lagged a change by one step would let an Allocate through on a device already offered to DRA.
So the snapshot is checked against the slow path after every mutation a node performs (evaluations that start,
advance, finish and abort moves, Allocates that win a withdrawal, prepares that take devices back, expiries, a
restart from the checkpoint), for every set of device IDs an Allocate could ask for, and again with real threads.
"""

from __future__ import annotations

import collections
import itertools
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

import bridge.node.split as split_module
from bridge.inventory import DeviceID, devices_from_spec
from bridge.ledger import (
    Facts,
    Holder,
    HolderKind,
    Ledger,
    LedgerConfig,
    Observations,
    Side,
    SplitError,
    allocate_per_device,
    guard_allocate,
    guard_prepare,
    parse_split,
    reconcile,
)
from bridge.node.split import SplitConfig, SplitController

GPUS = devices_from_spec("4xH100-80GB", "node-s")
U = [g.uuid for g in GPUS]
UNKNOWN = "GPU-not-on-this-node"
CFG = LedgerConfig(scheduler_grace_s=2, settle_s=1, move_timeout_s=30, cooldown_s=10, pending_allocate_s=5,
                   pending_prepare_s=20)
TARGETS = ["0", "1", "2", "all", "gpu-0,gpu-2", "gpu-3", "9", "bogus"]
# Every request an Allocate could make here: one or two devices (duplicates included), known or not.
REQUESTS: list[tuple[str, ...]] = [(u,) for u in [*U, UNKNOWN]] + list(itertools.product([*U, UNKNOWN], repeat=2))


def derived_sides(ledger: Ledger) -> dict[Side, frozenset[DeviceID]]:
    """What the snapshot must say, computed from the sides the slow path reads."""
    return {side: frozenset(u for u, s in ledger.sides.items() if s is side) for side in Side}


def assert_snapshot_answers_like_the_slow_path(ledger: Ledger, now: float) -> None:
    assert dict(ledger.by_side) == derived_sides(ledger)
    for ids in REQUESTS:
        fast = guard_allocate(ledger, ids, now, CFG, who="a test Allocate")
        slow = allocate_per_device(ledger, ids, now, CFG, who="a test Allocate")
        assert fast == slow, f"Allocate {ids} on {dict(ledger.sides)} (moves {dict(ledger.moves)})"


class LedgerChanges(RuleBasedStateMachine):
    """Random ledger mutations, as a node makes them; the snapshot is checked after each one."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.ledger = Ledger.all_legacy(GPUS)
        self.serial = 0

    def facts(self, draw: st.DataObject) -> Facts:
        pairs = []
        for u in U:
            if draw.draw(st.booleans(), label=f"legacy holder of {u}"):
                pairs.append((u, Holder(HolderKind.CONTAINER, f"pod p-{u[-4:]}")))
            if draw.draw(st.booleans(), label=f"dra holder of {u}"):
                pairs.append((u, Holder(HolderKind.PREPARED, f"claim c-{u[-4:]}")))
        unknown = draw.draw(st.sampled_from([{}, {}, {Side.LEGACY: "no PodResources"}, {Side.DRA: "API down"}]))
        return Facts.build(pairs, unknown)

    @rule(split=st.sampled_from(TARGETS), dt=st.sampled_from([0.0, 0.5, 1.5, 3.0, 40.0]), data=st.data())
    def evaluate(self, split: str, dt: float, data: st.DataObject) -> None:
        """An evaluation: starts, advances, finishes or aborts moves depending on facts and observations."""
        self.now += dt
        parsed: object
        try:
            parsed = parse_split(split)
        except SplitError as err:
            parsed = err
        offered = self.ledger.legacy_offered()
        alloc = data.draw(st.sampled_from([None, offered, offered + 1, 0]), label="node allocatable")
        published = data.draw(st.sampled_from(["none", "dra", "empty"]), label="published")
        obs = Observations(now=self.now, node_allocatable=alloc, node_changed_at=self.now - data.draw(
            st.sampled_from([0.0, 2.0]), label="since"), published_dra={
                "none": None, "dra": self.ledger.by_side[Side.DRA], "empty": frozenset()}[published])
        self.ledger = reconcile(self.ledger, parsed, self.facts(data), obs, CFG).ledger  # type: ignore[arg-type]

    @rule(ids=st.sampled_from(REQUESTS))
    def allocate(self, ids: Sequence[str]) -> None:
        """An Allocate through the fast path (it may win a withdrawal from legacy, or be refused)."""
        new, refusals, _ = guard_allocate(self.ledger, ids, self.now, CFG)
        if not refusals:
            self.ledger = new

    @rule(device=st.sampled_from(U), data=st.data())
    def prepare(self, device: DeviceID, data: st.DataObject) -> None:
        """A prepare: fine on DRA, takes a free device back from legacy or from a move, refused when held."""
        self.serial += 1
        uid = f"uid-{self.serial}"
        facts = self.facts(data)
        new, refusals, _ = guard_prepare(self.ledger, [device], f"ns/c{self.serial}", uid, lambda: facts, self.now, CFG)
        if not refusals:
            self.ledger = new if data.draw(st.booleans(), label="still preparing") else new.prepare_done(uid)

    @rule(dt=st.sampled_from([1.0, 10.0]))
    def holders_expire(self, dt: float) -> None:
        self.now += dt
        self.ledger = self.ledger.expired(self.now)

    @rule(data=st.data())
    def podresources_shows_answers(self, data: st.DataObject) -> None:
        self.ledger = self.ledger.seen_in(self.facts(data))

    @precondition(lambda self: bool(self.ledger.sides))
    @rule()
    def daemon_restarts_from_the_checkpoint(self) -> None:
        self.ledger = Ledger.adopt(GPUS, dict(self.ledger.sides), self.ledger.stored_moves(), now=self.now)

    @rule()
    def ledger_copied(self) -> None:
        """Copies made with `dataclasses.replace` recompute the snapshot; `with_pending` shares it."""
        self.ledger = replace(self.ledger, pending=()).with_pending(self.ledger.pending)

    @invariant()
    def snapshot_answers_like_the_slow_path(self) -> None:
        assert_snapshot_answers_like_the_slow_path(self.ledger, self.now)
        for u, side in self.ledger.sides.items():
            mv = self.ledger.moves.get(u)
            SEEN[f"{side}" if mv is None else f"moving {mv.source}->{mv.target}"] += 1


SEEN: collections.Counter[str] = collections.Counter()


def test_after_every_ledger_change_the_snapshot_answers_every_allocate_like_the_per_device_rules() -> None:
    SEEN.clear()
    run_state_machine_as_test(LedgerChanges, settings=settings(
        max_examples=60, stateful_step_count=40, deadline=None, database=None, derandomize=True,
        suppress_health_check=[HealthCheck.too_slow]))
    # Not a vacuous pass: the snapshot was checked with devices on each side and in moves both ways.
    assert all(SEEN[k] for k in ("legacy", "dra", "moving legacy->dra", "moving dra->legacy")), dict(SEEN)


def test_a_ledger_cannot_be_changed_behind_its_snapshot() -> None:
    sides = {u: Side.LEGACY for u in U}
    ledger = Ledger(tuple(GPUS), sides)
    sides[U[0]] = Side.DRA  # the caller's dict, not the ledger's
    assert ledger.sides[U[0]] is Side.LEGACY and U[0] in ledger.by_side[Side.LEGACY]
    with pytest.raises(TypeError):
        ledger.sides[U[0]] = Side.DRA  # type: ignore[index]
    assert guard_allocate(ledger, [U[0]], 0.0, CFG)[1] == []


def test_threads_allocating_while_devices_move_get_the_slow_paths_answer_every_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Allocates from several threads through the split controller (the fast path, under its lock), while another
    thread moves devices back and forth and another takes devices back for claims: every answer the controller gives
    is compared, on the very ledger it was given under the lock, with the per-device rules."""
    mismatches: list[str] = []
    answers = {"allowed": 0, "refused": 0, "grabbed": 0}
    real = split_module.guard_allocate

    def checked(ledger: Ledger, ids: Sequence[str], now: float, cfg: LedgerConfig, *, who: str):  # type: ignore[no-untyped-def]
        fast = real(ledger, ids, now, cfg, who=who)
        slow = allocate_per_device(ledger, ids, now, cfg, who=who)
        if fast != slow:
            mismatches.append(f"{ids} on {dict(ledger.sides)}: fast {fast[1:]} slow {slow[1:]}")
        answers["refused" if fast[1] else "grabbed" if fast[2] else "allowed"] += 1
        return fast

    monkeypatch.setattr(split_module, "guard_allocate", checked)
    fast_cfg = LedgerConfig(scheduler_grace_s=0, settle_s=0, move_timeout_s=5, cooldown_s=0, pending_allocate_s=0.002,
                            pending_prepare_s=0.002)

    class NoHolders:
        def facts(self, *, fresh_claims: bool = False) -> Facts:
            return Facts()

        def legacy_facts(self) -> Facts:
            return Facts()

        def wants_poll(self) -> bool:
            return False

    published: set[str] = set()

    def publish(led: Ledger) -> None:
        published.clear()
        published.update(led.by_side[Side.DRA])

    ctl = SplitController(GPUS, SplitConfig("node-s", ledger=fast_cfg), sources=NoHolders(),
                          published=lambda: frozenset(published), listeners=[publish])
    stop = threading.Event()
    errors: list[BaseException] = []
    finished_moves = 0

    def node(target: str) -> dict[str, object]:
        alloc = ctl.ledger.legacy_offered()
        return {"metadata": {"name": "node-s", "annotations": {"dra-bridge.io/dra-devices": target}},
                "status": {"allocatable": {"nvidia.com/gpu": str(alloc)}}}

    def mover() -> None:
        nonlocal finished_moves
        rng = random.Random(1)
        while not stop.is_set():
            target = rng.choice(["0", "2", "all", "gpu-1", "3"])
            for _ in range(3):
                d = ctl.evaluate(node(target))
                finished_moves += sum(1 for e in d.events if e.kind == "finished")

    def allocator(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            ctl.guard_allocate(list(rng.choice(REQUESTS)))

    def preparer() -> None:
        rng = random.Random(7)
        n = 0
        while not stop.is_set():
            n += 1
            ctl.guard_prepare([rng.choice(U)], f"ns/c{n}", f"uid-{n}")
            ctl.prepare_done(f"uid-{n}")

    def snapshot_reader() -> None:
        while not stop.is_set():
            led = ctl.ledger
            if dict(led.by_side) != derived_sides(led):
                mismatches.append(f"snapshot {dict(led.by_side)} of sides {dict(led.sides)}")

    def guarded(fn, *args):  # type: ignore[no-untyped-def]
        def run() -> None:
            try:
                fn(*args)
            except BaseException as err:  # noqa: BLE001 - reported by the test below
                errors.append(err)
                stop.set()
        return threading.Thread(target=run, daemon=True)

    threads = [guarded(mover), guarded(allocator, 1), guarded(allocator, 2), guarded(preparer),
               guarded(snapshot_reader)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not stop.is_set():
        if answers["allowed"] > 300 and answers["refused"] > 300 and finished_moves > 30:
            break
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(10)
    assert not errors, errors
    assert not mismatches, mismatches[:5]
    # Not a vacuous pass: Allocates were allowed and refused while devices really moved.
    assert answers["allowed"] > 300 and answers["refused"] > 300 and finished_moves > 30, (answers, finished_moves)
