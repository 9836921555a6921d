"""The `bridge` command line: every subcommand is reachable, and every option can be set through an environment
variable that its --help names (daemons run from manifests, where env is the natural interface)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from bridge.cli import main


def _commands(group: click.Group, ctx: click.Context, prefix: str = "bridge") -> Iterator[tuple[str, click.Command]]:
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, f"{prefix} {name} is listed but cannot be loaded"
        yield f"{prefix} {name}", cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, click.Context(cmd, parent=ctx), f"{prefix} {name}")


ALL = list(_commands(main, click.Context(main)))


def test_every_planned_command_is_there() -> None:
    names = {n for n, _ in ALL}
    assert {"bridge node", "bridge webhook", "bridge migrate-report", "bridge namespace", "bridge sandbox",
            "bridge sandbox apiserver", "bridge sandbox kubelet", "bridge namespace set"} <= names


@pytest.mark.parametrize(("name", "command"), ALL, ids=[n for n, _ in ALL])
def test_every_option_has_an_env_var_shown_in_help(name: str, command: click.Command) -> None:
    missing = [
        p.opts[-1]
        for p in command.params
        if isinstance(p, click.Option) and not p.hidden and p.name not in ("help", "version")
        and not (p.envvar and p.show_envvar)
    ]
    assert not missing, f"{name}: options without a documented env var: {missing}"


@pytest.mark.parametrize(("name", "command"), ALL, ids=[n for n, _ in ALL])
def test_every_command_explains_itself(name: str, command: click.Command) -> None:
    result = CliRunner().invoke(main, [*name.split()[1:], "--help"])
    assert result.exit_code == 0, result.output
    assert command.help and len(command.help.strip()) > 20


def test_python_dash_m_bridge_runs_the_same_cli() -> None:
    result = subprocess.run([sys.executable, "-m", "bridge", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert "migrate-report" in result.stdout and "node" in result.stdout
