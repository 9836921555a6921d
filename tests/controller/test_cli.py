"""`bridge controller` options: every bad value is refused with exit 2 and the option named, before any I/O."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from bridge.cli import main


@pytest.mark.parametrize(("args", "message"), [
    (["--min-legacy-share", "1.5"], "--min-legacy-share: expected a number between 0 and 1"),
    (["--pool-min-legacy-share", "training"], "expected POOL=SHARE"),
    (["--cooldown", "soon"], "expected a duration such as 120, 90s, 2m or 1h"),
    (["--policy-configmap", "just-a-name"], "expected NAMESPACE/NAME"),
    (["--interval", "10s", "--resync", "5s"], "--resync (5s) at least --interval (10s)"),
    (["--lease-duration", "10s", "--renew-deadline", "10s"], "must be greater than the renew deadline"),
    (["--http-address", "nowhere"], "use HOST:PORT, :PORT or 'off'"),
    (["--max-moves-per-minute", "-1"], "-1 is not in the range"),
    (["--max-moves-per-decision", "0"], "0 is not in the range 1<=x<=100000"),
])
def test_bad_options_exit_2_naming_the_problem(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["controller", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_no_usable_cluster_configuration_exits_2_with_the_reason(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["controller", "--kubeconfig", str(tmp_path / "missing"),
                                       "--http-address", "off"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("bridge controller:") and "missing" in result.output


def test_help_names_the_pins_the_records_and_the_rbac() -> None:
    out = CliRunner().invoke(main, ["controller", "--help"]).output
    for words in ("dra-bridge.io/split-pinned=true", "dra-bridge.io/split-decision", "patch nodes",
                  "BRIDGE_CONTROLLER_DRY_RUN", "leases"):
        assert words in out
