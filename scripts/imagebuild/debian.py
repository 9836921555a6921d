"""The image's base layer: a Debian root filesystem made by mmdebstrap, cached by its recipe.

`ensure_base` returns `<cache>/base-<key>.tar`, where the key hashes everything that decides the result except the
mirror's state: `recipe.DEBIAN` (suite, mirrors, variant, packages, dpkg path filters, epoch), the hook commands
below, the user, and mmdebstrap's version. A cached base is reused until the recipe changes or `--refresh-base`
asks for a new one (to pick up Debian's security updates); the packages it holds, with versions, are listed beside
it in `base-<key>.packages`.

What mmdebstrap is asked for, and why:
* `--variant=essential --include=python3`, no Recommends, merged /usr through mmdebstrap's own hook (Debian's
  `usrmerge` package would pull in all of Perl): about 100 MB unpacked.
* `SOURCE_DATE_EPOCH` (the recipe's epoch): mmdebstrap then removes its logs, the ld.so aux cache and the machine-id
  and clamps every mtime, so two runs against the same mirror state give the same tar (checked: two runs, one
  sha256). `--skip=output/dev`: no device nodes in the layer (the runtime provides /dev).
* customize hooks: drop the build host's /etc/resolv.conf and /etc/hostname (the runtime mounts its own); add the
  non-root user (`recipe.USER_ID`) by appending to passwd/group/shadow (useradd would write today's date into
  /etc/shadow); recompile the standard library's byte code with `--invalidation-mode unchecked-hash`, because
  Debian's postinst writes timestamp .pyc files that clamping would make stale (Python would then recompile them
  in memory at every start under a read-only root filesystem).
* `.deb` files are kept in `<cache>/debs` between runs (mmdebstrap's documented setup/customize hook pair).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from . import recipe

_PY = f"python{recipe.PYTHON_VERSION}"


def customize_commands() -> list[str]:
    """The customize hooks, run by mmdebstrap on the host with the new root as "$1"."""
    uid = recipe.USER_ID
    name = recipe.USER_NAME
    return [
        'rm -f "$1/etc/resolv.conf" "$1/etc/hostname"',
        f"printf '%s\\n' '{name}:x:{uid}:{uid}:{name}:/home/{name}:/usr/sbin/nologin' >> \"$1/etc/passwd\"",
        f"printf '%s\\n' '{name}:x:{uid}:' >> \"$1/etc/group\"",
        f"printf '%s\\n' '{name}:!:::::::' >> \"$1/etc/shadow\"",
        f"printf '%s\\n' '{name}:!::' >> \"$1/etc/gshadow\"",
        f'install -d -m 0755 -o {uid} -g {uid} "$1/home/{name}"',
        f'chroot "$1" env PYTHONHASHSEED=0 {recipe.INTERPRETER} -m compileall -q -q -f '
        f"--invalidation-mode unchecked-hash /usr/lib/{_PY}",
    ]


def mmdebstrap_version() -> str:
    out = subprocess.run(["mmdebstrap", "--version"], capture_output=True, text=True, check=True).stdout
    return out.strip()


def base_key(arch: str) -> str:
    spec = {"debian": asdict(recipe.DEBIAN), "hooks": customize_commands(), "arch": arch,
            "mmdebstrap": mmdebstrap_version()}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def mmdebstrap_command(arch: str, debs: Path, out: Path, packages_out: Path) -> list[str]:
    d = recipe.DEBIAN
    q = shlex.quote
    cmd = ["mmdebstrap", "--format=tar", f"--variant={d.variant}", f"--architectures={arch}", "--include=" + ",".join(d.packages),
           "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr", "--aptopt=APT::Install-Recommends \"false\"",
           "--skip=output/dev", "--skip=essential/unlink",
           '--setup-hook=mkdir -p "$1/var/cache/apt/archives"',
           f"--setup-hook=sync-in {q(str(debs))} /var/cache/apt/archives/"]
    cmd += [f"--dpkgopt=path-exclude={p}" for p in d.path_excludes]
    cmd += [f"--dpkgopt=path-include={p}" for p in d.path_includes]
    cmd += [f"--customize-hook=sync-out /var/cache/apt/archives {q(str(debs))}"]
    cmd += [f"--customize-hook={c}" for c in customize_commands()]
    cmd += [f"--customize-hook=chroot \"$1\" dpkg-query -W -f '${{Package}} ${{Version}}\\n' > {q(str(packages_out))}"]
    return [*cmd, d.suite, str(out), *d.mirrors]


class BaseError(Exception):
    pass


def ensure_base(cache: Path, arch: str, *, refresh: bool = False,
                log: Callable[[str], None] | None = None) -> tuple[Path, bool]:
    """The cached base tar for this recipe (made now if missing or `refresh`); True if it was made now."""
    key = base_key(arch)
    tar = cache / f"base-{key}.tar"
    packages = cache / f"base-{key}.packages"
    if tar.exists() and packages.exists() and not refresh:
        return tar, False
    cache.mkdir(parents=True, exist_ok=True)
    debs = cache / "debs"
    debs.mkdir(exist_ok=True)
    tmp_tar, tmp_packages = tar.with_suffix(".tar.part"), packages.with_suffix(".packages.part")
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(recipe.DEBIAN.epoch), LC_ALL="C.UTF-8")
    if log:
        log(f"mmdebstrap: Debian {recipe.DEBIAN.suite} {arch} + {', '.join(recipe.DEBIAN.packages)} (a minute or two)")
    proc = subprocess.run(mmdebstrap_command(arch, debs, tmp_tar, tmp_packages), env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        tmp_tar.unlink(missing_ok=True)
        raise BaseError(f"mmdebstrap failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    tmp_packages.replace(packages)
    tmp_tar.replace(tar)
    return tar, True
