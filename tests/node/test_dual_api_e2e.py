"""The invariant end to end: ONE `bridge node` process serves 8 GPUs through the device plugin AND DRA, each GPU to
exactly one of them, against the API emulator and the kubelet simulator (device manager + DRA manager).

The node says `dra-bridge.io/dra-devices=2`, so gpu-6 and gpu-7 serve DRA and gpu-0..5 the device plugin.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from bridge.inventory.simulated import devices_from_spec
from bridge.kube import EVENTS, NODES, PODS, KubeAPI, connect
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.kubelet import KubeletSimulator
from bridge.sandbox.kubelet.dramanager import PodPrepareError
from tests.dra.cluster import DRIVER, NODE, cdi_files, gpu, make_claim, make_pod, wait_until
from tests.node.kubeletcalls import allocate_directly
from tests.node.nodestatus import NodeStatusPoster

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RESOURCE = "nvidia.com/gpu"
GPUS = devices_from_spec("8xH100-80GB", NODE)
SPLIT_KEY = "dra-bridge.io/dra-devices"


@dataclass
class Env:
    api: KubeAPI
    kubeconfig: Path
    root: Path
    kubelet: KubeletSimulator

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kl"

    @property
    def cdi_root(self) -> Path:
        return self.root / "cdi"

    def node_args(self) -> list[str]:
        return ["--node-name", NODE, "--devices", "simulated:8xH100-80GB", "--kubelet-root", str(self.kubelet_root),
                "--device-plugin-dir", str(self.kubelet_root / "device-plugins"),
                "--state-dir", str(self.root / "st"), "--cdi-root", str(self.cdi_root),
                "--kubeconfig", str(self.kubeconfig), "--http-address", "off", "--log-format", "json",
                "--split-grace", "0.3"]

    def slice_devices(self) -> set[str]:
        items = self.api.list(self.api.resource_api().slices, field_selector=f"spec.nodeName={NODE}")["items"]
        return {d["name"] for s in items for d in s["spec"].get("devices") or []}

    def slices(self) -> list[dict]:
        return self.api.list(self.api.resource_api().slices, field_selector=f"spec.nodeName={NODE}")["items"]

    def set_split(self, value: str) -> None:
        # A merge patch, as an operator's `kubectl annotate` sends: a GET + PUT raced the kubelet's and the daemon's
        # own Node writes (409 Conflict, seen once in a full run).
        self.api.patch(NODES, NODE, {"metadata": {"annotations": {SPLIT_KEY: value}}})

    def our_sockets(self) -> list[Path]:
        kubelet_own = {self.kubelet.kubelet_socket, self.kubelet.podresources_socket}
        return [p for p in self.kubelet_root.rglob("*")
                if stat.S_ISSOCK(os.lstat(p).st_mode) and p not in kubelet_own]


class NodeProc:
    def __init__(self, args: list[str]) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        self.p = subprocess.Popen([sys.executable, "-m", "bridge", "node", *args], cwd=ROOT, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.lines.append(line.rstrip("\n"))

    def stop(self, timeout: float = 30) -> int:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.send_signal(signal.SIGUSR1)  # the daemon writes every thread's stack to its log
            time.sleep(2)
            self.p.kill()
            self.p.wait(10)
            self._reader.join(10)
            raise AssertionError(f"bridge node did not exit within {timeout:.0f}s of SIGTERM; its log ends:\n"
                                 + "\n".join(self.lines[-150:]))
        self._reader.join(timeout)
        return rc


@contextlib.contextmanager
def node_env(short_tmp: Path, split: str) -> Iterator[Env]:
    """An emulator with our Node (split annotation `split`), a kubelet simulator and its node-status loop."""
    with ApiServer() as srv:
        kubeconfig = srv.write_kubeconfig(short_tmp / "kubeconfig")
        api = connect(str(kubeconfig))
        api.create(NODES, {"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": NODE, "annotations": {SPLIT_KEY: split}}})
        kubelet = KubeletSimulator(short_tmp / "kl", kube=connect(str(kubeconfig)), node_name=NODE,
                                   dra_call_timeout=20, dra_health_retry=0.2).start()
        status = NodeStatusPoster(api, NODE, kubelet.devices).start()
        try:
            yield Env(api, kubeconfig, short_tmp, kubelet)
        finally:
            status.stop()
            kubelet.stop()


@pytest.fixture
def env(short_tmp: Path) -> Iterator[Env]:
    with node_env(short_tmp, "2") as e:
        yield e


def healthy_split(kubelet: KubeletSimulator) -> tuple[int, int]:
    state = kubelet.devices.resource(RESOURCE)
    return len(state.healthy), len(state.devices) - len(state.healthy)


def test_one_daemon_serves_each_gpu_to_exactly_one_api_through_claims_restarts_and_a_split_change(env: Env) -> None:
    kubelet, api = env.kubelet, env.api
    assert kubelet.dra is not None
    proc = NodeProc(env.node_args())
    try:
        # The device plugin: gpu-0..5 Healthy, gpu-6 and gpu-7 reported Unhealthy (allocatable 6).
        assert kubelet.devices.wait_for(lambda m: healthy_split(kubelet) == (6, 2), 60), proc.lines[-20:]
        unhealthy = {d.id for d in kubelet.devices.resource(RESOURCE).devices.values() if not d.healthy}
        assert unhealthy == {GPUS[6].uuid, GPUS[7].uuid}
        assert kubelet.devices.resource(RESOURCE).allocatable == 6
        # DRA: registered, and the slice (accepted by the emulator's schema validation) holds exactly gpu-6, gpu-7.
        kubelet.dra.wait_for_plugin(DRIVER, 60)
        wait_until(lambda: env.slice_devices() == {"gpu-6", "gpu-7"}, 60, "the slice with gpu-6 and gpu-7")
        [slice_obj] = env.slices()
        assert slice_obj["spec"]["pool"]["name"] == NODE and slice_obj["spec"]["driver"] == DRIVER

        # A claim allocated to gpu-7 is prepared; its CDI spec gives the container exactly that GPU.
        pod = make_pod(api, "team-a", "trainer", ["gpu"])
        uid = make_claim(api, "team-a", "gpu", pod, [gpu("gpu-7")])["metadata"]["uid"]
        records = kubelet.dra.prepare_pod_with_retry(pod, timeout=30)
        [dev] = records[uid].prepared[DRIVER]
        assert (dev.device, dev.cdi_ids) == ("gpu-7", (f"k8s.{DRIVER}/claim={uid}-gpu-7",))
        spec = json.loads(cdi_files(env.cdi_root)[uid].read_text())
        assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
        assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [{"path": f"/dev/nvidia{GPUS[7].minor}"}]
        # PodResources reports the DRA device on the container, as the kubelet does.
        assert [(a.pod_name, a.container, a.device) for a in kubelet.dra.dynamic_assignments()] == \
            [("trainer", "c", "gpu-7")]

        # The device plugin refuses gpu-7 even if asked directly, naming the owner.
        err = allocate_directly(env.kubelet_root, GPUS[7].uuid)
        assert err is not None and err.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "dra" in err.details() and GPUS[7].uuid in err.details()
        # ... while a legacy pod still gets a legacy GPU through the kubelet.
        got = kubelet.devices.allocate("pod-legacy", "main", RESOURCE, 1, namespace="team-b", pod_name="legacy")
        assert got.envs["NVIDIA_VISIBLE_DEVICES"] in {g.uuid for g in GPUS[:6]}

        # A claim allocated gpu-0 while the legacy pod holds it (a late allocation) is refused with a per-claim error
        # naming the device, and gpu-0 is withdrawn from the device plugin until the legacy pod ends; the claim's
        # pod gets a Warning Event saying so. Once the claim and its pod go, gpu-0 is back on the device plugin.
        assert got.envs["NVIDIA_VISIBLE_DEVICES"] == GPUS[0].uuid
        pod0 = make_pod(api, "team-a", "wrong", ["gpu0"])
        make_claim(api, "team-a", "gpu0", pod0, [gpu("gpu-0")])
        with pytest.raises(PodPrepareError) as refused:
            kubelet.dra.prepare_pod(pod0)
        assert "device gpu-0" in str(refused.value) and "legacy side" in str(refused.value)
        assert kubelet.devices.wait_for(lambda m: healthy_split(kubelet) == (5, 3), 60), proc.lines[-20:]
        stuck = wait_until(lambda: next((e for e in api.list(EVENTS, namespace="team-a")["items"]
                                         if e["reason"] == "DRAClaimStuck"), None), 30, "the stuck claim's Event")
        assert stuck["involvedObject"]["kind"] == "Pod" and stuck["involvedObject"]["name"] == "wrong"
        assert "gpu-0 was allocated to claim team-a/gpu0" in stuck["message"] and "team-b/legacy" in stuck["message"]
        api.delete(PODS, "wrong", "team-a", grace_period_seconds=0)
        api.delete(api.resource_api().claims, "gpu0", "team-a")
        assert kubelet.devices.wait_for(lambda m: healthy_split(kubelet) == (6, 2), 60), proc.lines[-20:]

        # A kubelet restart: the device plugin and DRA re-register, the wiped slices are republished.
        regs = kubelet.devices.resource(RESOURCE).registrations
        kubelet.restart()
        assert kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).registrations > regs
                                        and healthy_split(kubelet) == (6, 2), 60), proc.lines[-20:]
        kubelet.dra.wait_for_plugin(DRIVER, 60)
        wait_until(lambda: env.slice_devices() == {"gpu-6", "gpu-7"}, 60, "the slice republished after the wipe")
        # The restarted kubelet does not prepare the running pod again (its sandbox exists): the daemon's own record
        # keeps the claim prepared (CDI spec in place) and PodResources still reports the device from the kubelet's
        # claim checkpoint.
        assert kubelet.dra.prepare_calls.count((DRIVER, (uid,))) == 1
        assert set(cdi_files(env.cdi_root)) >= {uid}
        assert [(a.pod_name, a.device) for a in kubelet.dra.dynamic_assignments()] == [("trainer", "gpu-7")]

        # Target 0: gpu-6 (free) goes back to the device plugin; gpu-7 stays on DRA while its claim is prepared, and
        # an Event on the Node says why ...
        env.set_split("0")
        event = wait_until(lambda: next((e for e in api.list(EVENTS, namespace="default")["items"]
                                         if e["reason"] == "DRADeviceNotMoved" and "held by" in e["message"]), None),
                           30, "the waiting Event")
        assert event["involvedObject"]["kind"] == "Node" and event["involvedObject"]["name"] == NODE
        assert "gpu-7 held by claim team-a/gpu" in event["message"] and "will move when free" in event["message"]
        assert kubelet.devices.wait_for(lambda m: healthy_split(kubelet) == (7, 1), 60), proc.lines[-20:]
        wait_until(lambda: env.slice_devices() == {"gpu-7"}, 60, "only gpu-7 left in the slice")
        # ... and follows once the pod is gone (unprepared, deleted, its claim deallocated and deleted): all 8 GPUs
        # back on the device plugin, none in the slice.
        kubelet.dra.unprepare_pod_with_retry(pod, timeout=30)
        api.delete(PODS, "trainer", "team-a", grace_period_seconds=0)  # the kubelet's final delete, once unprepared
        api.delete(api.resource_api().claims, "gpu", "team-a")
        assert kubelet.devices.wait_for(lambda m: healthy_split(kubelet) == (8, 0), 60), proc.lines[-20:]
        wait_until(lambda: env.slice_devices() == set(), 60, "gpu-6 and gpu-7 gone from the slice")
    finally:
        rc = proc.stop()
    assert rc == 0, "\n".join(proc.lines[-150:])  # a stop past its deadline: the stacks are in there
    assert env.our_sockets() == []


def test_cleanup_deletes_the_nodes_slices_cdi_specs_and_sockets(env: Env) -> None:
    proc = NodeProc(env.node_args())
    try:
        wait_until(lambda: env.slice_devices() == {"gpu-6", "gpu-7"}, 60, "the slice")
        assert env.kubelet.dra is not None
        env.kubelet.dra.wait_for_plugin(DRIVER, 60)
        pod = make_pod(env.api, "team-a", "trainer", ["gpu"])
        uid = make_claim(env.api, "team-a", "gpu", pod, [gpu("gpu-6")])["metadata"]["uid"]
        env.kubelet.dra.prepare_pod_with_retry(pod, timeout=30)
        assert set(cdi_files(env.cdi_root)) == {uid}
    finally:
        proc.p.kill()  # a crash: sockets and slices are left behind
        proc.p.wait(30)
    assert env.slices() and env.our_sockets()
    out = subprocess.run([sys.executable, "-m", "bridge", "node", *env.node_args(), "--cleanup"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "deleted 1 ResourceSlice(s)" in out.stdout
    assert env.slices() == [] and cdi_files(env.cdi_root) == {} and env.our_sockets() == []
