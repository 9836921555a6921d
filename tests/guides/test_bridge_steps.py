"""The guides' `bridge` commands, run for real where kubectl is not installed.

tests/guides/test_guides.py runs every guide's commands, which need kubectl; without it that test is skipped. So
that the bridge's own steps still run there, this runs each distinct `bridge` command of the guides, in the guides'
order, against a sandbox cluster with the bridge on both nodes and the webhook (the state guide 01 leaves behind),
and checks what each prints and how it exits. Where kubectl is installed it is skipped (the story covers it), unless
GUIDES_BRIDGE_STEPS=1 asks for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.kube.api import NAMESPACES
from bridge.sandbox.cluster import SandboxCluster
from tests.guides.commands import simple_commands
from tests.guides.markdown import guide_names, load
from tests.guides.world import KUBECTL, NODES_SPEC, PLACEHOLDERS
from tests.sandbox_cluster import spec_for_tests

pytestmark = pytest.mark.skipif(KUBECTL is not None and not os.environ.get("GUIDES_BRIDGE_STEPS"),
                                reason="kubectl is installed: tests/guides/test_guides.py runs every bridge step "
                                       "inside the guides (GUIDES_BRIDGE_STEPS=1 runs this anyway)")
VARIABLES = {**PLACEHOLDERS, "n": "gpu-b", "ns": "team-b"}


def bridge_steps() -> list[tuple[str, list[str]]]:
    seen: set[tuple[str, ...]] = set()
    out = []
    for name in guide_names():
        for block in load(name).commands():
            if block.real_cluster_only is not None or block.real_backend is not None or block.variant == "standalone":
                continue
            for words in simple_commands(block.text, VARIABLES):
                if words[0] == "bridge" and tuple(words) not in seen and "$" not in " ".join(words):
                    seen.add(tuple(words))
                    out.append((block.where, words[1:]))
    return out


@pytest.fixture(scope="module")
def cluster() -> Iterator[SandboxCluster]:
    with SandboxCluster(spec_for_tests(NODES_SPEC, bridge=True, webhook=True, split="2")) as c:
        for ns in ("team-a", "team-b", "team-c"):
            c.api.create(NAMESPACES, {"metadata": {"name": ns}})
        yield c


def test_every_bridge_step_of_the_guides_runs_against_a_sandbox(cluster: SandboxCluster, tmp_path: Path) -> None:
    steps = bridge_steps()
    assert len(steps) > 10
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "NO_COLOR": "1"}
    env = {k: v for k, v in env.items() if not k.startswith("BRIDGE_")}
    cluster.wait_daemons_settled()
    for where, args in steps:
        proc = subprocess.run([sys.executable, "-m", "bridge", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        allowed = (0, 1) if args[0] == "migrate-report" else (0,)  # the report exits 1 while blockers remain
        assert proc.returncode in allowed, f"{where}: bridge {' '.join(args)} exited {proc.returncode}:\n" \
                                           f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        if args[:2] == ["node", "status"]:
            assert "state: converged" in proc.stdout and "2 of 8 GPUs on DRA" in proc.stdout
        if args[:2] == ["namespace", "set"]:
            assert f"namespace {args[2]}" in proc.stdout and "WARNING" not in proc.stderr
    assert (tmp_path / "fixes" / "wave-plan.sh").exists() and (tmp_path / "report.html").exists()
