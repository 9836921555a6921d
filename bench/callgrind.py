"""Reading callgrind's phase dumps, for the instruction-count benches (webhook_review_cost.py, deviceplugin_cost.py).

Those scripts run a process under `valgrind --tool=callgrind --dump-before=os_getppid`: every call of `os.getppid`
(the phase marker; nothing on the measured paths calls it) dumps the counters since the previous dump into a file
`cg.<pid>.<n>`, so dump k holds exactly what ran between two markers.
"""

from __future__ import annotations

import re
from pathlib import Path

MARKER = "os_getppid"  # CPython's C function behind os.getppid (callgrind --dump-before matches it)


def totals(directory: Path, pid: int) -> list[int]:
    """The instruction count of each dump, in order (dump k is what ran since dump k-1)."""
    found: dict[int, int] = {}
    for f in directory.glob(f"cg.{pid}.*"):
        m = re.search(r"^summary: (\d+)$", f.read_text(errors="replace"), re.M)
        if m:
            found[int(f.name.rsplit(".", 1)[1])] = int(m[1])
    return [found[k] for k in sorted(found)]
