"""The Containerfile (Docker/Podman/Buildah, from the official Python image) and scripts/build_image.py's image carry
the same Python packages at the same versions: both install image/requirements.lock by hash and our wheel.

The Containerfile is read, not built (no engine or registry here): its final stage's `pip install -r` must name the
lock (through its COPY) with --require-hashes and --no-deps, its wheel must be ours, and what it uninstalls must be
the base image's own tools (pip, setuptools, wheel), never a locked package. Then the packages it installs are the
lock's pins plus dra-bridge, and that list must equal the distributions Python finds in the built image."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from imagebuild import lockfile, recipe

from tests.image.conftest import in_image

# The first test to ask for the image builds it (minutes on a cold cache: the Debian base comes from the mirror).
pytestmark = pytest.mark.timeout(1200)


@dataclass
class Stage:
    name: str
    # destination in the image -> its sources ("stage:path" from another stage, else a repository path)
    copies: dict[str, list[str]] = field(default_factory=dict)
    runs: list[list[str]] = field(default_factory=list)  # each RUN split at && into argument lists


def parse_containerfile(path: Path) -> list[Stage]:
    text = re.sub(r"\\\n", " ", path.read_text())
    stages: list[Stage] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word == "FROM":
            parts = rest.split()
            stages.append(Stage(parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else str(len(stages))))
        elif word == "COPY":
            args = rest.split()
            origin = next((a.removeprefix("--from=") + ":" for a in args if a.startswith("--from=")), "")
            paths = [a for a in args if not a.startswith("--")]
            stages[-1].copies.setdefault(paths[-1], []).extend(origin + src for src in paths[:-1])
        elif word == "RUN":
            stages[-1].runs += [shlex.split(cmd) for cmd in rest.split("&&")]
    return stages


def installed_by_containerfile() -> set[tuple[str, str]]:
    stages = parse_containerfile(recipe.CONTAINERFILE)
    final, by_name = stages[-1], {s.name: s for s in stages}
    pip_runs = [r for r in final.runs if r[:2] == ["pip", "install"]]
    locks = [r[r.index("-r") + 1] for r in pip_runs if "-r" in r]
    assert [final.copies.get(p) for p in locks] == [["image/requirements.lock"]], "the final stage installs the lock"
    lock_run = next(r for r in pip_runs if "-r" in r)
    assert {"--require-hashes", "--no-deps", "--no-cache-dir"} <= set(lock_run)
    wheels = [a for r in pip_runs for a in r if a.endswith(".whl")]
    assert len(wheels) == 1 and all("--no-deps" in r for r in pip_runs)
    [origin] = final.copies[wheels[0].split("/*")[0].rstrip("/")]
    builder = by_name[origin.split(":")[0]]
    assert ["pip", "wheel"] == builder.runs[-1][:2] and builder.runs[-1][-1] == "."
    assert "pyproject.toml" in builder.copies.get("./", []), "the wheel stage builds this repository's project"
    removed = {lockfile.canonical(a) for r in final.runs if r[:2] == ["pip", "uninstall"] for a in r[2:]
               if not a.startswith("-")}
    pins = {(p.name, p.version) for p in lockfile.read_lock(recipe.LOCK)}
    assert removed == {"pip", "setuptools", "wheel"} and not removed & {name for name, _ in pins}
    project = recipe.project()
    return pins | {(lockfile.canonical(project.name), project.version)}


def test_the_containerfile_installs_exactly_the_lock_and_our_wheel() -> None:
    packages = installed_by_containerfile()
    assert ("dra-bridge", recipe.project().version) in packages
    assert len(packages) == len(lockfile.read_lock(recipe.LOCK)) + 1


def test_the_containerfile_and_the_built_image_list_the_same_packages_at_the_same_versions(rootfs: Path) -> None:
    code = ("import importlib.metadata as m, json; "
            "print(json.dumps(sorted([d.metadata['Name'], d.version] for d in m.distributions())))")
    proc = in_image(rootfs, recipe.INTERPRETER, "-c", code)
    assert proc.returncode == 0, proc.stderr
    in_the_image = {(lockfile.canonical(name), version) for name, version in json.loads(proc.stdout)}
    assert in_the_image == installed_by_containerfile()
