#!/usr/bin/env python3
"""Build the real Kubernetes components (and the node's runtime) from their published Go modules, pinned and cached.

    python scripts/build_real.py                      # everything for the default line (v1.37.2) + etcd, node, helm
    python scripts/build_real.py --kubernetes 1.35    # the older line (v1.35.4)
    python scripts/build_real.py --kubernetes 1.38 --only kubernetes   # the next release's beta (v1.38.0-beta.0)
    python scripts/build_real.py --only etcd,helm     # some sets only
    python scripts/build_real.py --print-bin-dir      # where the binaries of a line are (built or not); nothing built
    python scripts/build_real.py --update 1.37        # maintainers: regenerate a set's go.mod/go.sum (network)

What is built, from which module (each set is a small consumer Go module under `realk8s/<set>/`: a go.mod that
requires the published modules, its go.sum, and `tool` lines naming the main packages; nothing of those projects'
source is in this repository):

* `kubernetes-v1.38`, `kubernetes-v1.37`, `kubernetes-v1.35`: kube-apiserver, kube-controller-manager,
  kube-scheduler, kubelet, kubectl and kube-proxy from `k8s.io/kubernetes` (1.38: its beta, built with Go 1.27.3,
  which the go command fetches from the module proxy, and without kube-proxy: see KUBERNETES_SHIMS). Its go.mod
  requires the staging modules at `v0.0.0` with `replace => ./staging/...`; the consumer module replaces each with
  the published `v0.<minor>.<patch>` (the list is generated from the module's own go.mod by `--update`, never by
  hand). Built as the release does (kubernetes `hack/lib/golang.sh`): CGO off, tags
  `selinux,notest,grpcnotrace`, and the version stamped with `-X k8s.io/component-base/version.gitVersion=…`
  (`hack/lib/version.sh`), or the binaries would say `v0.0.0-master`.
* `etcd`: `go.etcd.io/etcd/server/v3` (its main package). A module of its own: etcd's go.mod has replace directives
  of its own, and sharing a build list with Kubernetes would let version selection move grpc under it.
* `node`: containerd, containerd-shim-runc-v2, ctr (`github.com/containerd/containerd/v2`, tag `no_btrfs`), runc
  (`github.com/opencontainers/runc`, cgo + libseccomp), the CNI plugins bridge, host-local, loopback, portmap
  (`github.com/containernetworking/plugins`) and crictl (`sigs.k8s.io/cri-tools`).
* `helm`: the `helm` CLI (`helm.sh/helm/v4`).

Output goes to `$DRA_BRIDGE_CACHE` (default `~/.cache/dra-bridge`) under `real/<set>-<key>/bin`, where the key hashes
the set's go.mod, go.sum, the build flags and the Go version: a change to any of them builds into a new directory; an
existing complete directory is reused. The script prints what it built or reused, where, and how long it took, and
exits non-zero with the Go tool's output when a build fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETS_DIR = ROOT / "realk8s"

# The pinned lines. `--kubernetes 1.35` selects by minor; the exact patch is pinned here and in the set's go.mod.
KUBERNETES_LINES = {"1.38": "v1.38.0-beta.0", "1.37": "v1.37.2", "1.35": "v1.35.4"}
DEFAULT_LINE = "1.37"
# A line whose go.mod needs a newer Go than the machine's: the go command fetches that toolchain from the module proxy
# (GOTOOLCHAIN=<version>, golang.org/toolchain) for this set only. k8s.io/kubernetes v1.38.0-beta.0 says `go 1.27.0`.
KUBERNETES_TOOLCHAINS = {"1.38": "go1.27.3"}
# Modules a line needs that the module proxy does not serve, replaced by a stand-in of ours under realk8s/shims/
# (each says what it supports), and the programs that need more of them than a stand-in should fake. From v1.38 the
# kubelet and kube-proxy import sigs.k8s.io/iptables-wrappers, which the proxy refuses (403, every version): the
# kubelet's use is small (two chains at start-up, skipped on a host without iptables, as these machines are), so
# the shim covers it; kube-proxy programs all of a Service's rules with it, so the 1.38 line builds no kube-proxy
# and the real backend runs the 1.37 one (bridge/sandbox/real/binaries.py; kube-proxy may be up to three minors
# older than the API server: the Kubernetes version skew policy).
KUBERNETES_SHIMS = {"1.38": {"sigs.k8s.io/iptables-wrappers": "shims/iptables-wrappers"}}
KUBERNETES_LEFT_OUT = {"1.38": ("kube-proxy",)}
ETCD_VERSION = "v3.7.3"
CONTAINERD_VERSION = "v2.4.2"
RUNC_VERSION = "v1.5.3"
CNI_PLUGINS_VERSION = "v1.10.0"
CRI_TOOLS_VERSION = "v1.37.0"
HELM_VERSION = "v4.3.2"

KUBE_TAGS = "selinux,notest,grpcnotrace"


@dataclass(frozen=True)
class BuildSet:
    """One consumer module and the programs built from it."""

    name: str
    # program name -> main package path
    programs: dict[str, str]
    cgo: dict[str, bool] = field(default_factory=dict)  # program -> needs cgo (default: off)
    tags: str = ""
    ldflags: str = ""
    # Debian packages a build needs (checked before building, with the apt-get command in the error).
    needs_debs: tuple[str, ...] = ()
    # GOTOOLCHAIN for this set's go commands ("" = the machine's own Go)
    toolchain: str = ""
    # module -> directory under realk8s/ that replaces it (KUBERNETES_SHIMS)
    shims: dict[str, str] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return SETS_DIR / self.name


def kubernetes_set(line: str) -> BuildSet:
    version = KUBERNETES_LINES[line]
    major, minor = version.lstrip("v").split(".")[:2]
    stamp = " ".join(
        f"-X k8s.io/component-base/version.{k}={v}"
        for k, v in (
            ("gitVersion", version),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
            ("buildDate", "1970-01-01T00:00:00Z"),
        )
    )
    stamp += f" -X k8s.io/client-go/pkg/version.gitVersion={version}"
    cmd = "k8s.io/kubernetes/cmd/"
    return BuildSet(
        name=f"kubernetes-v{line}",
        programs={p: cmd + p for p in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl",
                                       "kube-proxy") if p not in KUBERNETES_LEFT_OUT.get(line, ())},
        tags=KUBE_TAGS,
        ldflags=f"-s -w {stamp}",
        toolchain=KUBERNETES_TOOLCHAINS.get(line, ""),
        shims=KUBERNETES_SHIMS.get(line, {}),
    )


ETCD = BuildSet(
    name="etcd",
    programs={"etcd": "go.etcd.io/etcd/server/v3"},
    ldflags="-s -w",
)
NODE = BuildSet(
    name="node",
    programs={
        "containerd": "github.com/containerd/containerd/v2/cmd/containerd",
        "containerd-shim-runc-v2": "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
        "ctr": "github.com/containerd/containerd/v2/cmd/ctr",
        "runc": "github.com/opencontainers/runc",
        "bridge": "github.com/containernetworking/plugins/plugins/main/bridge",
        "loopback": "github.com/containernetworking/plugins/plugins/main/loopback",
        "host-local": "github.com/containernetworking/plugins/plugins/ipam/host-local",
        "portmap": "github.com/containernetworking/plugins/plugins/meta/portmap",
        "crictl": "sigs.k8s.io/cri-tools/cmd/crictl",
    },
    cgo={"runc": True},
    tags="no_btrfs",
    ldflags="-s -w",
    needs_debs=("libseccomp-dev", "pkg-config"),
)
HELM = BuildSet(
    name="helm",
    programs={"helm": "helm.sh/helm/v4/cmd/helm"},
    ldflags=f"-s -w -X helm.sh/helm/v4/internal/version.version={HELM_VERSION}",
)

ALL_SETS = ("kubernetes", "etcd", "node", "helm")


def build_sets(line: str, only: list[str]) -> list[BuildSet]:
    chosen = []
    for name in only:
        if name == "kubernetes":
            chosen.append(kubernetes_set(line))
        elif name == "etcd":
            chosen.append(ETCD)
        elif name == "node":
            chosen.append(NODE)
        elif name == "helm":
            chosen.append(HELM)
        else:
            raise SystemExit(f"unknown set {name!r}; choose from {', '.join(ALL_SETS)}")
    return chosen


def cache_root() -> Path:
    return Path(os.environ.get("DRA_BRIDGE_CACHE", Path.home() / ".cache" / "dra-bridge")) / "real"


def go_env(bs: BuildSet | None = None, **extra: str) -> dict[str, str]:
    """The environment of a set's go commands: its toolchain, if it names one (the machine's Go otherwise)."""
    env = dict(os.environ, **extra)
    if bs is not None and bs.toolchain:
        env["GOTOOLCHAIN"] = bs.toolchain
    return env


def go_version(bs: BuildSet | None = None) -> str:
    return subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True,
                          env=go_env(bs)).stdout.strip()


def set_key(bs: BuildSet) -> str:
    """A key for everything that decides the binaries' content."""
    h = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        h.update((bs.dir / name).read_bytes())
    for shim in sorted(bs.shims.values()):
        for f in sorted((SETS_DIR / shim).rglob("*")):
            if f.is_file():
                h.update(f.relative_to(SETS_DIR).as_posix().encode() + b"\0" + f.read_bytes())
    h.update(json.dumps([bs.programs, bs.cgo, bs.tags, bs.ldflags], sort_keys=True).encode())
    h.update(go_version(bs).encode())
    return h.hexdigest()[:12]


