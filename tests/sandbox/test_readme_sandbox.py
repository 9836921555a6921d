"""The README's sandbox, node-daemon and webhook commands work together as written (issue 15 item 4): the API
emulator, the kubelet simulator for `n1` (which registers its Node), the simulated node daemon for `n1` and the
webhook with its self-signed TLS, each as its own process, then `bridge namespace set ... --strict` and the README's
GPU pod; only the paths under /tmp and the fixed ports are replaced so tests can run side by side. The README's
`kubectl create -f examples/webhook/gpu-pod.yaml` is done with the official Python client (kubectl is not on every
machine); the `bridge` commands run as written.

Before the kubelet simulator registered its Node, the daemon looped on "Node 'n1' does not exist"; before
`--self-signed` there was no way to run the webhook locally with TLS."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from bridge.kube import NODES, connect
from bridge.kube.api import MUTATING_WEBHOOKS, PODS
from tests.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]


PREFIXES = (("apiserver", "bridge sandbox apiserver "), ("kubelet", "bridge sandbox kubelet "),
            ("node", "bridge node --node-name n1 "), ("webhook", "bridge webhook --kubeconfig /tmp/"),
            ("namespace", "bridge namespace set team-vision "), ("pod", "kubectl --kubeconfig /tmp/sandbox.kubeconfig create -f "))


def _readme_commands() -> dict[str, list[str]]:
    """The first README command line of each kind in PREFIXES."""
    text = (ROOT / "README.md").read_text().replace("\\\n", " ")
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.split("  #", 1)[0].strip()
        for key, prefix in PREFIXES:
            if line.startswith(prefix) and key not in out:
                out[key] = shlex.split(line)
    assert set(out) == {k for k, _ in PREFIXES}, f"README commands not found: {sorted(out)}"
    return out


def _localise(argv: list[str], tmp: Path, ports: dict[str, int]) -> list[str]:
    out = []
    for arg in argv:
        arg = re.sub(r"^/tmp/", f"{tmp}/", arg)
        out.append(str(ports.get(arg, arg)))
    return [sys.executable, "-m", "bridge", *out[1:]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _node_exists(api: Any) -> bool:
    try:
        api.get(NODES, "n1")
        return True
    except Exception:  # noqa: BLE001 - not registered yet
        return False


def test_the_readme_sandbox_node_daemon_and_webhook_commands_work_together_as_written(short_tmp: Path) -> None:
    commands = _readme_commands()
    ports = {"8001": _free_port(), "8443": _free_port()}
    kubeconfig = short_tmp / "sandbox.kubeconfig"
    daemons = ("apiserver", "kubelet", "node", "webhook")
    logs = {k: open(short_tmp / f"{k}.log", "w") for k in daemons}
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        procs["apiserver"] = subprocess.Popen(_localise(commands["apiserver"], short_tmp, ports), cwd=ROOT,
                                              stdout=logs["apiserver"], stderr=subprocess.STDOUT, text=True)
        wait_until(lambda: kubeconfig.exists() or procs["apiserver"].poll() is not None, 60, "the kubeconfig")
        # The kubelet posts its Node's status every 10 s like a real one; the documented env var shortens that.
        env = {**os.environ, "BRIDGE_SANDBOX_KUBELET_NODE_STATUS_FREQUENCY": "0.5"}
        api = connect(str(kubeconfig))
        for key in ("kubelet", "node", "webhook"):
            procs[key] = subprocess.Popen(_localise(commands[key], short_tmp, ports), cwd=ROOT, env=env,
                                          stdout=logs[key], stderr=subprocess.STDOUT, text=True)
            if key == "kubelet":  # as in the README, the daemon starts once its node's kubelet runs (has registered)
                wait_until(lambda: _node_exists(api) or procs["kubelet"].poll() is not None, 60, "Node n1")
        _the_webhook_translates_a_pod_of_a_namespace_flipped_to_dra(api, commands, short_tmp, ports, procs)

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
        for key in ("webhook", "node", "kubelet", "apiserver"):
            if key in procs:
                procs[key].send_signal(signal.SIGTERM)
                procs[key].wait(60)
        for f in logs.values():
            f.close()
    node_log = (short_tmp / "node.log").read_text()
    assert "does not exist" not in node_log, node_log[-2000:]
    assert {k: p.returncode for k, p in procs.items()} == {k: 0 for k in daemons}
    assert (short_tmp / "webhook" / "ca.crt").exists()  # --self-signed wrote the CA bundle it registered


def _the_webhook_translates_a_pod_of_a_namespace_flipped_to_dra(
        api: Any, commands: dict[str, list[str]], tmp: Path, ports: dict[str, int],
        procs: dict[str, subprocess.Popen[str]]) -> None:
    def registered() -> bool:
        try:
            return bool(api.get(MUTATING_WEBHOOKS, "dra-bridge"))
        except Exception:  # noqa: BLE001 - not yet
            return False

    wait_until(lambda: registered() or procs["webhook"].poll() is not None, 60, "the webhook to register itself")
    assert procs["webhook"].poll() is None, (tmp / "webhook.log").read_text()[-2000:]
    flip = subprocess.run(_localise(commands["namespace"], tmp, ports), cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert flip.returncode == 0, flip.stdout + flip.stderr  # --strict: the webhook is registered, reachable, covers it
    manifest = yaml.safe_load((ROOT / commands["pod"][-1]).read_text())  # kubectl create -f, by the Python client
    created = api.create(PODS, manifest, manifest["metadata"]["namespace"])
    assert created["metadata"]["annotations"]["dra-bridge.io/translated"] == "claims"
    [claim] = created["spec"]["resourceClaims"]
    assert claim["resourceClaimTemplateName"].startswith("dra-bridge-gpu-2-")
    limits = created["spec"]["containers"][0]["resources"].get("limits") or {}
    assert "nvidia.com/gpu" not in limits
