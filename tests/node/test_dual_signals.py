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
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SYS_TGKILL = 234  # x86_64; the test is skipped elsewhere


def tgkill(pid: int, tid: int, sig: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(SYS_TGKILL, pid, tid, sig) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {tid}, {sig}) failed")


def other_threads(pid: int) -> list[int]:
    return [int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid]


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine != "x86_64",
                    reason="tgkill syscall number is for Linux x86_64")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_delivered_to_a_non_main_thread_still_stops_the_daemon_and_removes_its_sockets(
        short_tmp: Path, sig: signal.Signals) -> None:
    kubelet_root = short_tmp / "kl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge", "node", "--node-name", "node-sig", "--devices", "simulated:2xL4",
         "--kubelet-root", str(kubelet_root),
         "--device-plugin-dir", str(kubelet_root / "device-plugins"), "--state-dir", str(short_tmp / "st"), "--cdi-root", str(short_tmp / "cdi"),
         "--http-address", "off", "--dra", "off"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        sockets = kubelet_root / "device-plugins"
        deadline = time.monotonic() + 60
        while not (sockets.is_dir() and any(p.is_socket() for p in sockets.iterdir())):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "bridge node never served its device-plugin socket"
            time.sleep(0.05)
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