def bin_dir(bs: BuildSet) -> Path:
    return cache_root() / f"{bs.name}-{set_key(bs)}" / "bin"


def is_complete(bs: BuildSet, where: Path) -> bool:
    return all((where / p).is_file() and os.access(where / p, os.X_OK) for p in bs.programs)


def check_debs(bs: BuildSet) -> None:
    missing = []
    for deb in bs.needs_debs:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", deb], capture_output=True, text=True)
        if "install ok installed" not in r.stdout:
            missing.append(deb)
    if missing:
        raise SystemExit(
            f"building {bs.name} needs Debian packages {', '.join(missing)}: "
            f"apt-get install -y {' '.join(missing)}"
        )


def build(bs: BuildSet, *, jobs: int | None) -> tuple[Path, bool, float]:
    """Build (or reuse) one set; returns (bin dir, built now, seconds)."""
    out = bin_dir(bs)
    if is_complete(bs, out):
        return out, False, 0.0
    check_debs(bs)
    start = time.monotonic()
    # Build into a temporary sibling and rename it into place, so an interrupted build never looks complete.
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bin.", dir=out.parent))
    try:
        groups: dict[bool, list[str]] = {}
        for prog in bs.programs:
            groups.setdefault(bs.cgo.get(prog, False), []).append(prog)
        for cgo, progs in sorted(groups.items()):
            env = go_env(bs, CGO_ENABLED="1" if cgo else "0", GOFLAGS="-mod=readonly -trimpath -buildvcs=false")
            tags = bs.tags
            if cgo and bs.name == "node":
                tags = ",".join(t for t in (tags, "seccomp") if t)
            for prog in progs:
                cmd = ["go", "build", "-o", str(tmp / prog)]
                if jobs:
                    cmd += ["-p", str(jobs)]
                if tags:
                    cmd += ["-tags", tags]
                if bs.ldflags:
                    cmd += ["-ldflags", bs.ldflags]
                cmd.append(bs.programs[prog])
                t0 = time.monotonic()
                print(f"  go build {prog} ({bs.programs[prog]}) …", flush=True)
                r = subprocess.run(cmd, cwd=bs.dir, env=env, capture_output=True, text=True)
                if r.returncode != 0:
                    sys.stderr.write(r.stdout + r.stderr)
                    raise SystemExit(f"building {prog} in {bs.dir} failed (exit {r.returncode}); output above")
                print(f"    {prog}: {time.monotonic() - t0:.0f} s", flush=True)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out, True, time.monotonic() - start


