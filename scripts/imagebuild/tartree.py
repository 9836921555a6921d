"""Deterministic tar archives: the same tree gives the same bytes on any machine, whenever it is written.

Entries are sorted by path, owned by 0:0 with no user or group names, stamped with one mtime (the commit time), with
permissions normalised to 0755 (directories, and files with any execute bit) or 0644 (the build host's umask does
not leak in), in POSIX pax format (long paths) without access/change times. Used for the app layer and for the OCI
archive that wraps the image layout.
"""

from __future__ import annotations

import os
import stat
import tarfile
from collections.abc import Iterable
from pathlib import Path


def walk(root: Path) -> list[str]:
    """Every path under `root` (relative, POSIX), sorted; symlinks are not followed."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = Path(dirpath).relative_to(root)
        for name in dirnames + filenames:
            out.append((rel / name).as_posix())
    return sorted(out)


def _info(root: Path, rel: str, epoch: int) -> tarfile.TarInfo:
    path = root / rel
    st = path.lstat()
    info = tarfile.TarInfo(rel)
    info.mtime = epoch
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if stat.S_ISDIR(st.st_mode):
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, os.readlink(path)
    elif stat.S_ISREG(st.st_mode):
        info.type, info.size = tarfile.REGTYPE, st.st_size
        info.mode = 0o755 if st.st_mode & 0o111 else 0o644
    else:
        raise ValueError(f"{path}: not a file, directory or symlink")
    return info


def write_tar(root: Path, members: Iterable[str], out: Path, epoch: int, prefix: str = "") -> None:
    """Write `members` (paths relative to `root`) into `out`, named `prefix + path`, in sorted order."""
    with out.open("wb") as f, tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted(members):
            info = _info(root, rel, epoch)
            info.name = prefix + rel
            if info.type == tarfile.REGTYPE:
                with (root / rel).open("rb") as data:
                    tar.addfile(info, data)
            else:
                tar.addfile(info)
