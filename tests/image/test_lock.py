"""The image's lock files: every dependency pinned at a version pyproject.toml allows, every pin with the hashes of
the files it accepts, nothing else; the reader refuses what pip's --require-hashes would not install exactly."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from imagebuild import lockfile, recipe

PYPROJECT = tomllib.loads((recipe.ROOT / "pyproject.toml").read_text())


def test_every_runtime_dependency_is_pinned_at_a_version_pyproject_allows() -> None:
    pins = {p.name: p for p in lockfile.read_lock(recipe.LOCK)}
    for dep in PYPROJECT["project"]["dependencies"]:
        req = Requirement(dep)
        pin = pins.get(lockfile.canonical(req.name))
        assert pin is not None, f"{req.name} is not in image/requirements.lock: run scripts/lock_image_deps.py"
        assert req.specifier.contains(pin.version, prereleases=True), \
            f"{req.name}=={pin.version} does not satisfy {req.specifier}: run scripts/lock_image_deps.py"


def test_the_runtime_lock_holds_no_build_or_test_tools() -> None:
    names = {p.name for p in lockfile.read_lock(recipe.LOCK)}
    assert not names & {"pip", "setuptools", "wheel", "pytest", "mypy", "grpcio-tools", "installer"}


def test_the_build_lock_pins_pip_installer_and_the_build_backend() -> None:
    names = {p.name for p in lockfile.read_lock(recipe.BUILD_LOCK)}
    wanted = {lockfile.canonical(Requirement(r).name) for r in PYPROJECT["build-system"]["requires"]}
    assert wanted | {"pip", "installer"} <= names


@pytest.mark.parametrize("lock", [recipe.LOCK, recipe.BUILD_LOCK], ids=lambda p: p.name)
def test_every_pin_names_sha256_hashes_and_the_file_says_how_to_regenerate_it(lock: Path) -> None:
    pins = lockfile.read_lock(lock)
    assert pins
    assert all(h.startswith("sha256:") and len(h) == len("sha256:") + 64 for p in pins for h in p.hashes)
    assert "python scripts/lock_image_deps.py" in lock.read_text().split("\n\n")[0]


def test_a_lock_reads_back_what_was_written(tmp_path: Path) -> None:
    pins = [lockfile.Pin("grpcio", "1.85.3", ("sha256:" + "a" * 64, "sha256:" + "b" * 64)),
            lockfile.Pin("click", "8.5.1", ("sha256:" + "c" * 64,))]
    path = tmp_path / "x.lock"
    path.write_text(lockfile.format_lock(pins, "header\nline two"))
    assert lockfile.read_lock(path) == sorted(pins, key=lambda p: p.name)
    assert path.read_text().startswith("# header\n# line two\nclick==8.5.1 \\\n")


@pytest.mark.parametrize("text, message", [
    ("click==8.5.1\n", "has no --hash"),
    ("click>=8 \\\n    --hash=sha256:" + "c" * 64 + "\n", "is not a name==version pin"),
    ("click==8.5.1 \\\n    --index-url=https://example.org\n", "only --hash=sha256:<hex> is allowed"),
    ("click==8.5.1 --hash=sha256:" + "c" * 64 + "\nClick==8.5.1 --hash=sha256:" + "d" * 64 + "\n",
     "a name is pinned twice"),
], ids=["no-hash", "range", "other-option", "twice"])
def test_the_reader_refuses_a_lock_pip_would_not_install_exactly(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.lock"
    path.write_text(text)
    with pytest.raises(lockfile.LockError, match=message):
        lockfile.read_lock(path)


def test_merging_platforms_refuses_different_versions_and_unions_hashes() -> None:
    a = [lockfile.Pin("grpcio", "1.85.3", ("sha256:" + "a" * 64,))]
    b = [lockfile.Pin("grpcio", "1.85.3", ("sha256:" + "b" * 64,))]
    assert lockfile.merge([a, b])[0].hashes == ("sha256:" + "a" * 64, "sha256:" + "b" * 64)
    with pytest.raises(lockfile.LockError, match="resolves to 1.85.3 on one platform and 1.86.0"):
        lockfile.merge([a, [lockfile.Pin("grpcio", "1.86.0", ("sha256:" + "b" * 64,))]])


def test_the_platform_tags_are_what_bookworms_glibc_accepts_newest_first() -> None:
    tags = recipe.manylinux_platforms("x86_64")
    assert tags[0] == "manylinux_2_36_x86_64"
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"} <= set(tags)
    assert not any(t.startswith("manylinux_2_37") for t in tags)
    assert all(t.endswith("_aarch64") for t in recipe.manylinux_platforms("aarch64"))
