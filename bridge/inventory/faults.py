"""Health faults for simulated GPUs from a file: how a process outside the node daemon (a test, `bridge sandbox
cluster`, an operator trying the bridge out) makes a simulated GPU fail, as an NVML XID event makes a real one fail.

    bridge node --devices simulated:8xH100-80GB --simulated-faults /var/lib/dra-bridge/simulated-faults.jsonl

The file holds one JSON object per line, appended by whoever injects the fault (`append_fault`):

    {"gpu": "GPU-5f0c...", "xid": 79}                       an XID event: NVIDIA's ignore list and --ignore-xids apply
    {"gpu": 3, "healthy": false, "reason": "fan failure"}   the GPU with minor number 3 marked unhealthy
    {"gpu": 3, "healthy": true}                             ... and healthy again

`gpu` is the GPU's UUID or its minor number (its index in the simulated spec). The daemon applies the lines in
order as they appear (it looks every 100 ms), from the start of the file when it starts: a fault outlives a daemon
restart, as a GPU that fell off the bus stays off it. A line that cannot be used (not JSON, an unknown GPU, neither
`xid` nor `healthy`) is logged with its line number and skipped; the lines after it still apply. A line is read
only once it is complete (ends with a newline), so a writer caught mid-line is read at the next look. A missing
file is no fault yet.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024  # a fault line is tens of bytes; a longer one is skipped, never buffered without end


@dataclass(frozen=True)
class Fault:
    line: int  # 1-based line number in the file
    gpu: str | int  # UUID or minor number
    xid: int | None = None
    healthy: bool | None = None
    reason: str = ""


class FaultError(ValueError):
    pass


def parse_fault(text: str, line: int) -> Fault:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise FaultError(f"not JSON ({err.msg})") from err
    if not isinstance(doc, dict):
        raise FaultError("expected an object like {\"gpu\": 3, \"xid\": 79}")
    gpu = doc.get("gpu")
    if isinstance(gpu, bool) or not isinstance(gpu, (str, int)) or gpu == "":
        raise FaultError("'gpu' must be a GPU UUID or a minor number")
    xid, healthy, reason = doc.get("xid"), doc.get("healthy"), doc.get("reason", "")
    if (xid is None) == (healthy is None):
        raise FaultError("expected exactly one of 'xid' (a number) and 'healthy' (true or false)")
    if xid is not None and (isinstance(xid, bool) or not isinstance(xid, int) or xid <= 0):
        raise FaultError(f"'xid' must be a positive number, got {xid!r}")
    if healthy is not None and not isinstance(healthy, bool):
        raise FaultError(f"'healthy' must be true or false, got {healthy!r}")
    if not isinstance(reason, str):
        raise FaultError("'reason' must be a string")
    return Fault(line, gpu, xid, healthy, reason)


class FaultsFile:
    """Reads the lines appended to a faults file since the last `read()`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._offset = 0
        self._line = 0
        self._identity: tuple[int, int] | None = None  # (device, inode) of the file read so far

    def read(self) -> list[Fault]:
        """The complete lines appended since the last call, parsed; bad lines are logged and left out. A file
        replaced by another (a new inode) or truncated is read again from its start."""
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                identity = (st.st_dev, st.st_ino)
                if identity != self._identity or st.st_size < self._offset:
                    self._identity, self._offset, self._line = identity, 0, 0
                f.seek(self._offset)
                data = f.read(max(0, st.st_size - self._offset))
        except FileNotFoundError:
            return []
        except OSError as err:
            log.warning("cannot read the simulated faults file %s: %s", self.path, err)
            return []
        out: list[Fault] = []
        consumed = 0
        while True:
            end = data.find(b"\n", consumed)
            if end < 0:
                if len(data) - consumed > MAX_LINE_BYTES:  # no newline within the limit: skip what is there
                    self._line += 1
                    log.warning("simulated faults file %s line %d: longer than %d bytes, skipped", self.path,
                                self._line, MAX_LINE_BYTES)
                    consumed = len(data)
                break
            raw, consumed = data[consumed:end], end + 1
            self._line += 1
            text = raw.decode("utf-8", errors="replace").strip()
            if not text:
                continue
            try:
                out.append(parse_fault(text, self._line))
            except FaultError as err:
                log.warning("simulated faults file %s line %d: %s; skipped", self.path, self._line, err)
        self._offset += consumed
        return out


def append_fault(path: Path, gpu: str | int, *, xid: int | None = None, healthy: bool | None = None,
                 reason: str = "") -> None:
    """Append one fault line (one `write` on an O_APPEND file: a reader sees the whole line or none of it)."""
    doc: dict[str, object] = {"gpu": gpu}
    if xid is not None:
        doc["xid"] = xid
    if healthy is not None:
        doc["healthy"] = healthy
    if reason:
        doc["reason"] = reason
    parse_fault(json.dumps(doc), 0)  # refuse here what the daemon would skip
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, (json.dumps(doc) + "\n").encode())
    finally:
        os.close(fd)
