"""Registration through the kubelet simulator's plugin watcher, version choice, sockets and both DRA services."""

from __future__ import annotations

import re

import os
import socket
import stat
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest

from bridge._proto.dra.v1 import dra_pb2 as v1
from bridge._proto.dra.v1 import dra_pb2_grpc as v1_grpc
from bridge._proto.dra.v1beta1 import dra_pb2 as v1beta1
from bridge._proto.dra.v1beta1 import dra_pb2_grpc as v1beta1_grpc
from bridge.dra.claims import ClaimRef
from bridge.dra.plugin import DraPlugin, PluginConfig
from bridge.dra.servicer import PrepareOutcome, PreparedDevice
from bridge.unixsock import SocketPathError
from bridge.sandbox.kubelet.dramanager import DraManager
from tests.dra.fakekube import FakeKube
from tests.polling import wait_until

DRIVER = "gpu.dra-bridge.io"


class EchoCore:
    """A core that prepares one fixed device per claim and remembers what it was asked."""

    def __init__(self) -> None:
        self.prepared: list[str] = []
        self.unprepared: list[str] = []

    def prepare(self, claims: Sequence[ClaimRef], time_left: float | None = None) -> dict[str, PrepareOutcome]:
        self.prepared += [c.uid for c in claims]
        return {
            c.uid: PrepareOutcome(devices=(PreparedDevice(("gpu",), "node-a", "gpu-0", (f"k8s.{DRIVER}/claim={c.uid}-gpu-0",)),))
            for c in claims
        }

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        self.unprepared += [c.uid for c in claims]
        return {c.uid: "" for c in claims}


@pytest.fixture
def kubelet(short_tmp: Path):
    manager = DraManager(FakeKube(), "node-a", str(short_tmp / "plugins_registry"), health_retry=0.2)
    manager.start()
    yield manager
    manager.stop()


def test_plugin_registers_through_the_plugin_watcher_and_the_kubelet_chooses_v1(short_tmp: Path, kubelet: DraManager) -> None:
    plugin = DraPlugin(PluginConfig(kubelet_root=str(short_tmp)), EchoCore())
    plugin.start()
    try:
        conn = kubelet.wait_for_plugin(DRIVER)
        assert conn.service == "v1.DRAPlugin"
        assert conn.endpoint == str(short_tmp / "plugins" / DRIVER / "dra.sock")
        status = plugin.registration.wait_for_status(20)
        assert status is not None and status.registered and status.error == ""
        assert (short_tmp / "plugins_registry" / f"{DRIVER}-reg.sock").is_socket()
    finally:
        plugin.stop()


def test_kubelet_chooses_v1beta1_when_the_plugin_advertises_only_v1beta1(short_tmp: Path, kubelet: DraManager) -> None:
    plugin = DraPlugin(PluginConfig(kubelet_root=str(short_tmp), dra_services=("v1beta1.DRAPlugin",)), EchoCore())
    plugin.start()
    try:
        assert kubelet.wait_for_plugin(DRIVER).service == "v1beta1.DRAPlugin"
    finally:
        plugin.stop()


def test_kubelet_rejects_a_plugin_without_a_supported_version_and_tells_it_why(short_tmp: Path, kubelet: DraManager) -> None:
    plugin = DraPlugin(PluginConfig(kubelet_root=str(short_tmp), dra_services=("v1alpha3.NodeService",)), EchoCore())
    plugin.start()
    try:
        status = plugin.registration.wait_for_status(20)
        assert status is not None and not status.registered
        assert "v1alpha3.NodeService" in status.error
        assert kubelet.plugin(DRIVER) is None
    finally:
        plugin.stop()


def test_both_dra_services_answer_on_the_dra_socket_with_one_entry_per_claim(short_tmp: Path) -> None:
    core = EchoCore()
    plugin = DraPlugin(PluginConfig(kubelet_root=str(short_tmp)), core)
    plugin.start()
    try:
        with grpc.insecure_channel("unix://" + str(plugin.config.dra_socket)) as ch:
            for pb, stub in ((v1, v1_grpc.DRAPluginStub(ch)), (v1beta1, v1beta1_grpc.DRAPluginStub(ch))):
                claim = pb.Claim(namespace="ns", name="c", uid=f"uid-{pb.__name__.split('.')[-2]}")
                # The same claim twice in one request still gets exactly one entry.
                resp = stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[claim, claim]), timeout=10)
                assert list(resp.claims) == [claim.uid]
                device = resp.claims[claim.uid].devices[0]
                assert (device.pool_name, device.device_name, list(device.request_names)) == ("node-a", "gpu-0", ["gpu"])
                assert list(device.cdi_device_ids) == [f"k8s.{DRIVER}/claim={claim.uid}-gpu-0"]
                un = stub.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(claims=[claim]), timeout=10)
                assert dict(un.claims)[claim.uid].error == ""
        assert core.prepared == ["uid-v1", "uid-v1beta1"]
    finally:
        plugin.stop()


