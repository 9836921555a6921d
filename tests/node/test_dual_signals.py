"""`bridge node` stops on SIGTERM whichever of its threads the kernel hands the signal to.

A signal sent to a process goes to ANY thread that does not block it; `bridge node` has a dozen (gRPC's C threads,
the ListAndWatch and slice workers). CPython runs the Python handler only in the main thread, when it next executes
bytecode, so a main thread parked in an untimed `Event.wait()` never ran it when another thread took the signal:
the daemon ignored SIGTERM until the kubelet's grace period ran out and it was SIGKILLed, leaving its sockets behind
(seen by hand: `bridge node` still running 30 s after SIGTERM). `tgkill` aims the signal at a chosen non-main thread,
so this test hits that case every time instead of by chance.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
SYS_TGKILL = 234  # x86_64; the test is skipped elsewhere


def tgkill(pid: int, tid: int, sig: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(SYS_TGKILL, pid, tid, sig) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {tid}, {sig}) failed")


def other_threads(pid: int) -> list[int]:
    return [int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid]


def start_daemon(short_tmp: Path) -> tuple[subprocess.Popen[str], Path]:
    """`bridge node` (device plugin only) in a subprocess, once its device-plugin socket is served."""
    kubelet_root = short_tmp / "kl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge", "node", "--node-name", "node-sig", "--devices", "simulated:2xL4",
         "--kubelet-root", str(kubelet_root),
         "--device-plugin-dir", str(kubelet_root / "device-plugins"), "--state-dir", str(short_tmp / "st"), "--cdi-root", str(short_tmp / "cdi"),
         "--http-address", "off", "--dra", "off"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sockets = kubelet_root / "device-plugins"
    deadline = time.monotonic() + 60
    while not (sockets.is_dir() and any(p.is_socket() for p in sockets.iterdir())):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"bridge node never served its device-plugin socket: {proc.communicate()[1]}")
        time.sleep(0.05)
    return proc, sockets


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine != "x86_64",
                    reason="tgkill syscall number is for Linux x86_64")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_delivered_to_a_non_main_thread_still_stops_the_daemon_and_removes_its_sockets(
        short_tmp: Path, sig: signal.Signals) -> None:
    proc, sockets = start_daemon(short_tmp)
    try:
        threads = other_threads(proc.pid)
        assert threads, "expected worker threads next to the main thread"
        tgkill(proc.pid, threads[-1], sig)
        try:
            rc = proc.wait(30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"bridge node ignored {sig.name} delivered to thread {threads[-1]} for 30 s")
        assert rc == 0, proc.stderr.read() if proc.stderr else ""
        assert not any(p.is_socket() for p in sockets.iterdir()), "our socket must be removed on the way out"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def test_a_stop_stuck_past_its_deadline_says_so_writes_every_threads_stack_and_exits_1() -> None:
    """The kubelet SIGKILLs a pod after its grace period and the log then ends mid-stop with no clue; the daemon's
    own deadline (armed by the SIGTERM handler) ends it first, naming the frame it is stuck in."""
    script = (
        "import logging, threading\n"
        "from bridge.node.dual import arm_stop_deadline\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "def a_stop_step_waiting_on_a_lock_nobody_releases():\n"
        "    lock = threading.Lock(); lock.acquire(); lock.acquire()\n"
        "arm_stop_deadline(1.0)\n"
        "a_stop_step_waiting_on_a_lock_nobody_releases()\n")
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert time.monotonic() - began < 30
    assert "stopping took longer than 1s: exiting now with status 1" in done.stderr
    assert "a_stop_step_waiting_on_a_lock_nobody_releases" in done.stderr  # the stack shows where it hangs


def test_a_slow_stop_step_is_logged_by_name(short_tmp: Path, monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    from bridge.inventory.simulated import SimulatedSource
    from bridge.node import daemon as daemon_mod
    from bridge.node.daemon import NodeConfig, NodeDaemon

    class SlowToStop:
        def start(self) -> None: ...

        def stop(self) -> None:
            time.sleep(0.3)

        def liveness(self) -> dict:
            return {}

        def readiness(self) -> dict:
            return {}

    monkeypatch.setattr(daemon_mod, "SLOW_STOP_STEP_S", 0.2)
    cfg = NodeConfig(node_name="node-slow", kubelet_root=short_tmp, cdi_root=short_tmp / "cdi",
                     state_dir=short_tmp / "state", http_address=None)
    node = NodeDaemon(cfg, SimulatedSource.from_spec("1xL4", "node-slow"), components=[SlowToStop()])
    node.start()
    with caplog.at_level("WARNING", logger="bridge.node"):
        node.stop()
    slow = [r.getMessage() for r in caplog.records if " took " in r.getMessage()]
    assert len(slow) == 1 and slow[0].startswith("stopping SlowToStop.stop took 0."), slow  # only the slow step


def test_sigusr1_writes_every_threads_stack_to_stderr_and_the_daemon_carries_on(short_tmp: Path) -> None:
    proc, _ = start_daemon(short_tmp)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr or ()), daemon=True)
    reader.start()
    try:
        wait_until(lambda: any("node daemon serving (started in" in line for line in err), timeout=30,
                   what="the daemon's 'serving' line")
        # A dump taken while the main thread is between its start and its wait would not show the wait: ask again.
        for _ in range(40):
            proc.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
            assert proc.poll() is None, "SIGUSR1 must not stop the daemon"
            if any("wait_for_stop" in line for line in err):
                break
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        reader.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    text = "".join(err)
    assert proc.returncode == 0, text[-2000:]
    assert "Current thread" in text or "Thread 0x" in text, text[-2000:]
    assert "wait_for_stop" in text, text[-2000:]  # the main thread, waiting for the signal that stops it
    assert "node daemon stopped" in text
