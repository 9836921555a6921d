"""The report's SPLIT column and DRB013 say what the node daemon does with the same Node: one parser, one answer."""

from __future__ import annotations

import pytest

from bridge.inventory.simulated import devices_from_spec
from bridge.ledger import Facts, LedgerConfig
from bridge.node.split import SplitConfig, SplitController
from bridge.report.checks import ReportOptions
from bridge.report.report import build_report

from .conftest import cluster, findings, gpu_device, node, resource_slice

GPUS = devices_from_spec("8xH100-80GB", "gpu-1")


class NoHolders:
    def facts(self, *, fresh_claims: bool = False) -> Facts:
        return Facts()

    def wants_poll(self) -> bool:
        return False

    def legacy_facts(self) -> Facts:
        return Facts()


def bridge_node(where: str, value: str) -> dict:
    n = node("gpu-1", 8)
    n["metadata"].setdefault(where, {})["dra-bridge.io/dra-devices"] = value
    return n


def daemon_says(n: dict) -> tuple[int | None, str]:
    ctl = SplitController(GPUS, SplitConfig("gpu-1", ledger=LedgerConfig()), sources=NoHolders())
    d = ctl.evaluate(n)
    return d.wanted, d.refusal


CASES = [("labels", "0"), ("labels", "2"), ("labels", "all"), ("labels", "ALL"), ("labels", "gpu-7"),
         ("annotations", "gpu-7"), ("annotations", "gpu-6,gpu-7"), ("labels", "9"), ("annotations", "12"),
         ("labels", "half")]


@pytest.mark.parametrize(("where", "value"), CASES, ids=[f"{w}={v}" for w, v in CASES])
def test_the_split_column_shows_what_the_daemon_does_with_the_same_node(where: str, value: str) -> None:
    n = bridge_node(where, value)
    wanted, refusal = daemon_says(n)
    report = build_report(cluster(n, resource_slice("gpu-1", [gpu_device(0)])), ReportOptions())
    [row] = [r for r in report.nodes if r.name == "gpu-1"]
    if wanted is None:
        assert row.split == f"{value} (refused)" and row.split_short == "refused"
        [finding] = findings(cluster(n, resource_slice("gpu-1", [gpu_device(0)])), "DRB013")
        assert finding.severity == "warning" and refusal in finding.message
        assert "the node daemon refuses it and keeps its current split" in finding.message
    else:
        assert row.split == f"{value} ({wanted}/8)" and row.split_short == f"{wanted}/8"
        assert findings(cluster(n, resource_slice("gpu-1", [gpu_device(0)])), "DRB013") == []


def test_a_count_above_the_total_is_refused_by_both_never_clamped_to_all() -> None:
    n = bridge_node("labels", "9")
    assert daemon_says(n) == (None, "DRA device split '9' asks for 9 devices but this node has 8")
    [row] = build_report(cluster(n, resource_slice("gpu-1", [gpu_device(0)])), ReportOptions()).nodes
    assert row.split == "9 (refused)"


def test_the_annotation_wins_in_the_report_too_and_a_disagreement_is_noted() -> None:
    n = bridge_node("labels", "1")
    n["metadata"]["annotations"] = {"dra-bridge.io/dra-devices": "gpu-6,gpu-7"}
    assert daemon_says(n) == (2, "")
    data = cluster(n, resource_slice("gpu-1", [gpu_device(0)]))
    [row] = build_report(data, ReportOptions()).nodes
    assert row.split == "gpu-6,gpu-7 (2/8)"
    [note] = findings(data, "DRB013")
    assert note.severity == "info" and "disagree; the annotation wins" in note.message


def test_the_daemons_status_annotation_reaches_the_report() -> None:
    n = bridge_node("annotations", "gpu-7")
    ctl = SplitController(GPUS, SplitConfig("gpu-1"), sources=NoHolders())
    ctl.evaluate(n)
    assert ctl.status is not None
    n["metadata"]["annotations"]["dra-bridge.io/split-status"] = ctl.status.encode()
    data = cluster(n, resource_slice("gpu-1", [gpu_device(0)]))
    from bridge.report.model import build_model

    model_node = build_model(data).nodes["gpu-1"]
    assert model_node.split_status is not None and model_node.split_status.state == "converging"
    assert [name for name, _ in model_node.split_inventory()] == [f"gpu-{i}" for i in range(8)]
