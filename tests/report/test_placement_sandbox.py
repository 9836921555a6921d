"""The trial that found the placement bug, replayed on a sandbox cluster (stand-in scheduler, real node daemons and
webhook): team-a's GPU pod is pinned to node-0 by its hostname; the report must advise raising node-0's split (not
node-1's), `--require-fixed team-a=DRB032` must refuse while the DRA GPUs are on the wrong node, pass once they are on
node-0, and the pod created after the flip must then be scheduled there through DRA.

Without placement the report advised "annotate node-1", the gate passed after it, and the new pod stayed Pending
("0/2 nodes are available: 1 cannot allocate all claims, 1 node(s) didn't match Pod's node affinity/selector")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from bridge.cli import main
from bridge.kube import NAMESPACES, NODES, PODS
from bridge.report import ReportOptions, build_report
from bridge.report.findings import Finding
from bridge.report.live import load_live
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from tests.polling import wait_until
from tests.sandbox_cluster import spec_for_tests

Obj = dict[str, Any]
SPLIT = "dra-bridge.io/dra-devices"

pytestmark = pytest.mark.slow


def trainer(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": "node-0"},
                     "containers": [{"name": "main", "image": "cuda",
                                     "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}


@pytest.fixture(scope="module")
def cluster() -> Iterator[SandboxCluster]:
    nodes = (NodeSpec("node-0", "4xH100-80GB", split="0"), NodeSpec("node-1", "4xH100-80GB", split="0"))
    with SandboxCluster(spec_for_tests(nodes, bridge=True, webhook=True)) as c:
        c.api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": "team-a", "labels": {"dra-bridge.io/mode": "shadow"}}})
        c.wait_daemons_settled(90)
        yield c


def capacity(c: SandboxCluster) -> list[Finding]:
    report = build_report(load_live(c.api, source="sandbox"), ReportOptions())
    return [f for f in report.findings if f.rule == "DRB032" and f.object.name == "team-a"]


def gate(c: SandboxCluster) -> int:
    return CliRunner().invoke(main, ["migrate-report", "--kubeconfig", str(c.kubeconfig),
                                     "--require-fixed", "team-a=DRB032"]).exit_code


def raise_split(c: SandboxCluster, node: str, value: str) -> None:
    c.api.patch(NODES, node, {"metadata": {"annotations": {SPLIT: value}}})
    c.wait_daemons_settled(90)


def test_the_advice_for_a_pod_pinned_by_hostname_makes_it_schedulable_and_the_gate_waits_for_it(
        cluster: SandboxCluster) -> None:
    c = cluster
    c.api.create(PODS, trainer("trainer"), "team-a")
    assert c.wait_pod_phase("team-a", "trainer", "Running", 60)["spec"]["nodeName"] == "node-0"

    (f,) = capacity(c)
    assert f.details["commands"] == [f"kubectl annotate node node-0 {SPLIT}=2 --overwrite"]
    assert gate(c) == 1

    raise_split(c, "node-1", "2")  # what the trial's report said: 2 DRA GPUs, on a node the pod cannot use
    (f,) = capacity(c)
    assert f.details["matchingDevices"] == 0
    assert f.details["commands"] == [f"kubectl annotate node node-0 {SPLIT}=2 --overwrite"]
    assert gate(c) == 1

    raise_split(c, "node-0", "2")  # the advice
    assert capacity(c) == []
    assert gate(c) == 0

    flip = CliRunner().invoke(main, ["namespace", "set", "team-a", "dra", "--strict", "--kubeconfig",
                                     str(c.kubeconfig)])
    assert flip.exit_code == 0, flip.output
    c.api.create(PODS, trainer("trainer-v2"), "team-a")
    running = c.wait_pod_phase("team-a", "trainer-v2", "Running", 60)
    assert running["spec"]["nodeName"] == "node-0"
    assert running["spec"].get("resourceClaims"), "the pod got its GPUs through DRA"
    c.api.delete(PODS, "trainer", "team-a")  # replaced: the old device-plugin pod goes
    c.wait_pod_phase("team-a", "trainer", "Gone", 60)
    wait_until(lambda: capacity(c) == [], 10, "team-a fits on DRA once its pod is replaced")
