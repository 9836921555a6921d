"""`bridge controller` end to end against the API emulator: informers, the Lease, the writes, Events, metrics.

The node daemons are played by the test: each Node carries the split-status annotation a daemon would publish.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from bridge.controller.app import App, AppOptions, LeaseOptions
from bridge.controller.loop import ControllerOptions
from bridge.controller.metrics import ControllerMetrics
from bridge.controller.model import PLANS, Policy, TargetChange
from bridge.controller.nodestatus import PIN_KEY, SPLIT_KEY, STATUS_KEY
from bridge.controller.record import DECISION_KEY, decode
from bridge.controller.writer import Writer
from bridge.kube import CONFIG_MAPS, EVENTS, NAMESPACES, NODES, PODS, RestKube, RetryPolicy, connect
from bridge.sandbox.apiserver import ApiServer
from tests.controller.status_docs import gpu_node, status_doc
from tests.kubenodes import register_node
from tests.polling import wait_until

L, D = "legacy", "dra"
RETRY = RetryPolicy(initial_backoff=0.05, factor=2.0, max_backoff=0.5, deadline=10.0)
LEASE = LeaseOptions(namespace="dra-bridge", lease_duration=2.0, renew_deadline=1.5, retry_period=0.25)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ApiServer, RestKube, Path]]:
    with ApiServer() as srv:
        path = tmp_path / "kubeconfig"
        srv.write_kubeconfig(path)
        with connect(path, retry=RETRY, timeout=10) as api:
            for ns in ("team-a", "team-b", "dra-bridge"):
                api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            yield srv, api, path


@pytest.fixture
def start_app(cluster: tuple[ApiServer, RestKube, Path]) -> Iterator[Callable[..., App]]:
    apps: list[tuple[App, RestKube]] = []

    def start(identity: str = "ctl-a", *, dry_run: bool = False, policy: Policy | None = None,
              configmap: tuple[str, str] | None = None) -> App:
        client = connect(cluster[2], retry=RETRY, timeout=10)
        opts = AppOptions(
            controller=ControllerOptions(policy=policy or Policy(max_moves_per_minute=100, cooldown_s=60),
                                         dry_run=dry_run, interval_s=0.1, resync_s=0.5, policy_configmap=configmap),
            lease=LEASE, identity=identity, http_address=("127.0.0.1", 0))
        app = App(client, opts).start()
        apps.append((app, client))
        return app

    yield start
    for app, client in apps:
        app.stop()
        client.close()


def add_node(api: RestKube, name: str, sides: list[str], **kw: Any) -> None:
    register_node(api, gpu_node(name, sides, **kw))


def add_dra_pod(api: RestKube, name: str, gpus: int, ns: str = "team-a") -> None:
    rapi = api.resource_api()
    api.create(rapi.claims, {"apiVersion": f"resource.k8s.io/{rapi.version}", "kind": "ResourceClaim",
                             "metadata": {"name": f"{name}-gpus", "namespace": ns},
                             "spec": {"devices": {"requests": [
                                 {"name": "gpus", "exactly": {"deviceClassName": "gpu.dra-bridge.io",
                                                              "count": gpus}}]}}}, ns)
    api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                      "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"claims": [
                          {"name": "gpus"}]}}], "resourceClaims": [{"name": "gpus",
                                                                     "resourceClaimName": f"{name}-gpus"}]}}, ns)


def add_legacy_pod(api: RestKube, name: str, gpus: int, ns: str = "team-b", node: str = "") -> None:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "cuda", "resources": {
        "requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if node:
        spec["nodeName"] = node
    api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                      "spec": spec}, ns)


def annotation(api: RestKube, node: str, key: str) -> str | None:
    return (api.get(NODES, node)["metadata"].get("annotations") or {}).get(key)


def events(api: RestKube, reason: str) -> list[dict[str, Any]]:
    return [e for e in api.list(EVENTS)["items"] if e.get("reason") == reason]


def act_as_daemon(api: RestKube, node: str, sides: list[str], held: list[int]) -> None:
    """Publish the status a daemon would after applying the Node's current target."""
    target = annotation(api, node, SPLIT_KEY) or "0"
    api.patch(NODES, node, {"metadata": {"annotations": {STATUS_KEY: status_doc(
        node, sides, held=held, requested=target, source="annotation")}}})


