"""Every `bridge` and `helm` command in the guides is one the real command line accepts: parsed by the real click
commands (options, choices, value checks) and by the Helm stand-in's parser (flags, values files, `--set`), with the
placeholders filled in. Needs no cluster, no kubectl and no Helm library, so the guides' bridge commands are checked
on every machine, including where tests/guides/test_guides.py is skipped for lack of kubectl."""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest

from bridge.cli import main
from tests.guides import markdown
from tests.guides.commands import simple_commands
from tests.guides.helmcli import UsageError, parse_args, parse_set, user_values
from tests.guides.world import PLACEHOLDERS

VARIABLES = {**PLACEHOLDERS, "n": "gpu-b", "ns": "team-b", "DEVICES": "gpu-0,gpu-1", "KUBECONFIG": "/tmp/kubeconfig",
             "WEBHOOK": "https://localhost:8443"}


def commands(program: str) -> list[tuple[str, list[str]]]:
    out = []
    for name in markdown.guide_names():
        for block in markdown.load(name).commands():
            for words in simple_commands(block.text, VARIABLES):
                if words[0] == program:
                    out.append((block.where, words[1:]))
    return out


def parse_bridge(args: list[str]) -> click.Context:
    """Resolve `bridge ARGS` down to its leaf command and parse its options, as click would before running it."""
    ctx = main.make_context("bridge", list(args))
    command: click.Command = main
    while isinstance(command, click.Group):
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        if not rest:
            break
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        ctx = sub.make_context(name, rest, parent=ctx)
        command = sub
    return ctx


BRIDGE = commands("bridge")
HELM = commands("helm")


def test_the_guides_use_the_commands_they_are_about() -> None:
    used = {" ".join(a[:2]) if a[0] in ("node", "namespace") else a[0] for _, a in BRIDGE}
    assert {"migrate-report", "namespace set", "namespace status", "node status"} <= used, used
    assert {a[0] for _, a in HELM} == {"install", "upgrade", "uninstall"}


@pytest.mark.parametrize(("where", "args"), BRIDGE, ids=[f"{w}:{' '.join(a)[:40]}" for w, a in BRIDGE])
def test_every_bridge_command_in_the_guides_parses(where: str, args: list[str], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for a in args:  # paths a command reads must exist when click checks them (--snapshot my-cluster/)
        if a.endswith("/") and not a.startswith("-"):
            (tmp_path / a).mkdir(parents=True, exist_ok=True)
    for var in [v for v in os.environ if v.startswith("BRIDGE_")]:
        monkeypatch.delenv(var)
    try:
        parse_bridge(args)
    except click.ClickException as err:
        pytest.fail(f"{where}: bridge {' '.join(args)}: {err.format_message()}")


@pytest.mark.parametrize(("where", "args"), HELM, ids=[f"{w}:{' '.join(a)[:40]}" for w, a in HELM])
def test_every_helm_command_in_the_guides_parses_and_its_values_exist(where: str, args: list[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(markdown.REPO)
    positional, opts = parse_args(args)
    assert positional[0] in ("install", "upgrade", "uninstall"), where
    if positional[0] != "uninstall" and positional[2].startswith("charts/"):  # not a chart of NVIDIA's repository
        assert (markdown.REPO / positional[2]).is_dir(), f"{where}: chart {positional[2]}"
        user_values(opts)  # values files readable, --set expressions valid


def test_the_helm_stand_in_parses_set_as_helm_does() -> None:
    assert parse_set("controller.enabled=true,controller.replicas=1") == {
        "controller": {"enabled": True, "replicas": 1}}
    assert parse_set("node.draDevices=all,a.b=0.5,c=null") == {"node": {"draDevices": "all"}, "a": {"b": "0.5"},
                                                              "c": None}
    assert parse_set(r"node.nodeSelector.dra-bridge\.io/x=y") == {"node": {"nodeSelector": {"dra-bridge.io/x": "y"}}}
    assert parse_set("l={a,b}") == {"l": ["a", "b"]}
    assert parse_set("node.draDevices=2", as_string=True) == {"node": {"draDevices": "2"}}
    for bad, message in [("novalue", "has no value"), ("a..b=1", "empty key segment")]:
        with pytest.raises(UsageError, match=message):
            parse_set(bad)
    with pytest.raises(UsageError, match="unknown flag: --atomicity"):
        parse_args(["upgrade", "r", "c", "--atomicity"])
    with pytest.raises(UsageError, match="flag needs an argument: -n"):
        parse_args(["status", "r", "-n"])
    with pytest.raises(UsageError, match="open missing.yaml"):
        user_values(parse_args(["install", "r", "c", "-f", "missing.yaml"])[1])
