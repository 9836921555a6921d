"""`--split-grace auto` (bridge.node.bindinggrace): the grace a GPU leaving DRA waits, from whether the cluster's
scheduler nominates pods to their node before it writes their allocation (KEP-5278, on from 1.35)."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from bridge.kube.errors import KubeError
from bridge.ledger.ledger import LedgerConfig
from bridge.node.bindinggrace import NO_SIGNAL_GRACE_S, SIGNAL_GRACE_S, auto_grace, parse_grace
from bridge.node.dual import DraOptions, DualNode
from tests.node.test_dual_options import captured, invoke  # noqa: F401  (fixture)


@pytest.mark.parametrize(("version", "seconds"), [
    ((1, 33), NO_SIGNAL_GRACE_S), ((1, 34), NO_SIGNAL_GRACE_S),  # NominatedNodeNameForExpectation off / alpha
    ((1, 35), SIGNAL_GRACE_S), ((1, 37), SIGNAL_GRACE_S), ((2, 0), SIGNAL_GRACE_S),
    (None, NO_SIGNAL_GRACE_S),  # not known yet: the safe value
])
def test_auto_grace_is_short_only_where_the_scheduler_nominates(version: tuple[int, int] | None,
                                                                 seconds: float) -> None:
    assert auto_grace(version).seconds == seconds


def test_without_the_signal_the_grace_outlasts_volume_bindings_longest_default_prebind() -> None:
    assert NO_SIGNAL_GRACE_S > 600  # VolumeBindingArgs.bindTimeoutSeconds
    assert "600" in auto_grace((1, 34)).why and "--split-grace" in auto_grace((1, 34)).why


@pytest.mark.parametrize(("text", "value"), [("auto", None), (" AUTO ", None), ("0", 0.0), ("2.5", 2.5)])
def test_parse_grace(text: str, value: float | None) -> None:
    assert parse_grace(text) == value


@pytest.mark.parametrize("text", ["-1", "soon", "nan", ""])
def test_parse_grace_refuses_what_is_not_auto_or_seconds(text: str) -> None:
    with pytest.raises(ValueError, match="--split-grace"):
        parse_grace(text)


def test_ledger_config_uses_the_given_grace_else_the_resolved_one_else_the_safe_one() -> None:
    assert DraOptions(split_grace_s=0.3).ledger_config(SIGNAL_GRACE_S).scheduler_grace_s == 0.3
    assert DraOptions().ledger_config(SIGNAL_GRACE_S).scheduler_grace_s == SIGNAL_GRACE_S
    assert DraOptions().ledger_config().scheduler_grace_s == NO_SIGNAL_GRACE_S
    assert LedgerConfig().scheduler_grace_s == SIGNAL_GRACE_S


def test_the_cli_default_is_auto_and_a_number_overrides_it(short_tmp: Path,
                                                           captured: list[DualNode]) -> None:  # noqa: F811
    code, out = invoke(short_tmp)
    assert code == 0, out
    assert captured[-1].opts.split_grace_s is None
    code, out = invoke(short_tmp, "--split-grace", "7")
    assert code == 0, out
    assert captured[-1].opts.split_grace_s == 7.0


class _Split:
    def __init__(self) -> None:
        self.configs: list[LedgerConfig] = []

    def set_ledger_config(self, config: LedgerConfig) -> None:
        self.configs.append(config)


class _Kube:
    """`/version` fails `failures` times, then answers `version`."""

    def __init__(self, version: tuple[int, int], failures: int) -> None:
        self.version, self.failures, self.calls = version, failures, 0

    def server_version(self) -> tuple[int, int]:
        self.calls += 1
        if self.calls <= self.failures:
            raise KubeError("connection refused", status=None)
        return self.version


@pytest.mark.parametrize(("version", "seconds"), [((1, 35), SIGNAL_GRACE_S), ((1, 34), NO_SIGNAL_GRACE_S)])
def test_the_daemon_keeps_the_safe_grace_until_the_api_server_answers_then_applies_its_versions(
        monkeypatch: pytest.MonkeyPatch, version: tuple[int, int], seconds: float) -> None:
    split = _Split()
    node = SimpleNamespace(opts=DraOptions(), kube=_Kube(version, failures=1), split=split,
                           config=SimpleNamespace(node_name="n1"), _grace_stop=_NoWait())
    DualNode._resolve_grace(node)  # type: ignore[arg-type]
    assert node.kube.calls == 2
    assert [c.scheduler_grace_s for c in split.configs] == [seconds]


class _NoWait(threading.Event):
    def wait(self, timeout: float | None = None) -> bool:
        return False