def test_pending_dra_pods_get_free_legacy_gpus_with_an_event_and_a_record(
        cluster: tuple[ApiServer, RestKube, Path], start_app: Callable[..., App]) -> None:
    _, api, _ = cluster
    add_node(api, "gpu-node-1", [L] * 8, held=[0, 1, 2, 3, 4, 5, 6])  # one free GPU: too few for any pod
    add_node(api, "gpu-node-9", [L] * 8)  # where the pods would go if gpu-node-4's new target were forgotten
    add_node(api, "gpu-node-4", [L] * 8, held=[0, 1])
    for i in range(3):
        add_dra_pod(api, f"train-{i}", 2)
    app = start_app()
    target = wait_until(lambda: annotation(api, "gpu-node-4", SPLIT_KEY), what="a target on gpu-node-4")
    assert target == "6"
    assert annotation(api, "gpu-node-1", SPLIT_KEY) is None and annotation(api, "gpu-node-9", SPLIT_KEY) is None
    record = decode(annotation(api, "gpu-node-4", DECISION_KEY) or "")
    assert (record.controller, record.dry_run, record.previous, record.target, record.moves) == (
        "ctl-a", False, "", "6", 6)
    assert record.reason == ("3 pending DRA pods in team-a need 6 GPUs; gpu-node-4 had 6 free legacy GPUs: "
                             "moving 6 to DRA")
    (event,) = wait_until(lambda: events(api, "SplitTargetChanged"), what="the Event")
    assert event["involvedObject"]["name"] == "gpu-node-4" and event["type"] == "Normal"
    assert "3 pending DRA pods in team-a need 6 GPUs" in event["message"]
    assert event["source"]["component"] == "dra-bridge-controller"
    # Decisions before the daemon acts plan with the target it was given: nothing is asked twice elsewhere.
    decisions = app.metrics.decisions._value.get()
    wait_until(lambda: app.metrics.decisions._value.get() >= decisions + 3, what="more decisions")
    assert len(events(api, "SplitTargetChanged")) == 1 and events(api, "GPUDemandBlocked") == []
    # How each plan was reached: the first from scratch, and the one after the write's echo (gpu-node-4 settling at
    # its new target); then, nothing changing, the decisions go on from the last plan.
    taken = app.metrics.decisions._value.get()
    plans = {p: app.metrics.registry.get_sample_value("dra_bridge_controller_plan_seconds_count", {"plan": p}) or 0
             for p in PLANS}
    assert plans["from-scratch"] >= 2 and plans["went-on"] >= 1, plans
    assert sum(plans.values()) >= taken  # (each plan is timed before its decision is counted)
    # Each decision's writes are timed too: the one that changed gpu-node-4 (a patch and an Event), and the others.
    assert app.metrics.registry.get_sample_value("dra_bridge_controller_write_seconds_count", {"changed": "yes"}) == 1
    assert app.metrics.registry.get_sample_value("dra_bridge_controller_write_seconds_sum", {"changed": "yes"}) > 0
    assert app.metrics.registry.get_sample_value("dra_bridge_controller_write_seconds_count", {"changed": "no"}) >= 2
    # The daemon applies it; the pods are still pending (not yet bound): nothing more changes.
    act_as_daemon(api, "gpu-node-4", [L] * 2 + [D] * 6, held=[0, 1])
    decisions = app.metrics.decisions._value.get()
    wait_until(lambda: app.metrics.decisions._value.get() >= decisions + 3, what="more decisions")
    assert annotation(api, "gpu-node-4", SPLIT_KEY) == "6"
    assert len(events(api, "SplitTargetChanged")) == 1


