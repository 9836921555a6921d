"""Every fixed input of the image: the Debian base, the Python target, the user, the paths.

Changing anything in `DEBIAN` changes the base's cache key (`debian.base_key`), so the next build makes a new base.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "image" / "requirements.lock"
BUILD_LOCK = ROOT / "image" / "build-requirements.lock"
CONTAINERFILE = ROOT / "Containerfile"
CACHE = Path.home() / ".cache" / "dra-bridge" / "image"

# The image's Python: Debian bookworm's python3 (3.11), glibc 2.36. Wheels must be CPython 3.11 (or abi3 / pure)
# for manylinux up to glibc 2.36; nothing is compiled from source (no compiler in the image or in the build).
PYTHON_VERSION = "3.11"
GLIBC = (2, 36)
ARCHES = ("x86_64", "aarch64")  # the lock covers both; the image is built for the build machine's (x86_64, amd64)
SITE_PACKAGES = f"/usr/local/lib/python{PYTHON_VERSION}/dist-packages"  # on Debian's sys.path, outside dpkg's files
PREFIX = "/usr/local"  # console scripts in /usr/local/bin
INTERPRETER = "/usr/bin/python3"

# webhook and controller run as this user (the chart's runAsUser); the node daemon overrides it with root.
USER_ID = 65532
USER_NAME = "nonroot"


def manylinux_platforms(arch: str) -> list[str]:
    """pip `--platform` tags a bookworm system accepts, newest first: manylinux_2_<y> for y <= 36 and the legacy
    aliases (PEP 600). Given explicitly: pip before 24 does not expand a manylinux_2_<y> tag to the older ones."""
    tags = [f"manylinux_{GLIBC[0]}_{minor}_{arch}" for minor in range(GLIBC[1], 16, -1)]
    tags.append(f"manylinux2014_{arch}")
    if arch == "x86_64":
        tags += [f"manylinux_2_12_{arch}", f"manylinux2010_{arch}", f"manylinux_2_5_{arch}", f"manylinux1_{arch}"]
    return tags


@dataclass(frozen=True)
class DebianRecipe:
    suite: str
    mirrors: tuple[str, ...]
    variant: str
    packages: tuple[str, ...]
    # dpkg path filters: no manuals, info pages, translations or docs except the copyright files (licence notices).
    path_excludes: tuple[str, ...]
    path_includes: tuple[str, ...]
    # The base layer's timestamps (mmdebstrap's SOURCE_DATE_EPOCH: newer mtimes are clamped to it). Fixed with the
    # recipe, not the commit's, so one cached base serves every commit and a fresh one is bit-identical to it.
    epoch: int


DEBIAN = DebianRecipe(
    suite="bookworm",
    mirrors=(
        "deb http://deb.debian.org/debian bookworm main",
        "deb http://deb.debian.org/debian bookworm-updates main",
        "deb http://deb.debian.org/debian-security bookworm-security main",
    ),
    # essential: Debian's Essential:yes set (libc, coreutils, dash, dpkg, ...), without apt.
    variant="essential",
    # python3, and the C++ runtime that grpcio's and google-re2's extensions link against (manylinux wheels may
    # expect libstdc++ from the system: PEP 599's list); everything else comes from the lock as wheels.
    packages=("python3", "libstdc++6"),
    path_excludes=("/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*", "/usr/share/doc/*",
                   "/usr/share/lintian/*"),
    path_includes=("/usr/share/doc/*/copyright",),
    epoch=1796083200,  # 2026-12-01T00:00:00Z; move it forward with the recipe
)


@dataclass(frozen=True)
class Project:
    name: str
    version: str
    license: str
    source: str
    dependencies: tuple[str, ...]


def project() -> Project:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return Project(name=meta["name"], version=meta["version"], license=meta["license"],
                   source=meta["urls"]["Source"], dependencies=tuple(meta["dependencies"]))
