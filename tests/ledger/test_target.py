"""The split target: one parser for the daemon and the report, the Node's precedence, and fitting a target to a node."""

from __future__ import annotations

import pytest

from bridge.ledger import SPLIT_KEY, SplitError, fit_target, parse_split, requested_split


def node(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict:
    return {"metadata": {"name": "n1", "labels": labels or {}, "annotations": annotations or {}}}


@pytest.mark.parametrize(("text", "kind", "canonical"), [
    (None, "none", "0"), ("", "none", "0"), (" 0 ", "none", "0"), ("none", "none", "0"), ("NONE", "none", "0"),
    ("all", "all", "all"), ("ALL", "all", "all"), (" All ", "all", "all"),
    ("3", "count", "3"), ("03", "count", "3"),
    ("gpu-7", "devices", "gpu-7"), ("GPU-7", "devices", "gpu-7"), ("gpu-07", "devices", "gpu-7"),
    ("gpu-6, gpu-7", "devices", "gpu-6,gpu-7"),
    ("GPU-42F486BF-B63D-5D5E-A9E1-72B6DE64B04D", "devices", "GPU-42f486bf-b63d-5d5e-a9e1-72b6de64b04d"),
])
def test_values_parse_case_insensitively_to_one_canonical_spelling(text, kind, canonical) -> None:
    target = parse_split(text)
    assert (target.kind, target.canonical) == (kind, canonical)


@pytest.mark.parametrize(("text", "message"), [
    ("two", "neither a count, 'all', a 'gpu-<index>' name nor a GPU UUID"),
    ("-1", "a count cannot be negative"),
    ("gpu-1,,gpu-2", "empty item"),
    ("gpu-1,GPU-1", "a device is listed twice"),
    ("half", "expected '0', 'all', a count"),
])
def test_bad_values_are_refused_naming_the_value_and_the_accepted_forms(text, message) -> None:
    with pytest.raises(SplitError, match="invalid DRA device split") as err:
        parse_split(text)
    assert message in str(err.value) and repr(text) in str(err.value)


def test_the_annotation_wins_over_the_label_which_wins_over_the_flag() -> None:
    assert requested_split(node(), None).source == "default" and requested_split(node(), None).text == "0"
    assert requested_split(node(), "2").source == "flag"
    assert requested_split(node(labels={SPLIT_KEY: "all"}), "2").source == "label"
    req = requested_split(node(labels={SPLIT_KEY: "all"}, annotations={SPLIT_KEY: "gpu-6,gpu-7"}), "2")
    assert (req.text, req.source) == ("gpu-6,gpu-7", "annotation")
    assert "disagree; the annotation wins" in req.conflict


def test_label_and_annotation_that_mean_the_same_are_no_conflict() -> None:
    req = requested_split(node(labels={SPLIT_KEY: "ALL"}, annotations={SPLIT_KEY: "all"}))
    assert req.source == "annotation" and req.conflict == ""


def test_requested_split_is_pure_and_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    requested_split(node(labels={SPLIT_KEY: "1"}, annotations={SPLIT_KEY: "2"}))
    assert caplog.records == []


INVENTORY = [(f"gpu-{i}", f"GPU-{i:08x}-0000-0000-0000-000000000000") for i in range(8)]


def test_fitting_a_target_to_a_node() -> None:
    assert fit_target(parse_split("0"), INVENTORY).count == 0
    assert fit_target(parse_split("all"), INVENTORY).count == 8
    assert fit_target(parse_split("3"), INVENTORY) == fit_target(parse_split("3"), INVENTORY)
    assert fit_target(parse_split("3"), INVENTORY).pinned is None
    assert fit_target(parse_split(f"gpu-1,{INVENTORY[5][1].upper()}"), INVENTORY).pinned == ("gpu-1", "gpu-5")


def test_a_count_above_the_total_and_an_unknown_device_are_refused_not_clamped() -> None:
    with pytest.raises(SplitError, match="asks for 9 devices but this node has 8"):
        fit_target(parse_split("9"), INVENTORY)
    with pytest.raises(SplitError, match="names unknown device 'gpu-12': this node has gpu-0, gpu-1"):
        fit_target(parse_split("gpu-12"), INVENTORY)


@pytest.mark.parametrize(("text", "says"), [
    ("9" * 5000, "more devices than any node has"),  # int() refuses above 4300 digits: a ValueError escaped
    ("gpu-" + "9" * 5000, "is neither a count"),
    ("gpu-1," * 5000, "longer than 16384 characters"),
])
def test_a_hostile_split_value_is_refused_by_name_and_quoted_briefly(text: str, says: str) -> None:
    """Issue 27: a Node annotation holds up to 256 KiB; what the daemon, the controller and the report say about it
    stays short (the value is cut, its length said)."""
    with pytest.raises(SplitError, match=says) as err:
        parse_split(text)
    assert len(str(err.value)) < 400 and "characters)" in str(err.value)
