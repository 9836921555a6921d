"""The kubelet simulator writes `device-plugins/kubelet_internal_checkpoint` byte for byte as the kubelet's device
manager does, when it does, and a restarted simulator reads its allocations back from it.

The golden bytes and checksums below were produced by go-spew d8f796af (the version kubernetes vendors) and Go's
encoding/json through the kubelet's own type definitions (kubernetes/kubernetes
pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go, pkg/kubelet/checkpointmanager/checksum/checksum.go)."""

from __future__ import annotations

import base64
import json

import pytest

from bridge.node import kubeletcheckpoint
from bridge.sandbox.kubelet import KubeletSimulator
from bridge.sandbox.kubelet.dmcheckpoint import CHECKPOINT_FILE, CheckpointCorrupt, Entry, checksum, encode, read
from bridge.sandbox.kubelet.devicemanager import AllocationFailed
from tests.sandbox.plugins import RES, Served, served, start_plugin  # noqa: F401 (fixture)

TRAINER = Entry("7c0a1f4e-1b2d-4c3e-9f00-aa11bb22cc33", "trainer", "nvidia.com/gpu",
                {10: ("GPU-10",), 2: ("GPU-2", "GPU-3")}, base64.b64decode("EgIKAA=="))


@pytest.mark.parametrize("entries, registered, expected", [
    (None, {}, 3467439661),
    (None, {"nvidia.com/gpu": ["GPU-a", "GPU-b"]}, 46018335),
    ([Entry("uid-1", "main", "nvidia.com/gpu", {0: ("GPU-a",), -1: ("GPU-c", "GPU-b")},
            base64.b64decode("CgQKAmFiEgI="))], {"nvidia.com/gpu": ["GPU-a", "GPU-b"], "example.com/x": []}, 461196105),
    ([Entry("uid-1", "main", "nvidia.com/gpu", {0: ("GPU-a",)}, b""),
      Entry("uid-2", "init", "nvidia.com/gpu", {1: ("GPU-b",)}, None)], None, 450231926),
    ([TRAINER], {"nvidia.com/gpu": ["GPU-2", "GPU-3", "GPU-10"]}, 4052549526),
    (None, {"a<b": ["x&y"]}, 133112821),
])
def test_the_checksum_is_the_kubelets_fnv32a_over_its_spew_rendering(entries, registered, expected) -> None:
    assert checksum(entries, registered) == expected


def test_the_file_is_the_kubelets_json_byte_for_byte() -> None:
    assert encode([TRAINER], {"nvidia.com/gpu": ["GPU-2", "GPU-3", "GPU-10"]}) == (
        b'{"Data":{"PodDeviceEntries":[{"PodUID":"7c0a1f4e-1b2d-4c3e-9f00-aa11bb22cc33","ContainerName":"trainer",'
        b'"ResourceName":"nvidia.com/gpu","DeviceIDs":{"10":["GPU-10"],"2":["GPU-2","GPU-3"]},"AllocResp":"EgIKAA=="}],'
        b'"RegisteredDevices":{"nvidia.com/gpu":["GPU-2","GPU-3","GPU-10"]}},"Checksum":4052549526}')
    assert encode(None, {"a<b": ["x&y"]}) == (
        b'{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"a\\u003cb":["x\\u0026y"]}},"Checksum":133112821}')


def test_the_simulator_writes_the_checkpoint_after_listandwatch_and_allocate_as_the_kubelet_does(
        kubelet: KubeletSimulator, served: list[Served]) -> None:
    path = kubelet.device_plugin_dir / CHECKPOINT_FILE
    plugin = start_plugin(kubelet, served, ["w0", "w1", "w2"])
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 3, 20)
    stored = read(kubelet.device_plugin_dir)
    assert stored == ([], {RES: ["w0", "w1", "w2"]})  # registered = the healthy devices
    plugin.set("w1", "Unhealthy")
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 2, 20)
    assert read(kubelet.device_plugin_dir) == ([], {RES: ["w0", "w2"]})
    kubelet.devices.allocate("uid-1", "init", RES, 1, namespace="ns", pod_name="p", init=True)
    [entry] = read(kubelet.device_plugin_dir)[0]
    # The fake plugin puts w0 on NUMA node 0 (its index modulo 2); the answer is the marshalled response.
    assert (entry.pod_uid, entry.container, entry.resource, dict(entry.device_ids)) == ("uid-1", "init", RES,
                                                                                       {0: ("w0",)})
    assert entry.alloc_resp
    doc = json.loads(path.read_bytes())
    assert list(doc) == ["Data", "Checksum"] and doc["Checksum"] == checksum(
        [entry], {RES: ["w0", "w2"]})
    # The node daemon's read-only reader sees the init container's GPU.
    assert [(e.pod_uid, e.container, e.device_ids) for e in kubeletcheckpoint.read(path, RES) or ()] == \
        [("uid-1", "init", ("w0",))]


