"""The bounded reader (`bridge.atomicfile.read_regular`) and its buffer-reusing form (`read_regular_into`, the
snapshot loader's): the same bytes and the same refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bridge import atomicfile
from bridge.atomicfile import ReadBuffer, UnreadableFile, read_regular, read_regular_into


def test_successive_files_of_every_size_read_into_one_buffer(tmp_path: Path) -> None:
    buffer = ReadBuffer()
    for i, size in enumerate([0, 5, 3 << 20, 7, (3 << 20) + 1, 1, 0, 100]):
        f = tmp_path / f"f{i}"
        f.write_bytes(bytes((i * 7 + j) % 251 for j in range(size)))
        view = read_regular_into(f, 8 << 20, buffer)
        assert view is not None and view.tobytes() == f.read_bytes() == read_regular(f, 8 << 20)
        view.release()
    assert read_regular_into(tmp_path / "missing", 10, buffer) is None


def test_the_buffer_is_all_ascii_only_when_the_file_is(tmp_path: Path) -> None:
    buffer = ReadBuffer()
    (tmp_path / "big").write_bytes(b"a" * 1000)
    (tmp_path / "small").write_bytes(b"\xc3\xa9")
    for name, ascii_only in (("big", True), ("small", False)):
        view = read_regular_into(tmp_path / name, 10_000, buffer)
        assert view is not None and buffer.data.isascii() is ascii_only
        view.release()


@pytest.mark.parametrize("grown", [10, 3 << 20])
def test_a_file_that_grows_while_read_is_read_to_its_end_or_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   grown: int) -> None:
    """The size fstat gave is where the first read stops; past it the reader goes on to the end, within the limit."""
    f = tmp_path / "growing"
    f.write_bytes(b"x" * (100 + grown))
    real_fstat = os.fstat

    def stale_fstat(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid, 100, st.st_atime,
                               st.st_mtime, st.st_ctime))

    monkeypatch.setattr(atomicfile.os, "fstat", stale_fstat)
    buffer = ReadBuffer()
    view = read_regular_into(f, 8 << 20, buffer)
    assert view is not None and view.tobytes() == f.read_bytes() == read_regular(f, 8 << 20)
    view.release()
    for read in (lambda: read_regular(f, 100 + grown - 1), lambda: read_regular_into(f, 100 + grown - 1, buffer)):
        with pytest.raises(UnreadableFile) as err:
            read()
        assert err.value.kind == "too-large" and err.value.size is None


def test_what_is_not_a_regular_file_is_refused_alike(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "link").symlink_to(tmp_path / "target")
    (tmp_path / "target").write_bytes(b"12345")
    (tmp_path / "large").write_bytes(b"123456")
    buffer = ReadBuffer()
    for path, kind in ((fifo, "not-regular"), (tmp_path, "not-regular"), (tmp_path / "link", "symlink"),
                       (tmp_path / "large", "too-large")):
        for read in (lambda: read_regular(path, 5), lambda: read_regular_into(path, 5, buffer)):
            with pytest.raises(UnreadableFile) as err:
                read()
            assert err.value.kind == kind
    view = read_regular_into(tmp_path / "link", 5, buffer, follow_links=True)
    assert view is not None and view.tobytes() == b"12345"
