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
    assert 'dra_bridge_deviceplugin_allocations_total{outcome="ok",resource="nvidia.com/gpu"} 1.0' in text
    assert 'dra_bridge_deviceplugin_registrations_total{outcome="ok",resource="nvidia.com/gpu"} 1.0' in text
    assert 'dra_bridge_deviceplugin_registered{resource="nvidia.com/gpu"} 1.0' in text
    health = [line for line in text.splitlines() if line.startswith("dra_bridge_device_healthy{")]
    assert len(health) == 8 and all(line.endswith(" 1.0") for line in health)
    assert "dra_bridge_deviceplugin_listandwatch_updates_total" in text
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
    # Our socket is gone; the kubelet's own files stay (its checkpoint, once our plugin's devices reached it, and the
    # temp file of a checkpoint write under way: bridge/sandbox/kubelet/dmcheckpoint.py).
    left = {p.name for p in kubelet.device_plugin_dir.iterdir()
            if p.name != "kubelet_internal_checkpoint" and not p.name.startswith(".tmp-")}
    assert left == {"kubelet.sock"}


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
        assert [sample(text, "dra_bridge_device_healthy", device=g, index=str(i), resource=RESOURCE)
                for i, g in enumerate(gpus)] == ["1.0"] * 4
        # The DRA-side GPU is healthy, but the kubelet is told Unhealthy so no legacy pod gets it.
        assert sample(text, "dra_bridge_deviceplugin_advertised_devices", health="Healthy", resource=RESOURCE) == "3.0"
        assert source.inject_xid(gpus[2], 79)
        wait_until(lambda: sample(get(daemon.http.port, "/metrics")[1], "dra_bridge_device_healthy", device=gpus[2],
                                  index="2", resource=RESOURCE) == "0.0", what="the XID to reach /metrics")
        text = get(daemon.http.port, "/metrics")[1]
        assert sample(text, "dra_bridge_deviceplugin_advertised_devices", health="Healthy", resource=RESOURCE) == "2.0"
        assert sample(text, "dra_bridge_deviceplugin_advertised_devices", health="Unhealthy", resource=RESOURCE) == "2.0"
        assert sample(text, "dra_bridge_deviceplugin_registered", resource=RESOURCE) in (None, "0.0")
    finally:
        daemon.stop()


# ---- hostile callers ---------------------------------------------------------------------------------------------

def _half_sent(port: int) -> "socket.socket":
    import socket

    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never finished
    return s


def test_half_sent_requests_hold_at_most_the_connection_cap_and_never_lock_the_probes_out() -> None:
    import threading
    import time

    from prometheus_client import CollectorRegistry, generate_latest

    from bridge.node.http import HealthServer

    registry = CollectorRegistry()
    srv = HealthServer(("127.0.0.1", 0), registry, {"alive": lambda: None}, {}, max_connections=16,
                       io_timeout_s=30.0)
    srv.start()
    threads_before = threading.active_count()
    hostile = []
    try:
        hostile = [_half_sent(srv.port) for _ in range(300)]
        time.sleep(0.2)
        assert threading.active_count() - threads_before <= 16 + 2  # not one thread per connection
        # Their deadline is 30 s away and they keep their sockets open, yet a probe is answered now: the oldest
        # connection that has not sent a whole request makes room for it.
        for _ in range(5):
            assert get(srv.port, "/healthz") == (200, "[+] alive\nok\n")
        text = generate_latest(registry).decode()

        def value(name: str) -> float:
            return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name + " ")))

        assert value("dra_bridge_http_connections_evicted_total") >= 300 - 16
        assert value("dra_bridge_http_connections_refused_total") == 0
        assert value("dra_bridge_http_connections_open") <= 16
    finally:
        for s in hostile:
            s.close()
        srv.stop()


def test_when_every_connection_is_being_answered_a_new_one_gets_503_at_once() -> None:
    import threading
    import time

    from prometheus_client import CollectorRegistry

    from bridge.node.http import HealthServer

    release = threading.Event()
    in_check = threading.Semaphore(0)

    def slow() -> str | None:
        in_check.release()
        return None if release.wait(30) else "x"

    srv = HealthServer(("127.0.0.1", 0), CollectorRegistry(), {"slow": slow}, {}, max_connections=4,
                       io_timeout_s=30.0)
    srv.start()
    answers: list[tuple[int, str]] = []
    busy = [threading.Thread(target=lambda: answers.append(get(srv.port, "/healthz"))) for _ in range(4)]
    try:
        for t in busy:
            t.start()
        # every one has sent its whole request and is being answered (a connection still sending its request head
        # would be evicted for the new one instead: that is the other test)
        for _ in range(4):
            assert in_check.acquire(timeout=20), "4 requests in the check"
        assert srv.open._value.get() == 4
        started = time.monotonic()
        assert get(srv.port, "/healthz")[0] == 503
        assert time.monotonic() - started < 2
    finally:
        release.set()
        for t in busy:
            t.join(10)
        srv.stop()
    assert [code for code, _ in answers] == [200] * 4


def test_a_client_trickling_its_request_is_cut_at_the_deadline() -> None:
    import time

    from prometheus_client import CollectorRegistry

    from bridge.node.http import HealthServer

    srv = HealthServer(("127.0.0.1", 0), CollectorRegistry(), {"alive": lambda: None}, {}, io_timeout_s=1.0)
    srv.start()
    s = _half_sent(srv.port)
    started = time.monotonic()
    try:
        while time.monotonic() - started < 8:
            try:
                s.sendall(b"X")  # one byte every 0.2 s: each read succeeds well within the per-read timeout
                if s.recv(1, __import__("socket").MSG_DONTWAIT) == b"":
                    break
            except BlockingIOError:
                pass
            except OSError:
                break
            time.sleep(0.2)
        assert time.monotonic() - started < 1.0 + 2.0  # closed at its 1 s deadline, not kept alive by the trickle
    finally:
        s.close()
        srv.stop()


def test_the_health_endpoint_listens_on_loopback_unless_told_otherwise() -> None:
    from click.testing import CliRunner

    from bridge.cli import main
    from bridge.controller.app import AppOptions
    from bridge.node.daemon import NodeConfig

    assert NodeConfig(node_name="n").http_address == ("127.0.0.1", 8080)
    assert AppOptions().http_address == ("127.0.0.1", 8080)
    for command in ("node", "controller"):
        text = " ".join(CliRunner().invoke(main, [command, "--help"], terminal_width=200).output.split())
        assert "default: 127.0.0.1:8080]" in text, command
