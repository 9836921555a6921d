"""The cross-process Prepare/Unprepare lock: exclusive, bounded wait, released when the holder dies."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from bridge.ledger import FileLock, LockTimeout, serialize_lock

HOLD = textwrap.dedent("""
    import sys, time
    from bridge.ledger import serialize_lock
    lock = serialize_lock(sys.argv[1])
    lock.acquire()
    print("held", flush=True)
    time.sleep(600)
""")


def test_serialize_lock_is_pu_lock_with_a_ten_second_timeout(tmp_path: Path) -> None:
    lock = serialize_lock(tmp_path)
    assert lock.path == tmp_path / "pu.lock" and lock.timeout_s == 10.0


def test_a_lock_held_by_another_process_times_out_then_frees_when_that_process_dies(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LockTimeout, match="pu.lock within 0.3s"):
            serialize_lock(tmp_path, timeout_s=0.3).acquire()
    finally:
        holder.kill()  # SIGKILL: no cleanup code runs in the holder
        holder.wait(timeout=30)
    with serialize_lock(tmp_path, timeout_s=30) as lock:
        assert lock.held


def test_two_threads_of_one_process_exclude_each_other(tmp_path: Path) -> None:
    inside = 0
    overlaps = 0
    guard = threading.Lock()

    def work() -> None:
        nonlocal inside, overlaps
        for _ in range(50):
            with FileLock(tmp_path / "x.lock", timeout_s=60):
                with guard:
                    inside += 1
                    overlaps += inside > 1
                threading.Event().wait(0.001)
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert overlaps == 0


def test_the_lock_is_not_reentrant_and_says_so(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "x.lock", timeout_s=0.1)
    with lock:
        with pytest.raises(RuntimeError, match="already held"):
            lock.acquire()
        with pytest.raises(LockTimeout):
            FileLock(tmp_path / "x.lock", timeout_s=0.1).acquire()
    assert not lock.held


def test_a_lock_whose_directory_is_missing_creates_it(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "state" / "nested" / "pu.lock", timeout_s=1)
    with lock:
        assert lock.held and (tmp_path / "state" / "nested" / "pu.lock").is_file()
    with lock:  # and again, the directory now there
        assert lock.held
