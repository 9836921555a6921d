"""Read glibc's `/etc/ld.so.cache` (the dynamic loader's library index) of a driver root, bounded and defensively.

Why: NVIDIA's CDI generator falls back to the root's loader cache when the standard library directories hold no
`lib*.so.<version>` (NVIDIA/nvidia-container-toolkit `pkg/lookup/library.go` `NewLibraryLocator`: `First(symlink
locator over the search dirs, ldcache locator)`; `pkg/lookup/ldcache.go` `newLdcacheLocator`;
`internal/ldcache/ldcache.go`). Where the driver sits in a directory outside those, the cache is the only place
that names it: on an H200 machine with driver 580.159.04 `ldconfig -p` shows `libcuda.so.1 (libc6,x86-64) =>
/lib/libcuda.so.1` and `=> /usr/local/nvidia/lib64/libcuda.so.1` (a directory from `/etc/ld.so.conf.d`), and no
search dir holds a driver library.

The format, from glibc `sysdeps/generic/dl-cache.h` (all integers in the machine's byte order; little-endian on
x86-64 and aarch64, the only machines NVIDIA's ldcache reader serves; big-endian caches are refused):

* new format (what `ldconfig` writes by default since glibc 2.32, `-c new`): a 48-byte header `cache_file_new`
  at offset 0: magic `glibc-ld.so.cache` + version `1.1` (20 bytes), `nlibs` (u32), `len_strings` (u32),
  `flags` (u8: endianness, 0 unset, 1 invalid, 2 little, 3 big), 3 padding bytes, `extension_offset` (u32),
  3 unused u32; then `nlibs` entries `file_entry_new` of 24 bytes: `flags` (i32), `key`, `value` (u32 string
  offsets), `osversion` (u32), `hwcap` (u64); then the strings;
* compat format (`-c compat`, glibc 2.2 to 2.31's default): the old header `cache_file` (magic `ld.so-1.7.0`,
  11 bytes, padded to 12, then `nlibs` u32) and `nlibs` 12-byte `file_entry`s, then, aligned to 8 bytes, the new
  format as above. Only the new part is read, as NVIDIA and glibc >= 2.2 do; an old-format-only cache (`-c old`,
  libc5 era) is refused like NVIDIA refuses it;
* string offsets of new-format entries count from the start of the NEW header (glibc `elf/dl-cache.c`:
  `cache_data = (const char *) cache_new`); a string is NUL-terminated.

Entries taken (NVIDIA's `getEntries` and `List`, whose 64-bit list is what its ldcache locator uses): type ELF
(1) or ELF libc6 (3) in `flags & 0x00ff` (glibc `_dl_cache_check_flags`), and a 64-bit architecture in
`flags & 0xff00`: x86-64 (0x0300), AArch64 (0x0a00), ppc64le (0x0500) (glibc `sysdeps/generic/ldconfig.h`
`FLAG_*`). 32-bit entries (i386, x32, ARM hard-float) are skipped: their libraries cannot serve a 64-bit CUDA
process.

Bounds (a driver root is the host's or a driver container's filesystem; a corrupt, truncated or hostile cache must
cost nothing but "no cache"): the file is opened with O_NOFOLLOW|O_NONBLOCK (a FIFO never blocks, a last-moment
symlink is refused), must be a regular file of at most `MAX_CACHE_BYTES`, and is read whole (no mmap: a file
truncated under us cannot fault the process). Every count and offset is checked against the bytes actually read;
an entry whose strings lie outside the file, are not terminated within `MAX_PATH_BYTES`, or whose path is not
absolute is skipped and counted, as glibc skips entries failing `_dl_cache_verify_ptr`. `load_ld_cache` never
raises: every failure is an `LdCache` with `problem` set, for the caller to put in its one start-up explanation.
Resolving the cache's paths (inside the driver root, never through an absolute symlink out of it) is the caller's
job (`bridge.cdi.discovery`).
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

LD_SO_CACHE = "/etc/ld.so.cache"
MAX_CACHE_BYTES = 16 * 2**20  # real caches are 10 KiB to ~1 MiB (a few thousand libraries)
MAX_PATH_BYTES = 4096  # PATH_MAX

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"
_OLD_HEADER = struct.Struct("<12sI")  # magic (11 bytes + 1 padding), nlibs
_OLD_ENTRY_SIZE = 12
_NEW_HEADER = struct.Struct("<20sIIB3xI12x")  # magic+version, nlibs, len_strings, flags, extension_offset
_NEW_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion, hwcap
_NEW_ALIGN = 8  # __alignof__ (struct cache_file_new): its entries hold a uint64_t

ENDIAN_UNSET, ENDIAN_INVALID, ENDIAN_LITTLE, ENDIAN_BIG = 0, 1, 2, 3
FLAG_TYPE_MASK = 0x00FF
FLAG_ELF, FLAG_ELF_LIBC6 = 0x0001, 0x0003
FLAG_ARCH_MASK = 0xFF00
ARCH_64BIT = {0x0300: "x86-64", 0x0A00: "AArch64", 0x0500: "ppc64le"}


class LdCacheFormatError(ValueError):
    """The bytes are not a usable ld.so.cache (the message says why)."""


@dataclass(frozen=True)
class CacheEntry:
    """One library of the cache: its soname (`libcuda.so.1`), the path the loader opens for it
    (`/lib/libcuda.so.1`, a path inside the cache's root), and glibc's flags word."""

    soname: str
    path: str
    flags: int

    @property
    def arch(self) -> str | None:
        """The 64-bit architecture NVIDIA's reader accepts this entry for, or None (32-bit, or not ELF)."""
        if self.flags & FLAG_TYPE_MASK not in (FLAG_ELF, FLAG_ELF_LIBC6):
            return None
        return ARCH_64BIT.get(self.flags & FLAG_ARCH_MASK)


@dataclass(frozen=True)
class LdCache:
    """What was read from one cache file: `path` (as named in messages), the entries, how many malformed entries
    were skipped, and `problem` when there is no usable cache ("" when it was read)."""

    path: str
    entries: tuple[CacheEntry, ...] = ()
    skipped: int = 0
    problem: str = ""

    def library_paths(self) -> list[str]:
        """The paths of the 64-bit ELF entries, first occurrence kept (NVIDIA's `List`, 64-bit half)."""
        return list(dict.fromkeys(e.path for e in self.entries if e.arch is not None))

    def summary(self) -> str:
        """For messages: `"/etc/ld.so.cache: 1432 libraries"` or `"/etc/ld.so.cache: absent"`."""
        if self.problem:
            return f"{self.path}: {self.problem}"
        skipped = f", {self.skipped} malformed entries skipped" if self.skipped else ""
        return f"{self.path}: {len(self.library_paths())} 64-bit libraries{skipped}"


def _string(data: bytes, offset: int) -> str | None:
    """The NUL-terminated string at `offset`, or None when it starts or runs outside `data` or is empty."""
    if offset >= len(data):
        return None
    end = data.find(b"\0", offset, offset + MAX_PATH_BYTES + 1)
    if end <= offset:
        return None
    return os.fsdecode(data[offset:end])


def _new_format_start(data: bytes) -> int:
    """Offset of the new-format header: 0, or after the old-format table of a compat cache."""
    if data.startswith(NEW_MAGIC):
        return 0
    if data.startswith(NEW_MAGIC[:-3]):
        raise LdCacheFormatError(f"unknown format version {data[len(NEW_MAGIC) - 3:len(NEW_MAGIC)]!r}")
    if not data.startswith(OLD_MAGIC):
        raise LdCacheFormatError("not an ld.so.cache (no glibc-ld.so.cache1.1 or ld.so-1.7.0 magic)")
    if len(data) < _OLD_HEADER.size:
        raise LdCacheFormatError("truncated in the old-format header")
    old_nlibs: int = _OLD_HEADER.unpack_from(data)[1]
    end_of_old = _OLD_HEADER.size + old_nlibs * _OLD_ENTRY_SIZE
    if end_of_old > len(data):
        raise LdCacheFormatError(f"truncated: {old_nlibs} old-format entries announced")
    start = (end_of_old + _NEW_ALIGN - 1) // _NEW_ALIGN * _NEW_ALIGN
    if start + len(NEW_MAGIC) > len(data) or not data.startswith(NEW_MAGIC, start):
        raise LdCacheFormatError("old format only (ld.so-1.7.0 without a glibc-ld.so.cache1.1 part), which "
                                 "NVIDIA's reader does not use either; regenerate it with ldconfig")
    return start


def parse_ld_cache(data: bytes) -> tuple[list[CacheEntry], int]:
    """(entries, malformed entries skipped) of a cache's bytes. Raises `LdCacheFormatError` when the header is not
    usable; never reads outside `data`."""
    start = _new_format_start(data)
    if start + _NEW_HEADER.size > len(data):
        raise LdCacheFormatError("truncated in the header")
    _, nlibs, _, flags, _ = _NEW_HEADER.unpack_from(data, start)
    endian = flags & 0x3
    if endian == ENDIAN_INVALID:
        raise LdCacheFormatError("ldconfig marked it invalid (endianness flag 1)")
    if endian == ENDIAN_BIG:
        raise LdCacheFormatError("big-endian (written for another machine)")
    table = start + _NEW_HEADER.size
    if nlibs > (len(data) - table) // _NEW_ENTRY.size:
        raise LdCacheFormatError(f"truncated: {nlibs} entries announced, room for "
                                 f"{(len(data) - table) // _NEW_ENTRY.size}")
    entries: list[CacheEntry] = []
    skipped = 0
    for i in range(nlibs):
        entry_flags, key, value, _, _ = _NEW_ENTRY.unpack_from(data, table + i * _NEW_ENTRY.size)
        soname = _string(data, start + key)
        path = _string(data, start + value)
        if soname is None or path is None or not path.startswith("/"):
            skipped += 1
            continue
        entries.append(CacheEntry(soname, path, entry_flags))
    return entries, skipped


def _read_bounded(path: Path) -> bytes:
    """The whole regular file at `path`, at most MAX_CACHE_BYTES; OSError or LdCacheFormatError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LdCacheFormatError("not a regular file")
        if st.st_size > MAX_CACHE_BYTES:
            raise LdCacheFormatError(f"{st.st_size} bytes, over the {MAX_CACHE_BYTES}-byte limit")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_CACHE_BYTES:
            chunk = os.read(fd, min(1 << 20, MAX_CACHE_BYTES + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_CACHE_BYTES:
            raise LdCacheFormatError(f"grew over the {MAX_CACHE_BYTES}-byte limit while read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def load_ld_cache(file: Path | None, shown_as: str = LD_SO_CACHE) -> LdCache:
    """The cache at `file` (where this process reads it; None: the path did not resolve inside the root).
    `shown_as` names it in messages. Never raises."""
    if file is None:
        return LdCache(shown_as, problem="absent")
    try:
        data = _read_bounded(file)
        entries, skipped = parse_ld_cache(data)
    except LdCacheFormatError as err:
        return LdCache(shown_as, problem=f"unusable ({err})")
    except struct.error as err:  # not expected: every unpack is bounds-checked first
        return LdCache(shown_as, problem=f"unusable (corrupt: {err})")
    except OSError as err:
        if err.errno == errno.ENOENT:
            return LdCache(shown_as, problem="absent")
        if err.errno == errno.ELOOP:
            return LdCache(shown_as, problem="unusable (a symlink where the file should be)")
        return LdCache(shown_as, problem=f"unreadable ({err.strerror or err})")
    return LdCache(shown_as, tuple(entries), skipped)
