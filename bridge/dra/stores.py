"""Adapters from the prepare core's two seams (`ClaimStore`, `CdiStore`) to the project's ledger and CDI packages.

`prepare.py` depends only on the Protocols; the concrete persistence lives in `bridge/ledger` (the checkpoint with
its `update(mutate)` path, file locks, boot ID) and `bridge/cdi` (spec building, atomic writer). This module is the
only glue.

Where the node's state lives: every change, of ownership sides or of prepared claims, goes through the one
`Checkpoint.update(mutate)` path (versioned, checksummed, boot ID, atomic rename, a file lock). The daemon keeps
two checkpoint files of that one format, because their contents live on different time scales:
* `<--state-dir>/checkpoint.json`, the ownership sides (and moves under way): they must survive a reboot (the
  kubelet's device assignments do), so they are on disk and every write is fsynced;
* `<--claims-dir>/claims.json`, the prepared-claim records: void after a reboot (the boot ID says so; the CDI specs
  they name live in tmpfs `/var/run/cdi`, and the kubelet prepares every claim again), written twice in every
  NodePrepareResources (PrepareStarted, PrepareCompleted). The chart puts them on the node's tmpfs
  (`/var/run/dra-bridge`), as the CDI specs are: on a real node, whose disk the kubelet and containerd write to as
  well, the two renames on disk cost a prepare 1.2 ms at p50 (the work under the node lock 3.5 ms on disk, 2.3 on
  tmpfs; bench/real_pod_start_bench.py --node-arg, stop 43). Without `--claims-dir` the file sits beside
  checkpoint.json.
No write ever needs both files at once: a prepare that takes a GPU back from the device plugin writes the sides
first (`SplitController.guard_prepare`, durably), then the claim's records. Claim records written by a version that
kept them in checkpoint.json are moved at start (`open_checkpoint`). The node-wide Prepare/Unprepare lock
(`pu.lock`) stays in the state directory, where every version of the daemon takes it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path

from bridge.cdi import CdiOptions, CdiSpecWriter, NodeCdi, build_claim_spec, claim_kind
from bridge.dra.prepare import ClaimRecord, RecordedDevice
from bridge.inventory.model import DeviceID, GpuDevice
from bridge.ledger.checkpoint import Checkpoint, CheckpointCorrupt
from bridge.ledger.lock import FileLock, serialize_lock
from bridge.ledger.state import CheckpointData, PreparedClaim, PreparedDevice

log = logging.getLogger(__name__)


class ClaimCdi:
    """`CdiStore` over `bridge.cdi`: the CDI devices of one claim, under `root` (e.g. /var/run/cdi).

    With the NVIDIA Container Toolkit's spec naming every GPU of the claim (`--cdi-source auto|toolkit`,
    `NodeCdi.toolkit_names`), the claim gets the toolkit's names (`nvidia.com/gpu=GPU-<uuid>`) and no file of
    ours; otherwise one spec file per claim, built from the node's driver inventory, named by the claim UID, written
    and removed without fsync (`CdiSpecWriter(durable=False)`: a reboot voids every claim spec, see
    `bridge.cdi.writer`)."""

    def __init__(self, root: str | Path, driver: str, node_cdi: NodeCdi | None = None) -> None:
        """`node_cdi` None: specs with device nodes only, listed unchecked (simulated GPUs, tests)."""
        self.kind = claim_kind(driver)
        self.writer = CdiSpecWriter(root, self.kind, durable=False)
        self.writer.sweep_temp_files()
        self.node_cdi = node_cdi if node_cdi is not None else NodeCdi(CdiOptions(source="own"), ())

    def write(self, claim_uid: str, devices: Sequence[tuple[str, GpuDevice]]) -> dict[str, tuple[str, ...]]:
        gpus = [gpu for _, gpu in devices]
        names = self.node_cdi.toolkit_names(gpus)  # CdiConfigError (a ValueError) with --cdi-source toolkit
        if names is not None:
            if self.writer.remove(claim_uid):  # our own spec from an earlier prepare of this claim
                log.info("claim now uses the NVIDIA Container Toolkit's CDI names; removed our spec",
                         extra={"uid": claim_uid})
            return {name: (names[gpu.uuid],) for name, gpu in devices}
        built = build_claim_spec(claim_uid, gpus, kind=self.kind, inventory=self.node_cdi.inventory(gpus))
        self.writer.write(claim_uid, built.document)
        return {name: (built.cdi_ids[gpu.uuid],) for name, gpu in devices}

    def remove(self, claim_uid: str) -> bool:
        return self.writer.remove(claim_uid)

    def exists(self, claim_uid: str, cdi_ids: Sequence[str] = ()) -> bool:
        """Whether the claim's CDI devices are in place: our file, when the IDs are ours (or unknown). IDs of the
        toolkit's spec need no file of ours."""
        if cdi_ids and not any(i.startswith(self.kind + "=") for i in cdi_ids):
            return True
        return self.writer.path_for(claim_uid).is_file()

    def claim_uids(self) -> set[str]:
        return set(self.writer.list())


