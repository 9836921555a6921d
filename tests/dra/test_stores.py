"""The prepared-claim store over a checkpoint, and the daemon's two files: the sides' checkpoint.json (state
directory, durable) and the claim records' claims.json (--claims-dir, a tmpfs in the chart)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.ledger import Side
from bridge.dra.prepare import ClaimRecord, RecordedDevice
from bridge.dra.stores import CLAIMS_NAME, CheckpointClaimStore, claims_checkpoint, open_checkpoint
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
    assert "cdiSpecFile" not in doc["data"]["preparedClaims"]["u1"], "no empty placeholder field in the file"
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


HOLD_PU_LOCK = """
import sys, time
from bridge.ledger import serialize_lock
serialize_lock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_prepare_and_unprepare_wait_for_another_process_holding_the_node_lock_then_fail_per_claim(
        short_tmp: Path) -> None:
    """A rolling update runs two instances: Prepare/Unprepare never interleave across them, and a wedged holder
    turns into a per-claim error within the lock timeout (far below the kubelet's 45 s), not a hang."""
    import subprocess
    import sys

    from bridge.dra.claims import ClaimRef
    from bridge.dra.prepare import Preparer
    from bridge.dra.slices import device_name
    from bridge.dra.stores import ClaimCdi
    from bridge.inventory.simulated import devices_from_spec
    from bridge.kube.api import ResourceAPI
    from tests.dra.fakekube import FakeKube

    gpus = devices_from_spec("2xH100-80GB", "node-a")
    kube = FakeKube()
    kube.put(ResourceAPI("v1").claims, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "c1", "namespace": "ns", "uid": "uid-1"},
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": "gpu.dra-bridge.io", "pool": "node-a", "device": "gpu-1"}]}}}})
    preparer = Preparer(kube=kube, driver="gpu.dra-bridge.io", pool="node-a", devices=gpus, device_name=device_name,
                        side_of=lambda _u: Side.DRA, store=CheckpointClaimStore(Checkpoint(short_tmp / "st",
                                                                                        boot_id=lambda: "boot-1")),
                        cdi=ClaimCdi(short_tmp / "cdi", "gpu.dra-bridge.io"), boot_id="boot-1", lock_timeout=0.5,
                        record_events=False)
    ref = ClaimRef("ns", "c1", "uid-1")
    (short_tmp / "st").mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_PU_LOCK, str(short_tmp / "st")], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        error = preparer.prepare([ref])["uid-1"].error
        assert error.startswith("prepare not attempted: could not lock") and "pu.lock within 0.5s" in error
        assert preparer.unprepare([ref])["uid-1"].startswith("unprepare not attempted: could not lock")
        assert not list((short_tmp / "cdi").glob("*.json")), "nothing was prepared without the lock"
    finally:
        holder.kill()  # the kernel drops a dead holder's flock
        holder.wait(30)
    assert preparer.prepare([ref])["uid-1"].error == ""
    assert preparer.unprepare([ref]) == {"uid-1": ""}


def two_files(root: Path, boot: Boot | None = None) -> tuple[Checkpoint, Checkpoint]:
    """The daemon's layout: the sides' checkpoint in the state directory, the claim records in another one."""
    boot_id = boot or (lambda: "boot-1")
    return (Checkpoint(root / "state", boot_id=boot_id), claims_checkpoint(root / "run", boot_id=boot_id))


def test_claim_records_go_to_the_claims_file_and_the_sides_checkpoint_is_not_written(short_tmp: Path) -> None:
    node, claims = two_files(short_tmp)
    node.update(lambda d: d.with_sides({UUID: "dra"}, split="1"))
    sides_file = (short_tmp / "state" / "checkpoint.json").read_bytes()
    store = CheckpointClaimStore(claims, lock_dir=short_tmp / "state")
    store.commit(put=[record("u1")], durable=False)
    store.commit(put=[record("u2")], remove=["u1"], durable=False)
    assert (short_tmp / "state" / "checkpoint.json").read_bytes() == sides_file
    doc = json.loads((short_tmp / "run" / CLAIMS_NAME).read_text())
    assert set(doc["data"]["preparedClaims"]) == {"u2"} and doc["bootID"] == "boot-1"
    assert store.load() == {"u2": record("u2")}
    # the node-wide Prepare/Unprepare lock stays where every version of the daemon takes it: the state directory
    with store.serialized(5):
        with pytest.raises(LockTimeout):
            with CheckpointClaimStore(Checkpoint(short_tmp / "state", boot_id=lambda: "boot-1")).serialized(0.2):
                pass


