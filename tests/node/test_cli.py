"""`bridge node` as a real process: registers with the (simulated) kubelet, exits 0 on SIGTERM leaving no socket."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from bridge.sandbox.kubelet import KubeletSimulator

from tests.polling import wait_until

from .conftest import RESOURCE

ROOT = Path(__file__).resolve().parents[2]


class Proc:
    """A `bridge node` subprocess whose JSON log lines are collected by a reader thread."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.p = subprocess.Popen([sys.executable, "-m", "bridge", "node", *args], cwd=ROOT, env=full_env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.p.stderr is not None
        for line in self.p.stderr:
            self.lines.append(line.rstrip("\n"))

    def logs(self) -> list[dict[str, object]]:
        out = []
        for line in list(self.lines):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def finish(self, timeout: float = 20) -> int:
        rc = self.p.wait(timeout)
        self._reader.join(timeout)
        return rc


def test_bridge_node_registers_serves_health_and_exits_cleanly_on_sigterm(
        kubelet: KubeletSimulator, short_tmp: Path) -> None:
    proc = Proc(["--devices", "simulated:8xH100-80GB", "--http-address", "127.0.0.1:0", "--log-format", "json"],
                env={"NODE_NAME": "node-cli", "BRIDGE_KUBELET_ROOT": str(short_tmp),
                     "BRIDGE_DEVICE_PLUGIN_DIR": str(short_tmp / "device-plugins"),
                     "BRIDGE_STATE_DIR": str(short_tmp / "state"), "BRIDGE_CDI_ROOT": str(short_tmp / "cdi")})
    try:
        assert kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 8, 30), proc.lines
        # The HTTP endpoint starts after the device plugin registered: wait for its log line, do not read once.
        port_line = wait_until(lambda: next((entry for entry in proc.logs()
                                             if "health and metrics on" in str(entry["msg"])), None), 30,
                               "the 'health and metrics on' log line")
        url = str(port_line["msg"]).split(" on ", 1)[1]
        with urllib.request.urlopen(url + "healthz", timeout=10) as r:
            assert r.status == 200
        kubelet.devices.allocate("uid-1", "main", RESOURCE, 2)
        assert proc.p.poll() is None
    finally:
        proc.p.send_signal(signal.SIGTERM)
        rc = proc.finish()
    assert rc == 0, proc.lines
    # Our socket is gone; the kubelet's own files stay.
    assert sorted(p.name for p in kubelet.device_plugin_dir.iterdir()) == ["kubelet.sock",
                                                                          "kubelet_internal_checkpoint"]
    assert any(entry["msg"] == "node daemon stopped" for entry in proc.logs())
    assert kubelet.devices.wait_for(lambda m: not m.resource(RESOURCE).connected, 20)


def test_sigint_also_stops_cleanly(kubelet: KubeletSimulator, short_tmp: Path) -> None:
    proc = Proc(["--node-name", "node-cli", "--devices", "simulated:1xL4", "--kubelet-root", str(short_tmp),
                 "--device-plugin-dir", str(short_tmp / "device-plugins"),
                 "--http-address", "off", "--device-list-strategy", "cdi-cri,envvar"])
    try:
        assert kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 1, 30), proc.lines
    finally:
        proc.p.send_signal(signal.SIGINT)
        rc = proc.finish()
    assert rc == 0, proc.lines
    # Our socket is gone; the kubelet's own files stay.
    assert sorted(p.name for p in kubelet.device_plugin_dir.iterdir()) == ["kubelet.sock",
                                                                          "kubelet_internal_checkpoint"]


