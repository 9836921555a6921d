"""Driver roots whose libraries only the loader cache names, with caches written by the real `ldconfig`.

`ldconfig` indexes only ELF shared objects that carry a SONAME, so the libraries are tiny real ones linked here
with `gcc -shared -nostdlib -Wl,-soname,<soname>` (one empty object compiled once, linked per library: ~20 ms
each). The cache is then made as a host's package scripts make it, inside the fake root:

    ldconfig -r <root> -C /etc/ld.so.cache -f /etc/ld.so.conf [-c new|compat|old]

(`-r` makes `-C` and `-f` paths relative to the root; no chroot, so no privilege is needed). Without -X it also
creates the soname links (`libcuda.so.1 -> libcuda.so.<version>`), as on a real host. Tests that need these skip
with the reason when gcc or ldconfig is missing.

`make_cache_only_driver(root, version)`: driver libraries in one directory that none of NVIDIA's standard search
dirs (`/usr/lib64`, `/usr/lib/x86_64-linux-gnu`, …) is, `/lib` by default. `make_h200_layout(root)`: the H200
machine of the real-hardware finding (driver 580.159.04), as read there: `/lib -> usr/lib`, the libraries in
`/usr/local/nvidia/lib64` (listed in `/etc/ld.so.conf.d`), absolute links `/usr/lib/libcuda.so.1 ->
/usr/local/nvidia/lib64/libcuda.so.580.159.04`, so that `ldconfig -p` lists each soname twice:
`libcuda.so.1 (libc6,x86-64) => /lib/libcuda.so.1` and `=> /usr/local/nvidia/lib64/libcuda.so.1`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

H200_VERSION = "580.159.04"
# The H200 machine's libraries with their sonames (a subset of 580's; enough for the discovery rules).
CACHE_ONLY_LIBRARIES = {"libcuda.so": "libcuda.so.1", "libnvidia-ml.so": "libnvidia-ml.so.1",
                        "libcudadebugger.so": "libcudadebugger.so.1",
                        "libnvidia-ptxjitcompiler.so": "libnvidia-ptxjitcompiler.so.1"}


def _tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if path is None:
        pytest.skip(f"{name} is not installed: the ld.so.cache tests build real libraries and caches with it")
    return path


def elf_library(path: Path, soname: str) -> Path:
    """A real (empty) ELF shared object at `path` whose SONAME is `soname`."""
    gcc = _tool("gcc")
    path.parent.mkdir(parents=True, exist_ok=True)
    obj = path.parent / ".empty.o"
    if not obj.exists():
        src = path.parent / ".empty.c"
        src.write_text("/* nothing: ldconfig only needs an ELF shared object with a SONAME */\n")
        subprocess.run([gcc, "-c", str(src), "-o", str(obj)], check=True, capture_output=True)
        src.unlink()
    subprocess.run([gcc, "-shared", "-nostdlib", f"-Wl,-soname,{soname}", str(obj), "-o", str(path)],
                   check=True, capture_output=True)
    return path


def tidy(directory: Path) -> None:
    """Remove the build leftovers of `elf_library` in `directory`."""
    (directory / ".empty.o").unlink(missing_ok=True)


def run_ldconfig(root: Path, conf_dirs: Iterable[str] = (), *, fmt: str = "new",
                 cache: str = "/etc/ld.so.cache") -> Path:
    """Write `root`'s loader cache with the real ldconfig; `conf_dirs` go to /etc/ld.so.conf (the trusted dirs
    /lib and /usr/lib, and the multiarch ones, are always scanned)."""
    ldconfig = _tool("ldconfig")
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc/ld.so.conf").write_text("".join(f"{d}\n" for d in conf_dirs))
    result = subprocess.run([ldconfig, "-r", str(root), "-C", cache, "-f", "/etc/ld.so.conf", "-c", fmt],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"ldconfig -r failed here (rc {result.returncode}): {result.stderr.strip()}")
    return root / cache.lstrip("/")


def ldconfig_listing(cache: Path) -> set[tuple[str, str, str]]:
    """(soname, arch as ldconfig -p names it, path) for every line of `ldconfig -p -C cache`."""
    out = subprocess.run([_tool("ldconfig"), "-p", "-C", str(cache)], capture_output=True, text=True,
                         check=True).stdout
    listed = set()
    for line in out.splitlines():
        m = re.fullmatch(r"\s+(\S+) \(([^)]*)\) => (\S+)", line)
        if m:
            kinds = m.group(2).split(",")
            listed.add((m.group(1), kinds[1] if len(kinds) > 1 else "", m.group(3)))
    return listed


def make_cache_only_driver(root: Path, version: str = H200_VERSION, libdir: str = "lib",
                           libraries: dict[str, str] | None = None, conf_dirs: Iterable[str] = ()) -> Path:
    """Driver libraries of `version` in `root/libdir` only, the loader cache naming them (soname links made by
    ldconfig). Returns the cache file."""
    lib = root / libdir
    for stem, soname in (libraries or CACHE_ONLY_LIBRARIES).items():
        elf_library(lib / f"{stem}.{version}", soname)
    tidy(lib)
    return run_ldconfig(root, conf_dirs)


def make_h200_layout(root: Path, version: str = H200_VERSION) -> Path:
    """The real H200 machine's layout (module docstring). Returns the cache file."""
    (root / "usr/lib").mkdir(parents=True, exist_ok=True)
    (root / "lib").symlink_to("usr/lib")
    for stem, soname in CACHE_ONLY_LIBRARIES.items():
        (root / "usr/lib" / soname).symlink_to(f"/usr/local/nvidia/lib64/{stem}.{version}")
    return make_cache_only_driver(root, version, libdir="usr/local/nvidia/lib64",
                                  conf_dirs=["/usr/local/nvidia/lib64"])
