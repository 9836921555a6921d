"""`bridge namespace set/status` tell the truth about the webhook: registered, reachable, covering the namespace,
and the GPU pods that arrived untranslated since the flip (the webhook fails open, so nothing else says so)."""

from __future__ import annotations

import copy
import json
import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bridge.cli import main as cli
from bridge.kube import connect
from bridge.kube.api import ENDPOINT_SLICES, EVENTS, MUTATING_WEBHOOKS, NAMESPACES, PODS, SERVICES, KubeAPI
from bridge.sandbox.apiserver import ApiServer
from bridge.webhook.coverage import Hook, coverage, find_hooks, judge_condition, selector_matches
from bridge.webhook.nscheck import FLIP_ANNOTATION
from tests.polling import wait_until
from tests.webhook.test_e2e import EXAMPLES, Cluster, cluster_factory  # noqa: F401 (fixture)

REGISTRATION = yaml.safe_load((EXAMPLES / "mutatingwebhookconfiguration.yaml").read_text())


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[tuple[KubeAPI, str]]:
    with ApiServer() as srv:
        path = srv.write_kubeconfig(tmp_path / "kubeconfig")
        api = connect(str(path))
        for name in ("team-a", "dra-bridge"):
            api.create(NAMESPACES, {"metadata": {"name": name}})
        yield api, str(path)


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def registration(**changes: Any) -> dict[str, Any]:
    hook = copy.deepcopy(REGISTRATION)
    hook["webhooks"][0].update(changes)
    return hook


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gpu_pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [
        {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def next_second() -> None:
    """Flip and creation times have one-second resolution, and a pod created in the flip's own second counts as
    after it: a pod meant to come before the flip is created a second earlier."""
    start = int(time.time())
    wait_until(lambda: int(time.time()) > start, timeout=3, interval=0.05)


def mode_of(api: KubeAPI, name: str) -> str | None:
    return (api.get(NAMESPACES, name)["metadata"].get("labels") or {}).get("dra-bridge.io/mode")


def test_without_our_webhook_set_warns_and_strict_refuses(emulator: tuple[KubeAPI, str]) -> None:
    api, path = emulator
    strict = run("namespace", "set", "team-a", "dra", "--strict", "--kubeconfig", path)
    assert strict.exit_code == 1, strict.output
    assert "no MutatingWebhookConfiguration has a webhook named pods.dra-bridge.io" in strict.output
    assert "NOT changed" in strict.output and mode_of(api, "team-a") is None
    loose = run("namespace", "set", "team-a", "dra", "--kubeconfig", path)
    assert loose.exit_code == 0 and "WARNING: no MutatingWebhookConfiguration" in loose.output
    assert "admitted UNTRANSLATED" in loose.output and mode_of(api, "team-a") == "dra"
    assert FLIP_ANNOTATION in api.get(NAMESPACES, "team-a")["metadata"]["annotations"]


def test_a_registration_that_does_not_select_the_namespace_is_named(emulator: tuple[KubeAPI, str]) -> None:
    api, path = emulator
    api.create(MUTATING_WEBHOOKS, registration(namespaceSelector={"matchLabels": {"team": "gold"}},
                                               clientConfig={"url": f"https://127.0.0.1:{closed_port()}/mutate"}))
    out = run("namespace", "set", "team-a", "shadow", "--strict", "--kubeconfig", path)
    assert out.exit_code == 1
    assert "does not cover this namespace: its namespaceSelector does not select the namespace" in out.output
    assert "is not reachable: no TLS handshake with 127.0.0.1" in out.output


def test_system_and_the_webhooks_own_namespaces_are_refused(emulator: tuple[KubeAPI, str]) -> None:
    api, path = emulator
    api.create(MUTATING_WEBHOOKS, registration())  # clientConfig.service in namespace dra-bridge
    for ns in ("kube-system", "kube-public", "dra-bridge"):
        out = run("namespace", "set", ns, "dra", "--kubeconfig", path)
        assert out.exit_code == 2 and "refusing" in out.output, (ns, out.output)
        assert mode_of(api, ns) is None
    assert run("namespace", "set", "kube-system", "legacy", "--kubeconfig", path).exit_code == 0  # undoing is fine


def test_service_registration_is_reachable_only_with_ready_endpoints(emulator: tuple[KubeAPI, str]) -> None:
    api, path = emulator
    api.create(MUTATING_WEBHOOKS, registration())
    out = run("namespace", "set", "team-a", "dra", "--strict", "--kubeconfig", path)
    assert out.exit_code == 1 and "Service dra-bridge/dra-bridge-webhook does not exist" in out.output
    api.create(SERVICES, {"metadata": {"name": "dra-bridge-webhook"}, "spec": {"ports": [{"port": 443}]}}, "dra-bridge")
    slice_ = {"metadata": {"name": "dra-bridge-webhook-x", "labels": {"kubernetes.io/service-name": "dra-bridge-webhook"}},
              "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.9"], "conditions": {"ready": False}}]}
    api.create(ENDPOINT_SLICES, slice_, "dra-bridge")
    out = run("namespace", "set", "team-a", "dra", "--strict", "--kubeconfig", path)
    assert out.exit_code == 1 and "has no ready endpoints" in out.output
    slice_["endpoints"].append({"addresses": ["10.0.0.10"], "conditions": {"ready": True}})
    api.create(ENDPOINT_SLICES, dict(slice_, metadata=dict(slice_["metadata"], name="dra-bridge-webhook-y")), "dra-bridge")
    # --no-wait: the endpoint is made up, so no webhook would ever answer the dry-run probe (test_namespace_wait.py)
    out = run("namespace", "set", "team-a", "dra", "--strict", "--no-wait", "--kubeconfig", path)
    assert out.exit_code == 0, out.output
    assert "Service dra-bridge/dra-bridge-webhook (port 443) has 1 ready endpoint(s)" in out.output
    assert mode_of(api, "team-a") == "dra"


