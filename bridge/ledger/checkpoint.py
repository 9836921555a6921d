"""The node daemon's checkpoint: one versioned JSON file, one mutation path, crash- and reboot-safe.

File (`<state-dir>/checkpoint.json`):

    {"version": 1, "bootID": "<kernel boot id>", "checksum": "sha256:<hex of canonical data>", "data": {...}}

Invariants:

* Every change goes through `update(mutate)`: exclusive `flock` on `checkpoint.json.lock` (with an acquire timeout,
  so a wedged holder becomes an error, not a hang), read + verify, `mutate(data) -> data`, write a temp file,
  fsync, rename over the file, fsync the directory. Readers never see a partial file; two processes (a rolling
  update) never lose each other's changes.
* The boot ID is stored with the data. A file written during a previous boot is reported as such
  (`ReadResult.previous_boot`); `update` refuses to build on it unless the caller says it has dealt with it
  (`adopt_previous_boot=True`, typically with `CheckpointData.without_claims`): CDI specs in tmpfs are gone after a
  reboot, so prepared claims must be prepared again, never trusted.
* Durability is per write (`update(..., durable=...)`). Every write is atomic (temp file + rename): a process that
  dies at any instant leaves the old or the new file, never a mix, and the page cache keeps a renamed file for the
  next process even if it was never fsynced. fsync (file, then directory) only matters when unsynced data is lost,
  and that happens only on power loss or a kernel crash, i.e. a reboot: a new boot ID, the tmpfs CDI specs gone,
  the kubelet preparing every claim again, and this module discarding the old boot's claims anyway. So a claim
  record that is superseded before the next durable write may skip the fsync (`durable=False`, the prepare path's
  PrepareStarted). What must survive a reboot is the ownership sides (the kubelet's device assignments survive
  it), and those are always written durably (the default). Residual risk of a non-durable write: on a filesystem
  that does not order a rename-over-existing-file after the new file's data (ext4's `auto_da_alloc` and btrfs do),
  a power cut between a non-durable write and the next durable one can leave a file that fails its checksum; it
  then takes the corrupt-file path below (moved aside, rebuilt from the API and the kubelet), never a silent
  partial state. Callers keep that window short: the durable write follows within the same request.
* A corrupt file (not JSON, wrong checksum, unknown version, malformed data) is never silently replaced by an
  empty state: it is renamed to `checkpoint.json.corrupt-<UTC timestamp>` and `CheckpointCorrupt` is raised, naming
  the reason and where the file went. The caller rebuilds from what the API and the kubelet can tell it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.cdi.writer import atomic_write_bytes, fsync_dir
from bridge.ledger.lock import FileLock
from bridge.ledger.state import CheckpointData

CHECKPOINT_VERSION = 1
CHECKPOINT_NAME = "checkpoint.json"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


class CheckpointError(RuntimeError):
    """The checkpoint could not be read or written (I/O, lock timeout, boot ID unreadable)."""


class CheckpointCorrupt(CheckpointError):
    """The checkpoint file was unusable and has been moved aside to `moved_to`."""

    def __init__(self, path: Path, moved_to: Path, reason: str) -> None:
        super().__init__(f"checkpoint {path} is corrupt ({reason}); moved it aside to {moved_to} and starting "
                         "without it: prepared claims and device sides must be rebuilt from the API and the kubelet")
        self.path = path
        self.moved_to = moved_to
        self.reason = reason


class CheckpointFromPreviousBoot(CheckpointError):
    """`update` was asked to build on state written before the last reboot."""


def read_boot_id(path: str | Path = BOOT_ID_PATH) -> str:
    try:
        value = Path(path).read_text().strip()
    except OSError as err:
        raise CheckpointError(f"cannot read the node boot ID from {path}: {err.strerror or err}") from err
    if not value:
        raise CheckpointError(f"the node boot ID in {path} is empty")
    return value


def _replace_unsynced(path: Path, data: bytes) -> None:
    """Atomic replace without fsync: temp file in the same directory, then rename (see the module docstring)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{time.monotonic_ns()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def checksum(data: dict[str, Any]) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class ReadResult:
    data: CheckpointData
    exists: bool  # False: no file yet (a fresh node), data is empty
    boot_id: str | None  # the boot the file was written in
    previous_boot: bool  # True: written before the last reboot


class Checkpoint:
    def __init__(self, state_dir: str | Path, *, boot_id: Callable[[], str] = read_boot_id,
                 lock_timeout_s: float = 10.0, name: str = CHECKPOINT_NAME,
                 clock: Callable[[], float] = time.time) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / name
        self._lock_path = self.dir / f"{name}.lock"
        self._boot_id = boot_id
        self._lock_timeout_s = lock_timeout_s
        self._clock = clock

    def current_boot_id(self) -> str:
        """The boot ID this process writes with (the node's, or the injected reader's)."""
        return self._boot_id()

    def _lock(self) -> FileLock:
        return FileLock(self._lock_path, self._lock_timeout_s)

    def read(self) -> ReadResult:
        """The stored state (raises CheckpointCorrupt after moving a bad file aside)."""
        current = self._boot_id()
        try:
            with self._lock():
                return self._read_locked(current)
        except TimeoutError as err:
            raise CheckpointError(str(err)) from err

    def update(self, mutate: Callable[[CheckpointData], CheckpointData], *,
               adopt_previous_boot: bool = False, durable: bool = True) -> CheckpointData:
        """Apply `mutate` to the stored state and persist the result atomically; returns the new state.

        If `mutate` raises, nothing is written. Raises CheckpointCorrupt (file moved aside) or
        CheckpointFromPreviousBoot (see module docstring) before calling `mutate`. `durable=False` skips the file
        and directory fsync but keeps the atomic rename: only for state that is void after a reboot and is
        followed shortly by a durable write (see the module docstring for why that is crash-safe).
        """
        current = self._boot_id()
        try:
            with self._lock():
                result = self._read_locked(current)
                if result.previous_boot and not adopt_previous_boot:
                    raise CheckpointFromPreviousBoot(
                        f"checkpoint {self.path} was written in boot {result.boot_id}, this is boot {current}: "
                        "discard its prepared claims first (update(..., adopt_previous_boot=True))")
                new = mutate(result.data)
                if not isinstance(new, CheckpointData):
                    raise TypeError(f"checkpoint mutate function returned {type(new).__name__}, not CheckpointData")
                self._write_locked(new, current, durable)
                return new
        except TimeoutError as err:
            raise CheckpointError(str(err)) from err

    def _write_locked(self, data: CheckpointData, boot_id: str, durable: bool = True) -> None:
        payload = data.to_dict()
        doc = {"version": CHECKPOINT_VERSION, "bootID": boot_id, "checksum": checksum(payload), "data": payload}
        raw = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            if durable:
                atomic_write_bytes(self.path, raw, mode=0o600)
            else:
                _replace_unsynced(self.path, raw)
        except OSError as err:
            raise CheckpointError(f"cannot write checkpoint {self.path}: {err.strerror or err}") from err

    def _read_locked(self, current_boot: str) -> ReadResult:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return ReadResult(CheckpointData(), exists=False, boot_id=None, previous_boot=False)
        except OSError as err:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {err.strerror or err}") from err
        try:
            doc = json.loads(raw)
        except ValueError as err:
            self._corrupt(f"not valid JSON: {err}")
        if not isinstance(doc, dict):
            self._corrupt("not a JSON object")
        if doc.get("version") != CHECKPOINT_VERSION:
            self._corrupt(f"unknown version {doc.get('version')!r}, this daemon reads version {CHECKPOINT_VERSION}")
        payload = doc.get("data")
        if not isinstance(payload, dict):
            self._corrupt("no data object")
        if doc.get("checksum") != checksum(payload):
            self._corrupt("checksum mismatch: the data was modified or partially written")
        boot = doc.get("bootID")
        if not isinstance(boot, str) or not boot:
            self._corrupt("no bootID")
        try:
            data = CheckpointData.from_dict(payload)
        except ValueError as err:
            self._corrupt(f"invalid data: {err}")
        return ReadResult(data, exists=True, boot_id=boot, previous_boot=boot != current_boot)

    def _corrupt(self, reason: str) -> Any:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self._clock()))
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        n = 1
        while target.exists():
            target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
            n += 1
        try:
            os.replace(self.path, target)
            fsync_dir(self.dir)
        except OSError as err:
            raise CheckpointError(f"checkpoint {self.path} is corrupt ({reason}) and could not be moved aside: "
                                  f"{err.strerror or err}") from err
        raise CheckpointCorrupt(self.path, target, reason)