def test_dry_run_records_what_it_would_do_once_and_never_writes_the_split_key(
        cluster: tuple[ApiServer, RestKube, Path], start_app: Callable[..., App]) -> None:
    _, api, _ = cluster
    add_node(api, "n1", [L] * 8)
    add_dra_pod(api, "train", 4)
    app = start_app(dry_run=True)
    text = wait_until(lambda: annotation(api, "n1", DECISION_KEY), what="the dry-run record")
    record = decode(text)
    assert record.dry_run and record.target == "4" and record.previous == ""
    decisions = app.metrics.decisions._value.get()
    wait_until(lambda: app.metrics.decisions._value.get() >= decisions + 3, what="more decisions")
    assert annotation(api, "n1", SPLIT_KEY) is None
    (event,) = events(api, "SplitTargetWouldChange")
    assert event["message"].startswith("would set dra-bridge.io/dra-devices (none) -> 4")
    assert events(api, "SplitTargetChanged") == []


def test_a_pinned_node_is_never_written_and_the_blocked_pod_is_told_why(
        cluster: tuple[ApiServer, RestKube, Path], start_app: Callable[..., App]) -> None:
    _, api, _ = cluster
    add_node(api, "pinned", [L] * 8, annotations={PIN_KEY: "true"})
    add_node(api, "full", [L] * 8, held=list(range(8)))
    add_dra_pod(api, "train", 2)
    start_app()
    (warning,) = wait_until(lambda: events(api, "GPUDemandBlocked"), what="the blocked-pod Event")
    assert warning["involvedObject"]["kind"] == "Pod" and warning["involvedObject"]["name"] == "train"
    assert warning["type"] == "Warning" and "(frozen)" in warning["message"] and "pinned" in warning["message"]
    assert annotation(api, "pinned", SPLIT_KEY) is None and annotation(api, "full", SPLIT_KEY) is None


def test_moves_past_the_limit_per_decision_wait_for_the_next_decision_and_the_pod_is_told_so(
        cluster: tuple[ApiServer, RestKube, Path], start_app: Callable[..., App]) -> None:
    _, api, _ = cluster
    add_node(api, "n1", [L] * 8)
    add_node(api, "n2", [L] * 8)
    add_dra_pod(api, "train-0", 4)
    add_dra_pod(api, "train-1", 4)
    start_app(policy=Policy(max_moves_per_minute=100, max_moves_per_decision=4, cooldown_s=60))
    def targets() -> dict[str, str]:
        return {n: t for n in ("n1", "n2") if (t := annotation(api, n, SPLIT_KEY))}

    ((node, target),) = wait_until(targets, what="the first decision's target").items()
    assert target == "4"  # 4 moves for train-0; train-1's wait for the next decision
    (warning,) = wait_until(lambda: events(api, "GPUDemandBlocked"), what="the blocked-pod Event")
    assert warning["involvedObject"]["name"] == "train-1" and "(rate-limit)" in warning["message"]
    assert "the limit of 4 moves per decision is reached (the next decision goes on)" in warning["message"]
    act_as_daemon(api, node, [D] * 4 + [L] * 4, held=[])  # the daemon moved them; train-0 is not bound yet
    wait_until(lambda: annotation(api, node, SPLIT_KEY) == "8", what="the next decision's 4 moves")
    assert annotation(api, "n2" if node == "n1" else "n1", SPLIT_KEY) is None


def test_a_dry_run_tells_the_pods_past_the_limit_per_decision_that_no_decision_goes_further(
        cluster: tuple[ApiServer, RestKube, Path], start_app: Callable[..., App]) -> None:
    _, api, _ = cluster
    add_node(api, "n1", [L] * 8)
    add_dra_pod(api, "train-0", 4)
    add_dra_pod(api, "train-1", 4)
    app = start_app(dry_run=True, policy=Policy(max_moves_per_minute=100, max_moves_per_decision=4, cooldown_s=60))
    (warning,) = wait_until(lambda: events(api, "GPUDemandBlocked"), what="the blocked-pod Event")
    assert warning["involvedObject"]["name"] == "train-1" and "(rate-limit)" in warning["message"]
    assert warning["message"].endswith("the limit of 4 moves per decision is reached (a dry run writes nothing: "
                                       "every decision plans the same first 4)")
    decisions = app.metrics.decisions._value.get()
    wait_until(lambda: app.metrics.decisions._value.get() >= decisions + 3, what="more decisions")
    record = decode(wait_until(lambda: annotation(api, "n1", DECISION_KEY), what="the dry-run record"))
    assert record.dry_run and record.target == "4"  # the same first 4 moves, decision after decision
    assert annotation(api, "n1", SPLIT_KEY) is None and len(events(api, "GPUDemandBlocked")) == 1


