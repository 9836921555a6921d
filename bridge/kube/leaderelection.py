"""Leader election over a `coordination.k8s.io/v1` Lease, with client-go's semantics.

Written from kubernetes/kubernetes staging/src/k8s.io/client-go/tools/leaderelection/leaderelection.go and
resourcelock/leaselock.go, so a bridge replica and any client-go component read one Lease the same way:

* The record is the Lease's spec: `holderIdentity`, `leaseDurationSeconds`, `acquireTime`, `renewTime` (MicroTime,
  RFC 3339 with microseconds) and `leaseTransitions`.
* **Clocks.** A candidate never trusts the timestamps in the record (they come from another machine's clock); it
  notes, on its own monotonic clock, when it last saw the record *change* (`observed_at`) and treats the lease as
  held until `observed_at + leaseDurationSeconds` (the duration *in the record*). So clock skew between replicas
  does not matter, only skew rate.
* `try_acquire_or_renew` (client-go `tryAcquireOrRenew`): the leader first updates optimistically from the record
  it observed last; otherwise get (create when NotFound); a record held by someone else and still valid means no;
  an empty `holderIdentity` (a released lease) may be taken at once. Renewing keeps `acquireTime` and
  `leaseTransitions`; taking over sets `acquireTime` and adds one to `leaseTransitions`. Every write is an update
  with the read's resourceVersion, so two candidates racing for an expired lease cannot both win (409 for one).
* Acquire retries every `retry_period` with client-go's jitter (x1.2); the leader renews every `retry_period` and
  **gives up** when no renewal succeeded within `renew_deadline` (client-go `renew`: PollImmediateUntil under a
  RenewDeadline timeout).
* Release on stop (client-go `ReleaseOnCancel`): holderIdentity "", leaseDurationSeconds 1, times = now, same
  transitions; the other replica takes over at its next retry instead of waiting a whole lease.
* Validation as client-go's `NewLeaderElector`: lease_duration > renew_deadline > 1.2 x retry_period > 0, and a
  non-empty identity.

Beyond client-go (which leaves fencing to the caller): `is_leader()` is true only while the last successful
renewal is younger than `renew_deadline`, on the local monotonic clock. A leader whose API server stops answering
therefore stops acting *before* any other candidate can see the lease expire (renew_deadline < lease_duration),
even if its renew loop is stuck in a slow request. Callers check it right before every write.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.kube.api import LEASES, KubeAPI, Obj
from bridge.kube.errors import KubeError, NotFound

log = logging.getLogger(__name__)

JITTER_FACTOR = 1.2


def micro_time(when: dt.datetime) -> str:
    """metav1.MicroTime's wire format: RFC 3339 with six fractional digits, UTC."""
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaderElectionConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0  # client-go's core components default to 15 s / 10 s / 2 s
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_stop: bool = True

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("leader election: the identity must not be empty")
        if not self.namespace or not self.name:
            raise ValueError("leader election: the Lease needs a namespace and a name")
        if self.retry_period <= 0 or self.renew_deadline <= 0 or self.lease_duration <= 0:
            raise ValueError("leader election: lease duration, renew deadline and retry period must be > 0")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError(f"leader election: the lease duration ({self.lease_duration:g}s) must be greater than "
                             f"the renew deadline ({self.renew_deadline:g}s)")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError(f"leader election: the renew deadline ({self.renew_deadline:g}s) must be greater than "
                             f"{JITTER_FACTOR} x the retry period ({self.retry_period:g}s)")
        if self.lease_duration < 1:
            raise ValueError("leader election: leaseDurationSeconds is whole seconds; use at least 1 s")


@dataclass(frozen=True)
class Record:
    holder: str
    lease_duration_s: int
    acquire_time: str
    renew_time: str
    transitions: int

    @staticmethod
    def of(lease: Obj) -> Record:
        spec = lease.get("spec") or {}
        return Record(str(spec.get("holderIdentity") or ""), int(spec.get("leaseDurationSeconds") or 0),
                      str(spec.get("acquireTime") or ""), str(spec.get("renewTime") or ""),
                      int(spec.get("leaseTransitions") or 0))

    def spec(self) -> dict[str, Any]:
        return {"holderIdentity": self.holder, "leaseDurationSeconds": self.lease_duration_s,
                "acquireTime": self.acquire_time, "renewTime": self.renew_time, "leaseTransitions": self.transitions}


