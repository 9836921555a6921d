"""Policy parsing (flags and the ConfigMap document) and the decision record the report reads."""

from __future__ import annotations

import pytest

from bridge.controller.model import Policy, PoolPolicy
from bridge.controller.nodestatus import SPLIT_KEY
from bridge.controller.policy import (
    PolicyError,
    describe,
    parse_document,
    parse_duration,
    parse_pool_shares,
    parse_share,
    policy_from_configmap,
)
from bridge.controller.record import DECISION_KEY, DecisionRecord, RecordError, decode, record_of

BASE = Policy(min_legacy_share=0.1, max_moves_per_minute=32, cooldown_s=120)


def test_a_full_document_overrides_the_flags() -> None:
    p = parse_document("minLegacyShare: 0.25\npools:\n  inference: {minLegacyShare: 0.5}\n"
                       "maxMovesPerMinute: 8\ncooldownSeconds: 300\n", BASE)
    assert p == Policy(0.25, {"inference": PoolPolicy(0.5)}, 8, 300.0)
    assert p.share("inference") == 0.5 and p.share("other") == 0.25


def test_the_document_sets_the_moves_per_decision_and_the_description_names_both_limits() -> None:
    p = parse_document("maxMovesPerDecision: 200", BASE)
    assert (p.max_moves_per_minute, p.max_moves_per_decision) == (32, 200)
    assert "at most 32 moves per minute and 200 per decision" in describe(p)


def test_keys_left_out_keep_the_flags_and_an_empty_document_is_the_flags() -> None:
    assert parse_document("maxMovesPerMinute: 4", BASE) == Policy(0.1, {}, 4, 120.0)
    assert parse_document("", BASE) == BASE


@pytest.mark.parametrize(("doc", "message"), [
    ("minLegacyshare: 0.2", "unknown key minLegacyshare; accepted: minLegacyShare, pools, maxMovesPerMinute"),
    ("minLegacyShare: 1.5", "minLegacyShare: expected a number between 0 and 1"),
    ("minLegacyShare: yes", "minLegacyShare: expected a number between 0 and 1, got True"),
    ("maxMovesPerMinute: -1", "maxMovesPerMinute: expected a whole number from 0 to 100000"),
    ("maxMovesPerMinute: 2.5", "maxMovesPerMinute: expected a whole number from 0 to 100000"),
    ("maxMovesPerMinute: 100001", "maxMovesPerMinute: expected a whole number from 0 to 100000, got 100001"),
    ("maxMovesPerDecision: 0", "maxMovesPerDecision: expected a whole number from 1 to 100000, got 0 "
                               "(maxMovesPerMinute: 0 pauses all moves)"),
    ("maxMovesPerDecision: -5", "maxMovesPerDecision: expected a whole number from 1 to 100000, got -5"),
    ("maxMovesPerDecision: 1000000", "maxMovesPerDecision: expected a whole number from 1 to 100000, got 1000000"),
    ("cooldownSeconds: forever", "cooldownSeconds: expected a number of seconds >= 0"),
    ("pools: [a, b]", "pools: expected a mapping from pool name to settings"),
    ("pools: {a: 0.5}", "pools.a: expected a mapping such as {minLegacyShare: 0.25}"),
    ("pools: {a: {share: 0.5}}", "pools.a: unknown key share"),
    ("pools: {a: {}}", "pools.a: minLegacyShare is required"),
    ("[1, 2]", "expected a mapping with keys"),
    ("a: [", "not valid YAML"),
])
def test_a_bad_document_is_refused_naming_the_field(doc: str, message: str) -> None:
    with pytest.raises(PolicyError, match=None) as err:
        parse_document(doc, BASE)
    assert message in str(err.value)


def test_the_configmap_must_carry_the_policy_key() -> None:
    cm = {"metadata": {"namespace": "dra-bridge", "name": "policy"}, "data": {"other": "x"}}
    with pytest.raises(PolicyError, match="ConfigMap dra-bridge/policy key policy.yaml: missing"):
        policy_from_configmap(cm, BASE)
    cm["data"] = {"policy.yaml": "cooldownSeconds: 10"}
    assert policy_from_configmap(cm, BASE).cooldown_s == 10.0


