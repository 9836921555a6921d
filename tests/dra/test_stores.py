"""The prepared-claim store over the node's one checkpoint: claims and ownership sides share the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.dra.prepare import ClaimRecord, RecordedDevice
from bridge.dra.stores import CheckpointClaimStore, open_checkpoint
from bridge.inventory.model import DeviceID
from bridge.ledger.checkpoint import Checkpoint, CheckpointFromPreviousBoot
from bridge.ledger.lock import LockTimeout

UUID = DeviceID("GPU-0000-aaaa")


def record(uid: str, state: str = "PrepareCompleted", *, admin: bool = False) -> ClaimRecord:
    return ClaimRecord(uid, "ns", f"claim-{uid}", state, "boot-1",  # type: ignore[arg-type]
                       (RecordedDevice("gpu-3", "node-a", UUID, ("gpu",), (f"k8s.x/claim={uid}-gpu-3",), admin),))


class Boot:
    def __init__(self) -> None:
        self.value = "boot-1"

    def __call__(self) -> str:
        return self.value


def test_claims_are_written_into_the_checkpoint_next_to_the_ownership_sides(short_tmp: Path) -> None:
    cp = Checkpoint(short_tmp, boot_id=lambda: "boot-1")
    cp.update(lambda d: d.with_sides({UUID: "dra"}, split="1"))
    store = CheckpointClaimStore(cp)
    store.commit(put=[record("u1", admin=True)], durable=False)
    store.commit(put=[record("u2")])
    doc = json.loads((short_tmp / "checkpoint.json").read_text())
    assert doc["data"]["ownership"] == {"sides": {UUID: "dra"}, "split": "1"}
    assert set(doc["data"]["preparedClaims"]) == {"u1", "u2"}
    assert store.load() == {"u1": record("u1", admin=True), "u2": record("u2")}
    store.commit(remove=["u1", "never-there"])
    assert set(store.load()) == {"u2"} and cp.read().data.sides == {UUID: "dra"}
    assert not list(short_tmp.glob(".checkpoint.json.tmp-*")), "no temp file left behind"


def test_serialized_reloads_what_another_instance_wrote_and_excludes_it(short_tmp: Path) -> None:
    a = CheckpointClaimStore(Checkpoint(short_tmp, boot_id=lambda: "boot-1"))
    b = CheckpointClaimStore(Checkpoint(short_tmp, boot_id=lambda: "boot-1"))
    a.commit(put=[record("u1")])
    with b.serialized(5):
        assert set(b.load()) == {"u1"}
        with pytest.raises(LockTimeout):
            with a.serialized(0.2):
                pass
        b.commit(put=[record("u2")])
        assert set(b.load()) == {"u1", "u2"}
    assert set(a.load()) == {"u1", "u2"}


def test_a_checkpoint_from_an_earlier_boot_loses_its_claims_but_keeps_its_sides(short_tmp: Path) -> None:
    boot = Boot()
    cp = Checkpoint(short_tmp, boot_id=boot)
    cp.update(lambda d: d.with_sides({UUID: "dra"}, split="all"))
    CheckpointClaimStore(cp).commit(put=[record("u1")])
    boot.value = "boot-2"
    with pytest.raises(CheckpointFromPreviousBoot):
        CheckpointClaimStore(cp).commit(put=[record("u2")])
    opened = open_checkpoint(cp)
    assert opened.discarded_claims == ("u1",) and opened.data.sides == {UUID: "dra"} and opened.corrupt is None
    store = CheckpointClaimStore(cp)
    assert store.load() == {}
    store.commit(put=[record("u2")])
    assert {r.boot_id for r in store.load().values()} == {"boot-2"}


def test_a_corrupt_checkpoint_is_moved_aside_and_reported_not_silently_emptied(
        short_tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    (short_tmp / "checkpoint.json").write_text('{"version": 1, "data": {}, "checksum": "sha256:00"}')
    opened = open_checkpoint(Checkpoint(short_tmp, boot_id=lambda: "boot-1"))
    assert opened.corrupt is not None and not opened.exists
    assert "checksum mismatch" in opened.corrupt.reason
    assert opened.corrupt.moved_to.read_text().startswith('{"version": 1')
    assert any("is corrupt" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
