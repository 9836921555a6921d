"""At start the daemon adopts devices the kubelet already gave to running containers (PodResources List)."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from bridge.inventory.simulated import SimulatedSource
from bridge.node.podresources import AdoptionError, Holder, adopt
from bridge.sandbox.kubelet import Assignment, KubeletSimulator

from .conftest import RESOURCE


def test_running_containers_devices_are_adopted_and_unknown_ids_warned_about(
        kubelet: KubeletSimulator, node_daemon, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    source = SimulatedSource.from_spec("8xH100-80GB", "node-a")
    gpus = [d.uuid for d in source.devices()]
    kubelet.devices.seed_assignment(Assignment("uid-1", "ml", "trainer-0", "main", RESOURCE, (gpus[0], gpus[1])))
    kubelet.devices.seed_assignment(Assignment("uid-2", "ml", "infer-0", "server", RESOURCE, (gpus[5],)))
    kubelet.devices.seed_assignment(Assignment("uid-3", "old", "legacy-0", "main", RESOURCE, ("GPU-from-elsewhere",)))
    kubelet.devices.seed_assignment(Assignment("uid-4", "net", "nic-0", "main", "example.com/nic", ("nic0",)))
    adopted = []
    with caplog.at_level(logging.INFO):
        daemon = node_daemon(source, on_adopted=adopted.append)

    (adoption,) = adopted
    assert adoption.source_available
    assert adoption.in_use == {
        gpus[0]: (Holder("ml", "trainer-0", "main"),),
        gpus[1]: (Holder("ml", "trainer-0", "main"),),
        gpus[5]: (Holder("ml", "infer-0", "server"),),
    }
    assert adoption.unknown == {"GPU-from-elsewhere": (Holder("old", "legacy-0", "main"),)}
    assert daemon.metrics.registry.get_sample_value(
        "dra_bridge_deviceplugin_adopted_devices", {"resource": RESOURCE}) == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'GPU-from-elsewhere'" in w and "not in this node's inventory" in w for w in warnings)


def test_without_a_podresources_socket_nothing_is_adopted(short_tmp: Path) -> None:
    adoption = adopt(str(short_tmp), RESOURCE, {"GPU-a"})
    assert adoption.in_use == {} and adoption.unknown == {} and not adoption.source_available


def test_a_podresources_socket_that_does_not_answer_fails_start_loudly(short_tmp: Path) -> None:
    (short_tmp / "pod-resources").mkdir()
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(short_tmp / "pod-resources" / "kubelet.sock"))  # bound, never listening: refused
    try:
        with pytest.raises(AdoptionError) as err:
            adopt(str(short_tmp), RESOURCE, {"GPU-a"}, timeout=1)
    finally:
        dead.close()
    message = str(err.value)
    assert f"PodResources List on {short_tmp}/pod-resources/kubelet.sock failed: the kubelet's PodResources socket " \
           "exists but did not answer within 1 s" in message
    assert "is the kubelet running?" in message


def test_adoption_waits_for_a_kubelet_that_is_coming_back(short_tmp: Path) -> None:
    import threading

    sim = KubeletSimulator(short_tmp)
    (short_tmp / "pod-resources").mkdir()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sim.podresources_socket))  # left behind by the kubelet that stopped: refuses connections
    sim.devices.seed_assignment(Assignment("uid-1", "ml", "trainer-0", "main", RESOURCE, ("GPU-a",)))

    def kubelet_comes_back() -> None:
        stale.close()
        sim.podresources.start()  # replaces the stale socket, as the kubelet does

    timer = threading.Timer(1.0, kubelet_comes_back)
    timer.start()
    try:
        adoption = adopt(str(short_tmp), RESOURCE, {"GPU-a"}, timeout=20)
    finally:
        timer.join()
        sim.podresources.stop()
    assert adoption.in_use == {"GPU-a": (Holder("ml", "trainer-0", "main"),)}


def test_podresources_reports_what_the_simulated_kubelet_allocated_through_the_plugin(
        kubelet: KubeletSimulator, node_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon = node_daemon()
    assert daemon.wait_registered(20)
    assert kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 8, 20)
    kubelet.devices.allocate("uid-9", "c1", RESOURCE, 2, namespace="team", pod_name="p9")
    adoption = adopt(str(kubelet.root), RESOURCE, {d.uuid for d in daemon.source.devices()})
    assert sorted(adoption.in_use) == sorted(kubelet.devices.assignments()[0].device_ids)
    assert all(h == (Holder("team", "p9", "c1"),) for h in adoption.in_use.values())
