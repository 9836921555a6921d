"""The prepare/unprepare core: plain dataclasses in and out, no protobuf, testable without gRPC.

Invariants (the kubelet's DRA manager contract: prepare per claim, idempotent, one result per claim UID):
* One owner per device: the ownership ledger's prepare guard (`bridge.ledger.guard_prepare`, through the split
  controller given as `ownership`) decides for every claim's devices. A device on the DRA side is fine; one the
  ledger can take back from the device plugin because it is free there is taken back (an allocated claim is
  never stranded); one held there is refused, naming the holder, and the kubelet's retry succeeds once it frees.
  A device already prepared for ANOTHER claim is refused too (last line of defence against double booking;
  admin-access claims are exempt, they only observe). A refusal is a per-claim error naming the device and its
  owner, logged, counted and recorded as a Kubernetes Event on the claim: never silent sharing.
* Two-phase, batched, crash-safe: one NodePrepareResources call (all of a pod's claims for this driver) makes ONE
  `PrepareStarted` checkpoint write for every claim that needs work, then writes their CDI specs, then ONE
  `PrepareCompleted` write (with the CDI IDs). A crash between the two leaves PrepareStarted records that the
  start-up `sweep()` undoes (spec files and records removed); the kubelet then retries from scratch.
  Durability: every claim write of a call (PrepareStarted, PrepareCompleted, an unprepare's removal) is atomic
  (temp file + rename) but not fsynced in the call; ONE fsync of the checkpoint file and its directory follows
  right after the call's writes, on a background thread (`bridge.dra.deferredsync`), coalesced with other calls'.
  Why that is enough: a process crash (SIGKILL, OOM) keeps the page cache, so the restarted daemon sees every
  renamed record exactly as if it had been synced; unsynced data is lost only by power loss or a kernel crash,
  which is a reboot: new boot ID, every claim record of the old boot discarded at start, tmpfs CDI specs gone, the
  kubelet preparing again. No claim record is ever needed across a reboot, so the kubelet's answer need not wait
  for the disk. The sync exists only to keep short the window in which a power cut could leave a renamed but
  unsynced checkpoint unreadable on a filesystem that does not order renames after data (`bridge.ledger.checkpoint`:
  then the corrupt-file path rebuilds the ownership sides, which are always written durably, from the API and the
  kubelet): the window ends when the sync does, milliseconds after the call, as it did when the call itself waited.
  The start-up sweep's writes stay durable. The claim's CDI spec is renamed into place without fsync and never
  synced (`bridge.cdi.writer`, `durable=False`): a reboot voids it, and the start-up sweep removes it. Cost in the
  kubelet's path: three page-cache renames (two versions of the claim records' file, one spec), no fsync; on a
  tmpfs (the chart's `--claims-dir /var/run/dra-bridge`, the CDI directory) none of them touches a disk
  (`bridge.dra.stores` says why the claim records have a file of their own).
* Trusts the API, not its memory: EVERY call reads each claim from the API (`bridge.dra.claimreads`: outside the
  node lock, concurrently, within one budget per call that leaves margin under the kubelet's 45 s), because a
  claim can be deallocated and re-allocated under the same UID (its pods gone while the kubelet was down, say), and
  the kubelet then asks to prepare a UID we hold a record for. The read claim must have the requested UID,
  namespace and name (`allocation_for`), and its allocation is compared with the record:
  - same devices (and request names, admin access, namespace/name) in a PrepareCompleted record of this boot:
    answered from the record (idempotent; the CDI spec is re-written if the file went missing);
  - anything else (no record, a PrepareStarted one, one from an earlier boot, a changed allocation): prepared
    from the claim. A changed allocation is a re-prepare: the claim's PrepareStarted record with the NEW devices
    replaces the old record in the same single checkpoint write (the old devices are released by that write), the
    new CDI spec atomically replaces the old one (same file: spec files are per claim UID; CDI device names carry
    the device name, `<uid>-gpu-5`, so a runtime's cache never maps the new name to the old device), then
    PrepareCompleted. A crash at any step leaves a PrepareStarted record that the start-up sweep undoes with the
    claim's spec file (old or new content alike) before the kubelet retries; nothing of the old allocation
    survives it. A re-prepare refused by the guards keeps the old record (do not release what we cannot replace).
  This is where we differ from NVIDIA's driver (NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/device_state.go
  `Prepare`), which answers any PrepareCompleted claim from its checkpoint by UID. After a reboot (new boot ID)
  every record is stale: the claim is prepared again (CDI specs live in tmpfs `/var/run/cdi`).
* Unprepare needs only the UID: it works from the record (the claim object may be gone) and succeeds for claims
  it does not know. CDI file first, then the record, so a crash in between is finished by the kubelet's retry.
* Serialized across processes: the work after the reads runs under the node-wide file lock, waiting at most the
  lock's share of the call's budget (`CallBudget`); a timeout fails the claims that were read with an error (the
  kubelet retries), never a hang past the kubelet's 45 s deadline. No API call is made under the lock: refusal
  Events are recorded after it is released, in the background.
* Exactly one outcome per requested UID; a bad claim never fails its neighbours: a malformed reference (empty
  namespace, invalid name: `claims.ref_problem`), a claim that cannot be read or not in time, one whose UID or
  allocation is wrong, one refused by a guard, and an unexpected exception while checking one claim each end as
  that claim's own error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from bridge.dra.claimreads import CallBudget, ClaimReader
from bridge.dra.claims import (
    AllocatedDevice,
    ClaimAllocation,
    ClaimError,
    ClaimGone,
    ClaimRef,
    allocation_for,
    ref_problem,
)
from bridge.dra.crashpoints import crash_point
from bridge.dra.deferredsync import DeferredSync
from bridge.dra.metrics import DraMetrics
from bridge.dra.servicer import PrepareOutcome, PreparedDevice
from bridge.inventory.model import DeviceID, GpuDevice
from bridge.kube.api import KubeAPI, Obj
from bridge.kube.errors import KubeError
from bridge.kube.events import record_event
from bridge.ledger.ledger import Refusal
from bridge.ledger.lock import LockTimeout
from bridge.ledger.sides import Side

log = logging.getLogger(__name__)

ClaimState = Literal["PrepareStarted", "PrepareCompleted"]
DEFAULT_LOCK_TIMEOUT_S = 10.0  # NVIDIA's pu.lock acquire timeout; far below the kubelet's 45 s call deadline


@dataclass(frozen=True)
class RecordedDevice:
    device: str  # "gpu-3"
    pool: str
    uuid: str
    request_names: tuple[str, ...]
    cdi_ids: tuple[str, ...] = ()
    admin_access: bool = False


@dataclass(frozen=True)
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    state: ClaimState
    boot_id: str
    devices: tuple[RecordedDevice, ...]


class PrepareGuard(Protocol):
    """The ownership ledger's side of a prepare (`bridge.node.split.SplitController`)."""

    def guard_prepare(self, uuids: Sequence[str], claim: str, uid: str) -> list[Refusal]:
        """[] when the claim's devices may be prepared (recorded as held until `prepare_done`), else refusals."""
        ...

    def prepare_done(self, uid: str) -> None: ...


