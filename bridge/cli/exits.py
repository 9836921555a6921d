"""Exit codes shared by every `bridge` command, and the one message for a port that cannot be listened on.

    0  done (a daemon: stopped cleanly on SIGTERM/SIGINT)
    1  the command ran and its answer is "no" (migrate-report: blockers found; namespace set --strict: refused)
       or a runtime failure that is not the caller's configuration (a corrupt checkpoint)
    2  usage, configuration or connection errors: bad options, no or unreadable kubeconfig, API server unreachable
       or slower than the timeout, missing RBAC, a port already in use, a path that cannot be used

A port in use is answered with the port, the option (and its environment variable) that chooses another, and `off`
where the listener is optional, never with a Python traceback.
"""

from __future__ import annotations

import errno

EXIT_OK, EXIT_NO, EXIT_CONFIG = 0, 1, 2


def listen_error(err: OSError, what: str, address: str, option: str, envvar: str, *, can_disable: bool = False,
                 any_port: bool = False) -> str | None:
    """The message for `err` when it is a failure to listen (port in use, privileged port, unknown address);
    None for any other OSError."""
    if err.errno == errno.EADDRINUSE:
        problem = f"{what}: {address} is already in use (another process listens there)"
    elif err.errno == errno.EACCES:
        problem = f"{what}: not allowed to listen on {address} (ports below 1024 need privileges)"
    elif err.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
        problem = f"{what}: {address} is not an address of this machine"
    else:
        return None
    choices = [f"choose another with {option} (env {envvar})"]
    if any_port:
        choices.append(f"{option} 0 picks a free port")
    if can_disable:
        choices.append(f"turn it off with {option} off")
    return f"{problem}; " + ", or ".join(choices)