def test_an_ended_pod_stays_in_the_file_until_the_next_write(kubelet: KubeletSimulator, served: list[Served]) -> None:
    plugin = start_plugin(kubelet, served, ["w0", "w1"])
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 2, 20)
    kubelet.devices.allocate("uid-1", "main", RES, 1)
    kubelet.devices.update_allocated([])  # UpdateAllocatedDevices: memory only
    assert [e.pod_uid for e in read(kubelet.device_plugin_dir)[0]] == ["uid-1"]
    plugin.set("w1", "Unhealthy")  # the next ListAndWatch update writes the file again
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 1, 20)
    assert read(kubelet.device_plugin_dir)[0] == []


def test_a_restarted_kubelet_reads_its_allocations_back_and_waits_for_the_plugin(
        kubelet: KubeletSimulator, served: list[Served]) -> None:
    start_plugin(kubelet, served, ["w0", "w1"])
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 2, 20)
    kubelet.devices.allocate("uid-1", "main", RES, 1, namespace="ns", pod_name="p")
    before = kubelet.devices.assignments()
    kubelet.restart()
    assert kubelet.devices.assignments() == before
    state = kubelet.devices.resource(RES)
    assert not state.connected and state.capacity == 0 and state.stopped_at is not None


def test_a_corrupt_checkpoint_is_refused_and_the_restarted_kubelet_starts_without_it(
        kubelet: KubeletSimulator, served: list[Served]) -> None:
    start_plugin(kubelet, served, ["w0"])
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 1, 20)
    kubelet.devices.allocate("uid-1", "main", RES, 1)
    path = kubelet.device_plugin_dir / CHECKPOINT_FILE
    path.write_bytes(path.read_bytes().replace(b'"uid-1"', b'"uid-9"'))
    with pytest.raises(CheckpointCorrupt, match="checksum"):
        read(kubelet.device_plugin_dir)
    kubelet.restart()
    assert kubelet.devices.assignments() == []


def test_after_a_restart_a_container_that_holds_devices_is_refused_until_its_plugin_is_back_then_not_allocated_again(
        kubelet: KubeletSimulator, served: list[Served]) -> None:
    """devicesToAllocate for a container whose devices the checkpoint keeps (a pod admitted again after a node
    reboot): "no healthy devices present" while the plugin has not registered (kubernetes/kubernetes#125579, seen
    on real kubelets by tests/real/test_real_node_reboot.py), and once it has, no Allocate call: the container runs
    with the response the kubelet kept."""
    plugin = start_plugin(kubelet, served, ["w0", "w1"])
    first = kubelet.devices.allocate("uid-1", "main", RES, 1, namespace="ns", pod_name="p")
    kubelet.restart()
    for uid in ("uid-1", "uid-2"):  # the same container again, and a new pod's
        with pytest.raises(AllocationFailed, match=f"^no healthy devices present; cannot allocate unhealthy devices "
                                                   f"{RES}$"):
            kubelet.devices.allocate(uid, "main", RES, 1, namespace="ns", pod_name="p")
    again = start_plugin(kubelet, served, ["w0", "w1"], name="w2.sock")
    assert kubelet.devices.allocate("uid-1", "main", RES, 1, namespace="ns", pod_name="p") == first
    assert (len(plugin.allocations), again.allocations) == (1, [])


def test_a_container_whose_kept_device_turned_unhealthy_is_refused(kubelet: KubeletSimulator,
                                                                   served: list[Served]) -> None:
    plugin = start_plugin(kubelet, served, ["w0", "w1"])
    kubelet.devices.allocate("uid-1", "main", RES, 1, namespace="ns", pod_name="p")
    [held] = plugin.allocations[0]
    plugin.set(held, "Unhealthy")
    assert kubelet.devices.wait_for(lambda m: m.resource(RES).allocatable == 1, 20)
    with pytest.raises(AllocationFailed, match=f"^previously allocated devices are no longer healthy; cannot allocate "
                                               f"unhealthy devices {RES}$"):
        kubelet.devices.allocate("uid-1", "main", RES, 1, namespace="ns", pod_name="p")
