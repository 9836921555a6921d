"""`bridge node` options of the DRA half that need no cluster: `--ignore-xids` reaches the device source."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from bridge.cli.node import node
from bridge.inventory.xid import DEFAULT_IGNORED_XIDS
from bridge.node import dual


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dual.DualNode]]:
    """Run the CLI up to the library call; keep the DualNode it built instead of serving. The CLI configures the
    root logger and the signal handlers; both are restored afterwards so later tests' log capture is unaffected."""
    built: list[dual.DualNode] = []

    def run(self: dual.DualNode, stop: threading.Event) -> None:
        built.append(self)

    monkeypatch.setattr(dual.DualNode, "run", run)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    signals = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield built
    root.handlers[:] = handlers
    root.setLevel(level)
    for sig, handler in signals.items():
        signal.signal(sig, handler)


def invoke(short_tmp: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(node, ["--node-name", "node-x", "--devices", "simulated:2xH100-80GB",
                                       "--kubelet-root", str(short_tmp / "kl"),
                                       "--device-plugin-dir", str(short_tmp / "kl" / "device-plugins"), "--state-dir", str(short_tmp / "st"),
                                       "--cdi-root", str(short_tmp / "cdi"), "--http-address", "off", "--dra", "off",
                                       *args], env=env, catch_exceptions=False)
    return result.exit_code, result.output


def test_ignore_xids_adds_to_nvidias_defaults_and_the_source_ignores_them(
        short_tmp: Path, captured: list[dual.DualNode]) -> None:
    code, out = invoke(short_tmp, "--ignore-xids", "48, 94")
    assert code == 0, out
    source = captured[0].source
    assert source.ignored_xids == DEFAULT_IGNORED_XIDS | {48, 94}  # type: ignore[attr-defined]
    gpu = source.devices()[0]
    assert source.inject_xid(gpu.uuid, 48) is False  # type: ignore[attr-defined]  # an addition: only logged
    assert source.inject_xid(gpu.uuid, 13) is False  # type: ignore[attr-defined]  # NVIDIA's default list
    assert source.inject_xid(gpu.uuid, 79) is True  # type: ignore[attr-defined]  # fallen off the bus: unhealthy


def test_ignore_xids_is_settable_by_environment_and_defaults_to_nvidias_list(
        short_tmp: Path, captured: list[dual.DualNode]) -> None:
    assert invoke(short_tmp)[0] == 0
    assert captured[0].source.ignored_xids == DEFAULT_IGNORED_XIDS  # type: ignore[attr-defined]
    assert invoke(short_tmp, env={"BRIDGE_IGNORE_XIDS": "79"})[0] == 0
    assert captured[1].source.ignored_xids == DEFAULT_IGNORED_XIDS | {79}  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["48;79", "xid48", "-1"])
def test_a_bad_ignore_xids_list_exits_2_naming_the_option_and_the_value(
        short_tmp: Path, captured: list[dual.DualNode], value: str) -> None:
    code, out = invoke(short_tmp, "--ignore-xids", value)
    assert code == 2 and "--ignore-xids" in out and "expected comma-separated numbers" in out, out
    assert captured == []


def test_a_pod_uid_puts_every_socket_name_per_instance_for_rolling_updates(
        short_tmp: Path, captured: list[dual.DualNode]) -> None:
    from bridge.dra.plugin import PluginConfig

    code, out = invoke(short_tmp, "--pod-uid", "0b1c-77", env={"BRIDGE_DRA": "off"})
    assert code == 0, out
    built = captured[0]
    assert built.config.device_plugin_socket_name == "dra-bridge-nvidia.com-gpu-0b1c-77.sock"
    dra = PluginConfig(kubelet_root=str(built.config.kubelet_root), pod_uid=built.opts.pod_uid)
    assert dra.registration_socket.name == "gpu.dra-bridge.io-0b1c-77-reg.sock"
    assert dra.dra_socket.name == "dra-0b1c-77.sock"
    assert invoke(short_tmp)[0] == 0 and captured[1].config.device_plugin_socket_name is None  # default names


def test_simulated_faults_reach_the_simulated_source(short_tmp: Path, captured: list[dual.DualNode]) -> None:
    faults = short_tmp / "faults.jsonl"
    faults.write_text('{"gpu": 1, "xid": 79}\n')
    code, out = invoke(short_tmp, "--simulated-faults", str(faults))
    assert code == 0, out
    source = captured[0].source
    stop = threading.Event()
    event = next(iter(source.health_events(stop)))  # type: ignore[attr-defined]
    assert event.uuid == source.devices()[1].uuid and event.xid == 79 and not event.healthy


def test_simulated_faults_with_real_gpus_is_refused_before_anything_starts(short_tmp: Path) -> None:
    result = CliRunner().invoke(node, ["--node-name", "node-x", "--devices", "nvml", "--simulated-faults",
                                       str(short_tmp / "faults.jsonl")])
    assert result.exit_code == 2
    assert "Invalid value for --simulated-faults: --simulated-faults needs simulated GPUs" in result.output
