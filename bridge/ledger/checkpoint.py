"""The node daemon's checkpoint: one versioned JSON file, one mutation path, crash- and reboot-safe.

File (`<state-dir>/checkpoint.json`), one top-level key per line, `data` in its canonical form on one line (the
exact bytes the checksum covers; `jq . checkpoint.json` for a readable view):

    {"version": 1,
     "bootID": "<kernel boot id>",
     "checksum": "sha256:<hex of canonical data>",
     "data": {...}}

Invariants:

* Every change goes through `update(mutate)`: exclusive `flock` on `checkpoint.json.lock` (with an acquire timeout,
  so a wedged holder becomes an error, not a hang), read + verify (see the snapshot below), `mutate(data) -> data`,
  write a temp file, fsync, rename over the file, fsync the directory. Readers never see a partial file; two
  processes (a rolling update) never lose each other's changes.
* The boot ID is stored with the data. A file written during a previous boot is reported as such
  (`ReadResult.previous_boot`); `update` refuses to build on it unless the caller says it has dealt with it
  (`adopt_previous_boot=True`, typically with `CheckpointData.without_claims`): CDI specs in tmpfs are gone after a
  reboot, so prepared claims must be prepared again, never trusted.
* Durability is per write (`update(..., durable=...)`). Every write is atomic (temp file + rename): a process that
  dies at any instant leaves the old or the new file, never a mix, and the page cache keeps a renamed file for the
  next process even if it was never fsynced. fsync (file, then directory) only matters when unsynced data is lost,
  and that happens only on power loss or a kernel crash, i.e. a reboot: a new boot ID, the tmpfs CDI specs gone,
  the kubelet preparing every claim again, and this module discarding the old boot's claims anyway. So a write
  that changes only claim records may skip the fsync (`durable=False`: the prepare path's claim writes, synced
  right after). What must survive a reboot is the ownership sides (the kubelet's device assignments survive it),
  and those are always written durably (the default). Residual risk of a non-durable write: on a filesystem
  that does not order a rename-over-existing-file after the new file's data (ext4's `auto_da_alloc` and btrfs do),
  a power cut between a non-durable write and the next durable one can leave a file that fails its checksum; it
  then takes the corrupt-file path below (moved aside, rebuilt from the API and the kubelet), never a silent
  partial state. Callers keep that window short: a durable write, or an fsync of the file and its directory, follows
  within milliseconds (the prepare path syncs right after its writes: `bridge.dra.deferredsync`).
* The last state this object read or wrote is kept in memory with the file's exact bytes (`_Snapshot`), and a read
  under the lock re-uses it only when the file's bytes are identical; otherwise it parses and verifies everything
  again. Reading a few KiB is cheap; parsing, checksumming and validating them is what costs, and the prepare path
  reads the file once per write. Why this is correct across processes and threads: every bridge writer holds the
  lock, so under the lock the file cannot change while we compare and use it, and the comparison is on content, not
  on (inode, mtime, size): an in-place rewrite of the same size within one timestamp tick, or a reused inode number,
  cannot fool it. What is cached for a write is what a fresh reader would parse from those bytes (`mutate`'s result
  is validated through `CheckpointData.from_dict` before anything is written, so data this module could not read back
  is refused instead of written).
* A corrupt file (not JSON, nested too deeply to parse, wrong checksum, unknown version, malformed data, larger
  than `MAX_FILE_BYTES`, not a regular file: a symlink, a FIFO, a device) is never silently replaced by an empty
  state and never crashes the daemon: it is renamed to `checkpoint.json.corrupt-<UTC timestamp>` and
  `CheckpointCorrupt` is raised, naming the reason and where the file went. The caller rebuilds from what the API
  and the kubelet can tell it. The file is opened without following symlinks and without blocking (a FIFO would
  otherwise hang the read), and read only up to the size limit. The newest `KEEP_CORRUPT` set-aside files are kept
  for the operator, older ones are deleted, so a node that keeps corrupting its file cannot fill the disk.
* `sweep()` (at start, under the lock, so no writer is mid-write) removes temp files a killed writer left behind
  (`.checkpoint.json.tmp-*`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from bridge.atomicfile import UnreadableFile, atomic_write_bytes, fsync_dir, in_directory, read_regular
from bridge.ledger.lock import FileLock
from bridge.ledger.state import CheckpointData

CHECKPOINT_VERSION = 1
CHECKPOINT_NAME = "checkpoint.json"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
# A node's checkpoint is a few KiB (sides) plus ~0.5 KiB per prepared claim: 16 MiB is thousands of times that, and
# small enough that reading a runaway file cannot exhaust the daemon's memory.
MAX_FILE_BYTES = 16 << 20
KEEP_CORRUPT = 5  # set-aside corrupt files kept for the operator; older ones are deleted


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


def cached_boot_id(path: str | Path = BOOT_ID_PATH) -> Callable[[], str]:
    """A `boot_id` reader for `Checkpoint` that reads the file once, at its first successful call: the kernel's boot
    ID cannot change while this process runs (a reboot ends it), and each checkpoint write is in the kubelet's path.
    A failed read raises, as `read_boot_id` does, and is tried again at the next call."""
    found: list[str] = []

    def boot_id() -> str:
        if not found:
            found.append(read_boot_id(path))
        return found[0]

    return boot_id


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


def _canonical(data: dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def checksum(data: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(_canonical(data).encode()).hexdigest()


@dataclass(frozen=True)
class ReadResult:
    data: CheckpointData
    exists: bool  # False: no file yet (a fresh node), data is empty
    boot_id: str | None  # the boot the file was written in
    previous_boot: bool  # True: written before the last reboot


@dataclass(frozen=True)
class _Snapshot:
    """The file's bytes and what they parse to (valid: checksum, version and data verified)."""

    raw: bytes
    data: CheckpointData
    boot_id: str