def test_with_the_real_webhook_the_flip_succeeds_and_status_counts_pods_since_it(
        cluster_factory: Callable[[str, str], Cluster]) -> None:  # noqa: F811
    c = cluster_factory("1.35.0", "claims")
    c.api.create(NAMESPACES, {"metadata": {"name": "team-t"}})
    out = run("namespace", "set", "team-t", "dra", "--strict", "--kubeconfig", c.kubeconfig)
    assert out.exit_code == 0, out.output
    assert "TLS handshake with 127.0.0.1" in out.output and "WARNING" not in out.output
    assert "a GPU pod created in team-t now gets dra from the webhook" in out.output  # set waited for the webhook
    next_second()
    c.create_pod("team-t", 1)
    status = json.loads(run("namespace", "status", "team-t", "-o", "json", "--kubeconfig", c.kubeconfig).output)[0]
    # covered: None, "for the pods its conditions select": the matchConditions need the pod
    assert status["webhook"] == {"name": "pods.dra-bridge.io", "registered": True, "reachable": True, "covered": None,
                                 "configurations": ["dra-bridge"], "problems": [], "notes": status["webhook"]["notes"]}
    assert status["sinceFlip"]["handled"] == 1 and status["sinceFlip"]["untranslated"] == 0


def test_status_reports_pods_that_arrived_untranslated_after_the_flip(emulator: tuple[KubeAPI, str]) -> None:
    api, path = emulator
    # Registered, but its URL answers nothing: failurePolicy Ignore admits every pod untranslated, silently.
    api.create(MUTATING_WEBHOOKS, registration(clientConfig={"url": f"https://127.0.0.1:{closed_port()}/mutate"},
                                               timeoutSeconds=1))
    api.create(PODS, gpu_pod("before"), "team-a")
    next_second()
    assert run("namespace", "set", "team-a", "dra", "--kubeconfig", path).exit_code == 0
    api.create(PODS, gpu_pod("lost-1"), "team-a")
    api.create(PODS, gpu_pod("mig"), "team-a")
    api.create(PODS, {"metadata": {"name": "cpu"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}, "team-a")
    optout = gpu_pod("optout")
    optout["metadata"]["annotations"] = {"dra-bridge.io/translate": "false"}
    api.create(PODS, optout, "team-a")
    api.create(EVENTS, {"metadata": {"name": "mig.1"}, "involvedObject": {"kind": "Pod", "name": "mig", "namespace": "team-a"},
                        "reason": "DRABridgeUntranslatable", "message": "nvidia.com/mig-1g.10gb is a MIG slice",
                        "type": "Warning"}, "team-a")
    status = json.loads(run("namespace", "status", "team-a", "-o", "json", "--kubeconfig", path).output)[0]
    flip = status["sinceFlip"]
    assert (flip["gpuPods"], flip["handled"], flip["leftLegacyByWebhook"], flip["expectedLegacy"]) == (3, 0, 1, 1)
    assert flip["untranslated"] == 1 and flip["untranslatedPods"] == ["lost-1"]
    assert status["webhook"]["registered"] is True and status["webhook"]["reachable"] is False
    table = run("namespace", "status", "team-a", "--kubeconfig", path)
    assert table.exit_code == 0
    assert "WARNING: 1 GPU pod(s) arrived untranslated without the webhook seeing them (it fails open): lost-1" in table.output


def test_every_api_command_has_a_timeout_and_exits_2_when_the_api_is_unreachable(
        unreachable_kubeconfig: Path, tmp_path: Path) -> None:
    kubeconfig = unreachable_kubeconfig
    for args in (["namespace", "set", "team-a", "dra"], ["namespace", "status"]):
        started = time.monotonic()
        out = run(*args, "--kubeconfig", str(kubeconfig), "--timeout", "1")
        assert out.exit_code == 2, out.output
        assert time.monotonic() - started < 15 and "Traceback" not in out.output
    missing = run("namespace", "status", "--kubeconfig", str(tmp_path / "nope"))
    assert missing.exit_code == 2 and "does not exist" in missing.output


# -- the pure rules ------------------------------------------------------------------------------------------------
def ns(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}}}


