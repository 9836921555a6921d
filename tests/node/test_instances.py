"""One `bridge node` per node and state directory, sockets that heal, and a surge rollout that keeps the node's
GPUs: real `bridge node` processes against the API emulator and the kubelet simulator (device manager with the
release's disconnect rule, DRA plugin watcher, Node status posted every 0.2 s).

The rollout test is the one the chart's `maxSurge: 1` depends on. Before the instance lock and the re-registration,
instance B registered beside A; A stopping then (kubelets through 1.36) disconnected B and marked every GPU
unhealthy, and allocatable stayed 0 for good: the test failed with "allocatable nvidia.com/gpu left 3 ... after B
served (device manager 0, connected False; Node 0); still not back 10 s later". Before the lock, a second daemon
on the same state directory kept running (the first test timed out waiting for it to exit), and a deleted DRA
registration socket was never re-created.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bridge.kube import NODES, KubeAPI, connect
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.kubelet import KubeletConfig, KubeletSimulator
from bridge.unixsock import socket_identity
from tests.node.test_dual_api_e2e import NodeProc
from tests.polling import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
NODE = "node-r"
RESOURCE = "nvidia.com/gpu"
DRIVER = "gpu.dra-bridge.io"
GPUS, DRA_GPUS = 4, 1
LEGACY = GPUS - DRA_GPUS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon(NodeProc):
    """A `bridge node` process (its output kept: JSON log lines) with its health endpoint on `port`."""

    def __init__(self, args: list[str], port: int) -> None:
        super().__init__(args)
        self.port = port

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def output(self) -> str:
        return "\n".join(self.lines[-30:])

    def wait(self, timeout: float = 60) -> int:
        """Wait for the process to exit on its own."""
        rc = self.p.wait(timeout)
        self._reader.join(timeout)
        return rc


@dataclass
class Env:
    root: Path
    api: KubeAPI
    kubeconfig: Path
    kubelet: KubeletSimulator
    daemons: list[Daemon] = field(default_factory=list)

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kl"

    def start(self, *extra: str) -> Daemon:
        port = free_port()
        args = ["--node-name", NODE, "--devices", f"simulated:{GPUS}xL4", "--kubelet-root", str(self.kubelet_root),
                "--device-plugin-dir", str(self.kubelet_root / "device-plugins"),
                "--state-dir", str(self.root / "st"), "--cdi-root", str(self.root / "cdi"),
                "--kubeconfig", str(self.kubeconfig), "--http-address", f"127.0.0.1:{port}", "--log-format", "json",
                "--dra-devices", str(DRA_GPUS), "--split-grace", "0.3", *extra]
        daemon = Daemon(args, port)
        self.daemons.append(daemon)
        return daemon

    def allocatable(self) -> int:
        return self.kubelet.devices.resource(RESOURCE).allocatable

    def node_allocatable(self) -> str | None:
        status = self.api.get(NODES, NODE).get("status") or {}
        return (status.get("allocatable") or {}).get(RESOURCE)

    def serving(self) -> bool:
        """Both APIs served: the device plugin connected with the legacy GPUs healthy, the Node says so too, and
        the DRA plugin registered."""
        state = self.kubelet.devices.resource(RESOURCE)
        assert self.kubelet.dra is not None
        return (state.connected and state.allocatable == LEGACY and self.node_allocatable() == str(LEGACY)
                and self.kubelet.dra.plugin(DRIVER) is not None
                and any(r.name == DRIVER for r in self.kubelet.dra.watcher.registered().values()))

    def registered_dra_socket(self) -> str | None:
        assert self.kubelet.dra is not None
        conn = self.kubelet.dra.plugin(DRIVER)
        return conn.endpoint if conn is not None else None


def make_env(root: Path, version: str) -> Iterator[Env]:
    with ApiServer() as srv:
        kubeconfig = srv.write_kubeconfig(root / "kubeconfig")
        api = connect(str(kubeconfig))
        kubelet = KubeletSimulator(root / "kl", kube=connect(str(kubeconfig)), node_name=NODE,
                                   config=KubeletConfig(version=version, register_node=True,
                                                        node_status_frequency=0.2)).start()
        env = Env(root, api, kubeconfig, kubelet)
        try:
            yield env
        finally:
            for d in env.daemons:
                if d.p.poll() is None:
                    d.p.kill()
                    d.p.wait(30)
            kubelet.stop()


@pytest.fixture
def env(short_tmp: Path) -> Iterator[Env]:
    yield from make_env(short_tmp, "1.36")


def stays(cond: Callable[[], bool], seconds: float) -> str | None:
    """None if `cond` held at every check for `seconds`, else when it first failed."""
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        if not cond():
            return f"after {elapsed:.2f}s"
        time.sleep(0.02)
    return None


def test_a_second_daemon_on_the_same_state_dir_is_refused_naming_the_holder_and_the_first_keeps_serving(
        env: Env) -> None:
    first = env.start()
    wait_until(env.serving, 60, "the first daemon serving both APIs")
    sockets = {p: socket_identity(p) for p in (env.kubelet_root / "device-plugins").iterdir()
               if p.name != "kubelet.sock" and socket_identity(p)}
    sockets.update({p: socket_identity(p) for p in (env.kubelet_root / "plugins_registry").iterdir()})
    sockets.update({p: socket_identity(p) for p in (env.kubelet_root / "plugins" / DRIVER).iterdir()})
    assert len(sockets) == 3
    registrations = env.kubelet.devices.resource(RESOURCE).registrations
    assert env.kubelet.dra is not None
    dra_registered = dict(env.kubelet.dra.watcher.registered())

    second = env.start()
    rc = second.wait(60)
    assert rc == 2, second.output()
    assert f"is in use by another bridge node (PID {first.p.pid}" in second.output()
    assert "one node daemon per node and state directory" in second.output()
    assert "Traceback" not in second.output()

    # The first never noticed: the same sockets (none deleted or re-created), no re-registration, both APIs up.
    time.sleep(0.5)
    assert {p: socket_identity(p) for p in sockets} == sockets
    assert env.kubelet.devices.resource(RESOURCE).registrations == registrations
    assert env.kubelet.dra.watcher.registered() == dra_registered
    assert env.serving() and first.ready() and first.p.poll() is None

    # --cleanup is refused the same way while the daemon runs (it would take its sockets and specs).
    cleanup = subprocess.run([sys.executable, "-m", "bridge", "node", "--node-name", NODE, "--cleanup", "--dra", "off",
                              "--kubelet-root", str(env.kubelet_root),
                              "--device-plugin-dir", str(env.kubelet_root / "device-plugins"), "--state-dir", str(env.root / "st"),
                              "--cdi-root", str(env.root / "cdi")], cwd=ROOT, capture_output=True, text=True,
                             timeout=60)
    assert cleanup.returncode == 2 and f"PID {first.p.pid}" in cleanup.stderr, cleanup.stderr
    assert {p: socket_identity(p) for p in sockets} == sockets
    assert first.stop() == 0


def test_a_second_daemon_sharing_the_first_ones_claims_dir_is_refused_naming_the_option_and_the_holder(
        env: Env) -> None:
    """Another state directory, the same --claims-dir: the two would keep their claim records in one claims.json
    (each sweeping the other's half-finished prepares at start), so the second one is refused before it serves."""
    claims = str(env.root / "run")
    first = env.start("--claims-dir", claims)
    wait_until(env.serving, 60, "the first daemon serving both APIs")
    records = env.root / "run" / "claims.json"
    before = records.read_bytes() if records.exists() else None

    second = env.start("--state-dir", str(env.root / "st2"), "--claims-dir", claims)
    rc = second.wait(60)
    assert rc == 2, second.output()
    assert f"claims directory {claims!r} (--claims-dir) is in use by another bridge node (PID {first.p.pid}" in \
        second.output()
    assert "Traceback" not in second.output()
    assert (records.read_bytes() if records.exists() else None) == before  # nothing of the first one's touched
    assert env.serving() and first.ready() and first.p.poll() is None
    assert first.stop() == 0


def test_each_of_our_sockets_deleted_under_a_running_daemon_is_re_created_and_registered_again_within_2s(
        env: Env) -> None:
    daemon = env.start()
    wait_until(env.serving, 60, "the daemon serving both APIs")
    assert env.kubelet.dra is not None
    watcher = env.kubelet.dra.watcher
    dp = next(p for p in (env.kubelet_root / "device-plugins").iterdir() if p.name.startswith("dra-bridge-"))
    reg = env.kubelet_root / "plugins_registry" / f"{DRIVER}-reg.sock"
    dra = env.kubelet_root / "plugins" / DRIVER / "dra.sock"
    for path in (dp, reg, dra):
        registrations = env.kubelet.devices.resource(RESOURCE).registrations
        record = wait_until(lambda: watcher.registered().get(str(reg)), 20, "the DRA registration")
        before = socket_identity(path)
        path.unlink()
        gone = time.monotonic()
        if path == dp:
            def back() -> bool:
                state = env.kubelet.devices.resource(RESOURCE)
                return state.registrations > registrations and state.allocatable == LEGACY and path.is_socket()
        else:
            def back() -> bool:
                now = watcher.registered().get(str(reg))
                return path.is_socket() and now is not None and now.timestamp != record.timestamp
        wait_until(back, 20, f"{path.name} re-created and registered again")
        took = time.monotonic() - gone
        print(f"{path.name}: re-created and registered again in {took:.2f}s")
        assert took < 2.0, f"{path.name} took {took:.2f}s"
        assert socket_identity(path) not in (None, before)
        wait_until(env.serving, 30, "both APIs served again")
    assert daemon.p.poll() is None
    assert daemon.stop() == 0
    assert not dp.exists() and not reg.exists() and not dra.exists()


def rollout(env: Env) -> tuple[float, float, Daemon, Daemon]:
    """Instance A serves; instance B (another pod UID, same state dir) starts; A is stopped (SIGTERM). Returns how
    long after the SIGTERM B served both APIs with the node's allocatable back to the legacy count (Node status
    included), and for how long the device manager's allocatable was below it on the way."""
    a = env.start("--pod-uid", "pod-a")
    wait_until(env.serving, 60, "instance A serving both APIs")
    b = env.start("--pod-uid", "pod-b")
    wait_until(b.ready, 60, "instance B ready (what lets the DaemonSet controller delete A)")
    assert env.serving() and a.ready()
    b_dp = str(env.kubelet_root / "device-plugins" / "dra-bridge-nvidia.com-gpu-pod-b.sock")
    b_dra = str(env.kubelet_root / "plugins" / DRIVER / "dra-pod-b.sock")

    def back() -> bool:
        return (env.kubelet.devices.endpoint(RESOURCE) == b_dp and env.registered_dra_socket() == b_dra
                and env.serving())

    a.p.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    low_since: float | None = None
    low_total = 0.0
    deadline = stopped + 30
    while not back():
        now = time.monotonic()
        if env.allocatable() < LEGACY:
            low_since = low_since or now
        elif low_since is not None:
            low_total, low_since = low_total + now - low_since, None
        if now > deadline:
            raise AssertionError(f"allocatable nvidia.com/gpu did not come back to {LEGACY} after instance A stopped "
                                 f"(device manager: {env.allocatable()}, connected "
                                 f"{env.kubelet.devices.resource(RESOURCE).connected}; Node: "
                                 f"{env.node_allocatable()})\nB's log:\n{b.output()}")
        time.sleep(0.01)
    took = time.monotonic() - stopped
    if low_since is not None:
        low_total += time.monotonic() - low_since
    assert a.wait(30) == 0, a.output()
    return took, low_total, a, b


@pytest.mark.parametrize("version", ["1.36", "1.37"])
def test_surge_rollout_keeps_the_node_allocatable_within_2s_of_the_old_instance_stopping(
        short_tmp: Path, version: str) -> None:
    """1.36: the old instance's stream ending disconnects whoever is current; 1.37: only itself."""
    env = next(envs := make_env(short_tmp, version))
    try:
        check_rollout(env)
    finally:
        envs.close()


def check_rollout(env: Env) -> None:
    took, low, a, b = rollout(env)
    print(f"rollout (kubelet {env.kubelet.config.version}): B serves both APIs, allocatable {RESOURCE} {LEGACY} (Node status "
          f"included) {took:.2f}s after A's SIGTERM; device-manager allocatable below {LEGACY} for {low:.2f}s")
    assert took < 2.0, f"took {took:.2f}s"
    failed = stays(lambda: env.allocatable() == LEGACY and env.node_allocatable() == str(LEGACY), 3.0)
    if failed is not None:
        seen = f"device manager {env.allocatable()}, connected {env.kubelet.devices.resource(RESOURCE).connected}; " \
               f"Node {env.node_allocatable()}"
        try:
            wait_until(lambda: env.allocatable() == LEGACY and env.node_allocatable() == str(LEGACY), 10)
            later = "came back later"
        except AssertionError:
            later = f"still not back 10 s later ({env.allocatable()})"
        pytest.fail(f"allocatable {RESOURCE} left {LEGACY} {failed} after B served ({seen}); {later}\n"
                    f"B's log:\n{b.output()}")
    # B serves DRA too, on its own sockets; A's are gone; B took the lock over from A.
    assert env.registered_dra_socket() == str(env.kubelet_root / "plugins" / DRIVER / "dra-pod-b.sock")
    leftovers = [p.name for d in ("device-plugins", "plugins_registry", f"plugins/{DRIVER}")
                 for p in (env.kubelet_root / d).iterdir() if "pod-a" in p.name]
    assert leftovers == []
    assert any("took over" in json.loads(line).get("msg", "") for line in b.lines if line.startswith("{"))
    assert any("standby" in json.loads(line).get("msg", "") for line in b.lines if line.startswith("{"))
    assert b.stop() == 0


def test_a_killed_predecessors_sockets_are_removed_by_the_instance_that_takes_over(env: Env) -> None:
    a = env.start("--pod-uid", "pod-a")
    wait_until(env.serving, 60, "instance A serving both APIs")
    a.p.kill()  # SIGKILL: no cleanup, its pod-UID sockets stay behind
    a.p.wait(30)
    a_sockets = [p for d in ("device-plugins", "plugins_registry", f"plugins/{DRIVER}")
                 for p in (env.kubelet_root / d).iterdir() if "pod-a" in p.name]
    assert len(a_sockets) == 3
    b = env.start("--pod-uid", "pod-b")
    b_dp = str(env.kubelet_root / "device-plugins" / "dra-bridge-nvidia.com-gpu-pod-b.sock")
    b_dra = str(env.kubelet_root / "plugins" / DRIVER / "dra-pod-b.sock")
    # B's own endpoints, not only `serving`: until the kubelet notices A's stream ended (in its own thread) and the
    # Node's next status, A's registrations still read as both APIs served, before B even started.
    wait_until(lambda: env.kubelet.devices.endpoint(RESOURCE) == b_dp and env.registered_dra_socket() == b_dra
               and env.serving(), 60, "instance B serving both APIs")
    assert [p for p in a_sockets if p.exists()] == []
    assert b.stop() == 0


def test_a_killed_predecessors_moved_device_plugin_socket_is_removed_by_the_instance_that_takes_over(
        short_tmp: Path) -> None:
    """On a 1.37+ kubelet holding its socket path, the device plugin moves to `<name>-r1.sock` (see
    tests/deviceplugin/test_kubelet_drops.py); the instance record lists that socket too, so a successor sweeps it
    after a SIGKILL as it sweeps the others."""
    env = next(envs := make_env(short_tmp, "1.37"))
    try:
        check_moved_socket_swept(env)
    finally:
        envs.close()


def check_moved_socket_swept(env: Env) -> None:
    import grpc

    from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as dp_pb
    from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as dp_grpc

    a = env.start("--pod-uid", "pod-a")
    wait_until(env.serving, 60, "instance A serving both APIs")
    first = env.kubelet_root / "device-plugins" / "dra-bridge-nvidia.com-gpu-pod-a.sock"
    with grpc.insecure_channel(f"unix://{env.kubelet.kubelet_socket}") as ch, pytest.raises(grpc.RpcError):
        dp_grpc.RegistrationStub(ch).Register(dp_pb.RegisterRequest(  # the kubelet now holds A's path for good
            version="v1beta1", endpoint=first.name, resource_name=RESOURCE), timeout=15)
    first.unlink()  # A serves again, is refused on its path and moves
    moved = first.with_name(f"{first.stem}-r1.sock")
    wait_until(lambda: env.kubelet.devices.endpoint(RESOURCE) == str(moved), 30, "A serving on a fresh socket")
    record = json.loads((env.root / "st" / "node.lock").read_text())
    assert str(moved) in record["sockets"]
    a.p.kill()
    a.p.wait(30)
    assert moved.is_socket()
    b = env.start("--pod-uid", "pod-b")
    wait_until(lambda: env.kubelet.devices.endpoint(RESOURCE) == str(first.with_name(
        "dra-bridge-nvidia.com-gpu-pod-b.sock")) and env.serving(), 60, "instance B serving both APIs")
    assert not moved.exists()
    assert b.stop() == 0