CLAIMS_NAME = "claims.json"  # the prepared-claim records' checkpoint file, in --claims-dir


def claims_checkpoint(claims_dir: str | Path, *, boot_id: Callable[[], str]) -> Checkpoint:
    """The checkpoint of prepared-claim records in `claims_dir` (see the module docstring)."""
    return Checkpoint(claims_dir, boot_id=boot_id, name=CLAIMS_NAME)


class CheckpointClaimStore:
    """`ClaimStore` over a checkpoint (`bridge.ledger.Checkpoint`): the claims file (`claims_checkpoint`) in the daemon,
    any checkpoint in tests; every change goes through `Checkpoint.update(mutate)`.

    Record mapping: `ClaimRecord` <-> `PreparedClaim`/`PreparedDevice`; a record's `boot_id` is the file's boot ID
    (the checkpoint stores one per file, and `open_checkpoint` drops an earlier boot's claims before anything is
    written in this boot). `serialized()` takes the node-wide Prepare/Unprepare lock (`pu.lock`, in `lock_dir`: the
    state directory; default the checkpoint's own directory) and then re-reads the checkpoint, since another
    instance (rolling update) may have changed it; `load()` answers from that snapshot while the lock is held and
    reads the file otherwise. `commit(put, remove, durable=...)` is one
    `update`; `sync()` makes the file as it is durable (see `bridge.dra.prepare` for which writes are fsynced when,
    and why).
    """

    def __init__(self, checkpoint: Checkpoint, *, lock_dir: str | Path | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.checkpoint = checkpoint
        self.lock_dir = Path(lock_dir) if lock_dir is not None else checkpoint.dir
        self._clock = clock
        self._held: dict[str, ClaimRecord] | None = None

    def serialized(self, timeout: float) -> AbstractContextManager[None]:
        return _Serialized(self, serialize_lock(self.lock_dir, timeout))

    def load(self) -> dict[str, ClaimRecord]:
        if self._held is not None:
            return dict(self._held)
        return self._read()

    def commit(self, put: Sequence[ClaimRecord] = (), remove: Sequence[str] = (), *, durable: bool = True) -> None:
        if not put and not remove:
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._clock()))
        claims = [_to_ledger(r, stamp) for r in put]
        gone = set(remove)

        def mutate(data: CheckpointData) -> CheckpointData:
            kept = {uid: c for uid, c in data.claims.items() if uid not in gone}
            kept.update({c.uid: c for c in claims})
            return replace(data, claims=kept)

        data = self.checkpoint.update(mutate, durable=durable)
        if self._held is not None:
            boot = self.checkpoint.current_boot_id()
            self._held = {uid: _from_ledger(c, boot) for uid, c in data.claims.items()}

    def sync(self) -> None:
        """fsync the checkpoint file as it is now, then its directory (the rename). A newer version renamed in
        after the open is covered by its own writer's sync. No lock: fsync does not change the file."""
        path = self.checkpoint.path
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return  # nothing written yet
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _read(self) -> dict[str, ClaimRecord]:
        result = self.checkpoint.read()
        boot = result.boot_id or self.checkpoint.current_boot_id()
        return {uid: _from_ledger(c, boot) for uid, c in result.data.claims.items()}


class _Serialized:
    def __init__(self, store: CheckpointClaimStore, lock: FileLock) -> None:
        self.store, self.lock = store, lock

    def __enter__(self) -> None:
        self.lock.acquire()
        try:
            self.store._held = self.store._read()
        except BaseException:
            self.lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        self.store._held = None
        self.lock.release()


def _to_ledger(r: ClaimRecord, stamp: str) -> PreparedClaim:
    return PreparedClaim(
        uid=r.uid, namespace=r.namespace, name=r.name, state=r.state, updated_at=stamp,
        devices=tuple(PreparedDevice(device=d.device, pool=d.pool, request_names=d.request_names,
                                     uuid=DeviceID(d.uuid), cdi_ids=d.cdi_ids, admin_access=d.admin_access)
                      for d in r.devices))