def test_two_replicas_one_writes_and_the_other_takes_over_when_it_stops(
        cluster: tuple[ApiServer, RestKube, Path], start_app: Callable[..., App]) -> None:
    _, api, _ = cluster
    add_node(api, "n1", [L] * 8)
    add_node(api, "n2", [L] * 8)
    a = start_app("ctl-a")
    wait_until(a.elector.is_leader, what="ctl-a leads")  # type: ignore[union-attr]
    b = start_app("ctl-b")
    add_dra_pod(api, "first", 8)
    wait_until(lambda: events(api, "SplitTargetChanged"), what="the first change")
    changed = [n for n in ("n1", "n2") if annotation(api, n, SPLIT_KEY)]
    assert len(changed) == 1 and decode(annotation(api, changed[0], DECISION_KEY) or "").controller == "ctl-a"
    a.stop()
    wait_until(b.elector.is_leader, what="ctl-b takes over")  # type: ignore[union-attr]
    add_dra_pod(api, "second", 8)
    other = "n2" if changed[0] == "n1" else "n1"
    wait_until(lambda: annotation(api, other, SPLIT_KEY) == "8", what="ctl-b's change")
    assert decode(annotation(api, other, DECISION_KEY) or "").controller == "ctl-b"
    # The writer records the Event after the write the wait above saw.
    changes = wait_until(lambda: e if len(e := events(api, "SplitTargetChanged")) >= 2 else None,
                         what="ctl-b's SplitTargetChanged Event")
    assert len(changes) == 2


def test_metrics_and_health_are_served(cluster: tuple[ApiServer, RestKube, Path],
                                       start_app: Callable[..., App]) -> None:
    _, api, _ = cluster
    add_node(api, "n1", [L] * 8, held=[0])
    add_node(api, "dark", [L] * 2)
    api.patch(NODES, "dark", {"metadata": {"annotations": {STATUS_KEY: "{broken"}}})
    add_dra_pod(api, "train", 3)
    add_legacy_pod(api, "job", 2)
    app = start_app()
    assert app.http is not None
    base = f"http://127.0.0.1:{app.http.port}"
    wait_until(lambda: annotation(api, "n1", SPLIT_KEY), what="the change")

    def metrics() -> str:
        with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
            return str(r.read().decode())

    moved = 'dra_bridge_controller_moves_total{direction="to-dra",mode="apply"}'

    def gauged() -> str:
        # The moves are counted once the target's write returned, after the annotation the wait above saw.
        text = metrics()
        return text if 'dra_bridge_controller_pending_gpus{api="dra"} 3.0' in text and moved in text else ""

    text = wait_until(gauged, what="the pending-demand gauge and the moves counter")
    assert 'dra_bridge_controller_pending_gpus{api="legacy"} 2.0' in text
    assert f"{moved} 3.0" in text
    assert 'dra_bridge_controller_nodes{state="unknown"} 1.0' in text
    assert 'dra_bridge_controller_leader 1.0' in text
    assert 'dra_bridge_controller_api_requests_total{verb="patch"}' in text
    with urllib.request.urlopen(base + "/readyz", timeout=5) as r:
        assert r.status == 200


def test_an_invalid_policy_configmap_is_refused_loudly_and_a_valid_one_applies(
        cluster: tuple[ApiServer, RestKube, Path], start_app: Callable[..., App]) -> None:
    _, api, _ = cluster
    api.create(CONFIG_MAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "policy", "namespace": "dra-bridge"},
                             "data": {"policy.yaml": "maxMovesPerMinute: lots\n"}}, "dra-bridge")
    add_node(api, "n1", [L] * 8)
    app = start_app(configmap=("dra-bridge", "policy"))
    (warning,) = wait_until(lambda: events(api, "InvalidPolicy"), what="the InvalidPolicy Event")
    assert "maxMovesPerMinute: expected a whole number from 0 to 100000, got 'lots'" in warning["message"]
    assert warning["involvedObject"]["kind"] == "ConfigMap"
    assert app.metrics.policy_errors._value.get() == 1
    api.patch(CONFIG_MAPS, "policy", {"data": {"policy.yaml": "maxMovesPerMinute: 0\n"}}, "dra-bridge")
    wait_until(lambda: app.controller.policy.max_moves_per_minute == 0, what="the new policy")
    add_dra_pod(api, "train", 2)
    blocked = wait_until(lambda: [b for b in (app.controller.last_decision.blocked
                                              if app.controller.last_decision else ())], what="a blocked pod")
    assert blocked[0].reason == "rate-limit"
    assert annotation(api, "n1", SPLIT_KEY) is None