def _encode(data: CheckpointData, boot_id: str) -> tuple[bytes, CheckpointData]:
    """The file bytes for `data`, and `data` as a reader of those bytes will see it.

    Raises ValueError when `data` would not read back (e.g. an unknown side or claim state)."""
    payload = data.to_dict()
    try:
        readback = CheckpointData.from_dict(payload)
    except ValueError as err:
        raise ValueError(f"refusing to write checkpoint data that could not be read back: {err}") from err
    canonical = _canonical(payload)
    digest = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    text = (f'{{"version": {CHECKPOINT_VERSION},\n "bootID": {json.dumps(boot_id, ensure_ascii=False)},\n'
            f' "checksum": "{digest}",\n "data": {canonical}}}\n')
    return text.encode(), readback


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
        self._last: _Snapshot | None = None  # read and written only while the file lock is held

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

        If `mutate` raises, or returns data that would not read back (ValueError), nothing is written. Raises
        CheckpointCorrupt (file moved aside) or CheckpointFromPreviousBoot (see module docstring) before calling
        `mutate`. `durable=False` skips the file and directory fsync but keeps the atomic rename: only for state that
        is void after a reboot and is followed shortly by a durable write (see the module docstring for why that is
        crash-safe).
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
                return self._write_locked(new, current, durable)
        except TimeoutError as err:
            raise CheckpointError(str(err)) from err

    def _write_locked(self, data: CheckpointData, boot_id: str, durable: bool = True) -> CheckpointData:
        raw, readback = _encode(data, boot_id)
        self._last = None  # from here until the write is known to be complete, the file may be either version
        try:
            in_directory(self.dir, lambda: self._replace(raw, durable))
        except OSError as err:
            raise CheckpointError(f"cannot write checkpoint {self.path}: {err.strerror or err}") from err
        self._last = _Snapshot(raw, readback, boot_id)
        return readback

    def _replace(self, raw: bytes, durable: bool) -> None:
        if durable:
            atomic_write_bytes(self.path, raw, mode=0o600)
        else:
            _replace_unsynced(self.path, raw)

    def sweep(self) -> list[Path]:
        """Remove temp files of writes that never finished (a process killed between creating its temp file and the
        rename); returns what was removed. Under the lock: a live writer's temp file exists only while it holds it."""
        removed: list[Path] = []
        try:
            with self._lock():
                for tmp in self.dir.glob(f".{self.path.name}.tmp-*"):
                    try:
                        tmp.unlink()
                    except FileNotFoundError:
                        continue
                    except OSError as err:
                        raise CheckpointError(f"cannot remove the stale temp file {tmp}: {err.strerror or err}") from err
                    removed.append(tmp)
        except TimeoutError as err:
            raise CheckpointError(str(err)) from err
        return removed

    def _read_raw(self) -> bytes | None:
        """The file's bytes; None when there is none. A file that is not a regular file or is over the size limit
        is corrupt (moved aside): read by `bridge.atomicfile.read_regular` (O_NOFOLLOW | O_NONBLOCK, checked on the
        descriptor), so neither a symlink to /dev/zero nor a FIFO can make the daemon read forever or hang."""
        try:
            return read_regular(self.path, MAX_FILE_BYTES)
        except UnreadableFile as err:
            self._corrupt(err.reason)
        except OSError as err:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {err.strerror or err}") from err

    def _read_locked(self, current_boot: str) -> ReadResult:
        raw = self._read_raw()
        if raw is None:
            self._last = None
            return ReadResult(CheckpointData(), exists=False, boot_id=None, previous_boot=False)
        last = self._last
        if last is None or last.raw != raw:
            self._last = None
            last = self._last = _Snapshot(raw, *self._parse(raw))
        return ReadResult(last.data, exists=True, boot_id=last.boot_id, previous_boot=last.boot_id != current_boot)

    def _parse(self, raw: bytes) -> tuple[CheckpointData, str]:
        """Verify and decode the file's bytes; a bad file is moved aside (CheckpointCorrupt)."""
        try:
            return self._verify(raw)
        except RecursionError:  # JSON nested deeper than the interpreter's stack (parse, checksum or validation)
            self._corrupt("nested too deeply to be a checkpoint")

    def _verify(self, raw: bytes) -> tuple[CheckpointData, str]:
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
        return data, boot

    def _corrupt(self, reason: str) -> NoReturn:
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
        self._prune_corrupt(keep=target)
        raise CheckpointCorrupt(self.path, target, reason)

    def _prune_corrupt(self, keep: Path) -> None:
        """Delete all but the newest `KEEP_CORRUPT` set-aside files (names sort by time: `<stamp>[-n]`)."""
        prefix = f"{self.path.name}.corrupt-"

        def order(p: Path) -> tuple[str, int]:
            stamp, _, n = p.name[len(prefix):].partition("-")
            return stamp, int(n) if n.isdigit() else 0

        found = sorted(self.dir.glob(prefix + "*"), key=order)
        for old in found[:-KEEP_CORRUPT]:
            if old != keep:
                try:
                    old.unlink()
                except OSError:  # best effort: a file we cannot delete is the operator's to remove
                    pass
