"""`bridge namespace set` returns only once the webhook applies the new mode (a dry-run probe pod shows it), says how
long that took, and says so loudly when it does not: the webhook reads namespace labels from a watch, so without the
wait pods created right after a flip can be admitted under the old mode."""

from __future__ import annotations

import copy
import heapq
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bridge.cli import main as cli
from bridge.kube import connect
from bridge.kube.api import EVENTS, MUTATING_WEBHOOKS, NAMESPACES, PODS, KubeAPI, WatchEvent
from bridge.kube.client import parse_warning_headers
from bridge.kube.errors import Forbidden
from bridge.sandbox.apiserver import ApiServer
from bridge.webhook.effects import MISS, NamespaceCache
from bridge.webhook.metrics import WebhookMetrics
from bridge.webhook.modeprobe import PROBE_LABEL, observe, wait_applied
from bridge.webhook.policy import Mode
from tests.polling import wait_until
from tests.webhook.test_e2e import Cluster, cluster_factory  # noqa: F401 (fixture)

LAG = 1.5  # seconds the lagging webhook's namespace watch is behind


class LaggingNamespaceCache(NamespaceCache):
    """The webhook's namespace cache with every watch event applied `lag` seconds late, in order: a watch that is
    slow, or busy re-listing, as a real one can be after an API server hiccup."""

    def __init__(self, api: KubeAPI, metrics: WebhookMetrics, lag: float) -> None:
        self.lag = lag
        self._due: list[tuple[float, int, WatchEvent]] = []
        self._seq = 0
        self._cond = threading.Condition()
        super().__init__(api, metrics)
        threading.Thread(target=self._deliver, name="lagging-namespace-cache", daemon=True).start()

    def _on_event(self, ev: WatchEvent) -> None:
        with self._cond:
            self._seq += 1
            heapq.heappush(self._due, (time.monotonic() + self.lag, self._seq, ev))
            self._cond.notify()

    def _deliver(self) -> None:
        while True:
            with self._cond:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._cond.wait(max(0.01, self._due[0][0] - time.monotonic()) if self._due else None)
                _, _, ev = heapq.heappop(self._due)
            super()._on_event(ev)


def lagging(lag: float) -> Callable[[KubeAPI, WebhookMetrics], NamespaceCache]:
    return lambda api, metrics: LaggingNamespaceCache(api, metrics, lag)


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def seen_after(output: str) -> float:
    found = re.search(r"seen (\d+\.\d)s after the change \((\d+) dry-run probes?\)", output)
    assert found, output
    return float(found.group(1))


def mode_label(c: Cluster, ns: str) -> str | None:
    return (c.api.get(NAMESPACES, ns)["metadata"].get("labels") or {}).get("dra-bridge.io/mode")


def every_namespace(c: Cluster) -> None:
    """Our registration without the opt-in namespaceSelector: the webhook's own view of the label alone decides, so
    a flip back to legacy lags as much as the others (with the opt-in selector the API server stops calling the
    webhook at once; a real API server's selector reads its own namespace cache, which can lag too)."""
    reg = c.api.get(MUTATING_WEBHOOKS, "dra-bridge")
    reg["webhooks"][0]["namespaceSelector"] = {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "dra-bridge"]}]}
    c.api.update(MUTATING_WEBHOOKS, reg)


@pytest.fixture
def slow(cluster_factory: Callable[..., Cluster]) -> Cluster:  # noqa: F811
    c = cluster_factory("1.35.0", "claims", namespace_cache=lagging(LAG))
    c.api.create(NAMESPACES, {"metadata": {"name": "team-w"}})
    wait_until(lambda: c.cache.peek("team-w") is not MISS, what="the webhook's cache to know team-w")
    return c


def test_each_flip_returns_once_a_lagging_webhook_applies_it_and_the_next_pod_gets_the_new_mode(slow: Cluster) -> None:
    c = slow
    every_namespace(c)
    for mode in ("shadow", "dra", "legacy"):
        out = run("namespace", "set", "team-w", mode, "--strict", "--kubeconfig", c.kubeconfig)
        assert out.exit_code == 0, out.output
        assert f"a GPU pod created in team-w now gets {mode} from the webhook" in out.output
        # The wait covered the lag: the webhook's watch saw the label LAG seconds after the change, not before.
        assert seen_after(out.output) >= LAG - 0.2, out.output
        pod = c.create_pod("team-w", 1)  # right after `set` returned
        ann = pod["metadata"].get("annotations") or {}
        limits = pod["spec"]["containers"][0]["resources"].get("limits", {})
        if mode == "shadow":
            assert "dra-bridge.io/shadow-translation" in ann and "nvidia.com/gpu" in limits
        elif mode == "dra":
            assert ann["dra-bridge.io/translated"] == "claims" and "nvidia.com/gpu" not in limits
            assert "translated (claims)" in out.output
        else:
            assert not {"dra-bridge.io/translated", "dra-bridge.io/shadow-translation"} & set(ann)
            assert "nvidia.com/gpu" in limits
    # The probes were dry runs: no probe pod stored, and the only template is the one the real dra pod needed.
    pods = c.api.list(PODS, "team-w")["items"]
    assert len(pods) == 3 and not [p for p in pods if PROBE_LABEL in (p["metadata"].get("labels") or {})]
    assert len(c.api.list(c.templates, "team-w")["items"]) == 1
    assert not [e for e in c.api.list(EVENTS, "team-w")["items"]
                if "probe" in str((e.get("involvedObject") or {}).get("name"))]


