"""The checkpoint: one update path, atomic and locked; reboots and corruption are reported, never papered over."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from bridge.ledger import (
    Checkpoint,
    CheckpointCorrupt,
    CheckpointData,
    CheckpointError,
    CheckpointFromPreviousBoot,
    FileLock,
    PreparedClaim,
    PreparedDevice,
    read_boot_id,
)
from bridge.inventory import DeviceID

BOOT_1 = "11111111-1111-1111-1111-111111111111"
BOOT_2 = "22222222-2222-2222-2222-222222222222"
DEV = PreparedDevice(device="gpu-3", pool="node-1", request_names=("gpu",), uuid=DeviceID("GPU-aaa"),
                     cdi_ids=("k8s.gpu.dra-bridge.io/claim=uid-1-gpu-3",))
CLAIM = PreparedClaim(uid="uid-1", namespace="ns", name="claim-a", state="PrepareStarted", devices=(DEV,),
                      cdi_spec_file="/var/run/cdi/k8s.gpu.dra-bridge.io-claim_uid-1.json",
                      updated_at="2025-01-01T00:00:00Z")


def cp_at(path: Path, boot: str = BOOT_1, **kw: object) -> Checkpoint:
    return Checkpoint(path, boot_id=lambda: boot, **kw)  # type: ignore[arg-type]


def test_a_fresh_node_has_an_empty_checkpoint(tmp_path: Path) -> None:
    result = cp_at(tmp_path).read()
    assert not result.exists and result.data == CheckpointData() and not result.previous_boot


def test_updates_persist_both_claim_states_and_sides(tmp_path: Path) -> None:
    cp = cp_at(tmp_path)
    cp.update(lambda d: d.with_claim(CLAIM).with_sides({DeviceID("GPU-aaa"): "dra"}, split="1"))
    cp.update(lambda d: d.with_claim(replace(d.claims["uid-1"], state="PrepareCompleted")))
    result = cp_at(tmp_path).read()
    assert result.exists and result.boot_id == BOOT_1
    assert result.data.claims["uid-1"] == replace(CLAIM, state="PrepareCompleted")
    assert result.data.sides == {"GPU-aaa": "dra"} and result.data.split == "1"
    assert result.data.claims_in("PrepareCompleted") == (replace(CLAIM, state="PrepareCompleted"),)


def test_the_file_is_versioned_and_checksummed_json(tmp_path: Path) -> None:
    cp_at(tmp_path).update(lambda d: d.with_claim(CLAIM))
    doc = json.loads((tmp_path / "checkpoint.json").read_text())
    assert doc["version"] == 1 and doc["bootID"] == BOOT_1 and doc["checksum"].startswith("sha256:")
    assert doc["data"]["preparedClaims"]["uid-1"]["state"] == "PrepareStarted"
    assert doc["data"]["preparedClaims"]["uid-1"]["devices"][0]["requestNames"] == ["gpu"]
    assert doc["data"]["preparedClaims"]["uid-1"]["devices"][0]["cdiIDs"] == list(DEV.cdi_ids)


def test_removing_a_claim(tmp_path: Path) -> None:
    cp = cp_at(tmp_path)
    cp.update(lambda d: d.with_claim(CLAIM))
    assert cp.update(lambda d: d.without_claim("uid-1")).claims == {}
    assert cp.update(lambda d: d.without_claim("uid-1")).claims == {}  # idempotent


def test_a_failing_mutation_writes_nothing(tmp_path: Path) -> None:
    cp = cp_at(tmp_path)
    cp.update(lambda d: d.with_claim(CLAIM))

    def boom(d: CheckpointData) -> CheckpointData:
        raise RuntimeError("prepare failed")

    with pytest.raises(RuntimeError, match="prepare failed"):
        cp.update(boom)
    assert cp.read().data.claims == {"uid-1": CLAIM}


def test_state_from_a_previous_boot_is_reported_and_must_be_adopted_explicitly(tmp_path: Path) -> None:
    cp_at(tmp_path, BOOT_1).update(lambda d: d.with_claim(CLAIM).with_sides({DeviceID("GPU-aaa"): "dra"}))
    after_reboot = cp_at(tmp_path, BOOT_2)
    result = after_reboot.read()
    assert result.previous_boot and result.boot_id == BOOT_1 and "uid-1" in result.data.claims
    with pytest.raises(CheckpointFromPreviousBoot, match=BOOT_1):
        after_reboot.update(lambda d: d)
    new = after_reboot.update(lambda d: d.without_claims(), adopt_previous_boot=True)
    assert new.claims == {} and new.sides == {"GPU-aaa": "dra"}
    result = after_reboot.read()
    assert not result.previous_boot and result.boot_id == BOOT_2


def test_two_writers_on_one_file_always_build_on_each_others_changes(tmp_path: Path) -> None:
    # Each Checkpoint keeps the last state it read or wrote; it must never answer from it once another writer
    # (a second daemon instance during a rolling update) has replaced the file.
    a, b = cp_at(tmp_path), cp_at(tmp_path)
    for i in range(6):
        writer = a if i % 2 == 0 else b
        writer.update(lambda d, i=i: d.with_claim(PreparedClaim(f"uid-{i}", "ns", f"c{i}", "PrepareStarted")))
        assert sorted(a.read().data.claims) == sorted(b.read().data.claims) == [f"uid-{n}" for n in range(i + 1)]


def test_a_same_size_rewrite_in_place_right_after_a_write_is_seen(tmp_path: Path) -> None:
    from bridge.ledger.checkpoint import checksum

    cp = cp_at(tmp_path)
    cp.update(lambda d: d.with_claim(CLAIM))
    path = tmp_path / "checkpoint.json"
    doc = json.loads(path.read_text())
    doc["data"]["preparedClaims"]["uid-1"]["name"] = "claim-b"
    doc["checksum"] = checksum(doc["data"])
    text = json.dumps(doc, ensure_ascii=False)
    text += " " * (path.stat().st_size - len(text.encode()))  # same size, same inode, same timestamp tick
    with path.open("r+b") as f:
        f.write(text.encode())
    assert cp.read().data.claims["uid-1"].name == "claim-b"
    assert cp.update(lambda d: d).claims["uid-1"].name == "claim-b"


def test_data_that_could_not_be_read_back_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    cp = cp_at(tmp_path)
    cp.update(lambda d: d.with_claim(CLAIM))
    before = (tmp_path / "checkpoint.json").read_bytes()
    with pytest.raises(ValueError, match="could not be read back: ownership.sides"):
        cp.update(lambda d: replace(d, sides={DeviceID("GPU-aaa"): "nobody"}))  # type: ignore[dict-item]
    assert (tmp_path / "checkpoint.json").read_bytes() == before
    assert cp_at(tmp_path).read().data.claims == {"uid-1": CLAIM}


def test_the_checksum_covers_the_data_exactly_as_stored(tmp_path: Path) -> None:
    from bridge.ledger.checkpoint import checksum

    cp_at(tmp_path).update(lambda d: d.with_claim(CLAIM).with_sides({DeviceID("GPU-aaa"): "dra"}, split="1"))
    text = (tmp_path / "checkpoint.json").read_text()
    doc = json.loads(text)
    assert doc["checksum"] == checksum(doc["data"])
    assert text.splitlines()[0] == '{"version": 1,'  # one top-level key per line, greppable


@pytest.mark.parametrize(("mangle", "reason"), [
    (lambda text: text[: len(text) // 2], "not valid JSON"),
    (lambda text: text.replace('"claim-a"', '"claim-b"'), "checksum mismatch"),
    (lambda text: text.replace('"version": 1', '"version": 2'), "unknown version 2"),
    (lambda text: "[]", "not a JSON object"),
])
def test_a_corrupt_file_is_moved_aside_and_reported(tmp_path: Path, mangle, reason: str) -> None:  # type: ignore[no-untyped-def]
    cp = cp_at(tmp_path)
    cp.update(lambda d: d.with_claim(CLAIM))
    path = tmp_path / "checkpoint.json"
    bad = mangle(path.read_text())
    path.write_text(bad)
    with pytest.raises(CheckpointCorrupt) as err:
        cp.read()
    assert reason in str(err.value) and "moved it aside" in str(err.value)
    assert err.value.moved_to.name.startswith("checkpoint.json.corrupt-")
    assert err.value.moved_to.read_text() == bad  # kept for the operator, byte for byte
    assert not path.exists()
    assert not cp.read().exists  # the caller was told; later reads start from nothing


def test_malformed_data_with_a_valid_checksum_is_corrupt_too(tmp_path: Path) -> None:
    from bridge.ledger.checkpoint import checksum

    data = {"preparedClaims": {"u": {"namespace": "ns", "name": "n", "state": "Prepared"}}}
    doc = {"version": 1, "bootID": BOOT_1, "checksum": checksum(data), "data": data}
    (tmp_path / "checkpoint.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointCorrupt, match="claims\\[u\\].state"):
        cp_at(tmp_path).update(lambda d: d)
    assert len(list(tmp_path.glob("checkpoint.json.corrupt-*"))) == 1


def test_two_corrupt_files_in_the_same_second_are_both_kept(tmp_path: Path) -> None:
    cp = cp_at(tmp_path, clock=lambda: 1_700_000_000.0)
    for text in ("{", "}"):
        (tmp_path / "checkpoint.json").write_text(text)
        with pytest.raises(CheckpointCorrupt):
            cp.read()
    assert sorted(p.read_text() for p in tmp_path.glob("checkpoint.json.corrupt-*")) == ["{", "}"]


def test_a_deeply_nested_file_is_set_aside_like_any_corrupt_file(tmp_path: Path) -> None:
    """json.loads raises RecursionError (not ValueError) for deep nesting: uncaught, it crash-looped the daemon."""
    (tmp_path / "checkpoint.json").write_text('{"version": 1, "data": ' + "[" * 200_000 + "]" * 200_000 + "}")
    cp = cp_at(tmp_path)
    with pytest.raises(CheckpointCorrupt, match="nested too deeply"):
        cp.read()
    assert not (tmp_path / "checkpoint.json").exists()
    assert cp.update(lambda d: d.with_claim(CLAIM)).claims  # the daemon goes on from an empty state


def test_a_checkpoint_that_is_not_a_regular_file_is_set_aside_without_reading_it(tmp_path: Path) -> None:
    """A symlink to /dev/zero would be read forever, a FIFO would block the read: both are corrupt files."""
    path = tmp_path / "checkpoint.json"
    cp = cp_at(tmp_path)
    path.symlink_to("/dev/zero")
    with pytest.raises(CheckpointCorrupt, match="symbolic link"):
        cp.read()
    assert not path.exists() and not path.is_symlink()
    os.mkfifo(path)
    with pytest.raises(CheckpointCorrupt, match="not a regular file"):
        cp.read()
    assert not path.exists()


def test_a_file_over_the_size_limit_is_set_aside_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bridge.ledger.checkpoint as module

    monkeypatch.setattr(module, "MAX_FILE_BYTES", 1024)
    (tmp_path / "checkpoint.json").write_bytes(b" " * 2048)
    with pytest.raises(CheckpointCorrupt, match="2048 bytes, over the 1024-byte limit"):
        cp_at(tmp_path).read()


def test_only_the_newest_corrupt_files_are_kept(tmp_path: Path) -> None:
    from bridge.ledger.checkpoint import KEEP_CORRUPT

    now = [1_700_000_000.0]
    cp = cp_at(tmp_path, clock=lambda: now[0])
    for i in range(KEEP_CORRUPT + 4):
        (tmp_path / "checkpoint.json").write_text(f"bad {i}")
        now[0] += 0.4  # several per second too: the `-n` suffixes sort after their stamp
        with pytest.raises(CheckpointCorrupt):
            cp.read()
    kept = sorted(p.read_text() for p in tmp_path.glob("checkpoint.json.corrupt-*"))
    assert kept == [f"bad {i}" for i in range(4, KEEP_CORRUPT + 4)]


def test_sweep_removes_temp_files_of_writes_that_never_finished(tmp_path: Path) -> None:
    cp = cp_at(tmp_path)
    cp.update(lambda d: d.with_claim(CLAIM))
    stale = [tmp_path / ".checkpoint.json.tmp-1234-5", tmp_path / ".checkpoint.json.tmp-ab12cd34"]
    for f in stale:
        f.write_text("half a write")
    other = tmp_path / ".other.json.tmp-1"
    other.write_text("not ours")
    assert sorted(cp.sweep()) == sorted(stale)
    assert not any(f.exists() for f in stale) and other.exists()
    assert list(cp.read().data.claims) == ["uid-1"]


def test_the_daemon_start_sweeps_temp_files_and_survives_a_deeply_nested_checkpoint(tmp_path: Path) -> None:
    from bridge.dra.stores import open_checkpoint

    (tmp_path / ".checkpoint.json.tmp-99-1").write_text("{")
    (tmp_path / "checkpoint.json").write_text("[" * 100_000)
    opened = open_checkpoint(cp_at(tmp_path))
    assert opened.corrupt is not None and "nested too deeply" in opened.corrupt.reason
    assert not opened.exists and not (tmp_path / ".checkpoint.json.tmp-99-1").exists()


def test_a_held_lock_times_out_with_a_clear_error(tmp_path: Path) -> None:
    cp = cp_at(tmp_path, lock_timeout_s=0.2)
    with FileLock(tmp_path / "checkpoint.json.lock"):
        with pytest.raises(CheckpointError, match="could not lock .*checkpoint.json.lock within 0.2s"):
            cp.update(lambda d: d.with_claim(CLAIM))
    assert not cp.read().exists


def test_concurrent_processes_never_lose_an_update(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys
        from bridge.ledger import Checkpoint, PreparedClaim
        cp = Checkpoint({str(tmp_path)!r}, boot_id=lambda: {BOOT_1!r}, lock_timeout_s=60)
        for i in range(15):
            uid = f"p{{sys.argv[1]}}-{{i}}"
            cp.update(lambda d: d.with_claim(PreparedClaim(uid, "ns", uid, "PrepareCompleted")))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(n)]) for n in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    assert len(cp_at(tmp_path).read().data.claims) == 45


@pytest.mark.parametrize("step", ["written", "synced"])
def test_a_daemon_killed_mid_write_leaves_the_previous_state(tmp_path: Path, step: str) -> None:
    cp_at(tmp_path).update(lambda d: d.with_claim(CLAIM))
    script = textwrap.dedent(f"""
        import os
        import bridge.ledger.checkpoint as c
        from bridge.ledger import PreparedClaim
        real = c.atomic_write_bytes
        def die(at):
            if at == {step!r}:
                os._exit(137)
        c.atomic_write_bytes = lambda path, data, **kw: real(path, data, fault=die, **kw)
        cp = c.Checkpoint({str(tmp_path)!r}, boot_id=lambda: {BOOT_1!r})
        cp.update(lambda d: d.with_claim(PreparedClaim("uid-2", "ns", "b", "PrepareStarted")))
    """)
    assert subprocess.run([sys.executable, "-c", script]).returncode == 137
    assert list(cp_at(tmp_path).read().data.claims) == ["uid-1"]


def test_boot_id_is_read_from_the_kernel_file(tmp_path: Path) -> None:
    f = tmp_path / "boot_id"
    f.write_text(BOOT_2 + "\n")
    assert read_boot_id(f) == BOOT_2
    with pytest.raises(CheckpointError, match="cannot read the node boot ID"):
        read_boot_id(tmp_path / "missing")
    assert read_boot_id()  # this Linux machine has one


@pytest.mark.parametrize("durable", [True, False])
def test_a_state_directory_removed_while_running_is_created_again_by_the_next_update(tmp_path: Path,
                                                                                     durable: bool) -> None:
    state = tmp_path / "var" / "lib" / "dra-bridge"
    cp = cp_at(state)
    cp.update(lambda d: d.with_claim(CLAIM), durable=durable)
    for p in sorted(tmp_path.rglob("*"), reverse=True):  # someone removed the whole state directory
        p.unlink() if not p.is_dir() else p.rmdir()
    cp.update(lambda d: d.with_sides({DeviceID("GPU-aaa"): "dra"}, split="1"), durable=durable)
    result = cp_at(state).read()
    assert result.exists and result.data.sides == {DeviceID("GPU-aaa"): "dra"} and not result.data.claims


def test_the_cached_boot_id_reads_the_file_once_and_retries_a_failed_read(tmp_path: Path) -> None:
    from bridge.ledger.checkpoint import cached_boot_id

    path = tmp_path / "boot_id"
    boot_id = cached_boot_id(path)
    with pytest.raises(CheckpointError, match="boot ID"):
        boot_id()  # no file yet: an error, not cached
    path.write_text(BOOT_1 + "\n")
    assert boot_id() == BOOT_1
    path.write_text(BOOT_2 + "\n")  # cannot happen while the process runs; shows it is not read again
    assert boot_id() == BOOT_1
