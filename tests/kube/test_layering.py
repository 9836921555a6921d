"""The layering rule the architecture fixes: only `bridge/kube/` imports the official `kubernetes` client, and
importing `bridge.kube` itself (for the Protocol, constants and errors) does not load it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def kubernetes_importers() -> list[str]:
    offenders = []
    for path in sorted((ROOT / "bridge").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("bridge/kube/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            if any(n == "kubernetes" or n.startswith("kubernetes.") for n in names):
                offenders.append(f"{rel}:{node.lineno}")
    return offenders


def test_only_bridge_kube_imports_the_kubernetes_client() -> None:
    assert kubernetes_importers() == []


def test_importing_bridge_kube_does_not_load_the_client() -> None:
    code = "import sys, bridge.kube; assert 'kubernetes' not in sys.modules, sorted(m for m in sys.modules if m.startswith('kubernetes'))"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
