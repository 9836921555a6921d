#!/usr/bin/env python3
"""Regenerate the image's lock files from a clean resolution of pyproject.toml.

    python scripts/lock_image_deps.py            # rewrite image/requirements.lock and image/build-requirements.lock
    python scripts/lock_image_deps.py --check    # exit 1 if a fresh resolution differs (newer releases exist)

Runtime: `[project] dependencies`, resolved by pip (dry run, nothing installed considered) for CPython 3.11 wheels on
manylinux x86_64 and aarch64 (glibc <= 2.36, Debian bookworm's), with the hash of each wheel file. Build tools: pip,
`[build-system] requires` and installer. Needs pip >= 22.2 (`--report`) and the package index; commit the result,
then rebuild the image (`python scripts/build_image.py`).
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from imagebuild import lockfile, recipe  # noqa: E402

RUNTIME_HEADER = """\
dra-bridge's runtime dependencies for its container image, pinned with hashes: CPython 3.11 wheels for manylinux
(glibc <= 2.36, Debian bookworm's) on x86_64 and aarch64. scripts/build_image.py and the Containerfile both install
exactly these (--require-hashes --no-deps), so both images carry the same packages at the same versions.
Regenerate (a clean resolution of pyproject.toml's [project] dependencies): python scripts/lock_image_deps.py
"""
BUILD_HEADER = """\
The tools scripts/build_image.py builds the image with (pip, [build-system] requires, installer), pinned with
hashes; installed into a cached virtualenv under ~/.cache/dra-bridge/image.
Regenerate: python scripts/lock_image_deps.py
"""
INSTALLER = "installer"  # writes wheels into the image's root with its interpreter in script shebangs


def runtime_pins() -> list[lockfile.Pin]:
    deps = list(recipe.project().dependencies)
    return lockfile.merge([lockfile.resolve(deps, recipe.manylinux_platforms(arch)) for arch in recipe.ARCHES])


def build_pins() -> list[lockfile.Pin]:
    requires = tomllib.loads((recipe.ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    return lockfile.resolve(["pip", *requires, INSTALLER], recipe.manylinux_platforms("x86_64"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    args = parser.parse_args()
    wanted = {recipe.LOCK: lockfile.format_lock(runtime_pins(), RUNTIME_HEADER),
              recipe.BUILD_LOCK: lockfile.format_lock(build_pins(), BUILD_HEADER)}
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text() != text]
    if args.check:
        for p in stale:
            print(f"{p.relative_to(recipe.ROOT)} differs from a fresh resolution", file=sys.stderr)
        return 1 if stale else 0
    for p, text in wanted.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        print(f"wrote {p.relative_to(recipe.ROOT)} ({len(lockfile.read_lock(p))} pins)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
