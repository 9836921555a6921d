"""The layering the architecture fixes, checked on every run: the import-linter contracts in pyproject.toml
(`[tool.importlinter]`) must all be kept. Each contract runs as its own test so a failure names the rule and prints
import-linter's report (the offending import with its line, and the contract's guidance).

Run by hand with `lint-imports` from the repository root."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The rules the project owner asked for; a contract may be added, but none of these may disappear quietly.
REQUIRED_CONTRACTS = {
    "kube-only",
    "nvml-only",
    "proto-in-grpc-shells",
    "sandbox-not-in-production",
    "cli-is-the-top",
    "pure-no-shells",
    "node-core-below-services",
    "node-layers",
}


def _contracts() -> dict[str, str]:
    """Contract id -> name, as configured."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        config = tomllib.load(f)
    return {c["id"]: c["name"] for c in config["tool"]["importlinter"]["contracts"]}


def _lint_imports(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The interpreter running the tests, so the check sees the same installed packages; the cache is off so a stale
    # graph can never hide a new import.
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", code, "--no-logo", "--no-cache", *args],
        cwd=cwd,
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin", "NO_COLOR": "1", "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def lint_report() -> str:
    """One import-linter run over the whole package (the graph is built once for all contracts)."""
    result = _lint_imports(ROOT)
    return result.stdout + result.stderr


def test_every_required_layering_rule_is_a_contract() -> None:
    assert REQUIRED_CONTRACTS <= set(_contracts())


@pytest.mark.parametrize("contract", sorted(_contracts()))
def test_contract_is_kept(contract: str, lint_report: str) -> None:
    name = _contracts()[contract]
    if f"{name} KEPT" not in lint_report.splitlines():
        pytest.fail(f"import-linter contract {contract!r} ({name}) is not kept:\n{lint_report}", pytrace=False)


def test_an_import_of_the_kubernetes_client_outside_bridge_kube_breaks_the_contract(tmp_path: Path) -> None:
    # The check itself must be able to fail: the same contracts on a copy of the package with one bad module.
    shutil.copytree(ROOT / "bridge", tmp_path / "bridge", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "bridge" / "webhook" / "sneaky.py").write_text('"""Breaks the rule."""\n\nimport kubernetes\n')

    result = _lint_imports(tmp_path, "--contract", "kube-only")

    assert result.returncode != 0
    assert "bridge.webhook.sneaky -> kubernetes (l.3)" in result.stdout
    assert "KubeAPI Protocol" in result.stdout  # the guidance tells the author what to do instead


@pytest.mark.parametrize("module, upward", [
    ("bridge/deviceplugin/sneaky.py", "bridge.node.daemon"),  # a half importing the daemon that composes it
    ("bridge/dra/sneaky.py", "bridge.deviceplugin.state"),  # one half importing the other (independent siblings)
    ("bridge/inventory/sneaky.py", "bridge.cdi.names"),  # the shared model importing one of its users
])
def test_an_upward_import_between_the_node_layers_breaks_the_contract(tmp_path: Path, module: str,
                                                                     upward: str) -> None:
    shutil.copytree(ROOT / "bridge", tmp_path / "bridge", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / module).write_text(f'"""Breaks the layering."""\n\nimport {upward}\n')

    result = _lint_imports(tmp_path, "--contract", "node-layers")

    importer = module[:-len(".py")].replace("/", ".")
    assert result.returncode != 0
    assert f"{importer} -> {upward} (l.3)" in result.stdout
    assert "An import goes up a layer" in result.stdout