class ClaimStore(Protocol):
    """Prepared-claim records (the checkpoint) plus the node-wide serialization lock."""

    def serialized(self, timeout: float) -> AbstractContextManager[None]:
        """Hold the cross-process lock; raise LockTimeout after `timeout` seconds."""
        ...

    def load(self) -> dict[str, ClaimRecord]: ...

    def commit(self, put: Sequence[ClaimRecord] = (), remove: Sequence[str] = (), *, durable: bool = True) -> None:
        """Insert/replace `put` and drop `remove` (absent UIDs are fine) in ONE atomic write; fsynced when
        `durable`. Raises OSError (e.g. CheckpointError) when nothing could be written."""
        ...

    def sync(self) -> None:
        """Make every commit so far durable (fsync of the file and its directory). Raises OSError."""
        ...


class CdiStore(Protocol):
    """One CDI spec file per claim; device names carry the claim UID."""

    def write(self, claim_uid: str, devices: Sequence[tuple[str, GpuDevice]]) -> dict[str, tuple[str, ...]]:
        """Write (atomically replace) the claim's spec for (device name, GPU) pairs; device name -> CDI IDs."""
        ...

    def remove(self, claim_uid: str) -> bool: ...

    def exists(self, claim_uid: str, cdi_ids: Sequence[str] = ()) -> bool:
        """Whether the claim's recorded CDI devices (`cdi_ids`) are still in place (our spec file, when ours)."""
        ...

    def claim_uids(self) -> set[str]:
        """Claims that have a spec file on disk (the sweep removes those without a record)."""
        ...


