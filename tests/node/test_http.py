"""/healthz dials our own device-plugin socket like the kubelet; /readyz is "registered"; /metrics is Prometheus."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from bridge.ledger import Side
from bridge.node.http import AddressError, parse_address
from bridge.sandbox.kubelet import KubeletSimulator

from .conftest import RESOURCE, wait_until


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_health_ready_and_metrics_respond(kubelet: KubeletSimulator, node_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon = node_daemon()
    assert daemon.wait_registered(20)
    port = daemon.http.port
    assert get(port, "/healthz") == (200, "[+] deviceplugin-socket\nok\n")
    code, body = get(port, "/readyz")
    assert code == 200 and "[+] deviceplugin-registered" in body
    kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 8, 20)
    kubelet.devices.allocate("uid-1", "main", RESOURCE, 1)
    code, text = get(port, "/metrics")
    assert code == 200
    assert 'bridge_deviceplugin_allocations_total{outcome="ok",resource="nvidia.com/gpu"} 1.0' in text
    assert 'bridge_deviceplugin_registrations_total{outcome="ok",resource="nvidia.com/gpu"} 1.0' in text
    assert 'bridge_deviceplugin_registered{resource="nvidia.com/gpu"} 1.0' in text
    health = [line for line in text.splitlines() if line.startswith("bridge_device_healthy{")]
    assert len(health) == 8 and all(line.endswith(" 1.0") for line in health)
    assert "bridge_deviceplugin_listandwatch_updates_total" in text
    assert get(port, "/nope")[0] == 404


def test_readyz_fails_without_a_kubelet_and_healthz_when_our_socket_cannot_be_dialled(kubelet: KubeletSimulator, node_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon = node_daemon()
    assert daemon.wait_registered(20)
    kubelet.devices.stop()  # the kubelet goes away: nothing to be registered with
    wait_until(lambda: get(daemon.http.port, "/readyz")[0] == 503, what="readyz to fail without a kubelet")
    assert "[-] deviceplugin-registered: not registered with the kubelet" in get(daemon.http.port, "/readyz")[1]
    daemon.plugin.stop()  # the plugin's server is gone for good now
    code, body = get(daemon.http.port, "/healthz")
    assert code == 503 and "[-] deviceplugin-socket: no socket at" in body


@pytest.mark.parametrize("value,expected", [
    (":8080", ("0.0.0.0", 8080)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:9", ("::1", 9)), ("off", None)])
def test_http_address_forms(value: str, expected: tuple[str, int] | None) -> None:
    assert parse_address(value) == expected


@pytest.mark.parametrize("value", ["8080", "host:", "host:99999", "a:b"])
def test_bad_http_addresses_are_rejected(value: str) -> None:
    with pytest.raises(AddressError, match="invalid HTTP address"):
        parse_address(value)


def test_an_http_port_in_use_is_a_clear_start_error(short_tmp, kubelet: KubeletSimulator) -> None:  # type: ignore[no-untyped-def]
    import socket

    from bridge.inventory.simulated import SimulatedSource
    from bridge.node.daemon import NodeConfig, NodeDaemon

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        daemon = NodeDaemon(NodeConfig(node_name="n", kubelet_root=short_tmp, http_address=("127.0.0.1", port)),
                            SimulatedSource.from_spec("1xL4", "n"))
        with pytest.raises(OSError, match=f"cannot serve health and metrics on 127.0.0.1:{port}"):
            daemon.start()
    finally:
        busy.close()
    # The failed start cleaned up: no plugin socket left behind.
    assert [p.name for p in kubelet.device_plugin_dir.iterdir()] == ["kubelet.sock"]


def test_device_health_metrics_follow_the_gpus_even_with_no_kubelet_connected(short_tmp) -> None:  # type: ignore[no-untyped-def]
    from bridge.inventory.simulated import SimulatedSource
    from bridge.node.daemon import NodeConfig, NodeDaemon

    source = SimulatedSource.from_spec("4xH100-80GB", "node-a")
    gpus = [d.uuid for d in source.devices()]
    dra_side = {gpus[0]}
    daemon = NodeDaemon(NodeConfig(node_name="node-a", kubelet_root=short_tmp, http_address=("127.0.0.1", 0)),
                        source, side_of=lambda d: Side.DRA if d in dra_side else Side.LEGACY)
    daemon.start()  # no kubelet.sock: never registered, no ListAndWatch stream open
    try:
        def sample(text: str, name: str, **labels: str) -> str | None:
            want = name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "} "
            return next((line[len(want):] for line in text.splitlines() if line.startswith(want)), None)

        text = get(daemon.http.port, "/metrics")[1]
        assert [sample(text, "bridge_device_healthy", device=g, index=str(i), resource=RESOURCE)
                for i, g in enumerate(gpus)] == ["1.0"] * 4
        # The DRA-side GPU is healthy, but the kubelet is told Unhealthy so no legacy pod gets it.
        assert sample(text, "bridge_deviceplugin_advertised_devices", health="Healthy", resource=RESOURCE) == "3.0"
        assert source.inject_xid(gpus[2], 79)
        wait_until(lambda: sample(get(daemon.http.port, "/metrics")[1], "bridge_device_healthy", device=gpus[2],
                                  index="2", resource=RESOURCE) == "0.0", what="the XID to reach /metrics")
        text = get(daemon.http.port, "/metrics")[1]
        assert sample(text, "bridge_deviceplugin_advertised_devices", health="Healthy", resource=RESOURCE) == "2.0"
        assert sample(text, "bridge_deviceplugin_advertised_devices", health="Unhealthy", resource=RESOURCE) == "2.0"
        assert sample(text, "bridge_deviceplugin_registered", resource=RESOURCE) in (None, "0.0")
    finally:
        daemon.stop()
