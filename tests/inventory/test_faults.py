"""Faults for simulated GPUs from a file (`bridge node --simulated-faults`): lines appended by another process are
played in order, a bad line is told and skipped without losing the ones after it, a half-written line waits for
its end, and a fault outlives a daemon restart (the file is read from its start)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from bridge.inventory.faults import FaultError, FaultsFile, append_fault, parse_fault
from bridge.inventory.model import HealthEvent
from bridge.inventory.simulated import SimulatedSource


def events(source: SimulatedSource, count: int, timeout: float = 5.0) -> list[HealthEvent]:
    """The next `count` health events (the source reads its faults file while it is asked for them)."""
    stop, out = threading.Event(), []
    timer = threading.Timer(timeout, stop.set)
    timer.start()
    try:
        for event in source.health_events(stop):
            out.append(event)
            if len(out) == count:
                break
    finally:
        timer.cancel()
    return out


def test_an_xid_by_uuid_and_a_health_flip_by_minor_number_are_played_in_order(tmp_path: Path) -> None:
    path = tmp_path / "faults.jsonl"
    source = SimulatedSource.from_spec("4xH100-80GB", "node-a", faults=path)
    gpus = source.devices()
    append_fault(path, gpus[1].uuid, xid=79)
    append_fault(path, 2, healthy=False, reason="fan failure")
    append_fault(path, 2, healthy=True)
    seen = events(source, 3)
    assert [(e.uuid, e.healthy, e.xid) for e in seen] == [(gpus[1].uuid, False, 79), (gpus[2].uuid, False, None),
                                                          (gpus[2].uuid, True, None)]
    assert "XID 79" in seen[0].reason and seen[1].reason == "fan failure"
    assert not source.is_healthy(gpus[1].uuid) and source.is_healthy(gpus[2].uuid)


def test_an_ignored_xid_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "faults.jsonl"
    source = SimulatedSource.from_spec("2xH100-80GB", "node-a", faults=path)
    append_fault(path, 0, xid=13)  # in NVIDIA's ignore list: logged only
    append_fault(path, 1, xid=48)
    assert [(e.uuid, e.xid) for e in events(source, 1)] == [(source.devices()[1].uuid, 48)]
    assert source.is_healthy(source.devices()[0].uuid)


def test_a_bad_line_is_told_with_its_number_and_skipped_and_the_next_lines_still_apply(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "faults.jsonl"
    source = SimulatedSource.from_spec("2xH100-80GB", "node-a", faults=path)
    path.write_text('{"gpu": 0, "xid": 79\n'  # not JSON
                    '{"gpu": 7, "xid": 79}\n'  # no such GPU
                    '{"gpu": 0}\n'  # neither xid nor healthy
                    '\n'
                    '{"gpu": 1, "healthy": false}\n')
    with caplog.at_level(logging.WARNING):
        (event,) = events(source, 1)
    assert event.uuid == source.devices()[1].uuid and not event.healthy
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("line 1: not JSON" in w for w in warnings), warnings
    assert any("line 2: no simulated GPU with minor number 7 (0 to 1)" in w for w in warnings), warnings
    assert any("line 3: expected exactly one of 'xid'" in w for w in warnings), warnings


def test_a_half_written_line_is_read_once_its_end_is_there(tmp_path: Path) -> None:
    path = tmp_path / "faults.jsonl"
    reader = FaultsFile(path)
    assert reader.read() == []  # no file yet: no fault
    path.write_text('{"gpu": 0, ')
    assert reader.read() == []
    with path.open("a") as f:
        f.write('"xid": 79}\n{"gpu": 1, "healthy": true}\n')
    assert [(f.line, f.gpu, f.xid, f.healthy) for f in reader.read()] == [(1, 0, 79, None), (2, 1, None, True)]
    assert reader.read() == []


def test_a_restarted_daemon_plays_the_file_from_its_start_and_a_replaced_file_is_read_anew(tmp_path: Path) -> None:
    path = tmp_path / "faults.jsonl"
    append_fault(path, 0, xid=79)
    first = FaultsFile(path)
    assert len(first.read()) == 1
    assert len(FaultsFile(path).read()) == 1  # a new reader (a restarted daemon) sees the fault again
    replacement = tmp_path / "new.jsonl"
    append_fault(replacement, 1, healthy=False)
    replacement.replace(path)
    assert [(f.line, f.gpu) for f in first.read()] == [(1, 1)]


@pytest.mark.parametrize(("text", "message"), [
    ('[1]', "expected an object"),
    ('{"gpu": true, "xid": 79}', "'gpu' must be a GPU UUID or a minor number"),
    ('{"gpu": 0, "xid": 79, "healthy": false}', "exactly one of"),
    ('{"gpu": 0, "xid": -1}', "'xid' must be a positive number"),
    ('{"gpu": 0, "healthy": "no"}', "'healthy' must be true or false"),
])
def test_malformed_faults_are_refused_with_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(FaultError, match=message):
        parse_fault(text, 1)


def test_append_refuses_a_fault_the_daemon_would_skip(tmp_path: Path) -> None:
    with pytest.raises(FaultError):
        append_fault(tmp_path / "f.jsonl", 0)
    assert not (tmp_path / "f.jsonl").exists()