@dataclass(frozen=True)
class SweepReport:
    undone: tuple[str, ...]  # claim UIDs whose half-finished prepare was undone
    leaked_specs: tuple[str, ...]  # spec files without any record, removed


def _outcome(record: ClaimRecord) -> PrepareOutcome:
    return PrepareOutcome(
        devices=tuple(PreparedDevice(d.request_names, d.pool, d.device, d.cdi_ids) for d in record.devices)
    )


def _allocation_key(devices: Sequence[RecordedDevice] | Sequence[AllocatedDevice]) -> list[tuple[object, ...]]:
    return sorted((d.device, d.pool, tuple(d.request_names), d.admin_access) for d in devices)


def _matches(record: ClaimRecord, alloc: ClaimAllocation) -> bool:
    """Whether `record` prepared exactly what the claim is allocated now (and under the same namespace/name)."""
    ref = alloc.ref
    return ((record.namespace, record.name) == (ref.namespace, ref.name)
            and _allocation_key(record.devices) == _allocation_key(alloc.devices))


def _names(refs: Sequence[ClaimRef], limit: int = 10) -> str:
    shown = ",".join(f"{r.namespace}/{r.name}" for r in refs[:limit])
    return shown + (f",... ({len(refs) - limit} more)" if len(refs) > limit else "")


def _devices(devices: Sequence[RecordedDevice] | Sequence[AllocatedDevice]) -> str:
    return ",".join(sorted(d.device for d in devices)) or "none"


HOLDER_READ_S = 2.0  # at most this long reading the claims that hold refused devices (the refusal path only)


@dataclass(frozen=True)
class DeviceRefusal:
    """A claim refused a device, to record as a Kubernetes Event once the node lock is released: the claim, the
    message (its Event's and its error's), and the claim the device is prepared for when that is why (`holder`)."""

    claim: Obj
    message: str
    holder: ClaimRef | None = None


Refusals = list[DeviceRefusal]