def test_flag_values() -> None:
    assert [parse_duration(v) for v in ("120", "90s", "2m", "1h", "500ms")] == [120, 90, 120, 3600, 0.5]
    with pytest.raises(PolicyError, match="--cooldown: expected a duration"):
        parse_duration("2 minutes")
    assert parse_pool_shares(["training=0", "inference=0.5"]) == {"training": PoolPolicy(0.0),
                                                                  "inference": PoolPolicy(0.5)}
    with pytest.raises(PolicyError, match="expected POOL=SHARE"):
        parse_pool_shares(["training"])
    with pytest.raises(PolicyError, match="given twice"):
        parse_pool_shares(["a=0", "a=1"])
    with pytest.raises(PolicyError, match="between 0 and 1"):
        parse_share("nan", "--min-legacy-share")


def test_the_pool_floor_rounds_up_from_the_decimal_written() -> None:
    assert Policy(min_legacy_share=0.3).min_legacy("", 10) == 3
    assert Policy(min_legacy_share=0.25).min_legacy("", 10) == 3
    assert Policy(min_legacy_share=0.0).min_legacy("", 10) == 0


def test_the_decision_record_round_trips_and_cuts_what_is_long() -> None:
    rec = DecisionRecord(time="2025-06-01T12:00:00Z", controller="ctl-1", dry_run=True, previous="2", target="4",
                         from_dra=2, to_dra=4, direction="to-dra", reason="x" * 1000,
                         pods=tuple(f"ns/p{i}" for i in range(20)), pod_count=20)
    back = decode(rec.encode())
    assert back.dry_run and back.moves == 2 and back.target == "4"
    assert len(back.reason) == 600 and back.reason.endswith("...")
    assert len(back.pods) == 10 and back.pod_count == 20
    node = {"metadata": {"annotations": {DECISION_KEY: rec.encode()}}}
    assert record_of(node) == back
    assert record_of({"metadata": {}}) is None
    assert "would set 2 -> 4 (2 to-dra)" in back.summary()


def test_a_newer_decision_record_is_refused_by_version() -> None:
    newer = r"schema version 2; this one reads version 1 \(written by a newer dra-bridge\)"
    with pytest.raises(RecordError, match=newer):
        decode('{"version": 2}')
    with pytest.raises(RecordError, match="not JSON"):
        decode("{")


def test_the_controller_writes_the_key_the_node_daemon_reads() -> None:
    from bridge.ledger.target import SPLIT_KEY as daemon_key

    assert SPLIT_KEY == daemon_key == "dra-bridge.io/dra-devices"


def test_the_flags_the_configmap_and_the_chart_take_the_same_largest_limits_on_moves() -> None:
    # `bridge controller --max-moves-per-...` (click's ranges), the ConfigMap (above) and the chart's schema.
    import json
    from pathlib import Path

    import click

    from bridge.cli.controller import controller
    from bridge.controller.limits import MOST_MOVES

    ranges = {p.name: p.type for p in controller.params if p.name in ("max_moves_per_minute", "max_moves_per_decision")}
    assert all(isinstance(t, click.IntRange) and t.max == MOST_MOVES for t in ranges.values()) and len(ranges) == 2
    assert parse_document(f"maxMovesPerMinute: {MOST_MOVES}\nmaxMovesPerDecision: {MOST_MOVES}", BASE) == Policy(
        0.1, {}, MOST_MOVES, 120, max_moves_per_decision=MOST_MOVES)
    schema = json.loads((Path(__file__).parents[2] / "charts/dra-bridge/values.schema.json").read_text())
    controller_values = schema["properties"]["controller"]["properties"]
    assert [controller_values[k]["maximum"] for k in ("maxMovesPerMinute", "maxMovesPerDecision")] == [MOST_MOVES] * 2
