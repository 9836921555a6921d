"""The kubelet simulator's DRA manager holds plugins to the kubelet's contract (kubernetes/kubernetes
pkg/kubelet/cm/dra): one NodePrepareResources per driver per pod with all its claims, the response checks
(missing claim, unknown UID, per-claim error), the 45 s call deadline, GetInfo's 1 s deadline, and a missing driver
failing the pod before anything is recorded.

The plugins here are deliberately misbehaving doubles served over real unix sockets (a real registration server
from `bridge.dra.registration`, a scripted `DRAPlugin` v1 servicer): they exist to prove the simulator catches
what a real kubelet would catch.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from bridge._proto.dra.v1 import dra_pb2 as pb
from bridge._proto.dra.v1 import dra_pb2_grpc as pb_grpc
from bridge._proto.pluginregistration.v1 import pluginregistration_pb2 as reg_pb
from bridge.dra.registration import RegistrationServicer, add_to_server, supported_versions
from bridge.kube import KubeAPI, connect
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.kubelet import dramanager
from bridge.sandbox.kubelet.dramanager import DraManager, PodPrepareError, PodUnprepareError
from tests.dra.cluster import NODE, gpu, make_claim, make_pod, wait_until

DRIVER = "gpu.dra-bridge.io"
OTHER = "nic.example.com"


@dataclass
class Script:
    """What the scripted plugin does with each call; records what it was asked."""

    drop: set[str] = field(default_factory=set)  # claim UIDs left out of the answer
    extra_uid: str = ""  # an answer for a UID nobody asked for
    errors: dict[str, str] = field(default_factory=dict)  # claim UID -> per-claim error
    delay_s: float = 0.0
    calls: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)  # (rpc, claim UIDs)


class ScriptedDra(pb_grpc.DRAPluginServicer):
    def __init__(self, script: Script) -> None:
        self.script = script

    def NodePrepareResources(self, request: pb.NodePrepareResourcesRequest,  # noqa: N802
                             context: grpc.ServicerContext) -> pb.NodePrepareResourcesResponse:
        s = self.script
        s.calls.append(("prepare", tuple(c.uid for c in request.claims)))
        time.sleep(s.delay_s)
        out = pb.NodePrepareResourcesResponse()
        for c in request.claims:
            if c.uid in s.drop:
                continue
            if c.uid in s.errors:
                out.claims[c.uid].error = s.errors[c.uid]
            else:
                out.claims[c.uid].devices.add(pool_name=NODE, device_name="gpu-0",
                                              cdi_device_ids=[f"k8s.{DRIVER}/claim={c.uid}-gpu-0"])
        if s.extra_uid:
            out.claims[s.extra_uid].SetInParent()
        return out

    def NodeUnprepareResources(self, request: pb.NodeUnprepareResourcesRequest,  # noqa: N802
                               context: grpc.ServicerContext) -> pb.NodeUnprepareResourcesResponse:
        s = self.script
        s.calls.append(("unprepare", tuple(c.uid for c in request.claims)))
        out = pb.NodeUnprepareResourcesResponse()
        for c in request.claims:
            if c.uid not in s.drop:
                out.claims[c.uid].error = s.errors.get(c.uid, "")
        return out


class SlowRegistration(RegistrationServicer):
    def __init__(self, *args: object, get_info_delay_s: float, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.get_info_delay_s = get_info_delay_s

    def GetInfo(self, request: reg_pb.InfoRequest, context: grpc.ServicerContext) -> reg_pb.PluginInfo:  # noqa: N802
        time.sleep(self.get_info_delay_s)
        return super().GetInfo(request, context)


class ScriptedPlugin:
    """A DRA plugin double on real sockets: `<root>/plugins_registry/<driver>-reg.sock` + `<root>/<driver>.sock`."""

    def __init__(self, root: Path, driver: str, script: Script, *, get_info_delay_s: float = 0.0) -> None:
        self.script = script
        endpoint = root / f"{driver}.sock"
        (root / "plugins_registry").mkdir(parents=True, exist_ok=True)
        self.registration = SlowRegistration(driver, str(endpoint), supported_versions(health=False),
                                             get_info_delay_s=get_info_delay_s)
        self.dra = grpc.server(futures.ThreadPoolExecutor(4))
        pb_grpc.add_DRAPluginServicer_to_server(ScriptedDra(script), self.dra)
        self.dra.add_insecure_port(f"unix://{endpoint}")
        self.reg = grpc.server(futures.ThreadPoolExecutor(2))
        add_to_server(self.registration, self.reg)
        self.reg.add_insecure_port(f"unix://{root / 'plugins_registry' / f'{driver}-reg.sock'}")
        self.dra.start()
        self.reg.start()

    def stop(self) -> None:
        self.reg.stop(0)
        self.dra.stop(0)


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


def test_a_response_that_leaves_out_a_claim_fails_the_pod_and_the_claim_is_asked_for_again(env: Env) -> None:
    script = env.plugin()
    registered(env, DRIVER)
    pod, uids = pod_with_claims(env, "p", {"a": [gpu("gpu-0")], "b": [gpu("gpu-1")]})
    script.drop = {uids["b"]}
    with pytest.raises(PodPrepareError, match="NodePrepareResources skipped 1 ResourceClaims"):
        env.kubelet.prepare_pod(pod)
    script.drop = set()
    env.kubelet.prepare_pod(pod)
    assert script.calls[-1] == ("prepare", (uids["b"],))  # "a" was answered, only "b" is asked again


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
