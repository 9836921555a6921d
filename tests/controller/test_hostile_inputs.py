"""Inputs that once stopped `bridge controller` for the whole cluster (issue 27): one pod's GPU count, one Node's
status annotation, one policy ConfigMap. Each now affects its own object only, with an Event and a metric, and the
other nodes are decided as usual. Against the API emulator, like test_controller_emulator."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bridge.controller.app import App
from bridge.controller.nodestatus import SPLIT_KEY, STATUS_KEY
from bridge.kube import CONFIG_MAPS, NODES, PODS, RestKube
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


def deep_json(n: int = 100_000) -> str:
    return "[" * n + "]" * n  # 200 KB: RecursionError in json.loads, which load_versioned did not catch


def test_deep_json_in_one_nodes_split_status_leaves_that_node_alone_with_an_event_and_a_metric(
        cluster: Cluster, start_app: Callable[..., App]) -> None:
    _, api, _ = cluster
    add_node(api, "good", [L] * 8)
    add_node(api, "bad", [L] * 8)
    api.patch(NODES, "bad", {"metadata": {"annotations": {STATUS_KEY: deep_json()}}})
    add_dra_pod(api, "train", 4)
    app = start_app()
    assert wait_until(lambda: annotation(api, "good", SPLIT_KEY), what="the good node's target") == "4"
    (warning,) = wait_until(lambda: events(api, "SplitStatusUnreadable"), what="the unreadable-status Event")
    assert warning["involvedObject"]["name"] == "bad" and warning["type"] == "Warning"
    assert "dra-bridge.io/split-status is nested deeper than 64 levels" in warning["message"]
    more_decisions(app)
    assert len(events(api, "SplitStatusUnreadable")) == 1 and annotation(api, "bad", SPLIT_KEY) is None
    assert app.metrics.unreadable_nodes._value.get() == 1
    assert app.metrics.nodes.labels(state="unknown")._value.get() == 1
    api.patch(NODES, "bad", {"metadata": {"annotations": {STATUS_KEY: "x" * 200_000}}})  # big and not JSON
    wait_until(lambda: len(events(api, "SplitStatusUnreadable")) == 2, what="an Event for the new reason")


# 373 bytes: a 597 MiB peak and a 580 MB log line (`{value!r}` of the expanded list) before aliases were refused
ALIAS_BOMB = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x]"] + [
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]" for i in range(8)]
    + ["maxMovesPerMinute: *i", ""])


def policy_configmap(api: RestKube, text: str) -> None:
    api.create(CONFIG_MAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "policy", "namespace": "dra-bridge"},
                             "data": {"policy.yaml": text}}, "dra-bridge")


def test_a_policy_configmap_with_yaml_aliases_is_refused_with_an_invalid_policy_event(
        cluster: Cluster, start_app: Callable[..., App]) -> None:
    _, api, _ = cluster
    policy_configmap(api, ALIAS_BOMB)
    add_node(api, "n1", [L] * 8)
    add_dra_pod(api, "train", 2)
    app = start_app(configmap=("dra-bridge", "policy"))
    (warning,) = wait_until(lambda: events(api, "InvalidPolicy"), what="the InvalidPolicy Event")
    assert "YAML aliases are not accepted (line 2)" in warning["message"] and len(warning["message"]) < 400
    assert app.metrics.policy_errors._value.get() == 1
    assert wait_until(lambda: annotation(api, "n1", SPLIT_KEY), what="a decision with the flags' policy") == "2"


def test_a_deeply_nested_policy_is_refused_with_an_invalid_policy_event(
        cluster: Cluster, start_app: Callable[..., App]) -> None:
    _, api, _ = cluster
    policy_configmap(api, "pools:\n  " + "[" * 900 + "]" * 900 + "\n")  # RecursionError in the pure-Python loader
    add_node(api, "n1", [L] * 8)
    app = start_app(configmap=("dra-bridge", "policy"))
    (warning,) = wait_until(lambda: events(api, "InvalidPolicy"), what="the InvalidPolicy Event")
    assert "nested deeper than 64 levels" in warning["message"]
    assert app.metrics.policy_errors._value.get() == 1


def test_a_long_policy_value_is_named_briefly_in_the_event_and_the_log(
        cluster: Cluster, start_app: Callable[..., App], caplog: Any) -> None:
    _, api, _ = cluster
    policy_configmap(api, "maxMovesPerMinute: '" + "9" * 500_000 + "'\n")
    add_node(api, "n1", [L] * 8)
    start_app(configmap=("dra-bridge", "policy"))
    (warning,) = wait_until(lambda: events(api, "InvalidPolicy"), what="the InvalidPolicy Event")
    assert "(500000 characters)" in warning["message"] and len(warning["message"]) < 400
    assert all(len(r.getMessage()) < 2000 for r in caplog.records)


def test_a_node_whose_daemon_cannot_evaluate_its_split_is_settling_not_planned() -> None:
    """Issue 27 item 4: while evaluations fail the daemon publishes evaluationError; what it shows was not
    re-evaluated, so the controller neither plans moves there nor counts its free GPUs as movable."""
    import json

    from bridge.controller.nodestatus import node_view
    from tests.controller.status_docs import gpu_node

    node = gpu_node("n1", [L] * 8, target="2", requested="0")
    doc = json.loads(node["metadata"]["annotations"][STATUS_KEY])
    doc["evaluationError"] = {"since": "2025-06-01T12:00:00Z", "message": "RuntimeError: PodResources broke"}
    doc["message"] = "error: RuntimeError: PodResources broke"
    node["metadata"]["annotations"][STATUS_KEY] = json.dumps(doc)
    view = node_view(node)
    assert view.frozen == "settling" and not view.unreadable
    assert view.frozen_reason == "the node daemon cannot evaluate its split: RuntimeError: PodResources broke"
