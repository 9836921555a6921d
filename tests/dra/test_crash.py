"""Crash safety: the DRA daemon SIGKILLed at each step of prepare/unprepare, restarted, the kubelet retries.

The daemon runs as a real subprocess (`python -m bridge.dra._crashharness`) with `BRIDGE_CRASH_AT`; a supervisor
restarts it when it dies, like the DaemonSet controller would. Final state must be correct: the claim prepared
exactly once (one record, one CDI spec), and nothing left after unprepare.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.sandbox.kubelet.dramanager import DraManager
from tests.dra.cluster import DRIVER, NODE, cdi_files, gpu, make_claim, make_pod, wait_until
from tests.dra.conftest import Cluster

pytestmark = pytest.mark.slow


class Daemon:
    """Runs the harness, restarting it whenever it exits (until `close`)."""

    def __init__(self, cluster: Cluster, env: dict[str, str]) -> None:
        self.cluster = cluster
        self.env = {**os.environ, **env}
        self.boot_id = cluster.root / "boot_id"
        if not self.boot_id.exists():
            self.boot_id.write_text("boot-1\n")
        self.starts = 0
        self.output: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._supervise, daemon=True)
        self._thread.start()

    def _supervise(self) -> None:
        while not self._closed.is_set():
            c = self.cluster
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bridge.dra._crashharness", "--kubeconfig", str(c.kubeconfig), "--node", NODE,
                 "--kubelet-root", str(c.kubelet_root), "--state-dir", str(c.state_dir), "--cdi-root", str(c.cdi_root),
                 "--boot-id-file", str(self.boot_id), "--log-level", "WARNING"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env,
            )
            self.starts += 1
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line.rstrip())
            self.proc.wait()

    def close(self) -> None:
        self._closed.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)
        self._thread.join(15)

    def records(self) -> dict[str, dict]:
        return checkpoint_doc(self.cluster)["data"]["preparedClaims"]


def checkpoint_doc(cluster: Cluster) -> dict:
    """The claim records' checkpoint as stored (claims.json, beside the sides' checkpoint.json)."""
    path = cluster.state_dir / "claims.json"
    return json.loads(path.read_text()) if path.exists() else {"data": {"preparedClaims": {}}}


@pytest.fixture
def daemon_factory(cluster: Cluster) -> Iterator:
    started: list[Daemon] = []

    def start(**env: str) -> Daemon:
        d = Daemon(cluster, env)
        started.append(d)
        return d

    yield start
    for d in started:
        d.close()


@pytest.mark.parametrize("point", ["prepare-after-checkpoint-started", "prepare-after-cdi-write",
                                   "prepare-after-checkpoint-completed"])
def test_a_crash_during_prepare_ends_prepared_exactly_once_after_restart_and_retry(
    cluster: Cluster, kubelet: DraManager, daemon_factory, point: str
) -> None:
    daemon = daemon_factory(BRIDGE_CRASH_AT=point, BRIDGE_CRASH_ONCE_FILE=str(cluster.root / "once"))
    kubelet.wait_for_plugin(DRIVER)
    pod = make_pod(cluster.api, "ns", "p", ["gpu"])
    uid = make_claim(cluster.api, "ns", "gpu", pod, [gpu("gpu-2")])["metadata"]["uid"]

    records = kubelet.prepare_pod_with_retry(pod, timeout=60, interval=0.3)
    assert daemon.starts >= 2, "the daemon should have crashed once and been restarted"
    assert [d.device for d in records[uid].prepared[DRIVER]] == ["gpu-2"]
    assert set(cdi_files(cluster.cdi_root)) == {uid}
    assert {u: r["state"] for u, r in daemon.records().items()} == {uid: "PrepareCompleted"}

    kubelet.unprepare_pod_with_retry(pod, timeout=30)
    assert cdi_files(cluster.cdi_root) == {} and daemon.records() == {}


@pytest.mark.parametrize("point", ["unprepare-before-cdi-remove", "unprepare-after-cdi-remove",
                                   "unprepare-after-checkpoint"])
def test_a_crash_during_unprepare_leaves_nothing_behind_after_restart_and_retry(
    cluster: Cluster, kubelet: DraManager, daemon_factory, point: str
) -> None:
    daemon = daemon_factory(BRIDGE_CRASH_AT=point, BRIDGE_CRASH_ONCE_FILE=str(cluster.root / "once"))
    kubelet.wait_for_plugin(DRIVER)
    pod = make_pod(cluster.api, "ns", "p", ["gpu"])
    make_claim(cluster.api, "ns", "gpu", pod, [gpu("gpu-1")])
    kubelet.prepare_pod_with_retry(pod, timeout=30)
    kubelet.unprepare_pod_with_retry(pod, timeout=60, interval=0.3)
    assert daemon.starts >= 2
    assert cdi_files(cluster.cdi_root) == {} and daemon.records() == {}
    # The device is free again: another claim gets it.
    pod2 = make_pod(cluster.api, "ns", "p2", ["gpu2"])
    uid2 = make_claim(cluster.api, "ns", "gpu2", pod2, [gpu("gpu-1")], request="gpu")["metadata"]["uid"]
    assert uid2 in kubelet.prepare_pod_with_retry(pod2, timeout=30)


def test_after_a_reboot_the_kubelet_re_prepares_and_the_cdi_spec_is_recreated(
    cluster: Cluster, kubelet: DraManager, daemon_factory
) -> None:
    daemon = daemon_factory()
    kubelet.wait_for_plugin(DRIVER)
    pod = make_pod(cluster.api, "ns", "p", ["gpu"])
    uid = make_claim(cluster.api, "ns", "gpu", pod, [gpu("gpu-3")])["metadata"]["uid"]
    kubelet.prepare_pod(pod)
    daemon.close()
    for f in cluster.cdi_root.iterdir():  # /var/run/cdi is tmpfs: empty after the reboot
        f.unlink()
    (cluster.root / "boot_id").write_text("boot-2\n")
    daemon_factory()
    kubelet.restart()
    kubelet.wait_for_plugin(DRIVER)
    kubelet.prepare_pod_with_retry(pod, timeout=30)
    assert set(cdi_files(cluster.cdi_root)) == {uid}
    doc = checkpoint_doc(cluster)
    assert (doc["data"]["preparedClaims"][uid]["state"], doc["bootID"]) == ("PrepareCompleted", "boot-2")


def test_a_corrupt_checkpoint_is_reported_kept_aside_and_the_daemon_still_serves(
    cluster: Cluster, kubelet: DraManager, daemon_factory
) -> None:
    cluster.state_dir.mkdir(parents=True)
    (cluster.state_dir / "checkpoint.json").write_text("{not json")
    daemon = daemon_factory()
    kubelet.wait_for_plugin(DRIVER)
    line = wait_until(lambda: next((l for l in daemon.output if "CORRUPT-CHECKPOINT-MOVED-TO" in l), None),
                      what="the corrupt-checkpoint report")
    aside = Path(line.split()[-1])
    assert aside.read_text() == "{not json"
    assert any("checkpoint.json is corrupt (not valid JSON" in l and "moved it aside" in l for l in daemon.output)
    pod = make_pod(cluster.api, "ns", "p", ["gpu"])
    uid = make_claim(cluster.api, "ns", "gpu", pod, [gpu("gpu-1")])["metadata"]["uid"]
    kubelet.prepare_pod(pod)
    assert set(cdi_files(cluster.cdi_root)) == {uid}
