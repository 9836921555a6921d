"""The ownership ledger: one side per device, static splits applied only when safe, refusals that name names."""

from __future__ import annotations

import pytest

from bridge.inventory import devices_from_spec
from bridge.ledger import Ownership, OwnershipError, SplitPlan, SplitRefused, parse_split, plan_static_split
from bridge.ledger.ownership import dra_selection

GPUS = devices_from_spec("8xH100-80GB", "node-1")
U = [g.uuid for g in GPUS]


def names(devs) -> list[str]:  # type: ignore[no-untyped-def]
    return [f"gpu-{g.index}" for g in devs]


def apply(current: Ownership, split: str, legacy: dict | None = None, dra: dict | None = None) -> Ownership:
    plan = plan_static_split(current, parse_split(split), legacy or {}, dra or {})
    assert isinstance(plan, SplitPlan), plan
    return plan.ownership


def test_a_node_that_says_nothing_keeps_every_device_legacy() -> None:
    own = apply(Ownership.all_legacy(GPUS), None)  # type: ignore[arg-type]
    assert names(own.legacy_devices()) == names(GPUS)
    assert own.dra_devices() == () and own.withdrawn_devices() == ()
    assert parse_split("").kind == parse_split("0").kind == parse_split(None).kind == "none"


def test_a_count_takes_the_highest_indexes() -> None:
    own = apply(Ownership.all_legacy(GPUS), "2")
    assert names(own.dra_devices()) == ["gpu-6", "gpu-7"]
    assert names(own.legacy_devices()) == [f"gpu-{i}" for i in range(6)]
    assert own.side_of(U[7]) == "dra" and own.side_of(U[0]) == "legacy"


def test_all_and_explicit_device_lists() -> None:
    assert names(apply(Ownership.all_legacy(GPUS), "all").dra_devices()) == names(GPUS)
    own = apply(Ownership.all_legacy(GPUS), f"gpu-0,{U[3]}")
    assert names(own.dra_devices()) == ["gpu-0", "gpu-3"]


def test_applying_the_same_split_again_moves_nothing() -> None:
    own = apply(Ownership.all_legacy(GPUS), "2")
    plan = plan_static_split(own, parse_split("2"), {U[7]: "pod a/b"}, {U[6]: "claim ns/c"})
    assert isinstance(plan, SplitPlan) and plan.moves == () and plan.ownership == own


def test_moving_a_device_in_use_is_refused_naming_each_busy_device_and_its_holder() -> None:
    current = Ownership.all_legacy(GPUS)
    result = plan_static_split(current, parse_split("3"),
                               {U[6]: "pod team-a/train-0 container main", U[7]: "pod team-b/infer container c",
                                U[0]: "pod x/y container z"}, {})
    assert isinstance(result, SplitRefused)
    assert [(b.name, b.side) for b in result.busy] == [("gpu-6", "legacy"), ("gpu-7", "legacy")]
    assert "gpu-6" in result.message and "pod team-a/train-0 container main" in result.message
    assert "gpu-7" in result.message and "pod team-b/infer container c" in result.message
    assert "gpu-0" not in result.message  # it stays legacy: not a problem
    assert "Nothing was changed" in result.message


def test_shrinking_dra_refuses_while_a_claim_holds_the_device() -> None:
    current = apply(Ownership.all_legacy(GPUS), "2")
    result = plan_static_split(current, parse_split("1"), {}, {U[6]: "claim ml/job-1 (uid 123)"})
    assert isinstance(result, SplitRefused)
    assert "gpu-6" in result.message and "claim ml/job-1" in result.message
    ok = plan_static_split(current, parse_split("1"), {}, {U[7]: "claim ml/job-2"})
    assert isinstance(ok, SplitPlan) and ok.moves == ((U[6], "dra", "legacy"),)


def test_a_withdrawn_device_goes_to_its_target_only_when_neither_side_holds_it() -> None:
    current = Ownership.all_legacy(GPUS).with_sides({U[7]: "withdrawn"})
    assert apply(current, "1").side_of(U[7]) == "dra"
    assert apply(current, "0").side_of(U[7]) == "legacy"
    refused = plan_static_split(current, parse_split("1"), {U[7]: "pod a/b container c"}, {})
    assert isinstance(refused, SplitRefused)


@pytest.mark.parametrize(("text", "needle"), [
    ("two", "neither a count"), ("gpu-1,,gpu-2", "empty item"), ("gpu-1,gpu-1", "listed twice"),
    ("-1", "neither a count"),
])
def test_unparseable_splits_are_rejected_with_examples(text: str, needle: str) -> None:
    with pytest.raises(OwnershipError) as err:
        parse_split(text)
    assert needle in str(err.value) and "'gpu-6,gpu-7'" in str(err.value)


def test_splits_that_do_not_fit_the_node_are_rejected() -> None:
    with pytest.raises(OwnershipError, match="asks for 9 devices but this node has 8"):
        dra_selection(parse_split("9"), GPUS)
    with pytest.raises(OwnershipError, match="unknown device 'gpu-8'"):
        dra_selection(parse_split("gpu-8"), GPUS)


def test_allocate_guard_refuses_dra_side_and_unknown_devices_naming_the_owner() -> None:
    own = apply(Ownership.all_legacy(GPUS), "2")
    assert own.check_allocate([U[0], U[1]]) == []
    refusals = own.check_allocate([U[0], U[7], "GPU-stranger"])
    assert [(r.name, r.owner) for r in refusals] == [("gpu-7", "dra"), ("GPU-stranger", "unknown")]
    assert "gpu-7" in refusals[0].message and "dra side" in refusals[0].message
    assert "not a GPU of this node" in refusals[1].message


def test_prepare_guard_refuses_legacy_and_withdrawn_devices() -> None:
    own = apply(Ownership.all_legacy(GPUS), "2").with_sides({U[6]: "withdrawn"})
    assert own.check_prepare([U[7]]) == []
    refusals = own.check_prepare([U[6], U[0]])
    assert [(r.name, r.owner) for r in refusals] == [("gpu-6", "withdrawn"), ("gpu-0", "legacy")]
    assert all("NodePrepareResources refused" in r.message for r in refusals)


def test_the_ledger_always_covers_exactly_the_nodes_devices() -> None:
    with pytest.raises(OwnershipError, match="missing"):
        Ownership(GPUS, {U[0]: "legacy"})
    with pytest.raises(OwnershipError, match="invalid sides"):
        Ownership(GPUS[:1], {U[0]: "both"})  # type: ignore[dict-item]


def test_adopting_a_stored_ledger_keeps_known_sides_and_starts_new_devices_legacy() -> None:
    own = Ownership.adopt(GPUS, {U[7]: "dra", "GPU-removed": "dra"})
    assert own.side_of(U[7]) == "dra" and own.side_of(U[0]) == "legacy"
    assert own.side_of("GPU-removed") is None
