"""The README's sandbox and node-daemon commands work together as written (issue 15 item 4): the API emulator, the
kubelet simulator for `n1` (which registers its Node) and the simulated node daemon for `n1`, each as its own
process, with only the paths under /tmp and the fixed port replaced so tests can run side by side.

Before the kubelet simulator registered its Node, the daemon looped on "Node 'n1' does not exist"."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

from bridge.kube import NODES, connect
from tests.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> dict[str, list[str]]:
    """The first `bridge sandbox apiserver`, `bridge sandbox kubelet` and simulated `bridge node` command lines."""
    text = (ROOT / "README.md").read_text().replace("\\\n", " ")
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.split("  #", 1)[0].strip()
        for key, prefix in (("apiserver", "bridge sandbox apiserver "), ("kubelet", "bridge sandbox kubelet "),
                            ("node", "bridge node --node-name n1 ")):
            if line.startswith(prefix) and key not in out:
                out[key] = shlex.split(line)
    assert set(out) == {"apiserver", "kubelet", "node"}, f"README commands not found: {sorted(out)}"
    return out


def _localise(argv: list[str], tmp: Path, port: int) -> list[str]:
    out = []
    for arg in argv:
        arg = re.sub(r"^/tmp/", f"{tmp}/", arg)
        out.append(str(port) if arg == "8001" else arg)
    return [sys.executable, "-m", "bridge", *out[1:]]


def test_the_readme_sandbox_and_node_daemon_commands_work_together_as_written(short_tmp: Path) -> None:
    commands = _readme_commands()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = short_tmp / "sandbox.kubeconfig"
    logs = {k: open(short_tmp / f"{k}.log", "w") for k in commands}
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        procs["apiserver"] = subprocess.Popen(_localise(commands["apiserver"], short_tmp, port), cwd=ROOT,
                                              stdout=logs["apiserver"], stderr=subprocess.STDOUT, text=True)
        wait_until(lambda: kubeconfig.exists() or procs["apiserver"].poll() is not None, 60, "the kubeconfig")
        # The kubelet posts its Node's status every 10 s like a real one; the documented env var shortens that.
        env = {**os.environ, "BRIDGE_SANDBOX_KUBELET_NODE_STATUS_FREQUENCY": "0.5"}
        for key in ("kubelet", "node"):
            procs[key] = subprocess.Popen(_localise(commands[key], short_tmp, port), cwd=ROOT, env=env,
                                          stdout=logs[key], stderr=subprocess.STDOUT, text=True)
        api = connect(str(kubeconfig))

        def gpus() -> str | None:
            try:
                return (api.get(NODES, "n1").get("status") or {}).get("allocatable", {}).get("nvidia.com/gpu")
            except Exception:  # noqa: BLE001 - not registered yet
                return None

        wait_until(lambda: gpus() == "8" or any(p.poll() is not None for p in procs.values()), 90,
                   "Node n1 to show the daemon's 8 GPUs")
        assert all(p.poll() is None for p in procs.values()), {k: p.returncode for k, p in procs.items()}
        assert gpus() == "8"
    finally:
        for key in ("node", "kubelet", "apiserver"):
            if key in procs:
                procs[key].send_signal(signal.SIGTERM)
                procs[key].wait(60)
        for f in logs.values():
            f.close()
    node_log = (short_tmp / "node.log").read_text()
    assert "does not exist" not in node_log, node_log[-2000:]
    assert {k: p.returncode for k, p in procs.items()} == {"apiserver": 0, "kubelet": 0, "node": 0}