class Preparer:
    def __init__(
        self,
        *,
        kube: KubeAPI,
        driver: str,
        pool: str,
        devices: Sequence[GpuDevice],
        device_name: Callable[[GpuDevice], str],
        side_of: Callable[[DeviceID], Side | None],
        store: ClaimStore,
        cdi: CdiStore,
        boot_id: str,
        metrics: DraMetrics | None = None,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT_S,
        record_events: bool = True,
        on_released: Callable[[], None] | None = None,
        ownership: PrepareGuard | None = None,
        reader: ClaimReader | None = None,
    ) -> None:
        """`ownership`: the ledger's guard (None: only `side_of` is checked, every device must be on DRA).
        `on_released` is called after an unprepare freed devices (a device waiting for its holder moves at once).
        `reader`: how claims are read (default: a `ClaimReader` over `kube`)."""
        self.kube = kube
        self.driver = driver
        self.pool = pool
        self.devices: dict[str, GpuDevice] = {device_name(d): d for d in devices}
        self.side_of = side_of
        self.store = store
        self.cdi = cdi
        self.boot_id = boot_id
        self.metrics = metrics or DraMetrics()
        self.lock_timeout = lock_timeout
        self.record_events = record_events
        self.on_released = on_released
        self.ownership = ownership
        self.reader = reader or ClaimReader(kube, observe=self.metrics.claim_get.observe)
        self.syncer = DeferredSync(store.sync)

    # -- NodePrepareResources -------------------------------------------------------------------------------------

    def prepare(self, claims: Sequence[ClaimRef], time_left: float | None = None) -> dict[str, PrepareOutcome]:
        """One outcome per distinct claim UID. `time_left`: seconds until the caller's deadline (the kubelet's
        45 s), None for none; the call's budget is derived from it (`CallBudget`)."""
        start = time.perf_counter()
        budget = CallBudget.begin(time_left, self.lock_timeout)
        first: dict[str, ClaimRef] = {}
        for ref in claims:
            first.setdefault(ref.uid, ref)  # the same UID twice in one request: one answer
        refs = list(first.values())
        outcomes: dict[str, PrepareOutcome] = {}
        to_read: list[ClaimRef] = []
        for ref in refs:
            problem = ref_problem(ref)
            if problem is None:
                to_read.append(ref)
            else:
                log.error("claim not prepared", extra={"uid": ref.uid, "error": problem})
                outcomes[ref.uid] = PrepareOutcome(error=problem)
        read = self.reader.read(to_read, budget)  # outside the node lock: a slow API must not hold it
        phase = self.metrics.prepare_phase
        read_at = time.perf_counter()
        if to_read:
            phase.labels("read").observe(read_at - start)
        readable: list[tuple[ClaimRef, Obj]] = []
        unread: list[ClaimRef] = []
        for ref in to_read:
            got = read[ref.uid]
            if isinstance(got, ClaimError):
                unread.append(ref)
                outcomes[ref.uid] = PrepareOutcome(error=str(got))
            else:
                readable.append((ref, got))
        if unread:  # one line per call: during an outage every claim of every retry fails the same way
            log.error("claims not prepared: not read from the API", extra={
                "count": len(unread), "claims": _names(unread), "error": outcomes[unread[0].uid].error})
        refusals: Refusals = []
        if readable:
            try:
                with self.store.serialized(budget.lock_wait(time.monotonic())):
                    locked_at = time.perf_counter()
                    phase.labels("lock").observe(locked_at - read_at)
                    outcomes.update(self._prepare_batch(readable, refusals))
                    self.metrics.prepared.set(len(self.store.load()))
                phase.labels("work").observe(time.perf_counter() - locked_at)
            except LockTimeout as err:
                log.error("prepare: node lock not acquired", extra={"claims": len(readable), "error": str(err)})
                outcomes.update({ref.uid: PrepareOutcome(error=f"prepare not attempted: {err}")
                                 for ref, _ in readable})
            finally:
                if self.ownership is not None:
                    for ref, _ in readable:
                        self.ownership.prepare_done(ref.uid)
        self._explain_gone_holders(refusals, outcomes, budget)
        self._record_refusals(refusals)
        for outcome in outcomes.values():
            self.metrics.claims.labels("prepare", "error" if outcome.error else "ok").inc()
        self.metrics.seconds.labels("prepare").observe(time.perf_counter() - start)
        return {ref.uid: outcomes[ref.uid] for ref in refs}

    def _prepare_batch(self, claims: Sequence[tuple[ClaimRef, Obj]], refusals: Refusals) -> dict[str, PrepareOutcome]:
        records = self.store.load()
        outcomes: dict[str, PrepareOutcome] = {}
        started: list[ClaimRecord] = []
        for ref, claim in claims:
            result = self._check_one(ref, claim, records, started, refusals)
            if isinstance(result, PrepareOutcome):
                outcomes[ref.uid] = result
            else:
                started.append(result)
        if not started:
            return outcomes
        try:
            # ONE write: new claims' records added, re-prepared claims' old records replaced (old devices released).
            self.store.commit(put=started, durable=False)
        except OSError as err:
            log.error("prepare: checkpoint write failed", extra={"claims": len(started), "error": str(err)})
            return {**outcomes, **{r.uid: PrepareOutcome(error=f"recording the prepare in the checkpoint failed: "
                                                                f"{err}") for r in started}}
        try:
            return {**outcomes, **self._complete(started)}
        finally:
            self.syncer.request()  # the call's writes made durable right after it (see the module docstring)

    def _complete(self, started: Sequence[ClaimRecord]) -> dict[str, PrepareOutcome]:
        """Phase two for claims whose PrepareStarted records are written: CDI specs, then PrepareCompleted."""
        crash_point("prepare-after-checkpoint-started")
        outcomes: dict[str, PrepareOutcome] = {}
        completed: list[ClaimRecord] = []
        failed: dict[str, str] = {}
        for record in started:
            try:
                completed.append(self._write_spec(replace(record, state="PrepareCompleted")))
            except ClaimError as err:
                failed[record.uid] = str(err)
                log.error("claim not prepared", extra={"claim": f"{record.namespace}/{record.name}",
                                                       "uid": record.uid, "error": str(err)})
                self._remove_spec_after_failure(record.uid)
        crash_point("prepare-after-cdi-write")
        try:
            self.store.commit(put=completed, remove=list(failed), durable=False)
        except OSError as err:
            # The PrepareStarted records stay: the kubelet retries, and a restart's sweep undoes them.
            log.error("prepare: checkpoint write failed", extra={"claims": len(started), "error": str(err)})
            return {r.uid: PrepareOutcome(error=f"recording the prepare in the checkpoint failed: {err}")
                    for r in started}
        crash_point("prepare-after-checkpoint-completed")
        for record in completed:
            log.info("claim prepared", extra={"claim": f"{record.namespace}/{record.name}", "uid": record.uid,
                                              "devices": _devices(record.devices)})
            outcomes[record.uid] = _outcome(record)
        for uid, error in failed.items():
            outcomes[uid] = PrepareOutcome(error=error)
        return outcomes

    def _remove_spec_after_failure(self, uid: str) -> None:
        """A failed spec write may leave the claim's previous spec (a re-prepare's old devices): remove it with the
        record. If even that fails, the start-up sweep removes the file (no record names it)."""
        try:
            self.cdi.remove(uid)
        except OSError as err:
            log.warning("could not remove the CDI spec of a claim whose prepare failed",
                        extra={"uid": uid, "error": str(err)})

    def _check_one(self, ref: ClaimRef, claim: Obj, records: Mapping[str, ClaimRecord],
                   pending: Sequence[ClaimRecord], refusals: Refusals) -> PrepareOutcome | ClaimRecord:
        """The answer for a claim that needs no work (prepared as allocated now, or refused), else its
        PrepareStarted record. `pending`: claims of this batch already accepted (they count for exclusivity)."""
        ctx = {"claim": f"{ref.namespace}/{ref.name}", "uid": ref.uid}
        try:
            alloc = allocation_for(claim, ref, self.driver, self.pool, self.devices)
            record = records.get(ref.uid)
            if record is not None and record.state == "PrepareCompleted" and record.boot_id == self.boot_id:
                if _matches(record, alloc):
                    if not self.cdi.exists(ref.uid, [i for d in record.devices for i in d.cdi_ids]):
                        log.warning("CDI spec of a prepared claim was missing; re-creating it", extra=ctx)
                        self._write_spec(record)
                    log.debug("claim already prepared", extra=ctx)
                    return _outcome(record)
                log.warning("the claim's allocation changed since it was prepared (deallocated and allocated again "
                            "under the same UID): preparing it again and releasing the old devices",
                            extra={**ctx, "was": f"{record.namespace}/{record.name} {_devices(record.devices)}",
                                   "now": _devices(alloc.devices)})
            elif record is not None and record.state == "PrepareCompleted":
                log.info("claim prepared in an earlier boot; preparing it again", extra=ctx)
            others = [r for r in records.values() if r.uid != ref.uid] + list(pending)
            self._guard(alloc, claim, others, refusals)
            return ClaimRecord(uid=ref.uid, namespace=ref.namespace, name=ref.name, state="PrepareStarted",
                               boot_id=self.boot_id, devices=tuple(self._recorded(d) for d in alloc.devices))
        except ClaimError as err:
            log.error("claim not prepared", extra={**ctx, "error": str(err)})
            return PrepareOutcome(error=str(err))
        except Exception as err:  # noqa: BLE001 - a bug checking one claim must not fail its neighbours
            log.exception("checking a claim failed unexpectedly", extra=ctx)
            return PrepareOutcome(error=f"internal error in the DRA driver while checking ResourceClaim "
                                        f"{ref.namespace}/{ref.name}: {type(err).__name__}: {err}")

    def _guard(self, alloc: ClaimAllocation, claim: Obj, others: Sequence[ClaimRecord], refusals: Refusals) -> None:
        """The last line of defence: one owner per device."""
        ref = alloc.ref
        if self.ownership is not None:
            uuids = [str(self.devices[d.device].uuid) for d in alloc.devices]
            refused = self.ownership.guard_prepare(uuids, f"{ref.namespace}/{ref.name}", ref.uid)
            if refused:
                self._refuse(claim, "ownership", "; ".join(r.message for r in refused), refusals)
        else:
            for dev in alloc.devices:
                gpu = self.devices[dev.device]
                side = self.side_of(gpu.uuid)
                if side is not Side.DRA:
                    self._refuse(
                        claim,
                        "ownership",
                        f"device {dev.device} ({gpu.uuid}) is owned by the {side} side of the ownership ledger, not "
                        f"by DRA: refusing to prepare it for ResourceClaim {ref.namespace}/{ref.name}",
                        refusals,
                    )
        if alloc.admin_access:
            return
        wanted = {d.device for d in alloc.devices if not d.admin_access}
        for other in others:
            for d in other.devices:
                if d.device in wanted and not d.admin_access:
                    self._refuse(
                        claim,
                        "in-use",
                        f"device {d.device} ({self.devices[d.device].uuid}) is already prepared for ResourceClaim "
                        f"{other.namespace}/{other.name} (uid {other.uid}): refusing to share it with "
                        f"ResourceClaim {ref.namespace}/{ref.name}",
                        refusals,
                        holder=ClaimRef(other.namespace, other.name, other.uid),
                    )

    def _refuse(self, claim: Obj, reason: str, message: str, refusals: Refusals,
                holder: ClaimRef | None = None) -> None:
        self.metrics.refusals.labels(reason).inc()
        log.error("device refused", extra={"reason": reason, "detail": message})
        refusals.append(DeviceRefusal(claim, message, holder))
        raise ClaimError(message)

    def _explain_gone_holders(self, refusals: Refusals, outcomes: dict[str, PrepareOutcome],
                              budget: CallBudget) -> None:
        """A device refused because it is prepared for a claim that no longer exists in the API: say so, and what
        happens next, in the refused claim's error and Event. That is the state after a pod was deleted (forced)
        while the node's kubelet could not clean up (down, restarting, being upgraded): kube-scheduler may give
        its GPU to the next claim at once, while the old container may still run; the kubelet unprepares the old
        claim in its DRA manager's reconcile loop (every 60 s: kubernetes pkg/kubelet/cm/dra/manager.go) and
        retries the pod later (seen on real kubelets: tests/real/test_real_kubelet_upgrade.py). Runs after the node
        lock, reading only the holders of refused devices, within HOLDER_READ_S and the call's budget; a holder
        that cannot be read is not explained."""
        held = [r for r in refusals if r.holder is not None]
        if not held:
            return
        now = time.monotonic()
        holders = list({r.holder.uid: r.holder for r in held if r.holder is not None}.values())
        got = self.reader.read(holders, CallBudget(max(0.0, min(HOLDER_READ_S, budget.deadline - now)), now, 0.0))
        for i, r in enumerate(refusals):
            if r.holder is None:
                continue
            read = got.get(r.holder.uid)
            exists = isinstance(read, dict) and (read.get("metadata") or {}).get("uid") == r.holder.uid
            if exists or not isinstance(read, (dict, ClaimGone)):
                continue
            hint = (f"; ResourceClaim {r.holder.namespace}/{r.holder.name} (uid {r.holder.uid}) no longer exists: its "
                    f"pod was deleted while this node's kubelet could not clean up (down, restarting or being "
                    f"upgraded); the kubelet unprepares it within about a minute, and this claim is prepared on the "
                    f"pod's next try")
            refusals[i] = replace(r, message=r.message + hint)
            uid = str((r.claim.get("metadata") or {}).get("uid", ""))
            if uid in outcomes:
                outcomes[uid] = replace(outcomes[uid], error=outcomes[uid].error + hint)

    def _record_refusals(self, refusals: Refusals) -> None:
        """Record refusals as Warning Events on their claims, in the background: an API write must neither run
        under the node lock nor delay the kubelet's answer (an Event is best effort)."""
        if not refusals or not self.record_events:
            return
        threading.Thread(target=self._record_events, args=(refusals,), name="dra-refusal-events", daemon=True).start()

    def _record_events(self, refusals: Refusals) -> None:
        for refusal in refusals:
            claim, message = refusal.claim, refusal.message
            try:
                version = claim.get("apiVersion") or f"resource.k8s.io/{self.kube.resource_api().version}"
                involved = {**claim, "apiVersion": version, "kind": "ResourceClaim"}
                record_event(self.kube, involved, "DeviceRefused", message, type="Warning", component=self.driver)
            except (KubeError, ValueError) as err:
                log.warning("could not record the refusal as an Event", extra={"error": str(err)})

    def _recorded(self, d: AllocatedDevice) -> RecordedDevice:
        return RecordedDevice(d.device, d.pool, self.devices[d.device].uuid, d.request_names, (), d.admin_access)

    def _write_spec(self, record: ClaimRecord) -> ClaimRecord:
        try:
            ids = self.cdi.write(record.uid, [(d.device, self.devices[d.device]) for d in record.devices])
        except (OSError, ValueError) as err:  # CdiWriteError is an OSError, CdiNameError a ValueError
            raise ClaimError(f"writing the CDI spec for claim {record.uid} failed: {err}") from err
        return replace(record, devices=tuple(replace(d, cdi_ids=ids[d.device]) for d in record.devices))

    # -- NodeUnprepareResources -----------------------------------------------------------------------------------

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        start = time.perf_counter()
        try:
            with self.store.serialized(self.lock_timeout):
                errors = self._unprepare_batch(claims)
                self.metrics.prepared.set(len(self.store.load()))
        except LockTimeout as err:
            log.error("unprepare: node lock not acquired", extra={"claims": len(claims), "error": str(err)})
            errors = {ref.uid: f"unprepare not attempted: {err}" for ref in claims}
        for error in errors.values():
            self.metrics.claims.labels("unprepare", "error" if error else "ok").inc()
        self.metrics.seconds.labels("unprepare").observe(time.perf_counter() - start)
        return errors

    def _unprepare_batch(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """CDI specs first, then ONE checkpoint write dropping every record: a crash in between leaves
        records whose specs are gone, which the kubelet's retry finishes (removal is idempotent)."""
        records = self.store.load()
        errors: dict[str, str] = {}
        drop: list[str] = []
        for ref in claims:
            ctx = {"claim": f"{ref.namespace}/{ref.name}", "uid": ref.uid}
            try:
                crash_point("unprepare-before-cdi-remove")
                self.cdi.remove(ref.uid)  # also when unknown: a spec without a record is a leak
                crash_point("unprepare-after-cdi-remove")
            except OSError as err:
                log.error("claim not unprepared", extra={**ctx, "error": str(err)})
                errors[ref.uid] = f"unpreparing claim {ref.uid} failed: {err}"
                continue
            errors[ref.uid] = ""
            if ref.uid in records:
                drop.append(ref.uid)
            else:
                log.info("claim was not prepared here; nothing to undo", extra=ctx)
        if drop:
            try:
                self.store.commit(remove=drop, durable=False)
                self.syncer.request()
            except OSError as err:
                log.error("unprepare: checkpoint write failed", extra={"claims": len(drop), "error": str(err)})
                for uid in drop:
                    errors[uid] = f"unpreparing claim {uid} failed: the checkpoint could not be written: {err}"
                return errors
            crash_point("unprepare-after-checkpoint")
            for uid in drop:
                r = records[uid]
                log.info("claim unprepared", extra={"claim": f"{r.namespace}/{r.name}", "uid": uid})
            if self.on_released is not None:
                try:
                    self.on_released()
                except Exception:  # noqa: BLE001 - a listener must not fail the kubelet's call
                    log.exception("on_released listener failed")
        return errors

    # -- start-up -------------------------------------------------------------------------------------------------

    def sweep(self) -> SweepReport:
        """Undo half-finished prepares (PrepareStarted records and their spec files) and remove leaked specs."""
        with self.store.serialized(self.lock_timeout):
            records = self.store.load()
            undone = []
            for uid, record in records.items():
                if record.state == "PrepareStarted":
                    self.cdi.remove(uid)
                    undone.append(uid)
                    log.warning(
                        "undid a half-finished prepare from before a crash",
                        extra={"claim": f"{record.namespace}/{record.name}", "uid": uid},
                    )
            if undone:
                self.store.commit(remove=undone, durable=True)
            leaked = sorted(self.cdi.claim_uids() - set(records))
            for uid in leaked:
                self.cdi.remove(uid)
                log.warning("removed a CDI spec no checkpoint record knows", extra={"uid": uid})
            self.metrics.swept.labels("half-prepared").inc(len(undone))
            self.metrics.swept.labels("leaked-spec").inc(len(leaked))
            self.metrics.prepared.set(len(self.store.load()))
        return SweepReport(tuple(sorted(undone)), tuple(leaked))

    def prepared_claims(self) -> Mapping[str, ClaimRecord]:
        return self.store.load()


def describe(records: Mapping[str, ClaimRecord]) -> list[dict[str, Any]]:
    """A JSON-friendly view of the records (status endpoints, debugging)."""
    return [
        {"uid": r.uid, "claim": f"{r.namespace}/{r.name}", "state": r.state, "devices": [d.device for d in r.devices]}
        for r in records.values()
    ]
