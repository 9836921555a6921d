"""The daemon's state directory (`--state-dir`), and its claims directory (`--claims-dir`) when one is given: made
and proven writable before anything is served.

The checkpoints (device sides; prepared claims, bridge.dra.stores) live there; a daemon that cannot write them
would serve devices and then lose what it promised on the first write. So start fails first, with the option, the
path and the OS reason, instead of a bare `[Errno 20] Not a directory` from deep inside the checkpoint code.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class StateDirError(OSError):
    """The state directory cannot be created or written."""


def ensure_state_dir(path: Path, option: str = "--state-dir") -> Path:
    """Create `path` (mode 0700, parents as needed) and check a file can be written in it; return it absolute.
    `option`: the flag that named it (also `--claims-dir`), for the error."""
    target = Path(os.path.abspath(path))
    try:
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target, prefix=".write-check-"):
            pass
    except OSError as err:
        raise StateDirError(f"{'state' if option == '--state-dir' else 'claims'} directory {str(target)!r} "
                            f"({option}) cannot be used: "
                            f"{err.strerror or err}" + (f": {err.filename!r}" if err.filename else "")) from err
    return target
