"""One node daemon per state directory, and the one exception: a rolling update's hand-over.

Why a lock: two `bridge node` processes on one state directory share one checkpoint but each keeps its own
in-memory ledger, so both could hand out the same GPU (one through Allocate, the other through
NodePrepareResources), and each deletes the other's sockets when it exits (gRPC unlinks the path of a server it
stops). So the daemon takes an exclusive `flock` on `<state-dir>/node.lock` before it serves or deletes anything,
and holds it until it has stopped serving and removed its sockets. The kernel releases it when the process dies,
even by SIGKILL, so it can never go stale. The lock file carries the holder's record (PID, pod UID, host, start
time, the sockets it serves) as one JSON line, rewritten by each new holder.

* A second daemon that finds the lock held is refused (`InstanceBusy`, exit 2) with the holder's PID, pod UID and
  start time, before it touches a socket.
* **Rolling update (the exception).** When both the holder and the newcomer were started with a pod UID
  (`--pod-uid`, the chart passes the pod's own) and the UIDs differ, the newcomer is the next pod of the DaemonSet:
  it does not fail, it waits in standby for the lock, serving nothing on the kubelet's sockets and touching
  neither the checkpoint, the CDI specs, the ResourceSlices nor the Node. Its own sockets carry its pod UID, so the
  two instances never share a path. When the old instance has stopped (its sockets removed, lock released) the
  new one takes the lock and starts in well under a second, with the device source already initialised. Two
  instances never serve at once, so no GPU can be handed out twice; a surge rollout (`maxSurge: 1`) works because
  the standby instance reports ready, which lets the DaemonSet controller delete the old pod.
* A predecessor that died without cleaning up (SIGKILL, OOM, node crash) leaves its sockets behind, with its own
  pod UID in their names: a stale registration socket keeps the kubelet's plugin watcher retrying a dead driver.
  Whoever takes the lock next removes the sockets the previous record lists (sockets only, never another file),
  since the free lock proves their owner is gone. A socket the holder starts serving later (the device plugin's
  move to a fresh name when a 1.37+ kubelet holds its path) is added to its record (`add_socket`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from bridge.unixsock import SocketPathError, remove_stale_socket

log = logging.getLogger("bridge.node.instance")

LOCK_NAME = "node.lock"
RECORD_VERSION = 1
DEFAULT_STANDBY_POLL_S = 0.05
STANDBY_LOG_EVERY_S = 60.0


@dataclass(frozen=True)
class Instance:
    """A daemon instance as the lock records it: who holds (or last held) a state directory."""

    pid: int
    pod_uid: str | None = None
    host: str = ""
    started_at: str = ""
    sockets: tuple[str, ...] = field(default=())

    @staticmethod
    def me(pod_uid: str | None, sockets: Sequence[str | os.PathLike[str]]) -> Instance:
        return Instance(os.getpid(), pod_uid or None, socket.gethostname(),
                      datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), tuple(os.fspath(s) for s in sockets))

    def to_json(self) -> str:
        return json.dumps({"version": RECORD_VERSION, "pid": self.pid, "podUID": self.pod_uid, "host": self.host,
                           "startedAt": self.started_at, "sockets": list(self.sockets)}, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> Instance | None:
        """The record, or None when `text` is empty or not a record (a holder still writing it, or junk)."""
        try:
            raw = json.loads(text)
            if not isinstance(raw, dict) or not isinstance(raw.get("pid"), int):
                return None
            sockets = raw.get("sockets") or []
            pod_uid = raw.get("podUID")
            return Instance(int(raw["pid"]), pod_uid if isinstance(pod_uid, str) and pod_uid else None,
                          str(raw.get("host") or ""), str(raw.get("startedAt") or ""),
                          tuple(str(s) for s in sockets if isinstance(s, str)))
        except (ValueError, RecursionError):
            return None

    def describe(self) -> str:
        parts = [f"PID {self.pid}"]
        if self.host:
            parts.append(f"host {self.host}")
        if self.pod_uid:
            parts.append(f"pod UID {self.pod_uid}")
        if self.started_at:
            parts.append(f"since {self.started_at}")
        return ", ".join(parts)


class InstanceBusy(RuntimeError):
    """Another daemon holds the state directory (or the claims directory, `--claims-dir`); the message names it and
    says what to do."""

    def __init__(self, state_dir: Path, holder: Instance | None, *, claims: bool = False) -> None:
        self.state_dir = state_dir
        self.holder = holder
        who = holder.describe() if holder is not None else "PID unknown: its record is not readable yet"
        if claims:
            super().__init__(
                f"claims directory {str(state_dir)!r} (--claims-dir) is in use by another bridge node ({who}): each "
                f"node daemon keeps its claim records in a directory of its own, as its state. Give this one "
                f"another --claims-dir, or stop that one first.")
            return
        super().__init__(
            f"state directory {str(state_dir)!r} is in use by another bridge node ({who}): one node daemon per "
            f"node and state directory. Stop that one first. In a rolling update every instance gets its own "
            f"--pod-uid (the chart passes the pod's UID) and the new one waits for the old one to exit.")


def _write_record(fd: int, record: Instance) -> None:
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, (record.to_json() + "\n").encode())
    os.fsync(fd)


def rolling_update(holder: Instance | None, me: Instance) -> bool:
    """Whether `me` may wait for `holder` instead of being refused: both carry pod UIDs, and they differ."""
    return holder is not None and bool(holder.pod_uid) and bool(me.pod_uid) and holder.pod_uid != me.pod_uid


class InstanceLock:
    """The exclusive lock on `<state_dir>/node.lock`, with the holder's record in it."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / LOCK_NAME
        self._fd: int | None = None
        self._mine: Instance | None = None  # the record we wrote
        self._write_lock = threading.Lock()
        self.previous: Instance | None = None  # the record found when we took the lock (a holder that has gone)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def holder(self) -> Instance | None:
        """The current record (retried briefly: a new holder may be rewriting it)."""
        for _ in range(5):
            try:
                text = self.path.read_text(errors="replace")
            except OSError:  # gone, or not readable by us: the caller says the PID is unknown
                return None
            record = Instance.from_json(text)
            if record is not None:
                return record
            time.sleep(0.02)
        return None

    def try_acquire(self, me: Instance) -> bool:
        """Take the lock without waiting and write our record; False when another process (or object) holds it."""
        if self._fd is not None:
            return True
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                return False
            raise
        try:
            old = os.read(fd, 65536).decode(errors="replace")
            self.previous = Instance.from_json(old)
            _write_record(fd, me)
        except BaseException:
            os.close(fd)  # releases the lock
            raise
        self._fd, self._mine = fd, me
        return True

    def add_socket(self, path: str | os.PathLike[str]) -> None:
        """Add a socket we serve now to our record, so that a successor sweeps it if we die without removing it.
        A record that cannot be rewritten is logged: the socket then stays behind after a crash (the kubelet's
        restart clears its device-plugin directory)."""
        with self._write_lock:
            fd, mine = self._fd, self._mine
            if fd is None or mine is None or os.fspath(path) in mine.sockets:
                return
            mine = replace(mine, sockets=(*mine.sockets, os.fspath(path)))
            try:
                _write_record(fd, mine)
            except OSError as err:
                log.warning("cannot add %s to the instance record in %s: %s", os.fspath(path), self.path, err)
                return
            self._mine = mine

    def acquire(self, me: Instance, *, stop: threading.Event | None = None,
                on_standby: Callable[[Instance], None] | None = None,
                poll_s: float = DEFAULT_STANDBY_POLL_S) -> bool:
        """Take the lock. Held by another daemon: in a rolling update (`rolling_update`) call `on_standby(holder)`
        once and wait until it is free or `stop` is set (then return False); otherwise raise InstanceBusy."""
        if self.try_acquire(me):
            return True
        holder = self.holder()
        if not rolling_update(holder, me):
            if self.try_acquire(me):  # it went away while we read its record
                return True
            raise InstanceBusy(self.state_dir, holder)
        assert holder is not None
        log.info("standby: %s holds %s (the previous instance of a rolling update); taking over when it exits",
                 holder.describe(), self.state_dir, extra={"pod_uid": me.pod_uid})
        if on_standby is not None:
            on_standby(holder)
        waited_since = last_log = time.monotonic()
        while not self.try_acquire(me):
            if stop is not None and stop.wait(poll_s):
                log.info("standby ended before the previous instance exited; nothing was served or changed")
                return False
            if stop is None:
                time.sleep(poll_s)
            if time.monotonic() - last_log >= STANDBY_LOG_EVERY_S:
                last_log = time.monotonic()
                current = self.holder()
                log.info("standby: still waiting for %s (%.0fs)", current.describe() if current else "the holder",
                         last_log - waited_since)
        log.info("took over %s after %.2fs in standby (previous holder: %s)", self.state_dir,
                 time.monotonic() - waited_since, self.previous.describe() if self.previous else "unknown")
        return True

    def sweep_previous(self, mine: Sequence[str | os.PathLike[str]]) -> list[str]:
        """Remove the sockets the previous holder's record lists that are not ours (it is gone: we hold the lock).
        Returns the paths removed. Never removes anything but a socket."""
        if self._fd is None or self.previous is None:
            return []
        own = {os.path.abspath(os.fspath(p)) for p in mine}
        removed: list[str] = []
        for path in self.previous.sockets:
            if os.path.abspath(path) in own:
                continue  # our own paths: the halves replace a stale socket there when they serve
            try:
                if remove_stale_socket(path):
                    removed.append(path)
            except SocketPathError as err:
                log.warning("not removing %s left by %s: %s", path, self.previous.describe(), err)
            except OSError as err:
                log.warning("cannot remove %s left by %s: %s", path, self.previous.describe(), err)
        if removed:
            log.warning("removed %d socket(s) left behind by the previous instance (%s), which did not stop cleanly",
                        len(removed), self.previous.describe(), extra={"sockets": ",".join(removed)})
        return removed

    def release(self) -> None:
        with self._write_lock:
            fd, self._fd, self._mine = self._fd, None, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


__all__ = ["Instance", "InstanceBusy", "InstanceLock", "LOCK_NAME", "rolling_update"]