def test_removing_the_registration_socket_deregisters_and_stop_removes_only_our_sockets(short_tmp: Path, kubelet: DraManager) -> None:
    other = short_tmp / "plugins_registry" / "other.example.com-reg.sock"
    plugin = DraPlugin(PluginConfig(kubelet_root=str(short_tmp)), EchoCore())
    plugin.start()
    other_server = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(1))
    other_server.add_insecure_port("unix://" + str(other))
    other_server.start()
    try:
        kubelet.wait_for_plugin(DRIVER)
        plugin.stop()
        assert not plugin.config.registration_socket.exists() and not plugin.config.dra_socket.exists()
        assert other.is_socket()  # never another plugin's socket
        wait_until(lambda: kubelet.plugin(DRIVER) is None, what="deregistration after the socket vanished")
    finally:
        other_server.stop(0)
        plugin.stop()


def test_rolling_update_instances_use_pod_uid_socket_names_and_coexist(short_tmp: Path, kubelet: DraManager) -> None:
    old = DraPlugin(PluginConfig(kubelet_root=str(short_tmp), pod_uid="pod-old"), EchoCore())
    new = DraPlugin(PluginConfig(kubelet_root=str(short_tmp), pod_uid="pod-new"), EchoCore())
    old.start()
    new.start()
    try:
        assert old.config.registration_socket.name == f"{DRIVER}-pod-old-reg.sock"
        assert new.config.dra_socket.name == "dra-pod-new.sock"
        wait_until(lambda: len(kubelet.watcher.registered()) == 2, what="both instances registered")
        old.stop()
        assert new.config.dra_socket.is_socket() and new.config.registration_socket.is_socket()
        wait_until(lambda: kubelet.plugin(DRIVER) is not None and kubelet.plugin(DRIVER).endpoint == str(new.config.dra_socket),
                   what="the kubelet to keep using the new instance")
    finally:
        old.stop()
        new.stop()


def test_under_umask_zero_neither_socket_is_world_writable(short_tmp: Path, kubelet: DraManager) -> None:
    # A world-writable registration socket let anyone on the node call NotifyRegistrationStatus(false).
    old_umask = os.umask(0)
    try:
        plugin = DraPlugin(PluginConfig(kubelet_root=str(short_tmp)), EchoCore())
        plugin.start()
    finally:
        os.umask(old_umask)
    try:
        for path in (plugin.config.registration_socket, plugin.config.dra_socket):
            assert stat.S_IMODE(os.lstat(path).st_mode) == 0o660, path
        assert kubelet.wait_for_plugin(DRIVER).service == "v1.DRAPlugin"  # the kubelet (root) still dials both
    finally:
        plugin.stop()


def prepare_through(dra_socket: Path, uid: str) -> str:
    with grpc.insecure_channel("unix://" + str(dra_socket)) as ch:
        claim = v1.Claim(namespace="ns", name="c", uid=uid)
        resp = v1_grpc.DRAPluginStub(ch).NodePrepareResources(v1.NodePrepareResourcesRequest(claims=[claim]),
                                                              timeout=10)
        return resp.claims[uid].devices[0].device_name


@pytest.mark.parametrize("which", ["dra_socket", "registration_socket"])
def test_a_deleted_socket_is_served_again_and_the_kubelet_registers_the_plugin_again_within_2s(
        short_tmp: Path, kubelet: DraManager, which: str) -> None:
    plugin = DraPlugin(PluginConfig(kubelet_root=str(short_tmp)), EchoCore(), board=_board())
    plugin.start()
    try:
        kubelet.wait_for_plugin(DRIVER)
        wait_until(lambda: plugin.registration.notifications == 1, what="the first registration")
        reg_socket = str(plugin.config.registration_socket)
        first = wait_until(lambda: kubelet.watcher.registered().get(reg_socket), 20, "the watcher's record").timestamp
        path: Path = getattr(plugin.config, which)
        path.unlink()  # e.g. an operator's `rm`, or a second daemon on the same paths exiting
        gone = time.monotonic()
        wait_until(lambda: plugin.registration.notifications == 2 and path.is_socket()
                   and reg_socket in kubelet.watcher.registered()
                   and kubelet.watcher.registered()[reg_socket].timestamp != first, 20,
                   "the socket re-created and the plugin registered again")
        took = time.monotonic() - gone
        print(f"{path.name} deleted: re-created and registered again in {took:.2f}s")
        assert took < 2.0
        assert plugin.recreated >= 1
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o660
        assert prepare_through(plugin.config.dra_socket, "uid-after") == "gpu-0"
        wait_until(lambda: (conn := kubelet.plugin(DRIVER)) is not None and conn.stream is not None, 20,
                   "the kubelet's health stream on the registered plugin")
    finally:
        plugin.stop()
    assert not plugin.config.dra_socket.exists() and not plugin.config.registration_socket.exists()


