"""The image's pinned Python dependencies: lock files in pip's requirements format, one pin and its hashes per entry.

* `image/requirements.lock`: pyproject.toml's `[project] dependencies`, resolved for CPython 3.11 on manylinux
  (glibc <= 2.36) x86_64 and aarch64, wheels only; one hash per wheel file the image may use. The image build and
  the Containerfile both install exactly these with `pip install --require-hashes --no-deps` (or the same check here),
  so the two images carry the same distributions at the same versions.
* `image/build-requirements.lock`: the tools that build our wheel and install wheels into the image (pip, setuptools
  and wheel from `[build-system] requires`, installer), pure-Python wheels.

`resolve` is a clean resolution: pip's own resolver in a dry run (`pip install --dry-run --ignore-installed
--report`), so nothing installed on the machine that runs it takes part; regenerate both files with
`python scripts/lock_image_deps.py`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import recipe


@dataclass(frozen=True)
class Pin:
    name: str  # canonical (PEP 503): lower case, runs of -_. as one -
    version: str
    hashes: tuple[str, ...]  # "sha256:<hex>", sorted


class LockError(Exception):
    pass


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)$")


def read_lock(path: Path) -> list[Pin]:
    """The pins of a lock file; refuses anything but `name==version` with at least one `--hash=sha256:` each."""
    text = path.read_text()
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip() if not raw.lstrip().startswith("--hash") else raw.rstrip()
        if not line.strip():
            continue
        current += " " + line.rstrip("\\").strip()
        if not line.endswith("\\"):
            logical.append(current.strip())
            current = ""
    if current.strip():
        logical.append(current.strip())
    pins = []
    for entry in logical:
        spec, *options = entry.split()
        m = _PIN.match(spec)
        if not m:
            raise LockError(f"{path.name}: {spec!r} is not a name==version pin")
        hashes = []
        for opt in options:
            if not opt.startswith("--hash=sha256:"):
                raise LockError(f"{path.name}: {spec}: unexpected {opt!r} (only --hash=sha256:<hex> is allowed)")
            hashes.append(opt.removeprefix("--hash="))
        if not hashes:
            raise LockError(f"{path.name}: {spec} has no --hash: every pin must name the files it accepts")
        pins.append(Pin(canonical(m.group(1)), m.group(2), tuple(sorted(hashes))))
    names = [p.name for p in pins]
    if len(set(names)) != len(names):
        raise LockError(f"{path.name}: a name is pinned twice")
    return pins


def format_lock(pins: Iterable[Pin], header: str) -> str:
    lines = [f"# {ln}".rstrip() for ln in header.strip().splitlines()]
    for pin in sorted(pins, key=lambda p: p.name):
        lines.append(f"{pin.name}=={pin.version} \\")
        lines += [f"    --hash={h} \\" for h in pin.hashes[:-1]] + [f"    --hash={pin.hashes[-1]}"]
    return "\n".join(lines) + "\n"


def pip_env() -> dict[str, str]:
    """The environment for pip: the package index alone. A local wheel directory (PIP_FIND_LINKS) could offer wheels
    built on this machine, whose hashes nobody else can reproduce."""
    env = {k: v for k, v in os.environ.items() if k not in {"PIP_FIND_LINKS", "PIP_NO_INDEX"}}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def resolve(requirements: Sequence[str], platforms: Sequence[str], *, pip: Sequence[str] | None = None) -> list[Pin]:
    """pip's resolution of `requirements` for CPython 3.11 wheels on `platforms` (no sdists, nothing installed
    considered). One hash per pin: the file pip chose for that platform set."""
    pip = list(pip or [sys.executable, "-m", "pip"])
    major, minor = recipe.PYTHON_VERSION.split(".")
    with tempfile.TemporaryDirectory(prefix="dra-bridge-lock-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = [*pip, "install", "--quiet", "--dry-run", "--ignore-installed", "--target", str(Path(tmp) / "t"),
               "--report", str(report), "--only-binary", ":all:", "--no-cache-dir",
               "--python-version", f"{major}.{minor}", "--implementation", "cp", "--abi", f"cp{major}{minor}"]
        for plat in platforms:
            cmd += ["--platform", plat]
        proc = subprocess.run([*cmd, *requirements], capture_output=True, text=True, env=pip_env())
        if proc.returncode != 0:
            raise LockError(f"pip could not resolve {list(requirements)} for {platforms[0]}...:\n{proc.stderr}")
        items = json.loads(report.read_text())["install"]
    pins = []
    for item in items:
        info = item["download_info"]
        digest = (info.get("archive_info") or {}).get("hashes", {}).get("sha256")
        if not digest or not info["url"].endswith(".whl"):
            raise LockError(f"{item['metadata']['name']}: pip chose {info['url']}, not a wheel with a sha256")
        pins.append(Pin(canonical(item["metadata"]["name"]), item["metadata"]["version"], (f"sha256:{digest}",)))
    return pins


def merge(per_platform: Sequence[list[Pin]]) -> list[Pin]:
    """One lock for several platforms: the same versions everywhere (else the lock would install different
    packages per platform), the union of their file hashes."""
    merged: dict[str, Pin] = {}
    for pins in per_platform:
        for pin in pins:
            seen = merged.get(pin.name)
            if seen is None:
                merged[pin.name] = pin
                continue
            if seen.version != pin.version:
                raise LockError(f"{pin.name} resolves to {seen.version} on one platform and {pin.version} on "
                                "another; pin it in pyproject.toml")
            merged[pin.name] = Pin(pin.name, pin.version, tuple(sorted(set(seen.hashes) | set(pin.hashes))))
    names = [{p.name for p in pins} for pins in per_platform]
    if any(n != names[0] for n in names):
        raise LockError(f"the platforms need different packages: {names}")
    return sorted(merged.values(), key=lambda p: p.name)
