"""Adapters from the prepare core's two seams (`ClaimStore`, `CdiStore`) to the project's ledger and CDI packages.

`prepare.py` depends only on the Protocols; the concrete persistence lives in `bridge/ledger` (checkpoint file,
file lock, boot ID) and `bridge/cdi` (spec building, atomic writer). This module is the only glue.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bridge.cdi import CdiSpecWriter, atomic_write_bytes, build_claim_spec, claim_kind
from bridge.dra.prepare import ClaimRecord, RecordedDevice
from bridge.inventory.model import GpuDevice
from bridge.ledger.lock import FileLock, serialize_lock

log = logging.getLogger(__name__)


class ClaimCdi:
    """`CdiStore` over `bridge.cdi`: one spec file per claim under `root` (e.g. /var/run/cdi)."""

    def __init__(self, root: str | Path, driver: str) -> None:
        self.kind = claim_kind(driver)
        self.writer = CdiSpecWriter(root, self.kind)
        self.writer.sweep_temp_files()

    def write(self, claim_uid: str, devices: Sequence[tuple[str, GpuDevice]]) -> dict[str, tuple[str, ...]]:
        built = build_claim_spec(claim_uid, [gpu for _, gpu in devices], kind=self.kind)
        self.writer.write(claim_uid, built.document)
        return {name: (built.cdi_ids[gpu.uuid],) for name, gpu in devices}

    def remove(self, claim_uid: str) -> bool:
        return self.writer.remove(claim_uid)

    def exists(self, claim_uid: str) -> bool:
        return self.writer.path_for(claim_uid).is_file()

    def claim_uids(self) -> set[str]:
        return set(self.writer.list())


class FileClaimStore:
    """`ClaimStore` on one versioned JSON file under the state dir, serialized by the ledger's node-wide lock.

    INTERIM: `bridge/ledger/checkpoint.py` (the project's single checkpoint with `update(mutate)`) had not landed
    when the DRA core was written; this store keeps the same guarantees for the DRA claim records alone (atomic
    replace with fsync through `bridge.cdi.atomic_write_bytes`, the ledger's `FileLock`, a version field, a
    corrupt file moved aside and reported) and is to be replaced by an adapter over the ledger's checkpoint.
    Every `put`/`remove` is one durable write; callers hold `serialized()` around read-modify-write sequences.
    """

    VERSION = 1

    def __init__(self, state_dir: str | Path, *, file_name: str = "dra-claims.json") -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / file_name
        self.corrupt_moved_to: Path | None = None
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._records = self._read()

    def serialized(self, timeout: float) -> AbstractContextManager[None]:
        return _Reloading(self, serialize_lock(self.state_dir, timeout))

    def load(self) -> dict[str, ClaimRecord]:
        return dict(self._records)

    def put(self, record: ClaimRecord) -> None:
        records = dict(self._records)
        records[record.uid] = record
        self._write(records)

    def remove(self, uid: str) -> None:
        if uid in self._records:
            records = dict(self._records)
            del records[uid]
            self._write(records)

    # -- file format ------------------------------------------------------------------------------------------------

    def _read(self) -> dict[str, ClaimRecord]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict) or doc.get("version") != self.VERSION:
                raise ValueError(f"unsupported version {doc.get('version') if isinstance(doc, dict) else None!r}")
            return {uid: _record_from(uid, r) for uid, r in doc["claims"].items()}
        except (ValueError, KeyError, TypeError) as err:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            os.replace(self.path, aside)
            self.corrupt_moved_to = aside
            log.error(
                "the DRA claim checkpoint is corrupt: moved aside; claims will be re-read from the API when the "
                "kubelet asks again",
                extra={"path": str(self.path), "moved_to": str(aside), "error": str(err)},
            )
            return {}

    def _write(self, records: dict[str, ClaimRecord]) -> None:
        doc = {"version": self.VERSION, "claims": {uid: asdict(r) for uid, r in sorted(records.items())}}
        atomic_write_bytes(self.path, json.dumps(doc, indent=1).encode(), mode=0o600)
        self._records = records


class _Reloading:
    """Take the file lock, then re-read the file: another instance (rolling update) may have changed it."""

    def __init__(self, store: FileClaimStore, lock: FileLock) -> None:
        self.store, self.lock = store, lock

    def __enter__(self) -> None:
        self.lock.acquire()
        self.store._records = self.store._read()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def _record_from(uid: str, r: dict[str, Any]) -> ClaimRecord:
    if r["state"] not in ("PrepareStarted", "PrepareCompleted"):
        raise ValueError(f"claim {uid}: unknown state {r['state']!r}")
    devices = tuple(
        RecordedDevice(
            device=d["device"], pool=d["pool"], uuid=d["uuid"], request_names=tuple(d["request_names"]),
            cdi_ids=tuple(d["cdi_ids"]), admin_access=bool(d.get("admin_access", False)),
        )
        for d in r["devices"]
    )
    return ClaimRecord(uid=uid, namespace=r["namespace"], name=r["name"], state=r["state"], boot_id=r["boot_id"],
                       devices=devices)
