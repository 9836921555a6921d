"""TEST HOOK: kill this process with SIGKILL at a named step of prepare/unprepare.

Crash tests run the daemon as a subprocess with `BRIDGE_CRASH_AT=<point>[,<point>...]` and check that a restart
plus the kubelet's retry ends in a correct state. Without that variable `crash_point` does nothing (one dict
lookup), so production behaviour is unchanged. `BRIDGE_CRASH_ONCE_FILE=<path>` makes a point fire only once per
file (the file is created just before the kill), so the restarted process passes the same point.

Points (in execution order):
    prepare-after-checkpoint-started   the PrepareStarted records are written (renamed, not fsynced), no CDI file
                                       (a re-prepare: the record names the NEW devices, the claim's OLD spec file
                                       is still on disk)
    prepare-after-cdi-write            the CDI specs are on disk, the records still say PrepareStarted
    prepare-after-checkpoint-completed the records say PrepareCompleted (renamed, not fsynced yet), the response
                                       is not sent yet
    claims-before-sync                 the background sync of a call's records (`deferredsync`) is about to fsync:
                                       the response may already be with the kubelet
    unprepare-before-cdi-remove        nothing undone yet for this claim
    unprepare-after-cdi-remove         this claim's CDI spec is gone, its record is still there
    unprepare-after-checkpoint         the batch's records are gone, the response is not sent yet
"""

from __future__ import annotations

import os
import signal

ENV = "BRIDGE_CRASH_AT"
ONCE_ENV = "BRIDGE_CRASH_ONCE_FILE"
POINTS = (
    "prepare-after-checkpoint-started",
    "prepare-after-cdi-write",
    "prepare-after-checkpoint-completed",
    "claims-before-sync",
    "unprepare-before-cdi-remove",
    "unprepare-after-cdi-remove",
    "unprepare-after-checkpoint",
)


def crash_point(name: str) -> None:
    """SIGKILL ourselves if `name` is listed in $BRIDGE_CRASH_AT (test hook; a no-op otherwise)."""
    wanted = os.environ.get(ENV)
    if not wanted or name not in wanted.split(","):
        return
    once = os.environ.get(ONCE_ENV)
    if once:
        marker = f"{once}.{name}"
        if os.path.exists(marker):
            return
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGKILL)