def test_a_node_that_changed_since_the_decision_is_left_alone(cluster: tuple[ApiServer, RestKube, Path]) -> None:
    _, api, _ = cluster
    add_node(api, "n1", [L] * 8)
    stale = api.get(NODES, "n1")
    api.patch(NODES, "n1", {"metadata": {"annotations": {PIN_KEY: "true"}}})  # an operator pins it meanwhile
    metrics = ControllerMetrics()
    writer = Writer(api, identity="ctl", dry_run=False, metrics=metrics)
    change = TargetChange("n1", 0, 2, "", "1 pending DRA pod needs 2 GPUs")
    assert writer.apply([change], {"n1": stale}, lambda: True) == []
    assert annotation(api, "n1", SPLIT_KEY) is None
    assert metrics.write_failures.labels(reason="conflict")._value.get() == 1
    assert writer.apply([change], {"n1": api.get(NODES, "n1")}, lambda: False) == [], "only the leader writes"


class Spied:
    """The client, with each Node patch and Event create timed (start, end), and Event creates that can be slowed down
    or made to fail."""

    def __init__(self, api: RestKube, event_delay: float = 0.0, failing_events: int = 0) -> None:
        self.api, self.event_delay, self.failing_events = api, event_delay, failing_events
        self.calls: list[tuple[str, str, float, float]] = []  # (verb, node, start, end)

    def patch(self, res: Any, name: str, body: Any, *args: Any, **kw: Any) -> Any:
        start = time.monotonic()
        out = self.api.patch(res, name, body, *args, **kw)
        self.calls.append(("patch", name, start, time.monotonic()))
        return out

    def create(self, res: Any, obj: Any, *args: Any, **kw: Any) -> Any:
        start = time.monotonic()
        time.sleep(self.event_delay)
        node = obj["involvedObject"]["name"]
        if self.failing_events > 0:
            self.failing_events -= 1
            self.calls.append(("event failed", node, start, time.monotonic()))
            raise RuntimeError("a bug in the Event's path")
        out = self.api.create(res, obj, *args, **kw)
        self.calls.append(("event", node, start, time.monotonic()))
        return out


def five_nodes(api: RestKube) -> tuple[list[TargetChange], dict[str, Any]]:
    for i in range(5):
        add_node(api, f"n{i}", [L] * 8)
    changes = [TargetChange(f"n{i}", 0, 2, "", f"pending DRA pod team-a/p{i} needs 2 GPUs") for i in range(5)]
    return changes, {f"n{i}": api.get(NODES, f"n{i}") for i in range(5)}


def test_a_decision_returns_with_every_change_and_its_event_written(
        cluster: tuple[ApiServer, RestKube, Path]) -> None:
    _, api, _ = cluster
    changes, nodes = five_nodes(api)
    writer = Writer(api, identity="ctl", dry_run=False, metrics=ControllerMetrics())
    assert writer.apply(changes, nodes, lambda: True) == changes
    assert [annotation(api, f"n{i}", SPLIT_KEY) for i in range(5)] == ["2"] * 5
    assert sorted(e["involvedObject"]["name"] for e in events(api, "SplitTargetChanged")) == [f"n{i}" for i in range(5)]


