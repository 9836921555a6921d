"""Children that go when the sandbox goes: the child half of the guard (the parent half is `processes.spawn`).

`python -m bridge.sandbox.cluster.orphanguard PARENT_PID -- COMMAND...` asks the kernel for SIGTERM when its parent
dies (Linux `prctl(PR_SET_PDEATHSIG)`), checks that the parent is still PARENT_PID, then execs COMMAND (the setting
survives `execve` for anything that is not set-user-ID or file-capability, which `bridge` is not).

The Linux man page prctl(2) (man-pages, `PR_SET_PDEATHSIG`, now also PR_SET_PDEATHSIG(2const)) says the
parent-death signal "is sent upon subsequent termination of the parent thread", and warns that the "parent" is the
*thread* that created the child, not the process: a child forked from a short-lived thread (a reconciler's worker, a
test's helper thread, a `ThreadPoolExecutor` worker the pool retires) gets SIGTERM the moment that thread returns,
while the sandbox lives on. So the parent forks every guarded child from one thread that lives as long as the
process (`processes.spawn`): the signal then comes exactly when the process dies (SIGKILL, a crash, a normal exit:
threads end with their process).

The sandbox cluster and the guide tests start their node daemons, controller, webhook and shells this way, so a
sandbox killed with SIGKILL (or crashing) leaves none behind. On systems without prctl the command simply runs;
`SandboxCluster.stop` still ends it. This module imports nothing but the standard library, and nothing in the
package imports it: run with `-m`, it must not be in `sys.modules` already.
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
