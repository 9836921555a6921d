"""Guide 04's hand-over script on a cluster the sandbox does not have: three GPU nodes, one the report blocks, one
whose node daemon never converges. `kubectl` and `bridge` are small fakes on PATH that answer from a table and log
every call, so the test reads the order of what the script did: one node at a time, the image pulled before the
vendor plugin goes, guide 01's checks before the next node, blocked nodes skipped and listed, and a check that fails
stops everything after it with what to look at. (The sandbox run of guide 04 hands the real gpu-b over with it.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.guides.markdown import REPO

SCRIPT = REPO / "migration-guides" / "04-node-split" / "hand-over"

FAKE = r'''
import json, os, sys
state = json.load(open(os.environ["FAKE_STATE"]))
program, args = os.path.basename(sys.argv[0]), sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(program + " " + " ".join(args) + "\n")
line = " ".join(args)
if program == "bridge":
    if args[:1] == ["migrate-report"]:
        print(json.dumps({"nodes": state["report"]}))
        sys.exit(1)
    node = args[2]
    converged = node not in state["stuck"]
    doc = {"status": {"state": "converged" if converged else "converging",
                      "counts": {"legacy": 8, "dra": 0 if converged else 1, "withdrawn": 0}}}
    print(json.dumps(doc) if "-o" in args else f"Node {node}: state: {doc['status']['state']}")
    sys.exit(0)
if "get nodes -l" in line:
    print(" ".join(state["nodes"]))
elif "containers[?(@.name==" in line:
    print("ghcr.io/dra-bridge/dra-bridge:0.1.0")
elif "imagePullSecrets" in line or "serviceAccountName" in line:
    print("")
elif "imageID" in line:
    print("ghcr.io/dra-bridge/dra-bridge@sha256:0")
elif "-o name" in line:
    print("pod/dra-bridge-node-x")
elif "nvidia\\.com/gpu" in line:
    print("8")
'''


def run(tmp_path: Path, nodes: list[str], report: list[dict[str, Any]], stuck: list[str] = ()) -> tuple[
        subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("kubectl", "bridge"):
        path = bin_dir / program
        path.write_text(f"#!{sys.executable}\n{FAKE}")
        path.chmod(0o755)
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"nodes": nodes, "report": report, "stuck": list(stuck)}))
    log = tmp_path / "calls.log"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_STATE": str(state),
           "FAKE_LOG": str(log)}
    done = subprocess.run([str(SCRIPT), "gpu-operator", "3"], capture_output=True, text=True, env=env, timeout=60)
    return done, log.read_text().splitlines() if log.exists() else []


def first(calls: list[str], *words: str) -> int:
    return next(i for i, c in enumerate(calls) if all(w in c for w in words))


REPORT = [{"name": "gpu-b", "status": "ready", "rules": []},
          {"name": "gpu-mig", "status": "blocked", "rules": ["DRB015", "DRB036"]},
          {"name": "gpu-c", "status": "needs-config", "rules": ["DRB012"]}]


def test_one_node_at_a_time_with_the_image_first_and_the_checks_between_nodes(tmp_path: Path) -> None:
    done, calls = run(tmp_path, ["gpu-b", "gpu-mig", "gpu-c"], REPORT)
    assert done.returncode == 0, done.stderr
    assert "skipping gpu-mig: the report blocks it (DRB015,DRB036)" in done.stdout
    assert "handed over: gpu-b gpu-c" in done.stdout
    assert "not handed over, blocked by the report: gpu-mig(DRB015,DRB036)" in done.stdout
    assert not [c for c in calls if "gpu-mig" in c and c.startswith("kubectl label")]
    for node in ("gpu-b", "gpu-c"):
        pulled = first(calls, "kubectl -n dra-bridge run dra-bridge-image-check", f'"nodeName":"{node}"')
        off = first(calls, "kubectl label node", node, "gpu.deploy.device-plugin=false")
        gone = first(calls, "wait --for=delete pod", f"spec.nodeName={node}")
        opt_in = first(calls, "kubectl label node", node, "dra-bridge.io/node=true")
        verified = first(calls, "bridge node status", node, "-o json")
        assert pulled < off < gone < opt_in < verified
    # gpu-c starts only after gpu-b passed guide 01's verification
    assert first(calls, "bridge node status gpu-b") < first(calls, "run dra-bridge-image-check", '"gpu-c"')


def test_a_node_that_does_not_converge_stops_the_hand_over_with_what_to_look_at(tmp_path: Path) -> None:
    done, calls = run(tmp_path, ["gpu-b", "gpu-c"], REPORT, stuck=["gpu-b"])
    assert done.returncode == 1
    assert "timed out after 3s waiting for" in done.stderr
    assert "look at: bridge node status gpu-b: the split must be converged with every GPU legacy" in done.stderr
    assert not [c for c in calls if "gpu-c" in c]  # the nodes after it are left as they are


@pytest.mark.parametrize("args", [["nvidia"], ["gpu-operator", "soon"]])
def test_a_wrong_argument_is_a_usage_error(args: list[str]) -> None:
    done = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=10)
    assert done.returncode == 2 and ("usage" in done.stderr or "whole number" in done.stderr)


def test_wait_until_says_what_to_look_at_when_the_limit_passes(tmp_path: Path) -> None:
    wait = REPO / "migration-guides" / "wait-until"
    done = subprocess.run([str(wait), "1", "the node daemon's log", "false"], capture_output=True, text=True,
                          timeout=10)
    assert done.returncode == 1
    assert "timed out after 1s waiting for: false" in done.stderr and "look at: the node daemon's log" in done.stderr
    assert subprocess.run([str(wait), "1", "-", "true"], timeout=10).returncode == 0
    assert subprocess.run([str(wait), "soon", "-", "true"], capture_output=True, timeout=10).returncode == 2
