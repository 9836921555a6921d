"""The ownership ledger's decisions (pure): which devices move, when a move is done, what the guards allow."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bridge.inventory import DeviceID, devices_from_spec
from bridge.inventory.simulated_yaml import devices_from_document
from bridge.ledger import (
    Facts,
    Holder,
    HolderKind,
    Ledger,
    LedgerConfig,
    Observations,
    Phase,
    Side,
    choose_dra,
    device_name,
    guard_allocate,
    guard_prepare,
    parse_split,
    reconcile,
)

GPUS = devices_from_spec("8xH100-80GB", "node-1")  # NUMA 0: gpu-0..3, NUMA 1: gpu-4..7, full NVLink mesh
U = [g.uuid for g in GPUS]
CFG = LedgerConfig(scheduler_grace_s=5, settle_s=1, move_timeout_s=60, cooldown_s=30)
FREE = Facts()


def names(ids) -> list[str]:  # type: ignore[no-untyped-def]
    by = {g.uuid: device_name(g) for g in GPUS}
    return sorted((by[i] for i in ids), key=lambda n: int(n.split("-")[1]))


def sides(led: Ledger) -> dict[str, str]:
    return {device_name(g): str(led.sides[g.uuid]) for g in GPUS}


def held(i: int, kind: HolderKind = HolderKind.CONTAINER, who: str = "pod ml/train-7 container main") -> Facts:
    return Facts.build([(U[i], Holder(kind, who))])


def obs(now: float, alloc: int | None = None, at: float = -100.0, published: list[int] | None = None) -> Observations:
    return Observations(now=now, node_allocatable=alloc, node_changed_at=at if alloc is not None else None,
                        published_dra=None if published is None else frozenset(U[i] for i in published))


def settle(led: Ledger, target: str, facts: Facts = FREE, *, start: float = 0.0) -> Ledger:
    """Drive moves to the end as a well-behaved kubelet and publisher would (node status and slice follow)."""
    now = start
    for _ in range(20):
        legacy = led.legacy_offered()
        published = [i for i, g in enumerate(GPUS) if led.sides[g.uuid] is Side.DRA]
        d = reconcile(led, parse_split(target), facts, obs(now, legacy, now - 2, published), CFG)
        led = d.ledger
        if d.state == "converged":
            return led
        now += 6
    raise AssertionError(f"did not converge: {sides(led)}")


# ---- choice -------------------------------------------------------------------------------------------------------

def test_a_count_on_an_idle_node_takes_the_highest_indexes_of_one_numa_node() -> None:
    assert names(choose_dra(GPUS, 2, on_dra=())) == ["gpu-6", "gpu-7"]
    assert names(choose_dra(GPUS, 4, on_dra=())) == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]
    assert names(choose_dra(GPUS, 6, on_dra=())) == ["gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7"]


def test_busy_devices_are_avoided_while_a_free_one_can_take_their_place() -> None:
    assert names(choose_dra(GPUS, 2, on_dra=(), busy={U[7]})) == ["gpu-5", "gpu-6"]
    everything_busy = set(U)
    assert names(choose_dra(GPUS, 1, on_dra=(), busy=everything_busy)) == ["gpu-7"]


def test_devices_already_on_dra_stay_and_only_the_difference_moves() -> None:
    assert names(choose_dra(GPUS, 2, on_dra={U[1], U[2]})) == ["gpu-1", "gpu-2"]
    # shrinking releases the free, least attached, lowest devices first: the NUMA-0 pair goes
    assert names(choose_dra(GPUS, 4, on_dra={U[2], U[3], U[4], U[5], U[6], U[7]})) == ["gpu-4", "gpu-5", "gpu-6",
                                                                                       "gpu-7"]
    assert names(choose_dra(GPUS, 1, on_dra={U[6], U[7]}, busy={U[6]})) == ["gpu-6"]


def test_growing_joins_the_numa_island_of_the_devices_already_there() -> None:
    assert names(choose_dra(GPUS, 3, on_dra={U[1]})) == ["gpu-1", "gpu-2", "gpu-3"]


def test_a_move_in_flight_is_cancelled_before_a_settled_device_moves() -> None:
    assert names(choose_dra(GPUS, 1, on_dra={U[3], U[7]}, in_flight={U[3]})) == ["gpu-7"]


# Two NVLink quads (gpu-0..3 and gpu-4..7) on one NUMA node: only the islands tell the groups apart.
QUADS = devices_from_document({"nvlink": "none", "gpus": [
    {"model": "H100-80GB", "numa": 0, "nvlinkPeers": {j: 18 for j in range(4 * (i // 4), 4 * (i // 4) + 4) if j != i}}
    for i in range(8)]}, "node-q")
Q = [g.uuid for g in QUADS]


def qnames(ids) -> list[int]:  # type: ignore[no-untyped-def]
    return sorted(Q.index(i) for i in ids)


def test_the_devices_that_join_come_from_the_one_island_that_holds_them_all() -> None:
    # gpu-4 and gpu-5 are held: island 1 has 2 free, island 0 has 4. Highest index first alone would take
    # gpu-7, gpu-6, then two of island 0 (a pod asking for the 4 would span both islands).
    assert qnames(choose_dra(QUADS, 4, on_dra=(), busy={Q[4], Q[5]})) == [0, 1, 2, 3]


def test_the_island_holding_the_free_dra_devices_is_grown_before_a_tighter_one() -> None:
    # gpu-3 is on DRA and free: a pod asking for 3 gets island 0 (3 free there) rather than island 1's 2.
    assert qnames(choose_dra(QUADS, 3, on_dra={Q[3]}, busy={Q[4], Q[5]})) == [1, 2, 3]


def test_between_equal_islands_the_highest_numbered_joins_and_the_lowest_leaves() -> None:
    assert qnames(choose_dra(QUADS, 4, on_dra=())) == [4, 5, 6, 7]
    assert qnames(choose_dra(QUADS, 4, on_dra=set(Q))) == [4, 5, 6, 7]


def test_the_devices_that_leave_come_from_the_tightest_island() -> None:
    # All on DRA; gpu-4 and gpu-5 are held there. Two must leave: island 1's two free ones go (island 0 stays whole);
    # least attached, lowest index first alone would take gpu-0 and gpu-1.
    assert qnames(choose_dra(QUADS, 6, on_dra=set(Q), busy={Q[4], Q[5]})) == [0, 1, 2, 3, 4, 5]


def test_when_no_island_holds_them_all_affinity_and_index_decide_as_before() -> None:
    assert qnames(choose_dra(QUADS, 6, on_dra=())) == [2, 3, 4, 5, 6, 7]
    assert qnames(choose_dra(QUADS, 3, on_dra=(), busy={Q[0], Q[1], Q[4], Q[5]})) == [3, 6, 7]


# ---- reconcile: legacy -> dra -------------------------------------------------------------------------------------

def test_legacy_to_dra_withdraws_at_once_and_finishes_only_when_the_node_shows_the_smaller_count() -> None:
    d = reconcile(Ledger.all_legacy(GPUS), parse_split("2"), FREE, obs(0, alloc=8), CFG)
    assert [e.describe() for e in d.events] == ["gpu-6 withdrawn, moving legacy->dra",
                                                "gpu-7 withdrawn, moving legacy->dra"]
    assert d.state == "converging" and d.ledger.legacy_offered() == 6
    d = reconcile(d.ledger, parse_split("2"), FREE, obs(30, alloc=8), CFG)  # the kubelet has not posted yet
    assert d.ledger.on(Side.DRA) == () and "it shows 8" in d.waiting[0].reason
    d = reconcile(d.ledger, parse_split("2"), FREE, obs(30.5, alloc=6, at=30.0), CFG)  # posted, scheduler lag
    assert d.ledger.on(Side.DRA) == ()
    d = reconcile(d.ledger, parse_split("2"), FREE, obs(31.5, alloc=6, at=30.0), CFG)
    assert d.state == "converged" and [device_name(g) for g in d.ledger.on(Side.DRA)] == ["gpu-6", "gpu-7"]
    assert {e.kind for e in d.events} == {"finished"}


def test_an_unknown_node_status_never_finishes_a_move_and_the_timeout_aborts_it() -> None:
    d = reconcile(Ledger.all_legacy(GPUS), parse_split("1"), FREE, obs(0), CFG)
    d = reconcile(d.ledger, parse_split("1"), FREE, obs(59), CFG)
    assert d.ledger.side_of(U[7]) is Side.WITHDRAWN
    d = reconcile(d.ledger, parse_split("1"), FREE, obs(60, alloc=8), CFG)
    [abort] = d.events
    assert abort.kind == "aborted" and "still shows 8" in abort.reason and "node status" in abort.reason
    assert d.ledger.side_of(U[7]) is Side.LEGACY and U[7] in d.ledger.cooldown
    d = reconcile(d.ledger, parse_split("1"), FREE, obs(61, alloc=8), CFG)
    assert d.waiting[0].phase == "cooldown" and d.ledger.side_of(U[7]) is Side.LEGACY
    d = reconcile(d.ledger, parse_split("1"), FREE, obs(91, alloc=8), CFG)
    assert d.ledger.side_of(U[7]) is Side.WITHDRAWN  # tried again after the cooldown


def test_a_device_taken_while_withdrawn_aborts_the_move_back_to_its_side() -> None:
    d = reconcile(Ledger.all_legacy(GPUS), parse_split("1"), FREE, obs(0, alloc=8), CFG)
    d = reconcile(d.ledger, parse_split("1"), held(7), obs(5, alloc=7, at=2), CFG)
    [abort] = d.events
    assert abort.kind == "aborted" and "taken by pod ml/train-7 container main (legacy container)" in abort.reason
    assert d.ledger.side_of(U[7]) is Side.LEGACY
    d = reconcile(d.ledger, parse_split("1"), held(7), obs(6, alloc=7, at=2), CFG)
    assert d.ledger.side_of(U[6]) is Side.WITHDRAWN  # another free device takes its place


# ---- reconcile: dra -> legacy -------------------------------------------------------------------------------------

def test_dra_to_legacy_waits_for_the_slice_without_it_and_the_scheduler_grace() -> None:
    led = settle(Ledger.all_legacy(GPUS), "2")
    d = reconcile(led, parse_split("1"), FREE, obs(100, 6, published=[6, 7]), CFG)
    assert [e.describe() for e in d.events] == ["gpu-6 withdrawn, moving dra->legacy"]
    d = reconcile(d.ledger, parse_split("1"), FREE, obs(101, 6, published=[6, 7]), CFG)
    assert d.waiting[0].phase == Phase.SLICE
    d = reconcile(d.ledger, parse_split("1"), FREE, obs(102, 6, published=[7]), CFG)
    assert d.waiting[0].phase == Phase.SCHEDULER and d.ledger.side_of(U[6]) is Side.WITHDRAWN
    d = reconcile(d.ledger, parse_split("1"), FREE, obs(107, 6, published=[7]), CFG)
    assert d.state == "converged" and d.ledger.side_of(U[6]) is Side.LEGACY


def test_a_claim_allocated_during_the_grace_keeps_the_device_on_dra() -> None:
    led = settle(Ledger.all_legacy(GPUS), "1")
    d = reconcile(led, parse_split("0"), FREE, obs(100, 7, published=[7]), CFG)
    d = reconcile(d.ledger, parse_split("0"), FREE, obs(101, 7, published=[]), CFG)
    allocated = held(7, HolderKind.ALLOCATED, "claim ml/gpu (pod ml/infer-0)")
    d = reconcile(d.ledger, parse_split("0"), allocated, obs(106, 7, published=[]), CFG)
    assert d.ledger.side_of(U[7]) is Side.DRA and d.events[0].kind == "aborted"
    d = reconcile(d.ledger, parse_split("0"), allocated, obs(107, 7, published=[7]), CFG)
    assert d.waiting[0].reason == ("gpu-7 held by claim ml/gpu (pod ml/infer-0) (DRA claim allocated, not prepared "
                                   "yet); will move when free")


def test_a_scheduler_grace_longer_than_the_move_timeout_is_waited_out_not_aborted() -> None:
    # `--split-grace auto` holds 605 s (VolumeBinding's 600 s PreBind) before 1.35 and until /version answers, with
    # the default 60 s move timeout: the grace is a wait the ledger chose, not a stuck move.
    cfg = replace(CFG, scheduler_grace_s=605)
    led = settle(Ledger.all_legacy(GPUS), "1")
    d = reconcile(led, parse_split("0"), FREE, obs(100, 7, published=[7]), cfg)
    d = reconcile(d.ledger, parse_split("0"), FREE, obs(101, 7, published=[]), cfg)
    for now in (161, 400, 705):
        d = reconcile(d.ledger, parse_split("0"), FREE, obs(now, 7, published=[]), cfg)
        assert d.events == () and d.waiting[0].phase == Phase.SCHEDULER, now
    d = reconcile(d.ledger, parse_split("0"), FREE, obs(706, 7, published=[]), cfg)
    assert d.state == "converged" and d.ledger.side_of(U[7]) is Side.LEGACY


def test_a_move_stuck_after_its_scheduler_grace_still_times_out() -> None:
    cfg = replace(CFG, scheduler_grace_s=605)
    unknown = Facts(unknown={Side.DRA: "the watch on the pods bound to node node-1 is down"})
    led = settle(Ledger.all_legacy(GPUS), "1")
    d = reconcile(led, parse_split("0"), FREE, obs(100, 7, published=[7]), cfg)
    d = reconcile(d.ledger, parse_split("0"), unknown, obs(101, 7, published=[]), cfg)
    d = reconcile(d.ledger, parse_split("0"), unknown, obs(706, 7, published=[]), cfg)
    assert d.waiting[0].phase == Phase.VERIFY
    d = reconcile(d.ledger, parse_split("0"), unknown, obs(764, 7, published=[]), cfg)
    assert d.waiting[0].phase == Phase.VERIFY  # 60 s of move timeout after the grace
    d = reconcile(d.ledger, parse_split("0"), unknown, obs(765, 7, published=[]), cfg)
    [abort] = d.events
    assert abort.kind == "aborted" and "could not be verified" in abort.reason and d.ledger.side_of(U[7]) is Side.DRA


# ---- reconcile: busy devices, unknown holders, target changes -----------------------------------------------------

def test_free_devices_move_now_and_busy_ones_wait_with_their_holder_named() -> None:
    facts = Facts.build([(U[i], Holder(HolderKind.CONTAINER, f"pod ml/p{i} container c")) for i in (0, 1, 2)])
    d = reconcile(Ledger.all_legacy(GPUS), parse_split("all"), facts, obs(0, 8), CFG)
    assert names(u for u, m in d.ledger.moves.items()) == ["gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7"]
    assert [w.reason for w in d.waiting] == [f"gpu-{i} held by pod ml/p{i} container c (legacy container); will move "
                                             "when free" for i in (0, 1, 2)]


def test_unknown_holders_mean_do_not_move() -> None:
    unknown = Facts(unknown={Side.LEGACY: "no PodResources socket at /var/lib/kubelet/pod-resources/kubelet.sock"})
    d = reconcile(Ledger.all_legacy(GPUS), parse_split("2"), unknown, obs(0, 8), CFG)
    assert d.events == () and d.ledger.moves == {}
    assert "holders are unknown (no PodResources socket" in d.waiting[0].reason


def test_changing_the_target_before_a_move_finishes_returns_the_device_at_once() -> None:
    d = reconcile(Ledger.all_legacy(GPUS), parse_split("1"), FREE, obs(0, 8), CFG)
    d = reconcile(d.ledger, parse_split("0"), FREE, obs(1, 8), CFG)
    assert d.ledger.side_of(U[7]) is Side.LEGACY and d.state == "converged"
    assert "the target changed" in d.events[0].reason


def test_a_target_that_does_not_fit_keeps_the_current_split() -> None:
    led = settle(Ledger.all_legacy(GPUS), "2")
    d = reconcile(led, parse_split("9"), FREE, obs(200, 6, published=[6, 7]), CFG)
    assert d.state == "refused" and d.wanted is None and "asks for 9 devices but this node has 8" in d.refusal
    assert d.ledger.sides == led.sides


def test_a_device_withdrawn_without_a_recorded_move_is_checked_on_both_sides() -> None:
    led = Ledger.adopt(GPUS, {U[7]: Side.WITHDRAWN})
    claim = held(7, HolderKind.PREPARED, "claim ml/c")
    d = reconcile(led, parse_split("0"), claim, obs(0, 7, published=[]), CFG)
    assert d.events[0].kind == "started" and d.ledger.moves[U[7]].sides_to_verify == (Side.LEGACY, Side.DRA)
    for now in (1, 7):
        d = reconcile(d.ledger, parse_split("0"), claim, obs(now, 7, published=[]), CFG)
    assert d.ledger.side_of(U[7]) is Side.DRA  # a DRA claim holds it: back where the holder got it


def test_a_stored_move_resumes_from_its_first_phase() -> None:
    led = Ledger.adopt(GPUS, {**{u: Side.LEGACY for u in U}, U[7]: Side.WITHDRAWN}, {U[7]: (Side.LEGACY, Side.DRA)},
                       now=50)
    assert led.moves[U[7]].phase is Phase.NODE_STATUS and led.moves[U[7]].started_at == 50


# ---- guards ---------------------------------------------------------------------------------------------------------

def test_allocate_refuses_devices_of_the_other_side_and_changes_nothing() -> None:
    led = settle(Ledger.all_legacy(GPUS), "1")
    new, refusals, _ = guard_allocate(led, [U[0], U[7]], 0.0, CFG)
    assert new is led and [r.name for r in refusals] == ["gpu-7"]
    assert "is on the dra side of the ownership ledger, not legacy; device-plugin Allocate refused" in \
        refusals[0].message
    assert guard_allocate(led, ["GPU-nope"], 0.0, CFG)[1][0].owner is None


def test_an_answered_allocate_holds_the_device_until_podresources_can_show_it() -> None:
    new, refusals, _ = guard_allocate(Ledger.all_legacy(GPUS), [U[7]], 0.0, CFG)
    assert refusals == []
    d = reconcile(new, parse_split("1"), FREE, obs(1, 8), CFG)
    assert d.ledger.side_of(U[7]) is Side.LEGACY and d.ledger.side_of(U[6]) is Side.WITHDRAWN
    d = reconcile(new, parse_split("gpu-7"), FREE, obs(1, 8), CFG)
    assert "device-plugin Allocate not yet visible in PodResources" in d.waiting[0].reason
    d = reconcile(new, parse_split("gpu-7"), FREE, obs(31, 8), CFG)  # expired
    assert d.ledger.side_of(U[7]) is Side.WITHDRAWN


def test_an_allocate_racing_a_withdrawal_wins_and_aborts_the_move() -> None:
    d = reconcile(Ledger.all_legacy(GPUS), parse_split("1"), FREE, obs(0, 8), CFG)
    new, refusals, events = guard_allocate(d.ledger, [U[7]], 0.2, CFG)
    assert refusals == [] and new.side_of(U[7]) is Side.LEGACY and U[7] not in new.moves
    assert events[0].kind == "aborted" and "before the kubelet saw the withdrawal" in events[0].reason


def test_prepare_takes_a_free_device_back_from_the_device_plugin() -> None:
    new, refusals, events = guard_prepare(Ledger.all_legacy(GPUS), [U[3]], "ml/c", "uid-1", lambda: FREE, 0.0, CFG)
    assert refusals == [] and new.side_of(U[3]) is Side.DRA
    assert events[0].kind == "reclaimed" and "taken back for ResourceClaim ml/c" in events[0].reason
    # the prepare in progress is a DRA holder until it ends
    d = reconcile(new, parse_split("0"), FREE, obs(1, 7, published=[3]), CFG)
    assert "NodePrepareResources in progress" in d.waiting[0].reason
    assert reconcile(new.prepare_done("uid-1"), parse_split("0"), FREE, obs(1, 7, published=[3]), CFG).events


def test_prepare_for_a_device_held_by_a_legacy_pod_is_refused_naming_the_holder() -> None:
    new, refusals, _ = guard_prepare(Ledger.all_legacy(GPUS), [U[3]], "ml/c", "uid-1",
                                     lambda: held(3, HolderKind.INIT_CONTAINER, "pod ml/train-7 container init"), 0.0, CFG)
    assert new.side_of(U[3]) is Side.LEGACY
    assert refusals[0].message == (f"device gpu-3 ({U[3]}) is held on the legacy side by pod ml/train-7 container "
                                   "init (legacy init container); ResourceClaim ml/c is prepared once it is free: "
                                   "delete that pod to free gpu-3 now, or delete this pod so the scheduler picks "
                                   "another GPU")


def test_prepare_with_unknown_legacy_holders_is_refused_and_retried() -> None:
    unknown = Facts(unknown={Side.LEGACY: "the kubelet is not running"})
    _, refusals, _ = guard_prepare(Ledger.all_legacy(GPUS), [U[3]], "ml/c", "u", lambda: unknown, 0.0, CFG)
    assert "device-plugin holders are unknown (the kubelet is not running); retried" in refusals[0].message


def test_prepare_for_a_device_moving_to_legacy_keeps_it_on_dra() -> None:
    led = settle(Ledger.all_legacy(GPUS), "1")
    d = reconcile(led, parse_split("0"), FREE, obs(100, 7, published=[7]), CFG)
    calls: list[int] = []
    new, refusals, events = guard_prepare(d.ledger, [U[7]], "ml/c", "u", lambda: calls.append(1) or FREE, 100.5, CFG)
    assert refusals == [] and new.side_of(U[7]) is Side.DRA and calls == []
    assert "allocated it before the scheduler saw the withdrawal" in events[0].reason


def test_the_ledger_rejects_sides_that_do_not_match_its_devices() -> None:
    with pytest.raises(ValueError, match="do not match the devices"):
        Ledger(tuple(GPUS), {U[0]: Side.LEGACY})
    led = Ledger.all_legacy(GPUS)
    with pytest.raises(ValueError, match="move of .* is recorded but the device is legacy"):
        replace(led, moves={U[0]: reconcile(led, parse_split("gpu-0"), FREE, obs(0), CFG).ledger.moves[U[0]]})


def test_devices_new_to_the_node_start_legacy_and_vanished_ones_are_dropped() -> None:
    led = Ledger.adopt(GPUS[:7], {U[7]: Side.DRA, U[0]: Side.DRA, DeviceID("GPU-gone"): Side.DRA})
    assert led.side_of(U[0]) is Side.DRA and led.side_of(U[1]) is Side.LEGACY and led.side_of("GPU-gone") is None


# ---- late allocations: a claim allocated a GPU after it left DRA --------------------------------------------------

def late(i: int, *legacy: Holder) -> Facts:
    """A claim allocated on gpu-<i> (the scheduler decided on an older slice), plus legacy holders of that GPU."""
    claim = Holder(HolderKind.ALLOCATED, "claim ml/infer-gpu (pod ml/infer)", "ml/infer", "uid-infer")
    return Facts.build([(U[i], claim), *((U[i], h) for h in legacy)])


def test_a_free_gpu_a_late_allocation_names_is_taken_back_at_once_whatever_the_target() -> None:
    d = reconcile(Ledger.all_legacy(GPUS), parse_split("0"), late(3), obs(0, 8), CFG)
    assert d.ledger.side_of(U[3]) is Side.DRA
    [event] = d.events
    assert (event.kind, event.name, event.target) == ("reclaimed", "gpu-3", Side.DRA)
    assert "allocated to claim ml/infer-gpu (pod ml/infer)" in event.reason


def test_a_held_gpu_a_late_allocation_names_is_withdrawn_until_its_legacy_holder_ends() -> None:
    legacy = Holder(HolderKind.CONTAINER, "pod team/train-1 container main")
    d = reconcile(Ledger.all_legacy(GPUS), parse_split("0"), late(3, legacy), obs(0, 8), CFG)
    assert d.ledger.side_of(U[3]) is Side.WITHDRAWN and d.ledger.moves[U[3]].phase is Phase.RECLAIM
    [w] = d.waiting
    assert w.phase == Phase.RECLAIM and w.blockers == (legacy,) and w.claims[0].pod == "ml/infer"
    assert w.reason == ("gpu-3 was allocated to claim ml/infer-gpu (pod ml/infer) (DRA claim allocated, not prepared "
                        "yet) after it had moved to the device plugin, and is held there by pod team/train-1 container "
                        "main (legacy container): pod ml/infer starts once that holder ends (delete it to free gpu-3 "
                        "now, or delete pod ml/infer so the scheduler picks another GPU); gpu-3 is withdrawn from the "
                        "device plugin meanwhile")
    # No new legacy pod gets it meanwhile, even one the kubelet admitted before it saw the withdrawal.
    _, refusals, _ = guard_allocate(d.ledger, [U[3]], 1.0, CFG)
    assert refusals and "not legacy" in refusals[0].message
    # Days later the legacy pod ends: the GPU becomes DRA (no timeout in this phase).
    stuck = reconcile(d.ledger, parse_split("0"), late(3, legacy), obs(3 * 86400, 7), CFG)
    assert stuck.ledger.moves[U[3]].phase is Phase.RECLAIM
    done = reconcile(stuck.ledger, parse_split("0"), late(3), obs(3 * 86400 + 5, 7), CFG)
    assert done.ledger.side_of(U[3]) is Side.DRA and not done.ledger.moves
    assert [e.kind for e in done.events] == ["reclaimed"]


def test_a_withdrawn_gpu_goes_back_to_legacy_when_the_claim_that_named_it_goes_away() -> None:
    legacy = Holder(HolderKind.CONTAINER, "pod team/train-1 container main")
    d = reconcile(Ledger.all_legacy(GPUS), parse_split("0"), late(3, legacy), obs(0, 8), CFG)
    back = reconcile(d.ledger, parse_split("0"), held(3, who="pod team/train-1 container main"), obs(10, 7), CFG)
    assert back.ledger.side_of(U[3]) is Side.LEGACY and not back.ledger.moves
    assert [e.kind for e in back.events] == ["aborted"]


def test_a_pod_nominated_here_and_waiting_for_its_allocation_keeps_every_dra_gpu_on_dra() -> None:
    led = settle(Ledger.all_legacy(GPUS), "2")
    incoming = Holder(HolderKind.INCOMING, "pod ml/infer", "ml/infer", "uid-infer")
    facts = Facts.build([(u, incoming) for u in U])
    d = reconcile(led, parse_split("0"), facts, obs(0, 6, published=[6, 7]), CFG)
    assert not d.ledger.moves and {w.phase for w in d.waiting} == {"held"}
    assert all("pod ml/infer (DRA pod nominated to this node, its claim not allocated yet)" in w.reason
               for w in d.waiting)
    # A move that was already under way when the pod was nominated is aborted at its verification.
    moving = reconcile(led, parse_split("0"), FREE, obs(0, 6, published=[6, 7]), CFG).ledger
    assert moving.moves
    graced = reconcile(moving, parse_split("0"), facts, obs(30, 6, published=[]), CFG).ledger  # slice published
    verify = reconcile(graced, parse_split("0"), facts, obs(36, 6, published=[]), CFG)  # after the grace
    assert not verify.ledger.moves and {e.kind for e in verify.events} == {"aborted"}
    assert sides(verify.ledger)["gpu-6"] == "dra" and sides(verify.ledger)["gpu-7"] == "dra"


# ---- reconcile: legacy pods the kubelet has not admitted yet ------------------------------------------------------

def admitting(*pods: tuple[str, int], facts: Facts = FREE) -> Facts:
    """`facts` plus legacy pods placed on this node (name, GPUs asked) that the kubelet has not admitted yet."""
    return replace(facts, admitting=tuple((Holder(HolderKind.ADMITTING, f"pod team/{name}"), n) for name, n in pods))


def test_free_legacy_gpus_a_pod_waiting_for_admission_needs_stay_legacy_and_the_rest_move() -> None:
    busy = Facts.build([(U[i], Holder(HolderKind.CONTAINER, f"pod ml/p{i} container c")) for i in (0, 1, 2)])
    facts = admitting(("train-0", 2), facts=busy)
    d = reconcile(Ledger.all_legacy(GPUS), parse_split("all"), facts, obs(0, 8), CFG)
    assert names(d.ledger.moves) == ["gpu-3", "gpu-4", "gpu-5"]  # 5 free, 2 of them kept for the pod
    kept = [w for w in d.waiting if "team/train-0" in w.reason]
    assert names(w.device for w in kept) == ["gpu-6", "gpu-7"] and {w.phase for w in kept} == {"held"}
    assert kept[0].reason == ("gpu-6 kept on legacy for pod team/train-0 (legacy pod placed on this node, not admitted "
                              "by the kubelet yet): the kubelet admits it with 2 free legacy GPUs and fails a pod that "
                              "finds too few; will move once admitted")
    assert d.ledger.legacy_offered() == 5  # the pod's 2 and the 3 held ones: it is admitted with 2 healthy GPUs
    # Admitted: the kubelet gave it gpu-6 and gpu-7 (its containers hold them), nothing is kept any more.
    now_held = Facts.build([(U[i], Holder(HolderKind.CONTAINER, f"pod ml/p{i} container c")) for i in (0, 1, 2)]
                           + [(U[i], Holder(HolderKind.CONTAINER, "pod team/train-0 container main")) for i in (6, 7)])
    d = reconcile(d.ledger, parse_split("all"), now_held, obs(1, 5, at=0.5), CFG)
    assert not any("kept on legacy" in w.reason for w in d.waiting)
    assert {w.phase for w in d.waiting if w.device in (U[6], U[7])} == {"held"}


def test_a_pod_needing_no_more_than_the_free_gpus_left_over_changes_nothing() -> None:
    d = reconcile(Ledger.all_legacy(GPUS), parse_split("2"), admitting(("infer", 1)), obs(0, 8), CFG)
    assert names(d.ledger.moves) == ["gpu-6", "gpu-7"] and d.waiting == ()


def test_a_pod_placed_on_the_old_count_aborts_the_newest_moves_to_dra_not_offered_there_yet() -> None:
    d = reconcile(Ledger.all_legacy(GPUS), parse_split("6"), FREE, obs(0, 8), CFG)
    d = reconcile(d.ledger, parse_split("6"), FREE, obs(0.2, 8), CFG)
    assert len(d.ledger.moves) == 6 and d.ledger.legacy_offered() == 2
    # The scheduler bound a pod asking for 3 before it saw the smaller allocatable: 2 are free, one move goes back.
    d = reconcile(d.ledger, parse_split("6"), admitting(("late", 3)), obs(1, 8), CFG)
    [back] = [e for e in d.events if e.kind == "aborted"]
    assert back.reason == ("kept on legacy for pod team/late (legacy pod placed on this node, not admitted by the "
                           "kubelet yet): the kubelet admits it with 3 free legacy GPUs and fails a pod that finds too "
                           "few; back to legacy (never offered to DRA)")
    assert d.ledger.side_of(back.device) is Side.LEGACY and d.ledger.legacy_offered() == 3
    assert len(d.ledger.moves) == 5 and not d.ledger.on(Side.DRA)


def test_a_gpu_taken_back_for_a_claim_is_not_given_to_a_pod_waiting_for_admission() -> None:
    claim = Holder(HolderKind.ALLOCATED, "claim ml/c (pod ml/p)", "ml/p", "uid-p")
    facts = admitting(("late", 8), facts=Facts.build([(U[3], claim),
                                                      (U[3], Holder(HolderKind.CONTAINER, "pod team/x container c"))]))
    d = reconcile(Ledger.all_legacy(GPUS), parse_split("0"), facts, obs(0, 8), CFG)
    assert d.ledger.moves[U[3]].phase is Phase.RECLAIM  # the claim's allocation is a fact; the pod's wait is not
    d = reconcile(d.ledger, parse_split("0"), facts, obs(1, 7), CFG)
    assert d.ledger.moves[U[3]].phase is Phase.RECLAIM and not [e for e in d.events if e.kind == "aborted"]


def test_pods_waiting_for_admission_change_nothing_while_the_legacy_side_is_unknown() -> None:
    unknown = admitting(("late", 8), facts=Facts(unknown={Side.LEGACY: "no PodResources socket"}))
    d = reconcile(Ledger.all_legacy(GPUS), parse_split("2"), FREE, obs(0, 8), CFG)
    d = reconcile(d.ledger, parse_split("2"), unknown, obs(1, 8), CFG)
    assert not [e for e in d.events if e.kind == "aborted"] and len(d.ledger.moves) == 2
