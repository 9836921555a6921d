"""`python -m bridge.sandbox.cluster.orphanguard PARENT_PID -- COMMAND...`: run COMMAND so that it gets SIGTERM when
the process that started it dies (Linux `prctl(PR_SET_PDEATHSIG)`), then exec it.

The sandbox cluster starts its node daemons and webhook through this, so a sandbox killed with SIGKILL (or crashing)
leaves no daemons behind. The signal is tied to the *thread* that forked the child, so the cluster starts children
from a thread that lives as long as the cluster (the one calling `SandboxCluster.start`). On systems without prctl
the command simply runs; `SandboxCluster.stop` still ends it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m bridge.sandbox.cluster.orphanguard PARENT_PID -- COMMAND...", file=sys.stderr)
        return 2
    parent = int(argv[0])
    command = argv[2:]
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        return 1
    os.execvp(command[0], command)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
