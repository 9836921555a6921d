"""The ld.so.cache reader against caches the real ldconfig wrote (tests/fakeldcache.py), and against broken,
truncated, huge and hostile files, none of which may raise, block or be read past its bounds."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from bridge.cdi.discovery import read_ld_cache
from bridge.cdi.driver import Root
from bridge.cdi.ldcache import MAX_CACHE_BYTES, LdCache, load_ld_cache, parse_ld_cache
from tests.fakeldcache import elf_library, ldconfig_listing, run_ldconfig, tidy

LIBS = {"lib/libcuda.so.580.159.04": "libcuda.so.1", "usr/lib/libz.so.1.3": "libz.so.1",
        "opt/vendor/lib/libvendor.so.2.0": "libvendor.so.2", "opt/vendor/lib/libother.so.7.1.1": "libother.so.7"}


def ldconfig_root(root: Path, fmt: str = "new") -> Path:
    """Libraries in a trusted dir (/lib, /usr/lib) and in a dir of ld.so.conf; the cache ldconfig writes."""
    for rel, soname in LIBS.items():
        elf_library(root / rel, soname)
    for rel in {str(Path(r).parent) for r in LIBS}:
        tidy(root / rel)
    return run_ldconfig(root, ["/opt/vendor/lib"], fmt=fmt)


def as_listing(cache: LdCache) -> set[tuple[str, str, str]]:
    return {(e.soname, e.arch or "", e.path) for e in cache.entries}


@pytest.mark.parametrize("fmt", ["new", "compat"])
def test_every_entry_ldconfig_lists_is_read_with_its_path_and_architecture(tmp_path: Path, fmt: str) -> None:
    """`compat` is the old table followed by the new one (glibc 2.2 to 2.31's default); `new` is today's."""
    cache_file = ldconfig_root(tmp_path, fmt)
    cache = load_ld_cache(cache_file)
    assert cache.problem == "" and cache.skipped == 0
    assert as_listing(cache) == ldconfig_listing(cache_file)  # what `ldconfig -p` prints, entry for entry
    assert "/lib/libcuda.so.1" in cache.library_paths() and "/opt/vendor/lib/libvendor.so.2" in cache.library_paths()
    assert cache.summary() == f"/etc/ld.so.cache: {len(LIBS)} 64-bit libraries"


def test_an_old_format_only_cache_is_refused_as_nvidia_refuses_it(tmp_path: Path) -> None:
    cache = load_ld_cache(ldconfig_root(tmp_path, "old"))
    assert cache.entries == ()
    assert cache.problem.startswith("unusable (old format only (ld.so-1.7.0 without a glibc-ld.so.cache1.1 part)")


def _entry_offset(data: bytes, path: str) -> int:
    """File offset of the new-format entry whose value is `path` (a new-format cache: header at 0)."""
    nlibs = struct.unpack_from("<I", data, 20)[0]
    for i in range(nlibs):
        at = 48 + 24 * i
        value = struct.unpack_from("<I", data, at + 8)[0]
        if data[value:data.index(b"\0", value)] == path.encode():
            return at
    raise AssertionError(f"{path} not in the cache")


def test_32_bit_entries_are_read_but_are_not_libraries_for_a_64_bit_cuda_process(tmp_path: Path) -> None:
    data = bytearray(ldconfig_root(tmp_path).read_bytes())
    for path, flags in (("/lib/libcuda.so.1", 0x0003), ("/usr/lib/libz.so.1", 0x0803)):  # i386 libc6, x32 libc6
        struct.pack_into("<i", data, _entry_offset(bytes(data), path), flags)
    entries, skipped = parse_ld_cache(bytes(data))
    assert skipped == 0 and len(entries) == len(LIBS)
    cache = LdCache("/etc/ld.so.cache", tuple(entries))
    assert sorted(cache.library_paths()) == ["/opt/vendor/lib/libother.so.7", "/opt/vendor/lib/libvendor.so.2"]


def test_an_entry_whose_strings_lie_outside_the_file_is_skipped_and_counted(tmp_path: Path) -> None:
    data = bytearray(ldconfig_root(tmp_path).read_bytes())
    libz, libcuda = (_entry_offset(bytes(data), p) for p in ("/usr/lib/libz.so.1", "/lib/libcuda.so.1"))
    struct.pack_into("<I", data, libz + 8, len(data) + 100)  # value (the path) past the end
    struct.pack_into("<I", data, libcuda + 4, 0xFFFFFFFF)  # key (the soname) far past it
    entries, skipped = parse_ld_cache(bytes(data))
    assert skipped == 2 and {e.soname for e in entries} == {"libvendor.so.2", "libother.so.7"}
    (tmp_path / "bad.cache").write_bytes(bytes(data))
    assert load_ld_cache(tmp_path / "bad.cache").summary() == \
        "/etc/ld.so.cache: 2 64-bit libraries, 2 malformed entries skipped"


@pytest.mark.parametrize("fmt", ["new", "compat"])
def test_every_truncation_and_random_corruption_means_no_cache_or_fewer_entries_never_an_exception(
        tmp_path: Path, fmt: str) -> None:
    real = ldconfig_root(tmp_path, fmt).read_bytes()
    whole = set(load_ld_cache(tmp_path / "etc/ld.so.cache").entries)
    broken = tmp_path / "broken.cache"
    table_end = real.index(b"glibc-ld.so.cache1.1") + 48 + 24 * len(whole)
    for size in range(len(real)):
        broken.write_bytes(real[:size])
        cache = load_ld_cache(broken)
        if size < table_end:  # cut in a header or the entry table: no cache
            assert cache.problem.startswith("unusable (") and cache.entries == (), size
        else:  # cut in the strings: the entries whose strings are whole, nothing invented
            assert set(cache.entries) <= whole, size
    rng = random.Random(5)
    for _ in range(300):
        data = bytearray(real)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        broken.write_bytes(bytes(data))
        cache = load_ld_cache(broken)  # must not raise, whatever the bytes
        assert all(e.path.startswith("/") for e in cache.entries)


@pytest.mark.parametrize(("patch", "reason"), [
    (lambda d: b"GARBAGE!" + d[8:], "not an ld.so.cache (no glibc-ld.so.cache1.1 or ld.so-1.7.0 magic)"),
    (lambda d: d[:17] + b"9.9" + d[20:], "unknown format version b'9.9'"),
    (lambda d: d[:20] + struct.pack("<I", 0xFFFFFFFF) + d[24:], "truncated: 4294967295 entries announced"),
    (lambda d: d[:28] + bytes([3]) + d[29:], "big-endian (written for another machine)"),
    (lambda d: d[:28] + bytes([1]) + d[29:], "ldconfig marked it invalid (endianness flag 1)"),
    (lambda d: b"ld.so-1.7.0\0" + struct.pack("<I", 0x7FFFFFFF) + d, "truncated: 2147483647 old-format entries"),
])
def test_a_damaged_header_is_refused_with_the_reason(tmp_path: Path, patch, reason: str) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.cache"
    bad.write_bytes(patch(ldconfig_root(tmp_path).read_bytes()))
    cache = load_ld_cache(bad)
    assert cache.entries == () and cache.problem.startswith(f"unusable ({reason}"), cache.problem


def test_a_huge_file_is_refused_without_being_read(tmp_path: Path) -> None:
    huge = tmp_path / "huge.cache"
    with open(huge, "wb") as f:
        f.write(ldconfig_root(tmp_path).read_bytes())
        f.truncate(4 * 2**30)  # sparse: 4 GiB announced, nothing read
    assert load_ld_cache(huge).problem == f"unusable ({4 * 2**30} bytes, over the {MAX_CACHE_BYTES}-byte limit)"


def test_a_fifo_is_refused_at_once_instead_of_waiting_for_a_writer(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    os.mkfifo(tmp_path / "etc/ld.so.cache")
    assert read_ld_cache(Root("/", tmp_path)).problem == "unusable (not a regular file)"  # O_NONBLOCK: no hang


def test_a_device_is_not_a_cache(tmp_path: Path) -> None:
    assert load_ld_cache(Path("/dev/zero")).problem == "unusable (not a regular file)"
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/ld.so.cache").symlink_to("/dev/zero")  # the ROOT's /dev/zero, which this fake root lacks
    assert read_ld_cache(Root("/", tmp_path)).problem == "absent"


def test_a_link_in_the_root_is_followed_inside_it_and_never_out_of_it(tmp_path: Path) -> None:
    outside = ldconfig_root(tmp_path / "elsewhere")  # a valid cache, outside the driver root
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/ld.so.cache").symlink_to(outside)  # absolute: means <root>/<that path>, which does not exist
    assert read_ld_cache(Root("/run/nvidia/driver", root)) == LdCache("/run/nvidia/driver/etc/ld.so.cache",
                                                                      problem="absent")
    (root / "etc/ld.so.cache").unlink()
    (root / "var/cache/ldconfig").mkdir(parents=True)
    (root / "var/cache/ldconfig/ld.so.cache").write_bytes(outside.read_bytes())
    (root / "etc/ld.so.cache").symlink_to("/var/cache/ldconfig/ld.so.cache")  # a stateless-/etc layout
    assert len(read_ld_cache(Root("/run/nvidia/driver", root)).entries) == len(LIBS)
    assert load_ld_cache(root / "etc/ld.so.cache").problem == "unusable (a symlink where the file should be)"


def test_a_missing_or_unreadable_cache_is_no_cache(tmp_path: Path) -> None:
    assert read_ld_cache(Root("/", tmp_path)).problem == "absent"
    assert load_ld_cache(None).summary() == "/etc/ld.so.cache: absent"
    (tmp_path / "dir.cache").mkdir()
    assert load_ld_cache(tmp_path / "dir.cache").problem == "unusable (not a regular file)"
