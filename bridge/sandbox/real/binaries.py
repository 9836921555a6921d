"""Where the real backend's programs are: built from their Go modules by `scripts/build_real.py` (never downloaded,
never taken from `PATH`: Debian's etcd 3.4 or a stray kubelet would silently be the wrong component).

Lookup, first match wins:

1. `BRIDGE_REAL_BIN_DIR`: directories (`:`-separated) searched for every program, for binaries built elsewhere;
2. the build script's manifest `$DRA_BRIDGE_CACHE/real/sets.json` (default `~/.cache/dra-bridge`), which names the
   bin directory of each set it built: `kubernetes-v1.38`, `kubernetes-v1.37`, `kubernetes-v1.35`, `etcd`, `node`,
   `helm`.

Nothing here builds: a missing program is a `BinariesMissing` whose message is the command that builds it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

# The Kubernetes lines the build script pins (scripts/build_real.py KUBERNETES_LINES), by minor.
LINES = {"1.38": "v1.38.0-beta.0", "1.37": "v1.37.2", "1.35": "v1.35.4"}
DEFAULT_LINE = "1.37"

# (line, program) -> the line whose build of the program this line runs: the 1.38 line builds no kube-proxy (it
# needs sigs.k8s.io/iptables-wrappers, which the module proxy here does not serve: scripts/build_real.py
# KUBERNETES_LEFT_OUT), and the Kubernetes version skew policy lets kube-proxy be up to three minors older than the
# API server.
_BORROWED = {("1.38", "kube-proxy"): "1.37"}

CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kube-proxy")
KUBELET = ("kubelet",)
ETCD = ("etcd",)
NODE = ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "bridge", "loopback", "host-local", "portmap",
        "crictl")
HELM = ("helm",)

_SET_OF = {**{p: "kubernetes" for p in CONTROL_PLANE + KUBELET}, **{p: "etcd" for p in ETCD},
           **{p: "node" for p in NODE}, **{p: "helm" for p in HELM}}


class BinariesMissing(RuntimeError):
    """A program the real backend needs was not built; the message says how to build it."""


def cache_root() -> Path:
    return Path(os.environ.get("DRA_BRIDGE_CACHE", Path.home() / ".cache" / "dra-bridge")) / "real"


def line_of(version: str) -> str:
    """'1.37', 'v1.37.2', '1.37.2' -> '1.37'; ValueError for a line the build does not pin."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.\d+(?:-[0-9A-Za-z.]+)?)?", version.strip())
    line = f"{m.group(1)}.{m.group(2)}" if m else ""
    if line not in LINES:
        raise ValueError(f"Kubernetes {version!r}: the real backend builds {', '.join(sorted(LINES))} "
                         f"(scripts/build_real.py --kubernetes LINE)")
    return line


def _manifest() -> dict[str, str]:
    try:
        data = json.loads((cache_root() / "sets.json").read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


@dataclass(frozen=True)
class Binaries:
    """The programs of one Kubernetes line (plus etcd, the node runtime and helm)."""

    line: str  # "1.37"

    @property
    def version(self) -> str:
        return LINES[self.line]

    def _set_dir(self, program: str) -> Path | None:
        set_name = _SET_OF[program]
        line = _BORROWED.get((self.line, program), self.line)
        key = f"kubernetes-v{line}" if set_name == "kubernetes" else set_name
        where = _manifest().get(key)
        return Path(where) if where else None

    def find(self, program: str) -> Path | None:
        for d in filter(None, os.environ.get("BRIDGE_REAL_BIN_DIR", "").split(":")):
            candidate = Path(d) / program
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
        where = self._set_dir(program)
        if where is not None:
            candidate = where / program
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
        return None

    def path(self, program: str) -> Path:
        found = self.find(program)
        if found is None:
            raise BinariesMissing(self.missing_message([program]))
        return found

    def missing(self, programs: tuple[str, ...]) -> list[str]:
        return [p for p in programs if self.find(p) is None]

    def missing_message(self, programs: list[str]) -> str:
        sets = sorted({_SET_OF[p] for p in programs})
        lines = sorted({_BORROWED.get((self.line, p), self.line) for p in programs if _SET_OF[p] == "kubernetes"})
        build_line = lines[0] if len(lines) == 1 else self.line  # a borrowed program is built by its own line
        return (f"the real backend needs {', '.join(programs)} (Kubernetes {self.version} line), which are not "
                f"built: run `python scripts/build_real.py --kubernetes {build_line} --only {','.join(sets)}` in a "
                f"clone of dra-bridge (Go >= 1.26 and the Go module proxy; a cold build takes a while, see the "
                f"README), or point BRIDGE_REAL_BIN_DIR at directories that hold them")

    def require(self, programs: tuple[str, ...]) -> None:
        missing = self.missing(programs)
        if missing:
            raise BinariesMissing(self.missing_message(missing))

    def reported_version(self, program: str = "kube-apiserver") -> str:
        """What the binary says it is (`Kubernetes v1.37.2`), to catch an unstamped `v0.0.0-master` build."""
        out = subprocess.run([str(self.path(program)), "--version"], capture_output=True, text=True, timeout=30)
        return (out.stdout or out.stderr).strip()