# --- maintainers: regenerate a set's go.mod / go.sum ----------------------------------------------------------------


def _go(args: list[str], cwd: Path, bs: BuildSet | None = None) -> str:
    r = subprocess.run(["go", *args], cwd=cwd, capture_output=True, text=True, env=go_env(bs, GOFLAGS="-mod=mod"))
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(f"go {' '.join(args)} failed in {cwd}")
    return r.stdout


def staging_replaces(version: str, bs: BuildSet) -> list[str]:
    """The staging modules k8s.io/kubernetes@version replaces with ./staging/..., read from its own go.mod."""
    info = json.loads(_go(["mod", "download", "-json", f"k8s.io/kubernetes@{version}"], cwd=Path(tempfile.gettempdir()),
                          bs=bs))
    text = Path(info["GoMod"]).read_text()
    mods = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/src/", text, re.M)
    if not mods:
        raise SystemExit(f"k8s.io/kubernetes@{version}'s go.mod has no ./staging replaces; has its layout changed?")
    return sorted(set(mods))


def update(bs: BuildSet, line: str | None) -> None:
    bs.dir.mkdir(parents=True, exist_ok=True)
    for name in ("go.mod", "go.sum"):
        (bs.dir / name).unlink(missing_ok=True)
    gover = go_version(bs).removeprefix("go")
    lines = [f"// Generated by scripts/build_real.py --update; edit that script, not this file.",
             f"module dra-bridge.local/realk8s/{bs.name}", "", f"go {gover}", ""]
    requires: list[str] = []
    if line is not None:
        version = KUBERNETES_LINES[line]
        staging_version = "v0." + version.lstrip("v").split(".", 1)[1]
        requires.append(f"k8s.io/kubernetes {version}")
        lines.append("replace (")
        lines += [f"\t{m} => {m} {staging_version}" for m in staging_replaces(version, bs)]
        lines += [f"\t{m} => ../{where}" for m, where in sorted(bs.shims.items())]
        lines.append(")")
    elif bs is ETCD:
        requires.append(f"go.etcd.io/etcd/server/v3 {ETCD_VERSION}")
    elif bs is NODE:
        requires += [
            f"github.com/containerd/containerd/v2 {CONTAINERD_VERSION}",
            f"github.com/opencontainers/runc {RUNC_VERSION}",
            f"github.com/containernetworking/plugins {CNI_PLUGINS_VERSION}",
            f"sigs.k8s.io/cri-tools {CRI_TOOLS_VERSION}",
        ]
    elif bs is HELM:
        requires.append(f"helm.sh/helm/v4 {HELM_VERSION}")
    lines += ["", "require ("] + [f"\t{r}" for r in requires] + [")", ""]
    # `tool` lines name the main packages, so `go mod tidy` keeps everything they import in go.sum. Written here
    # rather than with `go get -tool`, which would move the pinned module to its newest version.
    lines += ["tool ("] + [f"\t{pkg}" for pkg in sorted(set(bs.programs.values()))] + [")", ""]
    (bs.dir / "go.mod").write_text("\n".join(lines))
    try:
        _go(["mod", "tidy"], cwd=bs.dir, bs=bs)
    except SystemExit:
        # tidy also resolves the tests of every imported package; a module only those tests import may not be
        # served (v1.38.0-beta.0: sigs.k8s.io/iptables-wrappers v1.0.0, under kube-proxy's iptables tests). The
        # build needs none of them: go on without it, and the build itself fails if a module it needs is missing.
        print(f"{bs.dir}: go mod tidy failed (output above); retrying with -e, which skips what it cannot fetch",
              file=sys.stderr)
        _go(["mod", "tidy", "-e"], cwd=bs.dir, bs=bs)
    for req in requires:
        mod, version = req.split()
        got = _go(["list", "-m", "-f", "{{.Version}}", mod], cwd=bs.dir, bs=bs).strip()
        if got != version:
            raise SystemExit(f"{bs.dir}: {mod} resolved to {got}, not the pinned {version}")
    print(f"updated {bs.dir}/go.mod and go.sum")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubernetes", default=os.environ.get("BRIDGE_REAL_KUBERNETES", DEFAULT_LINE),
                   choices=sorted(KUBERNETES_LINES), help="the Kubernetes line to build (default %(default)s)")
    p.add_argument("--only", default=",".join(ALL_SETS), help="comma-separated sets: " + ", ".join(ALL_SETS))
    p.add_argument("--jobs", type=int, default=None, help="go build -p (default: the Go tool's, the CPU count)")
    p.add_argument("--print-bin-dir", action="store_true", help="print each set's bin directory as JSON and exit")
    p.add_argument("--update", action="store_true", help="regenerate the chosen sets' go.mod/go.sum, then stop")
    args = p.parse_args(argv)
    if shutil.which("go") is None:
        print("the Go tool is not on PATH: the real components are built with it (Go >= 1.26)", file=sys.stderr)
        return 2
    sets = build_sets(args.kubernetes, [s.strip() for s in args.only.split(",") if s.strip()])
    if args.update:
        for bs in sets:
            update(bs, args.kubernetes if bs.name.startswith("kubernetes-") else None)
        return 0
    if args.print_bin_dir:
        print(json.dumps({bs.name: str(bin_dir(bs)) for bs in sets}, indent=2))
        return 0
    total = time.monotonic()
    for bs in sets:
        print(f"{bs.name}: {', '.join(bs.programs)}", flush=True)
        where, built, secs = build(bs, jobs=args.jobs)
        size = sum((where / prog).stat().st_size for prog in bs.programs)
        verb = f"built in {secs:.0f} s" if built else "reused (cached)"
        print(f"{bs.name}: {verb}, {size / 2**20:.0f} MiB in {where}", flush=True)
        record(bs, where)
    print(f"done in {time.monotonic() - total:.0f} s; the sandbox finds the binaries through {manifest_path()}")
    return 0


def manifest_path() -> Path:
    return cache_root() / "sets.json"


def record(bs: BuildSet, where: Path) -> None:
    """Note where a set's binaries are, for `bridge sandbox cluster --backend real` (bridge/sandbox/real/binaries.py
    reads this file; it never builds anything itself)."""
    path = manifest_path()
    try:
        current = json.loads(path.read_text())
        if not isinstance(current, dict):
            current = {}
    except (OSError, ValueError):
        current = {}
    current[bs.name] = str(where)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