class LeaderElector:
    def __init__(
        self,
        api: KubeAPI,
        config: LeaderElectionConfig,
        *,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        on_new_leader: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc),
    ) -> None:
        self.api = api
        self.config = config
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self.clock = clock
        self.wall_clock = wall_clock
        self._lock = threading.Lock()
        self._observed: Record | None = None
        self._observed_at = 0.0
        self._lease: Obj | None = None  # the last Lease object read or written (for its resourceVersion)
        self._renewed_at: float | None = None  # monotonic time of our last successful acquire/renew
        self._reported = ""
        self.transitions_seen = 0

    # ---- queries ---------------------------------------------------------------------------------------------

    @property
    def identity(self) -> str:
        return self.config.identity

    def leader(self) -> str:
        """The last observed holder ("" when none)."""
        with self._lock:
            return self._observed.holder if self._observed else ""

    def is_leader(self) -> bool:
        """True only while we hold the lease AND our last renewal is younger than the renew deadline."""
        with self._lock:
            if self._observed is None or self._observed.holder != self.identity or self._renewed_at is None:
                return False
            return self.clock() - self._renewed_at < self.config.renew_deadline

    # ---- one attempt (client-go tryAcquireOrRenew) -----------------------------------------------------------

    def _observe(self, record: Record, lease: Obj | None) -> None:
        with self._lock:
            if record != self._observed:
                self._observed = record
                self._observed_at = self.clock()
            if lease is not None:
                self._lease = lease

    def _valid(self, now: float) -> bool:
        with self._lock:
            if self._observed is None:
                return False
            return self._observed_at + self._observed.lease_duration_s > now

    def _holds(self) -> bool:
        with self._lock:
            return self._observed is not None and self._observed.holder == self.identity

    def _write(self, record: Record) -> bool:
        with self._lock:
            lease = dict(self._lease or {})
        meta = dict(lease.get("metadata") or {})
        lease["metadata"] = meta
        lease["spec"] = record.spec()
        stored = self.api.update(LEASES, lease, self.config.namespace)
        self._observe(record, stored)
        return True

    def try_acquire_or_renew(self) -> bool:
        now = self.clock()
        stamp = micro_time(self.wall_clock())
        duration = int(self.config.lease_duration)
        # 1. fast path: the leader updates optimistically from the record it observed last.
        if self._holds() and self._valid(now):
            with self._lock:
                old = self._observed
            assert old is not None
            try:
                self._write(Record(self.identity, duration, old.acquire_time, stamp, old.transitions))
                self._renewed(now)
                return True
            except KubeError as err:
                log.info("lease %s/%s: optimistic renew failed (%s); reading it again", self.config.namespace,
                         self.config.name, err.message)
        # 2. read, or create.
        try:
            lease = self.api.get(LEASES, self.config.name, self.config.namespace)
        except NotFound:
            record = Record(self.identity, duration, stamp, stamp, 0)
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.config.name, "namespace": self.config.namespace},
                    "spec": record.spec()}
            try:
                stored = self.api.create(LEASES, body, self.config.namespace)
            except KubeError as err:
                log.info("lease %s/%s: create failed: %s", self.config.namespace, self.config.name, err.message)
                return False
            self._observe(record, stored)
            self._renewed(now)
            return True
        except KubeError as err:
            log.info("lease %s/%s: cannot read it: %s", self.config.namespace, self.config.name, err.message)
            return False
        current = Record.of(lease)
        self._observe(current, lease)
        # 3. held by someone else and not expired (on our clock): not ours.
        if current.holder and self._valid(now) and current.holder != self.identity:
            self._report()
            return False
        # 4. renew (keep acquireTime and transitions) or take over (new acquireTime, one more transition).
        if current.holder == self.identity:
            record = Record(self.identity, duration, current.acquire_time, stamp, current.transitions)
        else:
            record = Record(self.identity, duration, stamp, stamp, current.transitions + 1)
        try:
            self._write(record)
        except KubeError as err:
            log.info("lease %s/%s: update failed: %s", self.config.namespace, self.config.name, err.message)
            return False
        self._renewed(now)
        return True

    def _renewed(self, now: float) -> None:
        with self._lock:
            self._renewed_at = now
        self._report()

    def _report(self) -> None:
        holder = self.leader()
        if holder != self._reported:
            self._reported = holder
            self.transitions_seen += 1
            log.info("lease %s/%s: the leader is now %s", self.config.namespace, self.config.name,
                     holder or "(nobody)")
            if self.on_new_leader is not None:
                self.on_new_leader(holder)

    def release(self) -> bool:
        """Give the lease up if we hold it (client-go `release`)."""
        if not self._holds():
            return True
        with self._lock:
            old = self._observed
        assert old is not None
        stamp = micro_time(self.wall_clock())
        try:
            self._write(Record("", 1, stamp, stamp, old.transitions))
        except KubeError as err:
            log.warning("lease %s/%s: release failed: %s", self.config.namespace, self.config.name, err.message)
            return False
        self._stop_leading()
        log.info("lease %s/%s: released", self.config.namespace, self.config.name)
        return True

    # ---- loops (client-go acquire / renew / Run) -------------------------------------------------------------

    def acquire(self, stop: threading.Event) -> bool:
        log.info("lease %s/%s: %s is trying to become the leader", self.config.namespace, self.config.name,
                 self.identity)
        while not stop.is_set():
            if self.try_acquire_or_renew():
                log.info("lease %s/%s: %s became the leader", self.config.namespace, self.config.name, self.identity)
                return True
            stop.wait(self.config.retry_period * (1 + random.random() * JITTER_FACTOR))
        return False

    def renew(self, stop: threading.Event) -> None:
        """Renew every retry period until a renewal fails for a whole renew deadline, or `stop` is set."""
        while not stop.wait(self.config.retry_period):
            deadline = self.clock() + self.config.renew_deadline
            while True:
                if self.try_acquire_or_renew():
                    break
                if not self._holds():
                    log.error("lease %s/%s: %s holds the lease now; stopped leading", self.config.namespace,
                              self.config.name, self.leader() or "nobody")
                    self._stop_leading()
                    return
                if self.clock() + self.config.retry_period >= deadline:
                    log.error("lease %s/%s: could not renew within %gs; stopped leading", self.config.namespace,
                              self.config.name, self.config.renew_deadline)
                    self._stop_leading()
                    return
                if stop.wait(self.config.retry_period):
                    return

    def _stop_leading(self) -> None:
        with self._lock:
            self._renewed_at = None

    def run(self, stop: threading.Event) -> None:
        """Acquire, lead until the lease is lost or `stop` is set, then release (when configured) and return."""
        if not self.acquire(stop):
            return
        try:
            if self.on_started_leading is not None:
                self.on_started_leading()
            self.renew(stop)
        finally:
            if stop.is_set() and self.config.release_on_stop:
                self.release()
            if self.on_stopped_leading is not None:
                self.on_stopped_leading()


__all__ = ["JITTER_FACTOR", "LeaderElectionConfig", "LeaderElector", "Record", "micro_time"]