def _from_ledger(c: PreparedClaim, boot_id: str) -> ClaimRecord:
    return ClaimRecord(
        uid=c.uid, namespace=c.namespace, name=c.name, state=c.state, boot_id=boot_id,
        devices=tuple(RecordedDevice(device=d.device, pool=d.pool, uuid=d.uuid, request_names=d.request_names,
                                     cdi_ids=d.cdi_ids, admin_access=d.admin_access) for d in c.devices))


@dataclass(frozen=True)
class OpenedCheckpoint:
    """What the daemon starts from: the stored state (empty on a fresh node or after a corrupt file). `data`: the sides
    from the node's checkpoint, the claims from the claims file when there is one (`open_checkpoint(..., claims)`)."""

    data: CheckpointData
    exists: bool
    corrupt: CheckpointCorrupt | None = None  # set when the file was unusable and has been moved aside
    discarded_claims: tuple[str, ...] = ()  # claim UIDs dropped because they were prepared in an earlier boot
    claims_corrupt: CheckpointCorrupt | None = None  # the claims file was unusable and has been moved aside
    moved_claims: tuple[str, ...] = ()  # claim UIDs moved from checkpoint.json into the claims file

    @property
    def claims_lost(self) -> bool:
        """Claim records may be lost (a file that held them was corrupt): rebuild them from the kubelet."""
        return self.corrupt is not None or self.claims_corrupt is not None


def open_checkpoint(checkpoint: Checkpoint, claims: Checkpoint | None = None) -> OpenedCheckpoint:
    """Read the checkpoint at start, before anything writes to it; with `claims`, the claims file too
    (`_open_claims`).

    * a corrupt file: already moved aside by the checkpoint; logged at ERROR with where it went; the daemon goes on
      from an empty state and rebuilds from the API (split target) and the kubelet (PodResources): never silently;
    * a file from an earlier boot: its prepared claims are void (tmpfs CDI specs are gone, the kubelet prepares
      again) and are dropped in one durable write; the ownership sides are kept (the kubelet's device assignments
      survive a reboot in its own checkpoint).
    Temp files of writes a killed process never finished are removed first (`Checkpoint.sweep`).
    Raises CheckpointError when the file cannot be read or written at all (I/O error, lock timeout).
    """
    opened = _open_one(checkpoint)
    return opened if claims is None else _open_claims(checkpoint, opened, claims)


def _open_one(checkpoint: Checkpoint) -> OpenedCheckpoint:
    swept = checkpoint.sweep()
    if swept:
        log.warning("removed %d temp file(s) of checkpoint writes that never finished", len(swept),
                    extra={"files": ",".join(p.name for p in swept)})
    try:
        result = checkpoint.read()
    except CheckpointCorrupt as err:
        log.error("%s", err, extra={"path": str(err.path), "moved_to": str(err.moved_to), "reason": err.reason})
        return OpenedCheckpoint(CheckpointData(), exists=False, corrupt=err)
    if result.exists and result.previous_boot:
        dropped = tuple(sorted(result.data.claims))
        data = checkpoint.update(lambda d: d.without_claims(), adopt_previous_boot=True)
        log.warning("the checkpoint was written in an earlier boot (%s); discarded its %d prepared claim(s), which "
                    "the kubelet prepares again; kept the ownership sides", result.boot_id, len(dropped),
                    extra={"claims": ",".join(dropped)})
        return OpenedCheckpoint(data, exists=True, discarded_claims=dropped)
    return OpenedCheckpoint(result.data, exists=result.exists)


def _open_claims(node: Checkpoint, opened: OpenedCheckpoint, claims: Checkpoint) -> OpenedCheckpoint:
    """The claims file, opened as the node's checkpoint is (temp files swept; corrupt: moved aside, logged,
    `claims_corrupt`; an earlier boot's records dropped). Records still in checkpoint.json (written by a version that
    kept them there) are the newest there are: nothing after them was written anywhere, since this version moves
    them before it serves. So they replace the claims file's content (one write), and only then leave
    checkpoint.json (one durable write): a crash in between leaves them in both, and the next start does the same
    again."""
    found = _open_one(claims)
    records = dict(found.data.claims)
    moved = tuple(sorted(opened.data.claims))
    if moved:
        claims.update(lambda d: replace(d, claims=dict(opened.data.claims)), adopt_previous_boot=True)
        node.update(lambda d: d.without_claims())
        records = dict(opened.data.claims)
        log.info("moved %d prepared claim record(s) from %s to %s", len(moved), node.path, claims.path,
                 extra={"claims": ",".join(moved)})
    return replace(opened, data=replace(opened.data, claims=records), claims_corrupt=found.corrupt,
                   discarded_claims=(*opened.discarded_claims, *found.discarded_claims), moved_claims=moved)
