"""`bridge namespace status` reads the same in the table and in JSON, and lists only the namespaces an operator can
act on unless asked for all."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from bridge.cli import main
from bridge.kube import connect
from bridge.kube.api import NAMESPACES
from bridge.sandbox.apiserver import ApiServer


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with ApiServer(version="1.34.2") as srv:
        path = srv.write_kubeconfig(tmp_path_factory.mktemp("kc") / "kubeconfig")
        api = connect(path)
        api.create(NAMESPACES, {"metadata": {"name": "team-a"}})
        api.create(NAMESPACES, {"metadata": {"name": "team-b", "labels": {"dra-bridge.io/target": "claims"}}})
        yield str(path)


def _run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, ["namespace", "status", *args], catch_exceptions=False)


def test_target_reads_the_same_in_the_table_and_in_json(kubeconfig: str) -> None:
    rows = {r["namespace"]: r for r in json.loads(_run("-o", "json", "--kubeconfig", kubeconfig).output)}
    assert rows["team-a"]["target"] == "default" and rows["team-b"]["target"] == "claims"
    table = {line.split()[0]: line.split() for line in _run("--kubeconfig", kubeconfig).output.splitlines()[1:]
             if line and not line.startswith(" ")}
    assert table["team-a"][2] == "default" and table["team-b"][2] == "claims"


def test_system_namespaces_are_hidden_unless_all(kubeconfig: str) -> None:
    names = [r["namespace"] for r in json.loads(_run("-o", "json", "--kubeconfig", kubeconfig).output)]
    assert "team-a" in names and not {"kube-system", "kube-public", "kube-node-lease"} & set(names)
    everything = [r["namespace"] for r in json.loads(_run("-o", "json", "--all", "--kubeconfig", kubeconfig).output)]
    assert "kube-system" in everything and "team-a" in everything
    env = CliRunner().invoke(main, ["namespace", "status", "-o", "json", "--kubeconfig", kubeconfig],
                             env={"BRIDGE_NAMESPACE_ALL": "1"})
    assert "kube-system" in [r["namespace"] for r in json.loads(env.output)]
    named = json.loads(_run("kube-system", "-o", "json", "--kubeconfig", kubeconfig).output)
    assert [r["namespace"] for r in named] == ["kube-system"]  # asked by name: shown
