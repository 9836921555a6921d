"""The kubelet simulator's DRA manager holds plugins to the kubelet's contract (kubernetes/kubernetes
pkg/kubelet/cm/dra): one NodePrepareResources per driver per pod with all its claims, the response checks
(missing claim, unknown UID, per-claim error), the 45 s call deadline, GetInfo's 1 s deadline, and a missing driver
failing the pod before anything is recorded.

The plugins here are deliberately misbehaving doubles served over real unix sockets (a real registration server
from `bridge.dra.registration`, a scripted `DRAPlugin` v1 servicer): they exist to prove the simulator catches
what a real kubelet would catch.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bridge.kube import KubeAPI, connect
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.kubelet import dramanager
from bridge.sandbox.kubelet.dramanager import DraManager, PodPrepareError, PodUnprepareError
from bridge.sandbox.kubelet.pluginwatcher import PluginRejected
from bridge.sandbox.kubelet.version import KubeletVersion
from tests.dra.cluster import NODE, gpu, make_claim, make_pod, wait_until
from tests.sandbox.draplugins import DRIVER, OTHER, Script, ScriptedPlugin


@dataclass
class Env:
    api: KubeAPI
    root: Path
    kubelet: DraManager
    plugins: list[ScriptedPlugin]

    def plugin(self, driver: str = DRIVER, script: Script | None = None, **kw: float) -> Script:
        script = script or Script()
        self.plugins.append(ScriptedPlugin(self.root, driver, script, **kw))
        return script


@pytest.fixture
def env(short_tmp: Path) -> Iterator[Env]:
    with ApiServer() as srv:
        kubeconfig = srv.write_kubeconfig(short_tmp / "kubeconfig")
        kubelet = DraManager(connect(str(kubeconfig)), NODE, str(short_tmp / "plugins_registry"),
                             call_timeout=2.0, health_retry=0.2)
        kubelet.start()
        e = Env(connect(str(kubeconfig)), short_tmp, kubelet, [])
        try:
            yield e
        finally:
            kubelet.stop()
            for p in e.plugins:
                p.stop()


def pod_with_claims(env: Env, name: str, claims: dict[str, list[dict[str, str]]]) -> tuple[dict, dict[str, str]]:
    """A pod using the given claims (claim name -> allocation results); returns the pod and claim name -> UID."""
    pod = make_pod(env.api, "ns", name, list(claims))
    uids = {c: make_claim(env.api, "ns", c, pod, results)["metadata"]["uid"] for c, results in claims.items()}
    return pod, uids


def registered(env: Env, *drivers: str) -> None:
    for d in drivers:
        env.kubelet.wait_for_plugin(d, 30)


def test_the_kubelet_deadline_is_45_seconds_and_getinfo_gets_1_second() -> None:
    from bridge.sandbox.kubelet import pluginwatcher

    assert dramanager.CALL_TIMEOUT_S == 45.0
    assert pluginwatcher.GET_INFO_TIMEOUT_S == 1.0
    assert DraManager.__init__.__kwdefaults__["call_timeout"] == 45.0  # type: ignore[index]


def test_one_prepare_call_per_driver_per_pod_carries_all_of_its_claims(env: Env) -> None:
    ours, theirs = env.plugin(DRIVER), env.plugin(OTHER)
    registered(env, DRIVER, OTHER)
    pod, uids = pod_with_claims(env, "p", {"a": [gpu("gpu-0")], "b": [gpu("gpu-1")],
                                           "nic": [gpu("nic-0", driver=OTHER)]})
    env.kubelet.prepare_pod(pod)
    assert ours.calls == [("prepare", (uids["a"], uids["b"]))]
    assert theirs.calls == [("prepare", (uids["nic"],))]
    # A second pod sharing claim "a": it is prepared already, so only the new claim goes to the driver.
    pod2 = make_pod(env.api, "ns", "p2", ["a", "c"])
    claim_a = env.api.get(env.api.resource_api().claims, "a", "ns")
    claim_a["status"]["reservedFor"].append({"resource": "pods", "name": "p2", "uid": pod2["metadata"]["uid"]})
    env.api.update(env.api.resource_api().claims, claim_a, "ns", subresource="status")
    uid_c = make_claim(env.api, "ns", "c", pod2, [gpu("gpu-2")])["metadata"]["uid"]
    env.kubelet.prepare_pod(pod2)
    assert ours.calls[1:] == [("prepare", (uid_c,))]


def test_a_response_that_leaves_out_a_claim_fails_the_pod_and_every_claim_of_the_batch_is_asked_for_again(
        env: Env) -> None:
    script = env.plugin()
    registered(env, DRIVER)
    pod, uids = pod_with_claims(env, "p", {"a": [gpu("gpu-0")], "b": [gpu("gpu-1")]})
    script.drop = {uids["b"]}
    with pytest.raises(PodPrepareError, match="NodePrepareResources skipped 1 ResourceClaims"):
        env.kubelet.prepare_pod(pod)
    assert not env.kubelet.claim(uids["a"]).fully_prepared  # type: ignore[union-attr]  # answered, not prepared
    script.drop = set()
    env.kubelet.prepare_pod(pod)
    # manager.go marks claims prepared only once every batch succeeded: "a" is asked for again with "b".
    assert script.calls[-1] == ("prepare", (uids["a"], uids["b"]))
    assert env.kubelet.claim(uids["a"]).fully_prepared  # type: ignore[union-attr]


def test_a_claim_counts_as_prepared_only_after_every_driver_batch_of_the_pod_succeeded(env: Env) -> None:
    ours, theirs = env.plugin(DRIVER), env.plugin(OTHER)
    registered(env, DRIVER, OTHER)
    pod, uids = pod_with_claims(env, "p", {"a": [gpu("gpu-0")], "nic": [gpu("nic-0", driver=OTHER)]})
    theirs.errors = {uids["nic"]: "link down"}
    with pytest.raises(PodPrepareError, match="failed for ResourceClaim nic: link down"):
        env.kubelet.prepare_pod(pod)
    theirs.errors = {}
    env.kubelet.prepare_pod(pod)
    # Our driver answered the first attempt, yet the retry asks it again: nothing was prepared until all succeeded.
    assert ours.calls == [("prepare", (uids["a"],)), ("prepare", (uids["a"],))]
    assert theirs.calls == [("prepare", (uids["nic"],)), ("prepare", (uids["nic"],))]


def test_a_response_for_a_uid_that_was_not_requested_fails_the_pod(env: Env) -> None:
    env.plugin(script=Script(extra_uid="uid-nobody-asked-for"))
    registered(env, DRIVER)
    pod, _ = pod_with_claims(env, "p", {"a": [gpu("gpu-0")]})
    with pytest.raises(PodPrepareError, match="result for unknown claim UID uid-nobody-asked-for"):
        env.kubelet.prepare_pod(pod)


def test_a_per_claim_error_fails_the_pod_naming_the_claim_and_the_cause(env: Env) -> None:
    script = env.plugin()
    registered(env, DRIVER)
    pod, uids = pod_with_claims(env, "p", {"a": [gpu("gpu-0")]})
    script.errors = {uids["a"]: "device gpu-0 is owned by the legacy side"}
    with pytest.raises(PodPrepareError, match="failed for ResourceClaim a: device gpu-0 is owned by the legacy side"):
        env.kubelet.prepare_pod(pod)
    assert env.kubelet.claim(uids["a"]) is not None and not env.kubelet.claim(uids["a"]).fully_prepared  # type: ignore[union-attr]


def test_a_plugin_slower_than_the_call_deadline_fails_the_pod_start_and_a_retry_succeeds(env: Env) -> None:
    script = env.plugin(script=Script(delay_s=3.0))  # the fixture's kubelet deadline is 2 s (45 s in production)
    registered(env, DRIVER)
    pod, uids = pod_with_claims(env, "p", {"a": [gpu("gpu-0")]})
    with pytest.raises(PodPrepareError, match="DEADLINE_EXCEEDED"):
        env.kubelet.prepare_pod(pod)
    script.delay_s = 0.0
    assert uids["a"] in env.kubelet.prepare_pod_with_retry(pod, timeout=30)


def test_a_claim_of_an_unregistered_driver_fails_the_pod_before_any_call_or_record(env: Env) -> None:
    script = env.plugin()
    registered(env, DRIVER)
    pod, uids = pod_with_claims(env, "p", {"a": [gpu("gpu-0")], "nic": [gpu("nic-0", driver=OTHER)]})
    with pytest.raises(PodPrepareError, match=f"DRA driver {OTHER} is not registered"):
        env.kubelet.prepare_pod(pod)
    assert script.calls == []
    assert env.kubelet.claim(uids["a"]) is None, "nothing is checkpointed when a driver is missing"


def test_unprepare_fails_when_a_claim_is_missing_from_the_answer_and_is_retried(env: Env) -> None:
    script = env.plugin()
    registered(env, DRIVER)
    pod, uids = pod_with_claims(env, "p", {"a": [gpu("gpu-0")], "b": [gpu("gpu-1")]})
    env.kubelet.prepare_pod(pod)
    script.drop = {uids["a"]}
    with pytest.raises(PodUnprepareError, match="skipped 1 ResourceClaims"):
        env.kubelet.unprepare_pod(pod)
    script.drop = set()
    assert sorted(env.kubelet.unprepare_pod_with_retry(pod, timeout=30)) == sorted(uids.values())
    assert [c for c in script.calls if c[0] == "unprepare"][-1] == ("unprepare", (uids["a"], uids["b"]))


def test_a_getinfo_slower_than_one_second_is_not_registered_until_it_answers_in_time(env: Env) -> None:
    env.plugin(get_info_delay_s=1.5)
    sock = str(env.root / "plugins_registry" / f"{DRIVER}-reg.sock")
    wait_until(lambda: "DEADLINE_EXCEEDED" in env.kubelet.watcher.last_error(sock), 30, "the GetInfo deadline")
    assert env.kubelet.plugin(DRIVER) is None
    env.plugins[0].registration.get_info_delay_s = 0.0
    registered(env, DRIVER)  # the watcher retries from scratch with backoff


@pytest.mark.parametrize(("name", "endpoint", "refusal"), [
    ("Bad_Name", "/var/lib/kubelet/plugins/x/dra.sock",
     'invalid DRA driver name: driverName: Invalid value: "Bad_Name"'),
    ("", "/var/lib/kubelet/plugins/x/dra.sock", "invalid DRA driver name: driverName: Required value"),
    (DRIVER, "//var/lib/kubelet/plugins/x/dra.sock", "must be a plain path"),  # a unix: URL's host
    (DRIVER, "/var/lib/kubelet/plugins/x%41/dra.sock", "must be a plain path"),  # decoded when dialled
    (DRIVER, "dra.sock", 'DRA plugin endpoint "dra.sock" must be an absolute path'),
    (DRIVER, "/" + "x" * 107, "must not be longer than 108 bytes"),
])
def test_from_1_38_the_kubelet_refuses_a_bad_driver_name_or_endpoint_at_registration(
        env: Env, name: str, endpoint: str, refusal: str) -> None:
    """dra_plugin_manager.go `ValidatePlugin` (v1.38.0-beta.0): the name, then the endpoint, then the services;
    1.37.2 checked the services only (and the simulator of 1.37 an empty name)."""
    versions = ["v1.DRAPlugin"]
    kubelet_138 = DraManager(env.api, NODE, str(env.root / "r138"), version=KubeletVersion.parse("v1.38.0-beta.0"))
    with pytest.raises(PluginRejected, match=re.escape(refusal)):
        kubelet_138.validate_plugin(name, endpoint, versions)
    kubelet_137 = DraManager(env.api, NODE, str(env.root / "r137"), version=KubeletVersion.parse("1.37.2"))
    if name:
        kubelet_137.validate_plugin(name, endpoint, versions)
    kubelet_138.validate_plugin(DRIVER, "/var/lib/kubelet/plugins/x y/dra.sock", versions)  # a space is plain
