"""Container images for the real nodes, made here: nothing can be pulled on these machines (no registry), so each
node's containerd imports OCI archives that this module writes.

* `pause` — the pod sandbox image: a tiny static program of ours (`pause.c`, built with the system C compiler,
  `-static`) that sleeps until SIGINT/SIGTERM and reaps the zombies a shared PID namespace leaves it, which is the
  whole job of Kubernetes' own pause container (kubernetes `build/pause/linux/pause.c` documents the job; this is
  written from that description, not copied). Pinned as containerd's sandbox image.
* `probe` — the test image: Debian's statically linked busybox (`busybox-static`), with `/bin/sh` and the applets
  linked, and `/probe`, a script that prints what a GPU container sees (its `/dev/nvidia*` nodes, the driver files
  mounted from the driver root, `NVIDIA_*` variables, and the output of the mounted `nvidia-smi`) then sleeps. Tests
  read its log.

The archives follow the OCI image layout and image spec (opencontainers/image-spec `image-layout.md`,
`manifest.md`, `config.md`): one uncompressed layer (tar with sorted entries, fixed owner, mode and mtime), a
config, a manifest, `index.json` with the `org.opencontainers.image.ref.name` and `io.containerd.image.name`
annotations so that `ctr images import` names the image. The same input gives the same bytes, so the same digest.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

PAUSE_IMAGE = "dra-bridge.local/pause:1"
PROBE_IMAGE = "dra-bridge.local/probe:1"
_EPOCH = 0

PAUSE_C = r"""
/* The pod sandbox's process: hold the pod's namespaces open, reap zombies, exit on SIGINT/SIGTERM. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) { (void)sig; _exit(0); }

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction term = {.sa_handler = on_term};
  struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &term, NULL) < 0 || sigaction(SIGTERM, &term, NULL) < 0 ||
      sigaction(SIGCHLD, &child, NULL) < 0) {
    perror("sigaction");
    return 1;
  }
  if (getpid() != 1) fprintf(stderr, "pause: not PID 1 (fine outside a pod sandbox)\n");
  for (;;) pause();
}
"""

PROBE_SH = """#!/bin/sh
# What a GPU container sees (read by the sandbox's tests from the container's log).
echo "probe: begin"
for d in /dev/nvidia*; do [ -e "$d" ] && echo "probe: dev $(ls -l "$d" | awk '{print $1, $5, $6, $NF}')"; done
for f in /usr/lib/x86_64-linux-gnu/lib*nvidia* /usr/lib/x86_64-linux-gnu/libcuda* /lib64/lib*nvidia* \\
         /lib64/libcuda* /usr/bin/nvidia-*; do
  [ -e "$f" ] && echo "probe: file $f"
done
env | grep '^NVIDIA_' | sort | sed 's/^/probe: env /'
if [ -x /usr/bin/nvidia-smi ]; then /usr/bin/nvidia-smi -L 2>&1 | sed 's/^/probe: smi /'; fi
echo "probe: end"
exec sleep "${PROBE_SLEEP:-100000}"
"""

BUSYBOX_APPLETS = ("sh", "ls", "cat", "env", "grep", "sed", "awk", "sort", "sleep", "echo", "true", "false",
                   "ps", "mount", "id", "wc", "head", "tail", "test", "[")


class ImageBuildError(RuntimeError):
    pass


@dataclass
class Layer:
    """Files of one layer: container path -> (content, mode); symlinks: path -> target."""

    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)

    def tar(self) -> bytes:
        buf = io.BytesIO()
        dirs: set[str] = set()
        for path in list(self.files) + list(self.symlinks):
            parts = path.strip("/").split("/")[:-1]
            for i in range(1, len(parts) + 1):
                dirs.add("/".join(parts[:i]))
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            entries: list[tuple[str, str]] = [(d, "dir") for d in dirs]
            entries += [(p.strip("/"), "file") for p in self.files] + [(p.strip("/"), "link") for p in self.symlinks]
            for name, kind in sorted(entries):
                info = tarfile.TarInfo(name)
                info.mtime, info.uid, info.gid, info.uname, info.gname = _EPOCH, 0, 0, "", ""
                if kind == "dir":
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                elif kind == "link":
                    info.type, info.mode = tarfile.SYMTYPE, 0o777
                    info.linkname = self.symlinks["/" + name]
                    tar.addfile(info)
                else:
                    data, mode = self.files["/" + name]
                    info.size, info.mode = len(data), mode
                    tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()


def _blob(out: tarfile.TarFile, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size, info.mtime, info.mode = len(data), _EPOCH, 0o644
    out.addfile(info, io.BytesIO(data))
    return {"digest": f"sha256:{digest}", "size": len(data)}


def write_oci_archive(path: Path, name: str, layer: Layer, *, entrypoint: list[str], env: list[str] | None = None,
                      labels: dict[str, str] | None = None) -> str:
    """Write an OCI archive (image layout in a tar) of one image; returns the manifest digest."""
    layer_tar = layer.tar()
    diff_id = "sha256:" + hashlib.sha256(layer_tar).hexdigest()
    config = {
        "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
        "config": {"Entrypoint": entrypoint, "Env": env or ["PATH=/bin:/usr/bin"], "Labels": labels or {}},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "bridge.sandbox.real.images"}],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as out:
        def add_json(arcname: str, doc: object) -> None:
            data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
            info = tarfile.TarInfo(arcname)
            info.size, info.mtime, info.mode = len(data), _EPOCH, 0o644
            out.addfile(info, io.BytesIO(data))

        add_json("oci-layout", {"imageLayoutVersion": "1.0.0"})
        layer_desc = {"mediaType": "application/vnd.oci.image.layer.v1.tar", **_blob(out, layer_tar)}
        config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
        config_desc = {"mediaType": "application/vnd.oci.image.config.v1+json", **_blob(out, config_bytes)}
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": config_desc, "layers": [layer_desc]}
        manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
        manifest_desc = _blob(out, manifest_bytes)
        add_json("index.json", {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                                "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                                               **manifest_desc,
                                               "platform": {"architecture": "amd64", "os": "linux"},
                                               "annotations": {"io.containerd.image.name": name,
                                                               "org.opencontainers.image.ref.name": name}}]})
    tmp.replace(path)
    return str(manifest_desc["digest"])


def _key(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.hexdigest()[:12]


def build_pause(out_dir: Path, cc: str = "cc") -> Path:
    """The pause image's archive under `out_dir` (compiled once per directory)."""
    archive = out_dir / f"pause-{_key(PAUSE_C.encode())}.oci.tar"  # a changed program is a new archive
    if archive.exists():
        return archive
    if shutil.which(cc) is None:
        raise ImageBuildError(f"building the pause image needs a C compiler ({cc}) with static glibc (Debian: "
                              f"apt-get install gcc libc6-dev)")
    with tempfile.TemporaryDirectory() as tmp:
        src, binary = Path(tmp) / "pause.c", Path(tmp) / "pause"
        src.write_text(PAUSE_C)
        r = subprocess.run([cc, "-static", "-Os", "-s", "-o", str(binary), str(src)], capture_output=True, text=True)
        if r.returncode != 0:
            raise ImageBuildError(f"compiling the pause program failed: {r.stderr.strip()}")
        layer = Layer(files={"/pause": (binary.read_bytes(), 0o755)})
    write_oci_archive(archive, PAUSE_IMAGE, layer, entrypoint=["/pause"])
    return archive


def build_probe(out_dir: Path, busybox: Path = Path("/bin/busybox")) -> Path:
    if not busybox.is_file():
        raise ImageBuildError(f"the probe image needs a statically linked busybox at {busybox} (Debian: apt-get "
                              f"install busybox-static)")
    busybox_bytes = busybox.read_bytes()
    archive = out_dir / f"probe-{_key(busybox_bytes, PROBE_SH.encode())}.oci.tar"
    if archive.exists():
        return archive
    layer = Layer(files={"/bin/busybox": (busybox_bytes, 0o755), "/probe": (PROBE_SH.encode(), 0o755)},
                  symlinks={f"/bin/{a}": "busybox" for a in BUSYBOX_APPLETS})
    write_oci_archive(archive, PROBE_IMAGE, layer, entrypoint=["/probe"])
    return archive
