"""The three-step device move: withdraw, wait out the grace, verify, then offer — or abort on a grab."""

from __future__ import annotations

from bridge.inventory import devices_from_spec
from bridge.ledger import Ownership, Refusal
from bridge.ledger.moves import Move, begin_move, step_move

GPUS = devices_from_spec("2xL4", "node-1")
A, B = GPUS[0].uuid, GPUS[1].uuid


def test_a_free_device_is_withdrawn_then_offered_after_the_grace() -> None:
    own, move = begin_move(Ownership.all_legacy(GPUS), A, "dra", now=100.0, holders={})  # type: ignore[misc]
    assert own.side_of(A) == "withdrawn" and own.check_allocate([A]) and own.check_prepare([A])
    same_own, same = step_move(own, move, now=104.9, grace_s=5.0, holders={})
    assert same == move and same_own.side_of(A) == "withdrawn"  # still in the grace
    own, move = step_move(own, move, now=105.0, grace_s=5.0, holders={})
    assert move.phase == "offered" and own.side_of(A) == "dra" and own.side_of(B) == "legacy"


def test_a_grab_during_the_grace_aborts_and_returns_the_device_naming_the_holder() -> None:
    own, move = begin_move(Ownership.all_legacy(GPUS), A, "dra", now=0.0, holders={})  # type: ignore[misc]
    own, move = step_move(own, move, now=10.0, grace_s=5.0, holders={A: "pod ns/late container c"})
    assert move.phase == "aborted" and own.side_of(A) == "legacy"
    assert "pod ns/late container c" in move.reason and "gpu-0" in move.reason


def test_moves_that_may_not_start_are_refused() -> None:
    own = Ownership.all_legacy(GPUS)
    busy = begin_move(own, A, "dra", now=0.0, holders={A: "pod ns/p container c"})
    assert isinstance(busy, Refusal) and "pod ns/p" in busy.message
    assert isinstance(begin_move(own, A, "legacy", now=0.0, holders={}), Refusal)
    assert isinstance(begin_move(own, "GPU-nope", "dra", now=0.0, holders={}), Refusal)
    moving, _ = begin_move(own, A, "dra", now=0.0, holders={})  # type: ignore[misc]
    again = begin_move(moving, A, "dra", now=1.0, holders={})
    assert isinstance(again, Refusal) and "already being moved" in again.message


def test_a_finished_move_does_not_change_again() -> None:
    own, move = begin_move(Ownership.all_legacy(GPUS), B, "dra", now=0.0, holders={})  # type: ignore[misc]
    own, move = step_move(own, move, now=9.0, grace_s=1.0, holders={})
    assert step_move(own, move, now=99.0, grace_s=1.0, holders={B: "claim x/y"}) == (own, move)
    assert isinstance(move, Move) and move.done
