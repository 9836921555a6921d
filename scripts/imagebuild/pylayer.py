"""The image's Python layer: our wheel and the locked wheels installed into the base root filesystem.

* The build tools (pip, setuptools, installer) come from `image/build-requirements.lock`, installed by hash into a
  virtualenv cached under `<cache>/buildenv-<key>`; nothing of the machine's own Python packages takes part.
* Our wheel is built from the repository's tracked files (their working-tree content, so an uncommitted change is
  in the image and the revision label says `-dirty`), without build isolation (the pinned setuptools builds it).
* The locked wheels are the lock's files, checked by sha256; they are downloaded once into `<cache>/wheels` and a
  warm build needs no network.
* `pip` itself never runs against the image: `install_wheels.py` (pypa's installer) writes the wheels into the root
  with the image's interpreter in script shebangs, without caches, without compiling. The image's own Python then
  byte-compiles them with `--invalidation-mode unchecked-hash` (no source mtime in a .pyc; PYTHONHASHSEED=0 so set
  constants are marshalled in one order), in a chroot, and runs `bridge --help` there as root and as the non-root
  user: a broken interpreter, a missing shared library or a bad shebang fails the build, not the cluster.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from . import lockfile, recipe


class PyLayerError(Exception):
    pass


def _run(cmd: list[str], what: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise PyLayerError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd[:6])} ...\n"
                           f"{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
    return proc


def buildenv(cache: Path) -> Path:
    """The Python of a virtualenv holding exactly the build lock (made once per lock and host Python)."""
    lock_text = recipe.BUILD_LOCK.read_text()
    key = hashlib.sha256(f"{lock_text}\n{sys.version}".encode()).hexdigest()[:16]
    env = cache / f"buildenv-{key}"
    python = env / "bin" / "python"
    if (env / ".complete").exists():
        return python
    shutil.rmtree(env, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(env)], "creating the build virtualenv")
    _run([str(python), "-m", "pip", "install", "--quiet", "--no-cache-dir", "--require-hashes", "--no-deps",
          "--only-binary", ":all:", "-r", str(recipe.BUILD_LOCK)], "installing image/build-requirements.lock",
         env=lockfile.pip_env())
    (env / ".complete").touch()
    return python


def copy_tracked_sources(dst: Path) -> None:
    out = _run(["git", "-C", str(recipe.ROOT), "ls-files", "-z"], "listing the tracked files").stdout
    for rel in filter(None, out.split("\0")):
        src = recipe.ROOT / rel
        if not src.is_file() or src.is_symlink():
            continue  # deleted in the working tree, or a link (none of the wheel's files)
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)


def build_wheel(python: Path, work: Path, epoch: int) -> Path:
    src, out = work / "src", work / "wheel"
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    copy_tracked_sources(src)
    _run([str(python), "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-cache-dir",
          "-w", str(out), str(src)], "building the dra-bridge wheel",
         env=dict(lockfile.pip_env(), SOURCE_DATE_EPOCH=str(epoch)))
    wheels = sorted(out.glob("*.whl"))
    if len(wheels) != 1:
        raise PyLayerError(f"expected one wheel in {out}, found {[w.name for w in wheels]}")
    return wheels[0]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return f"sha256:{h.hexdigest()}"


def _fits(wheel: Path, arch: str) -> bool:
    platforms = wheel.name.removesuffix(".whl").split("-")[-1].split(".")
    return any(p == "any" or p.endswith(f"_{arch}") for p in platforms)


def locked_wheels(python: Path, cache: Path, arch: str) -> list[Path]:
    """One wheel file per pin of image/requirements.lock, for `arch`, its sha256 one of the pin's hashes."""
    pins = lockfile.read_lock(recipe.LOCK)
    store = cache / "wheels"
    store.mkdir(parents=True, exist_ok=True)

    def chosen() -> dict[str, Path]:
        by_hash = {_sha256(w): w for w in sorted(store.glob("*.whl")) if _fits(w, arch)}
        return {p.name: by_hash[h] for p in pins for h in p.hashes if h in by_hash}

    found = chosen()
    if len(found) < len(pins):
        cmd = [str(python), "-m", "pip", "download", "--quiet", "--no-cache-dir", "--require-hashes", "--no-deps",
               "--only-binary", ":all:", "--python-version", recipe.PYTHON_VERSION, "--implementation", "cp",
               "--abi", "cp" + recipe.PYTHON_VERSION.replace(".", ""), "-d", str(store), "-r", str(recipe.LOCK)]
        for plat in recipe.manylinux_platforms(arch):
            cmd += ["--platform", plat]
        _run(cmd, "downloading the locked wheels", env=lockfile.pip_env())
        found = chosen()
    missing = sorted({p.name for p in pins} - set(found))
    if missing:
        raise PyLayerError(f"no wheel for {arch} matches the lock's hash for: {', '.join(missing)}")
    return [found[p.name] for p in sorted(pins, key=lambda p: p.name)]