def test_a_webhook_that_does_not_catch_up_within_the_timeout_is_a_warning_and_strict_exits_1(
        cluster_factory: Callable[..., Cluster]) -> None:  # noqa: F811
    c = cluster_factory("1.35.0", "claims", namespace_cache=lagging(0))
    c.api.create(NAMESPACES, {"metadata": {"name": "team-w"}})
    wait_until(lambda: c.cache.peek("team-w") is not MISS, what="the webhook's cache to know team-w")
    assert isinstance(c.cache, LaggingNamespaceCache)
    c.cache.lag = 60  # from now on its watch is far behind
    strict = run("namespace", "set", "team-w", "dra", "--strict", "--timeout", "2", "--kubeconfig", c.kubeconfig)
    assert strict.exit_code == 1, strict.output
    assert "does not get dra from the webhook: it still gets legacy" in strict.output
    assert "namespace team-w IS set to dra, but the webhook was not seen applying it" in strict.output
    assert mode_label(c, "team-w") == "dra"  # the flip itself is done; the exit code says it is not in effect
    loose = run("namespace", "set", "team-w", "shadow", "--timeout", "2", "--kubeconfig", c.kubeconfig)
    assert loose.exit_code == 0, loose.output
    assert "WARNING: 2s after the change" in loose.output and "does not get shadow" in loose.output
    quick = run("namespace", "set", "team-w", "dra", "--no-wait", "--kubeconfig", c.kubeconfig)
    assert quick.exit_code == 0 and "dry-run" not in quick.output, quick.output


def test_without_a_webhook_set_does_not_wait_and_shows_what_new_pods_get(tmp_path: Path) -> None:
    with ApiServer() as srv:
        path = str(srv.write_kubeconfig(tmp_path / "kubeconfig"))
        api = connect(path)
        api.create(NAMESPACES, {"metadata": {"name": "team-a"}})
        start = time.monotonic()
        out = run("namespace", "set", "team-a", "dra", "--kubeconfig", path)
        assert out.exit_code == 0, out.output
        assert "WARNING: no MutatingWebhookConfiguration" in out.output
        assert ("not waiting for the webhook to apply dra: a GPU pod created in team-a now: it still gets legacy "
                "(not translated, no shadow record)") in out.output
        assert time.monotonic() - start < 20  # one probe, not a wait of --timeout (30 s)
        back = run("namespace", "set", "team-a", "legacy", "--strict", "--kubeconfig", path)
        assert back.exit_code == 0, back.output  # nothing translates here: legacy is in effect at once
        assert "a GPU pod created in team-a now gets legacy from the webhook" in back.output
        assert seen_after(back.output) < 5


def test_a_probe_the_api_server_refuses_ends_the_wait_with_its_reason(
        cluster_factory: Callable[..., Cluster]) -> None:  # noqa: F811
    """Another webhook on pods without dry-run support (sideEffects Unknown): the API server refuses every dry run."""
    c = cluster_factory("1.35.0", "claims")
    c.api.create(NAMESPACES, {"metadata": {"name": "team-w"}})
    other = copy.deepcopy(c.api.get(MUTATING_WEBHOOKS, "dra-bridge"))
    other["metadata"] = {"name": "other-vendor"}
    other["webhooks"][0].update(name="pods.other.example.com", sideEffects="Unknown", namespaceSelector={},
                                matchConditions=[])
    c.api.create(MUTATING_WEBHOOKS, other)
    out = run("namespace", "set", "team-w", "dra", "--strict", "--kubeconfig", c.kubeconfig)
    assert out.exit_code == 1, out.output
    assert ('cannot check that the webhook applies dra to new pods in team-w: the dry-run create of a probe pod was '
            'refused: admission webhook "pods.other.example.com" does not support dry run') in out.output
    assert mode_label(c, "team-w") == "dra"


def test_missing_rbac_for_the_probe_is_named(tmp_path: Path) -> None:
    with ApiServer() as srv:
        api = connect(str(srv.write_kubeconfig(tmp_path / "kubeconfig")))
        api.create(NAMESPACES, {"metadata": {"name": "team-a"}})
        srv.faults.fail(10, status=403, path_regex=r"/namespaces/team-a/pods$")
        applied = wait_applied(api, "team-a", Mode.DRA, 5)
    assert applied.ok is None and applied.rbac and applied.probes == 0
    assert applied.error == "missing RBAC: create pods in namespace team-a (a dry-run create of a probe pod)"


