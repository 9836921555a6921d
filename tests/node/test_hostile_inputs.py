"""Inputs that once stopped the node daemon or `bridge node status` (issue 27): the kubelet's checkpoint replaced by
something that is not a checkpoint (item 3)."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from bridge.ledger import Side
from bridge.node import kubeletcheckpoint
from tests.node.test_holders import kubelet, listed, pod, sources  # noqa: F401 - the kubelet fixture

# ---- item 3: the kubelet checkpoint is read bounded ------------------------------------------------------------


def checkpoint_path(root: Path) -> Path:
    path = root / "device-plugins" / kubeletcheckpoint.CHECKPOINT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def read_within(path: Path, seconds: float = 10.0) -> BaseException | None:
    """`kubeletcheckpoint.read` in a thread: the error it raised, or TimeoutError when it did not return (a blocked
    open, an endless read)."""
    out: list[BaseException | None] = []

    def run() -> None:
        try:
            kubeletcheckpoint.read(path)
            out.append(None)
        except BaseException as err:  # noqa: BLE001 - handed to the test
            out.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return out[0] if out else TimeoutError(f"kubeletcheckpoint.read({path}) did not return within {seconds} s")


@pytest.mark.parametrize(("make", "expected"), [
    (lambda p: p.symlink_to("/dev/zero"), "a symbolic link, not a regular file"),  # was 2.1 GiB of memory
    (lambda p: os.mkfifo(p), "a FIFO, not a regular file"),  # was an open() blocked for ever
    (lambda p: (p.touch(), os.truncate(p, 1 << 30)), "1073741824 bytes, over the 8388608-byte limit"),  # 1.26 GiB
    (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "nested deeper than 64 levels"),  # RecursionError
])
def test_a_kubelet_checkpoint_that_is_not_a_regular_bounded_file_is_refused_unread(
        short_tmp: Path, make: Any, expected: str) -> None:
    path = checkpoint_path(short_tmp)
    make(path)
    err = read_within(path)
    assert isinstance(err, kubeletcheckpoint.KubeletCheckpointError), err
    assert expected in str(err)


def test_an_unusable_kubelet_checkpoint_makes_legacy_holders_unknown_and_is_logged_once_per_change(
        kubelet: Any, caplog: pytest.LogCaptureFixture) -> None:
    root, _ = kubelet
    path = checkpoint_path(root)
    path.symlink_to("/dev/zero")
    src = sources(root, listed())
    with caplog.at_level(logging.INFO, logger="bridge.node.holders"):
        for _ in range(3):
            assert "a symbolic link" in src.legacy_facts().unknown[Side.LEGACY]
        path.unlink()
        os.mkfifo(path)
        assert "a FIFO" in src.legacy_facts().unknown[Side.LEGACY]
        path.unlink()
        path.write_text('{"Data": {"PodDeviceEntries": []}}')
        assert src.legacy_facts().known(Side.LEGACY)
    said = [r.getMessage() for r in caplog.records if "device-manager checkpoint" in r.getMessage()]
    assert len(said) == 3 and "a symbolic link" in said[0] and "a FIFO" in said[1] and "readable again" in said[2]