def test_a_too_long_socket_path_is_refused_with_the_path_and_its_length(short_tmp: Path) -> None:
    root = short_tmp / ("x" * 90)
    with pytest.raises(SocketPathError, match=r"bytes long; the limit is 107"):
        DraPlugin(PluginConfig(kubelet_root=str(root)), EchoCore())


@pytest.mark.parametrize(("root", "says"), [
    ("//var/lib/kubelet", "starts with '//'"),  # a unix: URL's host: the kubelet would dial another path
    ("/var/lib/kube%41let", "contains '%'"),  # decoded by the kubelet's dial
    ("/var/lib/kubelet?x", "contains '?'"),
    ("/var/lib/kubelet#1", "contains '#'"),
    ("var/lib/kubelet", "must be absolute"),
])
def test_a_kubelet_root_the_kubelet_would_not_dial_as_written_is_refused_at_start(root: str, says: str) -> None:
    """kubelet 1.38 refuses such an endpoint at registration (dra_plugin_manager.go `validateEndpoint`); the
    daemon says so at start-up instead of serving a node without DRA."""
    with pytest.raises(SocketPathError, match=re.escape(says)) as err:
        PluginConfig(kubelet_root=root).check()
    assert "--kubelet-root" in str(err.value)


def test_an_invalid_driver_name_is_refused(short_tmp: Path) -> None:
    with pytest.raises(SocketPathError, match="invalid DRA driver name"):
        DraPlugin(PluginConfig(kubelet_root=str(short_tmp), driver="GPU_Driver"), EchoCore())


def test_a_stale_socket_of_ours_is_replaced_at_start(short_tmp: Path, kubelet: DraManager) -> None:
    config = PluginConfig(kubelet_root=str(short_tmp))
    for path in (config.registration_socket, config.dra_socket):  # what a SIGKILLed instance leaves behind
        path.parent.mkdir(parents=True, exist_ok=True)
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
        assert path.is_socket()
    second = DraPlugin(PluginConfig(kubelet_root=str(short_tmp)), EchoCore())
    second.start()
    try:
        status = second.registration.wait_for_status(30)
        assert status is not None and status.registered
    finally:
        second.stop()


def get_info(sock: Path) -> object:
    from bridge._proto.pluginregistration.v1 import pluginregistration_pb2 as reg_pb
    from bridge._proto.pluginregistration.v1 import pluginregistration_pb2_grpc as reg_grpc

    with grpc.insecure_channel(f"unix://{sock}") as ch:
        return reg_grpc.RegistrationStub(ch).GetInfo(reg_pb.InfoRequest(), timeout=10)


def test_getinfo_names_the_driver_the_absolute_dra_socket_and_versions_newest_first(short_tmp: Path) -> None:
    with_health = DraPlugin(PluginConfig(kubelet_root=str(short_tmp)), EchoCore(), board=_board())
    with_health.start()
    try:
        info = get_info(with_health.config.registration_socket)
        assert (info.type, info.name, info.endpoint) == ("DRAPlugin", DRIVER, str(short_tmp / "plugins" / DRIVER / "dra.sock"))
        assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth",
                                                 "v1alpha1.DRAResourceHealth"]
    finally:
        with_health.stop()
    without = DraPlugin(PluginConfig(kubelet_root=str(short_tmp), health=False), EchoCore(), board=_board())
    without.start()
    try:
        assert list(get_info(without.config.registration_socket).supported_versions) == ["v1.DRAPlugin",
                                                                                          "v1beta1.DRAPlugin"]
    finally:
        without.stop()


def test_the_registration_socket_keeps_answering_getinfo_after_the_kubelet_confirmed_it(
        short_tmp: Path, kubelet: DraManager) -> None:
    """Newer kubelets call GetInfo on registered sockets every 10 s and deregister after two failures."""
    plugin = DraPlugin(PluginConfig(kubelet_root=str(short_tmp)), EchoCore())
    plugin.start()
    try:
        status = plugin.registration.wait_for_status(20)
        assert status is not None and status.registered
        calls = plugin.registration.get_info_calls
        for _ in range(3):
            assert get_info(plugin.config.registration_socket).name == DRIVER
        assert plugin.registration.get_info_calls == calls + 3
        assert kubelet.plugin(DRIVER) is not None
    finally:
        plugin.stop()


def _board():  # a health board over one device, for the plugin's health service
    from bridge.dra.health import HealthBoard
    from bridge.inventory.model import DeviceID

    return HealthBoard("node-a", {DeviceID("GPU-1"): "gpu-0"})