# kube-apiserver v1.37.2's answer to a pod in a namespace whose ServiceAccount does not exist (the ServiceAccount
# admission plugin, after its own retries of `default`)
NO_SERVICE_ACCOUNT = 'pods "dra-bridge-mode-probe-x" is forbidden: error looking up service account {ns}/default: ' \
                     'serviceaccount "default" not found'


class NewNamespace:
    """The API as seen right after `kubectl create namespace`: pods are refused until the `default` ServiceAccount
    exists (`refusals` answers), then the webhook translates the probe."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.calls = 0

    def create(self, res: Any, obj: Any, namespace: str, **kw: Any) -> Any:
        self.calls += 1
        if self.calls <= self.refusals:
            raise Forbidden(NO_SERVICE_ACCOUNT.format(ns=namespace), verb="create", resource="pods", status=403)
        return {"metadata": {"annotations": {"dra-bridge.io/translated": "claims"}}}


def test_a_namespace_without_its_default_service_account_yet_is_waited_for_not_called_an_rbac_problem() -> None:
    api = NewNamespace(refusals=3)
    applied = wait_applied(api, "team-new", Mode.DRA, 10, sleep=lambda s: None)  # type: ignore[arg-type]
    assert applied.ok is True and applied.probes == 2 and api.calls == 5
    never = NewNamespace(refusals=10**6)
    clock = iter(float(i) for i in range(10**6))
    applied = wait_applied(never, "team-new", Mode.DRA, 5, clock=lambda: next(clock),  # type: ignore[arg-type]
                           sleep=lambda s: None)
    assert applied.ok is None and not applied.rbac
    assert applied.error.startswith("namespace team-new has no default ServiceAccount yet, so the API server refuses "
                                    "every pod there")


def test_the_webhooks_serve_check_waits_for_its_namespaces_default_service_account(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge.webhook import serving

    monkeypatch.setattr(serving.time, "sleep", lambda s: None)

    class Kept(NewNamespace):
        def create(self, res: Any, obj: Any, namespace: str, **kw: Any) -> Any:
            super().create(res, obj, namespace)
            return obj  # the API server kept the claim

    assert serving.check_claims_kept(Kept(refusals=4), "dra-bridge") == (True, "")  # type: ignore[arg-type]
    kept, why = serving.check_claims_kept(Kept(refusals=10**6), "dra-bridge")  # type: ignore[arg-type]
    assert kept is None and "error looking up service account dra-bridge/default" in why


# -- what an answer shows (pure) -----------------------------------------------------------------------------------
def test_the_answer_shows_the_mode_the_webhook_applied() -> None:
    translated = {"metadata": {"annotations": {"dra-bridge.io/translated": "extended"}}}
    shadow = {"metadata": {"annotations": {"dra-bridge.io/shadow-translation": '{"ok":false}'}}}
    assert observe(translated, []).mode is Mode.DRA and observe(translated, []).detail == "translated (extended)"
    assert observe(shadow, ["dra-bridge: would stay on the device plugin: MIG"]).mode is Mode.SHADOW
    assert observe({"metadata": {}}, []).mode is Mode.LEGACY
    # dra mode applied, translation impossible here: the webhook's warning is the evidence, and it says why
    left = observe({"metadata": {}}, ["dra-bridge: stays on the device plugin: the API server drops pod claims"])
    assert left.mode is Mode.DRA and left.left_legacy == "the API server drops pod claims"
    # another component's warnings prove nothing; the webhook's own other warnings are kept as notes
    other = observe({"metadata": {}}, ["stays on the device plugin: x", "dra-bridge: not translated: internal error"])
    assert other.mode is Mode.LEGACY and other.notes == ("not translated: internal error",)


def test_warning_headers_parse_as_the_api_server_writes_them() -> None:
    assert parse_warning_headers(['299 - "dra-bridge: stays on the device plugin: x"']) == [
        "dra-bridge: stays on the device plugin: x"]
    assert parse_warning_headers(['299 - "a, b", 299 - "say \\"hi\\" \\\\ bye"', "garbage"]) == [
        "a, b", 'say "hi" \\ bye']


def test_dra_applied_but_nothing_translatable_is_said_with_the_webhooks_reason(
        cluster_factory: Callable[..., Cluster]) -> None:  # noqa: F811
    """An API server that drops pod claims (DynamicResourceAllocation off on 1.34): the webhook applies dra and leaves
    every pod on the device plugin, saying why in a warning; `set` reports that instead of waiting for a translation
    that can never come."""
    c = cluster_factory("1.34.0", "claims", gates={"DynamicResourceAllocation": False})
    c.api.create(NAMESPACES, {"metadata": {"name": "team-w"}})
    out = run("namespace", "set", "team-w", "dra", "--strict", "--kubeconfig", c.kubeconfig)
    assert out.exit_code == 0, out.output
    assert ("gets dra from the webhook: dra applied, but the webhook leaves this pod on the device plugin: the API "
            "server drops pod claims") in out.output
    assert "WARNING: the webhook leaves GPU pods like the probe on the device plugin in team-w" in out.output
