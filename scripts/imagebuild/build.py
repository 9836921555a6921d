"""The image build pipeline: base layer, Python layer, OCI archive (`scripts/build_image.py` is its command line).

Needs root (mmdebstrap's root mode; chroot to compile and smoke-test in the image's own Python), `mmdebstrap` and
`umoci` (Debian packages), `tar`, `git`, and for a cold build the Debian mirror and the Python package index.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from . import debian, oci, pylayer, recipe, tartree

DEFAULT_REPOSITORY = "ghcr.io/dra-bridge/dra-bridge"  # the chart's image.repository
WHEEL_ARCH = {"amd64": "x86_64", "arm64": "aarch64"}
ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
       # Logs leave at once; byte code is all compiled in the image, and the root filesystem may be read-only.
       "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1")
Log = Callable[[str], None]


class BuildError(Exception):
    pass


@dataclass(frozen=True)
class BuildResult:
    archive: Path
    reference: str
    manifest_digest: str
    revision: str
    created: str
    compressed_bytes: int  # what a registry stores and a node pulls: layer blobs, config and manifest
    uncompressed_bytes: int  # the layers unpacked (tar streams)
    archive_bytes: int
    base_built: bool
    seconds: dict[str, float] = field(default_factory=dict)


def _git(*args: str) -> str:
    proc = subprocess.run(["git", "-C", str(recipe.ROOT), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"git {' '.join(args)}: {proc.stderr.strip()} (the build reads the repository's commit)")
    return proc.stdout.strip()


def source_state() -> tuple[str, int]:
    """(revision, epoch): HEAD's commit id (with -dirty if tracked files differ) and SOURCE_DATE_EPOCH, by default
    HEAD's commit time."""
    revision = _git("rev-parse", "HEAD")
    if _git("status", "--porcelain", "--untracked-files=no"):
        revision += "-dirty"
    epoch = os.environ.get("SOURCE_DATE_EPOCH") or _git("log", "-1", "--format=%ct")
    return revision, int(epoch)


def preflight() -> str:
    """The machine's Debian architecture, after checking the tools the build needs."""
    if os.geteuid() != 0:
        raise BuildError("the image build needs root (mmdebstrap's root mode, chroot into the image): run it with sudo")
    missing = [t for t in ("mmdebstrap", "umoci", "tar", "chroot", "git") if shutil.which(t) is None]
    if missing:
        raise BuildError(f"missing {', '.join(missing)}: apt-get install mmdebstrap umoci (Debian's packages)")
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True).stdout.strip()
    if arch not in WHEEL_ARCH:
        raise BuildError(f"unsupported architecture {arch!r}: the lock has wheels for {', '.join(WHEEL_ARCH)}")
    return arch


def labels(revision: str, created: str) -> dict[str, str]:
    p = recipe.project()
    return {"org.opencontainers.image.title": p.name, "org.opencontainers.image.version": p.version,
            "org.opencontainers.image.revision": revision, "org.opencontainers.image.source": p.source,
            "org.opencontainers.image.licenses": p.license, "org.opencontainers.image.created": created,
            "org.opencontainers.image.description": "dra-bridge: node daemon, admission webhook and controller "
                                                    "(`bridge node|webhook|controller`)"}


def build(out: Path, *, cache: Path = recipe.CACHE, refresh_base: bool = False,
          repository: str = DEFAULT_REPOSITORY, tag: str | None = None, log: Log = print) -> BuildResult:
    """Build the image into the OCI archive `out`. Builds sharing a cache directory run one at a time (a lock
    file in it), so two never write the same cached base, wheel or build environment at once."""
    arch = preflight()
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build(out, arch, cache, refresh_base, repository, tag, log)


def _build(out: Path, arch: str, cache: Path, refresh_base: bool, repository: str, tag: str | None,
           log: Log) -> BuildResult:
    revision, epoch = source_state()
    created = datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    reference = f"{repository}:{tag or recipe.project().version}"
    seconds: dict[str, float] = {}

    def stage(name: str, start: float) -> None:
        seconds[name] = round(time.monotonic() - start, 1)

    t = time.monotonic()
    base, base_built = debian.ensure_base(cache, arch, refresh=refresh_base, log=log)
    stage("base", t)
    (cache / "work").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="build-", dir=cache / "work") as tmp:
        work = Path(tmp)
        rootfs = work / "rootfs"
        rootfs.mkdir()
        t = time.monotonic()
        subprocess.run(["tar", "-xpf", str(base), "--numeric-owner", "-C", str(rootfs)], check=True)
        python = pylayer.buildenv(cache)
        wheel = pylayer.build_wheel(python, work, epoch)
        stage("wheel", t)
        # Two layers: the locked dependencies, then dra-bridge alone, so a new version of the bridge is a pull of
        # its own few MiB on every node (the dependencies' layer is the same until the lock changes).
        t = time.monotonic()
        local = rootfs / recipe.PREFIX.lstrip("/")
        prefix = recipe.PREFIX.lstrip("/") + "/"
        before = set(tartree.walk(local))
        pylayer.install(python, rootfs, pylayer.locked_wheels(python, cache, WHEEL_ARCH[arch]))
        pylayer.compile_bytecode(rootfs, recipe.SITE_PACKAGES)
        with_deps = set(tartree.walk(local))
        tartree.write_tar(local, with_deps - before, work / "deps.tar", epoch, prefix=prefix)
        pylayer.install(python, rootfs, [wheel])
        pylayer.compile_bytecode(rootfs, f"{recipe.SITE_PACKAGES}/bridge")
        tartree.write_tar(local, set(tartree.walk(local)) - with_deps, work / "app.tar", epoch, prefix=prefix)
        stage("install", t)
        t = time.monotonic()
        pylayer.smoke_test(rootfs)
        stage("smoke", t)
        t = time.monotonic()
        spec = oci.ImageSpec(reference=reference, created=created, arch=arch, entrypoint=("/usr/local/bin/bridge",),
                             cmd=("--help",), user=f"{recipe.USER_ID}:{recipe.USER_ID}", env=ENV,
                             labels=labels(revision, created))
        layers = [oci.Layer(base, f"mmdebstrap {recipe.DEBIAN.suite} {' '.join(recipe.DEBIAN.packages)}",
                            "Debian base (scripts/imagebuild/debian.py)"),
                  oci.Layer(work / "deps.tar", "install image/requirements.lock",
                            f"locked dependencies in {recipe.PREFIX} (scripts/imagebuild/pylayer.py)"),
                  oci.Layer(work / "app.tar", f"install {wheel.name}",
                            f"dra-bridge in {recipe.PREFIX} (scripts/imagebuild/pylayer.py)")]
        uncompressed = sum(layer.tar.stat().st_size for layer in layers)
        oci.pack(work / "layout", layers, spec)
        out.parent.mkdir(parents=True, exist_ok=True)
        oci.write_archive(work / "layout", out, epoch)
        stage("pack", t)
    image = oci.OciArchive.read(out)
    compressed = (sum(layer["size"] for layer in image.layers) + image.manifest["config"]["size"]
                  + image.index["manifests"][0]["size"])
    return BuildResult(archive=out, reference=reference, manifest_digest=image.manifest_digest, revision=revision,
                       created=created, compressed_bytes=compressed, uncompressed_bytes=uncompressed,
                       archive_bytes=out.stat().st_size, base_built=base_built, seconds=seconds)
