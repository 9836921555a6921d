"""CDI spec files: atomic replacement, crash safety, listing and removal of only our own files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bridge.cdi import CdiSpecWriter, CdiWriteError, build_claim_spec, claim_kind
from bridge.inventory import devices_from_spec

GPUS = devices_from_spec("4xA100-80GB", "node-1")
KIND = claim_kind()
UID_A = "c0ffee00-0000-4000-8000-000000000001"
UID_B = "c0ffee00-0000-4000-8000-000000000002"


def _doc(uid: str, *idx: int) -> dict:
    return dict(build_claim_spec(uid, [GPUS[i] for i in idx]).document)


def test_written_spec_is_complete_json_with_our_prefix(tmp_path: Path) -> None:
    writer = CdiSpecWriter(tmp_path / "cdi", KIND)
    path = writer.write(UID_A, _doc(UID_A, 1))
    assert path.name == f"k8s.gpu.dra-bridge.io-claim_{UID_A}.json"
    assert json.loads(path.read_text()) == _doc(UID_A, 1)
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert writer.read(UID_A) == _doc(UID_A, 1)
    assert writer.read(UID_B) is None


def test_rewriting_replaces_the_whole_file(tmp_path: Path) -> None:
    writer = CdiSpecWriter(tmp_path, KIND)
    writer.write(UID_A, _doc(UID_A, 0, 1, 2, 3))
    writer.write(UID_A, _doc(UID_A, 2))
    assert writer.read(UID_A) == _doc(UID_A, 2)
    assert [p.name for p in tmp_path.iterdir()] == [f"k8s.gpu.dra-bridge.io-claim_{UID_A}.json"]


@pytest.mark.parametrize("step", ["written", "synced"])
def test_a_failure_before_the_rename_keeps_the_old_file_and_leaves_no_temp(tmp_path: Path, step: str) -> None:
    CdiSpecWriter(tmp_path, KIND).write(UID_A, _doc(UID_A, 0))

    def crash(at: str) -> None:
        if at == step:
            raise OSError(5, "simulated I/O error")

    with pytest.raises(CdiWriteError, match="cannot write CDI spec"):
        CdiSpecWriter(tmp_path, KIND, fault=crash).write(UID_A, _doc(UID_A, 3))
    assert CdiSpecWriter(tmp_path, KIND).read(UID_A) == _doc(UID_A, 0)
    assert len(list(tmp_path.iterdir())) == 1


@pytest.mark.parametrize("durable", [True, False])
@pytest.mark.parametrize("step", ["written", "synced", "renamed"])
def test_a_process_killed_mid_write_leaves_the_old_or_the_new_file_never_a_partial_one(
        tmp_path: Path, step: str, durable: bool) -> None:
    writer = CdiSpecWriter(tmp_path, KIND)
    writer.write(UID_A, _doc(UID_A, 0))
    script = textwrap.dedent(f"""
        import os, sys
        from bridge.cdi import CdiSpecWriter, build_claim_spec, claim_kind
        from bridge.inventory import devices_from_spec
        gpus = devices_from_spec("4xA100-80GB", "node-1")
        def die(at):
            if at == {step!r}:
                os._exit(137)
        doc = build_claim_spec({UID_A!r}, [gpus[3]]).document
        CdiSpecWriter({str(tmp_path)!r}, claim_kind(), fault=die, durable={durable!r}).write({UID_A!r}, doc)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 137, proc.stderr
    content = writer.read(UID_A)
    assert content in (_doc(UID_A, 0), _doc(UID_A, 3))
    if step == "renamed":
        assert content == _doc(UID_A, 3)
    assert list(writer.list()) == [UID_A]
    leftovers = writer.sweep_temp_files()
    assert len(leftovers) == (0 if step == "renamed" else 1)
    assert len(list(tmp_path.iterdir())) == 1


@pytest.mark.parametrize("durable", [True, False])
def test_only_a_durable_writer_fsyncs_its_writes_and_removals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              durable: bool) -> None:
    """Durable: the file and the directory after a write, the directory after a removal. Not durable (per-claim
    specs, which a reboot voids): the same complete files through a rename, and no fsync at all."""
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    writer = CdiSpecWriter(tmp_path, KIND, durable=durable)
    writer.write(UID_A, _doc(UID_A, 1))
    assert writer.read(UID_A) == _doc(UID_A, 1)
    assert [p.name for p in tmp_path.iterdir()] == [f"k8s.gpu.dra-bridge.io-claim_{UID_A}.json"]
    assert len(synced) == (2 if durable else 0)
    assert writer.remove(UID_A) and writer.read(UID_A) is None
    assert len(synced) == (3 if durable else 0)


def test_list_and_remove_touch_only_our_files(tmp_path: Path) -> None:
    other = tmp_path / "nvidia.yaml"
    other.write_text("cdiVersion: 0.5.0\n")
    dp_file = tmp_path / "nvidia.com-gpu_node.json"
    dp_file.write_text("{}")
    writer = CdiSpecWriter(tmp_path, KIND)
    writer.write(UID_B, _doc(UID_B, 1))
    writer.write(UID_A, _doc(UID_A, 0))
    assert list(writer.list()) == [UID_A, UID_B]
    assert writer.remove(UID_A) is True
    assert writer.remove(UID_A) is False  # idempotent
    assert list(writer.list()) == [UID_B]
    assert other.exists() and dp_file.exists()


def test_listing_a_missing_directory_is_empty(tmp_path: Path) -> None:
    writer = CdiSpecWriter(tmp_path / "absent", KIND)
    assert writer.list() == {}
    assert writer.sweep_temp_files() == []
    assert writer.remove(UID_A) is False


@pytest.mark.parametrize("key", ["", "../etc/passwd", "a/b", ".hidden", "x" * 300])
def test_unsafe_file_keys_are_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(CdiWriteError, match="invalid CDI spec file key"):
        CdiSpecWriter(tmp_path, KIND).write(key, _doc(UID_A, 0))


def test_a_spec_of_another_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CdiWriteError, match="does not match"):
        CdiSpecWriter(tmp_path, "nvidia.com/gpu").write(UID_A, _doc(UID_A, 0))


def test_an_unwritable_root_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "cdi"
    blocker.write_text("not a directory")
    with pytest.raises(CdiWriteError) as err:
        CdiSpecWriter(blocker, KIND).write(UID_A, _doc(UID_A, 0))
    assert str(blocker) in str(err.value)


def test_a_corrupt_spec_file_is_reported_on_read(tmp_path: Path) -> None:
    writer = CdiSpecWriter(tmp_path, KIND)
    writer.path_for(UID_A).write_text("{trunc")
    with pytest.raises(CdiWriteError, match="cannot read CDI spec"):
        writer.read(UID_A)
    assert os.path.exists(writer.path_for(UID_A))


def test_a_root_removed_while_running_is_created_again_by_the_next_write(tmp_path: Path) -> None:
    root = tmp_path / "run" / "cdi"  # /var/run/cdi on a node: tmpfs, empty (or absent) after a reboot
    writer = CdiSpecWriter(root, KIND)
    writer.write(UID_A, _doc(UID_A, 1))
    writer.remove(UID_A)
    root.rmdir()
    root.parent.rmdir()
    path = writer.write(UID_B, _doc(UID_B, 2))
    assert path.parent == root and json.loads(path.read_text()) == _doc(UID_B, 2)