def test_the_shipped_registration_covers_shadow_and_dra_namespaces_only() -> None:
    (hook,) = find_hooks([REGISTRATION])
    # None: the namespace is selected, and the matchConditions decide per pod (GPU pods without a translation record)
    assert coverage(hook, ns("team-a", **{"dra-bridge.io/mode": "dra"})).covered is None
    assert coverage(hook, ns("team-a", **{"dra-bridge.io/mode": "shadow"})).covered is None
    assert coverage(hook, ns("team-a")).covered is False
    assert coverage(hook, ns("dra-bridge", **{"dra-bridge.io/mode": "dra"})).covered is False
    assert hook.own_namespace == "dra-bridge" and find_hooks([REGISTRATION], "other.example.com") == []


@pytest.mark.parametrize(("selector", "labels", "matches"), [
    (None, {}, True), ({}, {"a": "b"}, True),
    ({"matchLabels": {"a": "b"}}, {"a": "b"}, True), ({"matchLabels": {"a": "b"}}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["x"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
    ({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}, {"a": "2"}, False),
])
def test_label_selector_semantics(selector: Any, labels: dict[str, str], matches: bool) -> None:
    assert selector_matches(selector, labels) is matches


def test_match_conditions_are_judged_as_far_as_possible_without_a_pod() -> None:
    team = ns("team-a", **{"dra-bridge.io/mode": "dra", "tier": "gold"})
    assert judge_condition("n", 'namespaceObject.metadata.labels["tier"] == "gold"', team).verdict is True
    assert judge_condition("r", 'request.namespace == "other"', team).verdict is False
    assert judge_condition("s", 'request.namespace == "other" && object.spec.nodeName == ""', team).verdict is False
    pod_dependent = judge_condition("gpu", "object.spec.containers.exists(c, has(c.resources.limits))", team)
    assert pod_dependent.verdict is None and "depends on `object`" in pod_dependent.detail
    assert judge_condition("bad", "object.(", team).verdict is False
    hook = Hook("cfg", dict(REGISTRATION["webhooks"][0], matchConditions=[
        {"name": "gpu", "expression": "object.spec.containers.size() > 0"}]))
    verdict = coverage(hook, team)
    assert verdict.covered is None and any("decided for each pod" in n for n in verdict.notes)
    excluded = Hook("cfg", dict(REGISTRATION["webhooks"][0], matchConditions=[
        {"name": "not-here", "expression": 'namespaceObject.metadata.name != "team-a"'}]))
    assert coverage(excluded, team).covered is False
