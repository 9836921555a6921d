"""Fixtures for the image tests: the image (`built`, from tests/imagebuilt.py, shared with the real-cluster chart
tests) unpacked once."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.imagebuilt import _locked, build, oci

PATH = "/usr/local/bin:/usr/bin:/bin"

@pytest.fixture(scope="session")
def image(built: build.BuildResult) -> oci.OciArchive:
    return oci.OciArchive.read(built.archive)


@pytest.fixture(scope="session")
def rootfs(image: oci.OciArchive, shared_dir: Path) -> Path:
    """The image's layers unpacked in order (as a container runtime would), owners and modes kept."""
    root = shared_dir / "rootfs"
    with _locked(shared_dir / "rootfs.lock"):
        if not (shared_dir / "rootfs.done").exists():
            shutil.rmtree(root, ignore_errors=True)
            image.unpack(root)
            (shared_dir / "rootfs.done").touch()
    return root


def in_image(rootfs: Path, *args: str, user: str = "65532:65532") -> subprocess.CompletedProcess[str]:
    """Run a command inside the unpacked image (chroot) as `user`, with only PATH set."""
    return subprocess.run([shutil.which("chroot") or "chroot", f"--userspec={user}", str(rootfs), *args],
                          capture_output=True, text=True, env={"PATH": PATH}, timeout=120)
