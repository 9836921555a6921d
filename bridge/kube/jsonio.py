"""Decoding large API responses without the cyclic garbage collector thrashing.

`json.loads` of one 500-pod page (~2 MiB) allocates hundreds of thousands of dicts, lists and strings. Each
allocation counts towards the collector's thresholds, so a decode triggers many collections, and the older
generations scan every object the process holds, including the pages already decoded: measured on a 500-pod page,
47 ms with a small heap, 166 ms once a few thousand pods are held, versus 19-51 ms with collection paused. Decoded
JSON cannot contain reference cycles, so pausing the collector for the duration of a large decode frees nothing
later than it would have been freed anyway.

The pause is process-wide and reference-counted across threads: the first large decode pauses collection (only if
it was enabled), the last one to finish resumes it. Small bodies are decoded directly.
"""

from __future__ import annotations

import gc
import json
import threading
from typing import Any

LARGE = 256 * 1024

_lock = threading.Lock()
_active = 0
_paused_by_us = False


def loads(data: bytes) -> Any:
    global _active, _paused_by_us
    if len(data) < LARGE:
        return json.loads(data)
    with _lock:
        if _active == 0 and gc.isenabled():
            gc.disable()
            _paused_by_us = True
        _active += 1
    try:
        return json.loads(data)
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _paused_by_us:
                _paused_by_us = False
                gc.enable()


__all__ = ["LARGE", "loads"]
