"""A guarded child lives exactly as long as the process that started it, whichever thread started it."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bridge.sandbox.cluster import processes
from tests.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]

# The parent: a thread starts the child, stays until the child has exec'd `sleep` (so the death signal is armed
# while that thread is its parent), then returns. Prints the child's pid once the thread is gone.
PARENT = """
import sys, threading, time
from pathlib import Path
from bridge.sandbox.cluster.processes import ChildProcess

started = {}

def start():
    child = ChildProcess("sleeper", ["sleep", "120"], Path(sys.argv[1])).start()
    started["pid"] = child.pid
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{child.pid}/cmdline").read_bytes().startswith(b"sleep"):
                return
        except OSError:
            return
        time.sleep(0.02)

helper = threading.Thread(target=start, name="short-lived")
helper.start()
helper.join()
print(started["pid"], flush=True)
time.sleep(120)
"""


def _state(pid: int) -> str:
    """The process state letter from /proc (Z: exited, not yet reaped), or '' when the pid is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _running(pid: int) -> bool:
    return _state(pid) not in ("", "Z", "X")


def test_a_child_started_from_a_thread_that_exits_lives_until_the_parent_process_dies(short_tmp: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(short_tmp / "child.log")], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        # The thread that asked for the child has returned; the child must not have been signalled for it.
        time.sleep(1.0)
        assert _running(child), f"the child (state {_state(child) or 'gone'}) died with the thread that started it"
        assert parent.poll() is None
    finally:
        parent.kill()
        parent.communicate(timeout=30)
    wait_until(lambda: not _running(child), 30, "the child to go with its parent process")


def test_every_child_is_forked_by_one_long_lived_thread_and_its_errors_reach_the_caller() -> None:
    seen: list[threading.Thread] = []
    helpers = [threading.Thread(target=lambda: seen.append(processes.spawn(threading.current_thread)))
               for _ in range(3)]
    for h in helpers:
        h.start()
        h.join()
    assert seen == [processes.spawner_thread()] * 3 and seen[0].daemon and seen[0].is_alive()
    with pytest.raises(ValueError, match="embedded null byte"):
        processes.spawn(lambda: subprocess.Popen(["sleep", "1"], env={"X": "a\0b"}))
