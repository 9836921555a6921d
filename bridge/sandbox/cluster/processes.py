"""Child processes of a sandbox cluster (node daemons, the webhook): started with a death signal tied to the
cluster's process (not to the thread that asked: see `orphanguard`), logs to a file, stopped with SIGTERM and, after
a grace period, SIGKILL.

Children run in their own session, so a Ctrl-C in the terminal reaches only the cluster process, which then stops
them in order (webhook and daemons before the API emulator); `orphanguard` makes them go if the cluster dies.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from pathlib import Path

from bridge.sandbox.cluster import orphanguard

log = logging.getLogger(__name__)


class ChildProcess:
    def __init__(self, name: str, argv: list[str], log_path: Path, *, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> ChildProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            # forked by orphanguard's spawner thread, whichever thread calls start: the death signal follows
            # the thread that forked, and that one lives as long as this process
            self.proc = orphanguard.spawn(lambda: subprocess.Popen(
                orphanguard.command(self.argv),
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, **(self.env or {})},
            ))
        log.info("started %s (pid %d), log %s", self.name, self.proc.pid, self.log_path)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM, wait up to `grace` seconds, then SIGKILL. Returns the exit code (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0fs after SIGTERM: killing it", self.name, grace)
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