def test_a_change_s_event_is_sent_while_the_next_patch_is(cluster: tuple[ApiServer, RestKube, Path]) -> None:
    """The patches go in order, one at a time; each Event overlaps the next patch instead of waiting before it."""
    _, api, _ = cluster
    changes, nodes = five_nodes(api)
    spied = Spied(api, event_delay=0.2)
    Writer(cast(Any, spied), identity="ctl", dry_run=False, metrics=ControllerMetrics()).apply(
        changes, nodes, lambda: True)
    patches = [c for c in spied.calls if c[0] == "patch"]
    sent = {c[1]: c for c in spied.calls if c[0] == "event"}
    assert [p[1] for p in patches] == [f"n{i}" for i in range(5)]
    assert all(a[3] <= b[2] for a, b in zip(patches, patches[1:])), "one patch in flight at a time"
    assert patches[1][2] < sent["n0"][3], "n1's patch went out while n0's Event was in flight"
    assert all(sent[f"n{i}"][2] >= patches[i][3] for i in range(5)), "an Event follows its own patch"
    assert set(sent) == {f"n{i}" for i in range(5)}, "every Event sent by the time apply returned"


def test_a_replica_that_stops_leading_stops_between_two_patches_and_sends_their_events(
        cluster: tuple[ApiServer, RestKube, Path]) -> None:
    _, api, _ = cluster
    changes, nodes = five_nodes(api)
    checks = iter([True, True])
    written = Writer(api, identity="ctl", dry_run=False, metrics=ControllerMetrics()).apply(
        changes, nodes, lambda: next(checks, False))
    assert written == changes[:2]
    assert [annotation(api, f"n{i}", SPLIT_KEY) for i in range(5)] == ["2", "2", None, None, None]
    assert sorted(e["involvedObject"]["name"] for e in events(api, "SplitTargetChanged")) == ["n0", "n1"]


def test_an_event_that_fails_is_logged_and_loses_no_patch_and_no_other_event(
        cluster: tuple[ApiServer, RestKube, Path], caplog: pytest.LogCaptureFixture) -> None:
    _, api, _ = cluster
    changes, nodes = five_nodes(api)
    spied = Spied(api, failing_events=1)
    assert Writer(cast(Any, spied), identity="ctl", dry_run=False, metrics=ControllerMetrics()).apply(
        changes, nodes, lambda: True) == changes
    assert [annotation(api, f"n{i}", SPLIT_KEY) for i in range(5)] == ["2"] * 5
    assert sorted(e["involvedObject"]["name"] for e in events(api, "SplitTargetChanged")) == ["n1", "n2", "n3", "n4"]
    assert "an Event of the decision was not recorded" in caplog.text and "a bug in the Event's path" in caplog.text


def test_the_controller_keeps_of_each_watched_object_only_what_it_reads(
        cluster: tuple[ApiServer, RestKube, Path], start_app: Callable[..., App]) -> None:
    _, api, _ = cluster
    add_node(api, "gpu-node-1", [L] * 8, labels={"nvidia.com/gpu.product": "H100"})
    api.create(PODS, {"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": "web", "namespace": "team-b", "labels": {"app": "web"}},
                      "spec": {"containers": [{"name": "main", "image": "nginx", "env": [{"name": "A", "value": "1"}],
                                               "resources": {"requests": {"cpu": "1"}}}],
                               "volumes": [{"name": "v", "emptyDir": {}}]}}, "team-b")
    add_legacy_pod(api, "train", 2)
    app = start_app()
    wait_until(app.controller.synced, what="the informers' lists")
    pods = app.controller.pods.snapshot()
    web, train = pods["team-b/web"], pods["team-b/train"]
    assert (web["apiVersion"], web["kind"], web["metadata"]["name"]) == ("v1", "Pod", "web")
    # what ranks it in the queue (the Priority admission's 0, as a real API server writes it) and nothing else
    assert "labels" not in web["metadata"] and web["spec"] == {"priority": 0}, "a pod asking for no GPU keeps no spec"
    assert train["spec"]["containers"] == [{"name": "main", "resources": {
        "requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}}]
    node = app.controller.nodes.snapshot()["gpu-node-1"]
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "H100"
    assert set(node.get("status") or {}) <= {"capacity", "allocatable", "conditions"}
    # What is cut is what the controller never reads: the pending GPU pod is still its demand, the other one is not.
    assert [(p.key, p.api, p.gpus) for p in app.controller.build().demand.pending] == [("team-b/train", "legacy", 2)]