def test_records_an_older_version_kept_in_checkpoint_json_move_to_the_claims_file_at_start(short_tmp: Path) -> None:
    node, claims = two_files(short_tmp)
    node.update(lambda d: d.with_sides({UUID: "dra"}, split="1"))
    CheckpointClaimStore(node).commit(put=[record("u1"), record("u2", "PrepareStarted")])  # the old layout
    opened = open_checkpoint(node, claims)
    assert opened.moved_claims == ("u1", "u2") and not opened.claims_lost
    assert set(opened.data.claims) == {"u1", "u2"} and opened.data.sides == {UUID: "dra"}
    assert node.read().data.claims == {} and node.read().data.sides == {UUID: "dra"}
    assert CheckpointClaimStore(claims).load() == {"u1": record("u1"), "u2": record("u2", "PrepareStarted")}
    again = open_checkpoint(node, claims)  # the next start: nothing left to move
    assert again.moved_claims == () and set(again.data.claims) == {"u1", "u2"}


def test_a_start_killed_between_the_moves_two_writes_moves_the_records_again(short_tmp: Path) -> None:
    """Records still in checkpoint.json are the newest: this version writes claims.json only after the move, so
    whatever claims.json holds then (the same records, or an older version's leftovers) is replaced."""
    node, claims = two_files(short_tmp)
    CheckpointClaimStore(claims).commit(put=[record("stale")])  # e.g. left from before a downgrade
    CheckpointClaimStore(node).commit(put=[record("u1")])
    opened = open_checkpoint(node, claims)
    assert opened.moved_claims == ("u1",) and set(opened.data.claims) == {"u1"}
    assert set(CheckpointClaimStore(claims).load()) == {"u1"} and node.read().data.claims == {}


def test_a_corrupt_claims_file_is_moved_aside_the_sides_stay_and_the_records_are_to_be_rebuilt(
        short_tmp: Path) -> None:
    node, claims = two_files(short_tmp)
    node.update(lambda d: d.with_sides({UUID: "dra"}, split="1"))
    CheckpointClaimStore(claims).commit(put=[record("u1")])
    path = short_tmp / "run" / CLAIMS_NAME
    path.write_bytes(path.read_bytes()[:40])  # cut short
    opened = open_checkpoint(node, claims)
    assert opened.corrupt is None and opened.claims_corrupt is not None and opened.claims_lost
    assert opened.claims_corrupt.moved_to.parent == short_tmp / "run" and not path.exists()
    assert opened.data.sides == {UUID: "dra"} and opened.data.claims == {}
    CheckpointClaimStore(claims).commit(put=[record("u2")])  # a fresh file from then on
    assert set(CheckpointClaimStore(claims).load()) == {"u2"}


def test_claim_records_of_an_earlier_boot_are_dropped_and_the_sides_kept(short_tmp: Path) -> None:
    boot = Boot()
    node, claims = two_files(short_tmp, boot)
    node.update(lambda d: d.with_sides({UUID: "dra"}, split="1"))
    CheckpointClaimStore(claims).commit(put=[record("u1")])
    boot.value = "boot-2"  # a claims dir that is not a tmpfs survives the reboot; its records do not count
    opened = open_checkpoint(node, claims)
    assert opened.discarded_claims == ("u1",) and opened.data.claims == {} and opened.data.sides == {UUID: "dra"}
    assert CheckpointClaimStore(claims).load() == {}