@pytest.mark.parametrize("args,message", [
    ([], "Missing option '--node-name'"),
    (["--node-name", "n", "--devices", "simulated:3xNOPE"], "unknown GPU model 'NOPE'"),
    (["--node-name", "n", "--device-list-strategy", "env"], "unknown device list strategy env"),
    (["--node-name", "n", "--resource-name", "gpu"], "'gpu' is not an extended resource name"),
    (["--node-name", "n", "--http-address", "8080"], "invalid HTTP address '8080'"),
    (["--node-name", "n", "--devices", "simulated:1xL4", "--dra", "on", "--kubeconfig", "/dev/null",
      "--boot-id-file", "/nonexistent/boot_id"],
     "Invalid value for --boot-id-file: cannot read the node boot ID from /nonexistent/boot_id: No such file"),
])
def test_bad_options_exit_2_with_a_clear_message(args: list[str], message: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("NODE_NAME", "BRIDGE_NODE_NAME")}
    r = subprocess.run([sys.executable, "-m", "bridge", "node", *args], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2
    assert message in " ".join(r.stderr.split())


def test_a_kubelet_root_too_long_for_unix_sockets_exits_2_naming_the_path(short_tmp: Path) -> None:
    root = short_tmp / ("r" * 100)
    r = subprocess.run([sys.executable, "-m", "bridge", "node", "--node-name", "n", "--devices",
                        "simulated:1xL4", "--kubelet-root", str(root),
                        "--device-plugin-dir", str(root / "device-plugins"), "--http-address", "off"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2  # a configuration error (bridge/cli/exits.py)
    sock = str(root / "device-plugins" / "dra-bridge-nvidia.com-gpu.sock")
    assert f"bridge node: unix socket path {sock!r} is {len(sock)} bytes long; the limit is 107 bytes" in r.stderr


@pytest.mark.parametrize(("args", "hint"), [
    (["--dra-devices", "gpu-x"], "--dra-devices"),
    (["--pod-uid", "../etc"], "--pod-uid"),
    (["--driver-name", "Not_A_DNS_Name"], "--driver-name"),
    (["--dra", "maybe"], "--dra"),
    (["--split-grace", "-1"], "--split-grace"),
])
def test_bad_dra_options_exit_2_naming_the_option(short_tmp: Path, args: list[str], hint: str) -> None:
    out = subprocess.run([sys.executable, "-m", "bridge", "node", "--node-name", "n", "--devices",
                          "simulated:1xH100-80GB", "--kubelet-root", str(short_tmp),
                          "--device-plugin-dir", str(short_tmp / "device-plugins"), *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and hint in out.stderr, out.stderr


def test_cleanup_without_an_api_removes_our_sockets_and_cdi_specs_and_leaves_others(short_tmp: Path) -> None:
    import socket

    (short_tmp / "device-plugins").mkdir()
    (short_tmp / "plugins_registry").mkdir()
    ours = [short_tmp / "device-plugins" / "dra-bridge-nvidia.com-gpu.sock",
            short_tmp / "plugins_registry" / "gpu.dra-bridge.io-1234-reg.sock"]
    theirs = short_tmp / "device-plugins" / "kubelet.sock"
    for path in [*ours, theirs]:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))
    cdi = short_tmp / "cdi"
    cdi.mkdir()
    (cdi / "k8s.gpu.dra-bridge.io-claim_uid-1.json").write_text("{}")
    (cdi / "k8s.device-plugin.dra-bridge.io-gpu_node.json").write_text("{}")  # the device plugin's
    (cdi / "nvidia.com-gpu_node.json").write_text("{}")  # what earlier builds wrote for the device plugin
    (cdi / "nvidia.com-gpu.json").write_text("{}")  # the toolkit's: never touched
    out = subprocess.run([sys.executable, "-m", "bridge", "node", "--node-name", "n", "--devices",
                          "simulated:1xH100-80GB", "--kubelet-root", str(short_tmp),
                          "--device-plugin-dir", str(short_tmp / "device-plugins"), "--cdi-root", str(cdi),
                          "--cleanup"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")})
    assert out.returncode == 0, out.stderr
    assert "ResourceSlices not touched" in out.stderr and "removed 3 CDI spec(s) and 2 socket(s)" in out.stdout
    assert not any(p.exists() for p in ours) and theirs.exists()
    assert sorted(p.name for p in cdi.iterdir()) == ["nvidia.com-gpu.json"]


def test_an_unusable_state_dir_exits_2_naming_the_option_and_the_path(short_tmp: Path) -> None:
    blocker = short_tmp / "blocker"
    blocker.write_text("not a directory")
    state = blocker / "state"  # (the state dir being a file itself is click's exit 2: "Directory ... is a file")
    r = subprocess.run([sys.executable, "-m", "bridge", "node", "--node-name", "n", "--devices", "simulated:1xL4",
                        "--kubelet-root", str(short_tmp / "kl"),
                        "--device-plugin-dir", str(short_tmp / "kl" / "device-plugins"), "--state-dir", str(state), "--http-address", "off"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")})
    assert r.returncode == 2, r.stderr
    assert f"bridge node: state directory {str(state)!r} (--state-dir) cannot be used: Not a directory" in r.stderr
    assert blocker.read_text() == "not a directory"  # nothing of the user's was touched
    assert not (short_tmp / "kl" / "device-plugins").exists()  # nothing was served


def test_an_unusable_claims_dir_exits_2_naming_the_option_and_the_path(short_tmp: Path) -> None:
    blocker = short_tmp / "blocker"
    blocker.write_text("not a directory")
    claims = blocker / "claims"
    r = subprocess.run([sys.executable, "-m", "bridge", "node", "--node-name", "n", "--devices", "simulated:1xL4",
                        "--kubelet-root", str(short_tmp / "kl"),
                        "--device-plugin-dir", str(short_tmp / "kl" / "device-plugins"), "--state-dir",
                        str(short_tmp / "st"), "--claims-dir", str(claims), "--http-address", "off"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")})
    assert r.returncode == 2, r.stderr
    assert f"bridge node: claims directory {str(claims)!r} (--claims-dir) cannot be used: Not a directory" in r.stderr
    assert blocker.read_text() == "not a directory"
    assert not (short_tmp / "kl" / "device-plugins").exists()  # nothing was served


@pytest.mark.parametrize(("args", "message"), [
    (["--driver-root", "run/nvidia/driver"], "'run/nvidia/driver' is not an absolute host path"),
    (["--dev-root", "dev"], "'dev' is not an absolute host path"),
    (["--cdi-hook-path", "nvidia-cdi-hook"], "'nvidia-cdi-hook' is not an absolute host path"),
    (["--host-root", "/nonexistent/host"], "Directory '/nonexistent/host' does not exist"),
    (["--cdi-source", "nvidia"], "'nvidia' is not one of 'auto', 'toolkit', 'own'"),
])
def test_bad_cdi_options_exit_2_naming_the_option(short_tmp: Path, args: list[str], message: str) -> None:
    out = subprocess.run([sys.executable, "-m", "bridge", "node", "--node-name", "n", "--devices",
                          "simulated:1xH100-80GB", "--kubelet-root", str(short_tmp),
                          "--device-plugin-dir", str(short_tmp / "device-plugins"), *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and message in " ".join(out.stderr.split()), out.stderr


def test_cdi_source_toolkit_without_the_toolkits_spec_exits_2_before_serving(short_tmp: Path) -> None:
    host = short_tmp / "host"
    host.mkdir()
    out = subprocess.run([sys.executable, "-m", "bridge", "node", "--node-name", "n", "--devices",
                          "simulated:1xH100-80GB", "--kubelet-root", str(short_tmp),
                          "--device-plugin-dir", str(short_tmp / "device-plugins"), "--state-dir",
                          str(short_tmp / "st"), "--dra", "off", "--http-address", "off", "--host-root", str(host)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "BRIDGE_CDI_SOURCE": "toolkit"})
    assert out.returncode == 2, out.stderr
    assert "bridge node: --cdi-source toolkit: no spec of kind nvidia.com/gpu in /etc/cdi, /var/run/cdi" in out.stderr
    assert not (short_tmp / "device-plugins").exists() or not list((short_tmp / "device-plugins").glob("dra-*"))


def test_the_start_log_explains_the_driver_root_and_whose_cdi_names_containers_get(
        kubelet: KubeletSimulator, short_tmp: Path) -> None:
    from bridge.inventory.simulated import DEFAULT_DRIVER_VERSION, devices_from_spec
    from tests.fakedriver import make_driver_files, put_spec, toolkit_spec

    host = make_driver_files(short_tmp / "host", DEFAULT_DRIVER_VERSION)
    put_spec(host, "/etc/cdi/nvidia.yaml", toolkit_spec(devices_from_spec("2xH100-80GB", "node-cli")))
    proc = Proc(["--node-name", "node-cli", "--devices", "simulated:2xH100-80GB", "--kubelet-root", str(short_tmp),
                 "--device-plugin-dir", str(short_tmp / "device-plugins"),
                 "--state-dir", str(short_tmp / "st"), "--cdi-root", str(short_tmp / "cdi"), "--dra", "off",
                 "--http-address", "off", "--log-format", "json", "--device-list-strategy", "cdi-cri"],
                env={"BRIDGE_DRIVER_ROOT": "/", "BRIDGE_HOST_ROOT": str(host)})
    try:
        assert kubelet.devices.wait_for(lambda m: m.resource(RESOURCE).allocatable == 2, 30), proc.lines
        resp = kubelet.devices.allocate("uid-1", "main", RESOURCE, 1)
    finally:
        proc.p.send_signal(signal.SIGTERM)
        assert proc.finish() == 0, proc.lines
    messages = [str(e["msg"]) for e in proc.logs()]
    assert any(m.startswith(f"CDI: driver {DEFAULT_DRIVER_VERSION} at driver root / (read at {host}): ")
               for m in messages), messages
    assert any(m.startswith("CDI source: toolkit (--cdi-source auto): /etc/cdi/nvidia.yaml names all 2 GPU(s)")
               for m in messages), messages
    assert [c.name for c in resp.cdi_devices][0].startswith("nvidia.com/gpu=GPU-")


def test_help_lists_the_simulated_gpu_models_and_what_a_count_in_the_split_means() -> None:
    from click.testing import CliRunner

    from bridge.cli import main
    from bridge.inventory.catalog import model_names

    text = " ".join(CliRunner().invoke(main, ["node", "--help"], terminal_width=200).output.split())
    assert "(models: " + ", ".join(model_names()) + ")" in text
    assert "'N' (a count, e.g. '2'): that many GPUs, chosen by the daemon" in text
