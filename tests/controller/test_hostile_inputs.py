"""Inputs that once stopped `bridge controller` for the whole cluster (issue 27): one pod's GPU count, one Node's
status annotation, one policy ConfigMap. Each now affects its own object only, with an Event and a metric, and the
other nodes are decided as usual. Against the API emulator, like test_controller_emulator."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bridge.controller.app import App
from bridge.controller.nodestatus import SPLIT_KEY
from bridge.kube import PODS, RestKube
from bridge.sandbox.apiserver import ApiServer
from tests.controller.test_controller_emulator import (  # noqa: F401 - fixtures
    L,
    add_dra_pod,
    add_node,
    annotation,
    cluster,
    events,
    start_app,
)
from tests.polling import wait_until

Cluster = tuple[ApiServer, RestKube, Path]


def add_pod_asking(api: RestKube, name: str, value: str, ns: str = "team-b") -> None:
    api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                      "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {
                          "requests": {"nvidia.com/gpu": value}, "limits": {"nvidia.com/gpu": value}}}]}}, ns)


def more_decisions(app: App, n: int = 3) -> None:
    done = app.metrics.decisions._value.get()
    wait_until(lambda: app.metrics.decisions._value.get() >= done + n, what=f"{n} more decisions")


def test_pods_with_huge_gpu_counts_are_blocked_once_and_every_other_pod_is_served(
        cluster: Cluster, start_app: Callable[..., App]) -> None:
    """1e400 once failed every decision (OverflowError in a gauge's float()), 1e5000 too (Python's int-to-string
    limit in a message), while /healthz said 200."""
    _, api, _ = cluster
    add_node(api, "n1", [L] * 8)
    for name, value in (("e400", "1e400"), ("e5000", "100e4998"), ("e3e7", "1e30000000"), ("big", "4294967296")):
        add_pod_asking(api, name, value)
    add_dra_pod(api, "train", 2)
    app = start_app()
    assert wait_until(lambda: annotation(api, "n1", SPLIT_KEY), what="the valid pod's target") == "2"
    blocked = wait_until(lambda: [e for e in events(api, "GPUDemandBlocked") if "(invalid-count)" in e["message"]]
                         if len(events(api, "GPUDemandBlocked")) >= 4 else [], what="four blocked-pod Events")
    assert sorted(e["involvedObject"]["name"] for e in blocked) == ["big", "e3e7", "e400", "e5000"]
    e400 = next(e for e in blocked if e["involvedObject"]["name"] == "e400")
    assert "not a valid GPU count: container main: nvidia.com/gpu '1e400' is out of range" in e400["message"]
    more_decisions(app)
    assert len(events(api, "GPUDemandBlocked")) == 4  # once per pod, not once per decision
    assert app.metrics.blocked_pods.labels(reason="invalid-count")._value.get() == 4
    assert app.metrics.pending_gpus.labels(api="dra")._value.get() == 2
    assert app.controller.health() is None