def install(python: Path, rootfs: Path, wheels: list[Path]) -> None:
    helper = Path(__file__).with_name("install_wheels.py")
    _run([str(python), str(helper), str(rootfs), recipe.INTERPRETER, recipe.PREFIX, recipe.SITE_PACKAGES,
          *map(str, wheels)], "installing the wheels into the image root")


def compile_bytecode(rootfs: Path, tree: str) -> None:
    """Byte-compile `tree` (a path in the image) with the image's Python. One process: compileall's -j needs
    /dev/shm, which the chroot lacks, and two cores gain little."""
    chroot = shutil.which("chroot") or "chroot"
    _run([chroot, str(rootfs), "env", "PYTHONHASHSEED=0", recipe.INTERPRETER, "-m", "compileall", "-q", "-q",
          "--invalidation-mode", "unchecked-hash", tree], "byte-compiling in the image's Python")


SMOKE = ("--help", "node --help", "webhook --help", "controller --help")
# Every module of the package, so each dependency's shared libraries load (grpc, cryptography, re2, orjson, ...).
IMPORT_ALL = ("import importlib, pkgutil, bridge\n"
              "for m in pkgutil.walk_packages(bridge.__path__, 'bridge.'): importlib.import_module(m.name)")


def missing_libraries(rootfs: Path) -> list[str]:
    """"<library> (needed by <file>)" for every shared library an extension module in /usr/local links against
    that the image does not have (ldd in the image root)."""
    chroot = shutil.which("chroot") or "chroot"
    out = subprocess.run([chroot, str(rootfs), "/usr/bin/find", recipe.PREFIX, "-name", "*.so*", "-type", "f",
                          "-exec", "/usr/bin/ldd", "{}", "+"], capture_output=True, text=True).stdout
    missing, current = [], ""
    for line in out.splitlines():
        if not line.startswith(("\t", " ")) and line.endswith(":"):
            current = line[:-1]
        elif "not found" in line:
            missing.append(f"{line.split()[0]} (needed by {current})")
    return sorted(missing)


def smoke_test(rootfs: Path) -> None:
    """In the image root with an empty environment: every extension module's libraries present, `bridge --help` as
    root, each component's `--help` and an import of every module as the non-root user."""
    missing = missing_libraries(rootfs)
    if missing:
        raise PyLayerError("shared libraries missing from the image (add their Debian packages to "
                           "recipe.DEBIAN.packages): " + "; ".join(missing))
    chroot = shutil.which("chroot") or "chroot"
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
    nonroot = f"--userspec={recipe.USER_ID}:{recipe.USER_ID}"
    _run([chroot, "--userspec=0:0", str(rootfs), "/usr/local/bin/bridge", "--help"], "bridge --help as root", env=env)
    for args in SMOKE:
        _run([chroot, nonroot, str(rootfs), "/usr/local/bin/bridge", *args.split()], f"bridge {args}", env=env)
    _run([chroot, nonroot, str(rootfs), recipe.INTERPRETER, "-c", IMPORT_ALL], "importing every bridge module",
         env=env)
