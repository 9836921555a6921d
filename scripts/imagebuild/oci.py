"""The OCI image: layers, config and labels put together by umoci, wrapped in one OCI archive; and read back.

umoci (opencontainers/umoci, Debian's package) writes the image layout: `raw add-layer` gzips each layer tar and
records it with its history entry, `config` sets the runtime config, the labels and the manifest annotations, `gc`
drops the blobs the intermediate steps left behind. Every time it writes is given explicitly (`--created`,
`--history.created`), so the manifest digest depends only on the layers and these values.

The archive is the layout directory as a tar (`oci-layout`, `index.json`, `blobs/sha256/...`): what `skopeo copy
oci-archive:FILE`, `podman load -i FILE` and `ctr images import FILE` read. Its index names the image twice, as
BuildKit's OCI exporter does: `org.opencontainers.image.ref.name` (the tag; skopeo's `oci-archive:FILE:TAG`) and
`io.containerd.image.name` (the full reference, the name `ctr images import` gives it: containerd
core/images/archive/importer.go reads it from index.json).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import tartree

CONTAINERD_NAME = "io.containerd.image.name"
REF_NAME = "org.opencontainers.image.ref.name"


class OciError(Exception):
    pass


@dataclass(frozen=True)
class Layer:
    tar: Path
    created_by: str
    comment: str


@dataclass(frozen=True)
class ImageSpec:
    reference: str  # repository:tag, e.g. ghcr.io/dra-bridge/dra-bridge:0.1.0
    created: str  # RFC 3339, the commit time
    arch: str  # OCI/Go architecture name (amd64, arm64)
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    user: str
    env: tuple[str, ...]
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def tag(self) -> str:
        return self.reference.rsplit(":", 1)[1]


def _umoci(*args: str) -> None:
    proc = subprocess.run(["umoci", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise OciError(f"umoci {args[0]} failed (exit {proc.returncode}): {proc.stderr.strip()}")


def pack(layout: Path, layers: list[Layer], spec: ImageSpec) -> None:
    image = f"{layout}:{spec.tag}"
    _umoci("init", "--layout", str(layout))
    _umoci("new", "--image", image)
    for layer in layers:
        _umoci("raw", "add-layer", "--image", image, "--history.created", spec.created,
               "--history.created_by", layer.created_by, "--history.comment", layer.comment, str(layer.tar))
    config = ["config", "--image", image, "--no-history", "--created", spec.created, "--os", "linux",
              "--architecture", spec.arch, "--config.user", spec.user, "--config.workingdir", "/"]
    for arg in spec.entrypoint:
        config += ["--config.entrypoint", arg]
    for arg in spec.cmd:
        config += ["--config.cmd", arg]
    for var in spec.env:
        config += ["--config.env", var]
    for key, value in sorted(spec.labels.items()):
        config += ["--config.label", f"{key}={value}", "--manifest.annotation", f"{key}={value}"]
    _umoci(*config)
    _umoci("gc", "--layout", str(layout))
    index_path = layout / "index.json"
    index = json.loads(index_path.read_text())
    if len(index["manifests"]) != 1:
        raise OciError(f"expected one manifest in {index_path}, found {len(index['manifests'])}")
    index["manifests"][0].setdefault("annotations", {})[CONTAINERD_NAME] = spec.reference
    index_path.write_text(json.dumps(index, sort_keys=True, separators=(",", ":")))


def write_archive(layout: Path, out: Path, epoch: int) -> None:
    tmp = out.with_name(out.name + ".part")
    tartree.write_tar(layout, tartree.walk(layout), tmp, epoch)
    tmp.replace(out)


@dataclass
class OciArchive:
    """An OCI archive read back: its index, the one image's manifest and config, and blob access."""

    path: Path
    index: dict[str, Any]
    manifest_digest: str
    manifest: dict[str, Any]
    config: dict[str, Any]
    _blobs: dict[str, tarfile.TarInfo]

    @classmethod
    def read(cls, path: Path) -> "OciArchive":
        with tarfile.open(path) as tar:
            members = {m.name.removeprefix("./"): m for m in tar.getmembers()}

            def load(name: str) -> Any:
                f = tar.extractfile(members[name])
                assert f is not None
                return json.loads(f.read())

            if load("oci-layout").get("imageLayoutVersion") != "1.0.0":
                raise OciError(f"{path}: not an OCI image layout 1.0.0")
            index = load("index.json")
            digest = index["manifests"][0]["digest"]
            manifest = load(_blob_name(digest))
            config = load(_blob_name(manifest["config"]["digest"]))
        blobs = {name.removeprefix("blobs/").replace("/", ":", 1): m for name, m in members.items()
                 if name.startswith("blobs/sha256/")}
        return cls(path, index, digest, manifest, config, blobs)

    @property
    def layers(self) -> list[dict[str, Any]]:
        return list(self.manifest["layers"])

    def blob_size(self, digest: str) -> int:
        return self._blobs[digest].size

    def extract_layer(self, digest: str, dest: Path) -> None:
        """Unpack one layer (gzip tar) into `dest` with owners and modes (as root)."""
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(self.path) as outer:
            f = outer.extractfile(self._blobs[digest])
            assert f is not None
            proc = subprocess.Popen(["tar", "-xzpf", "-", "--numeric-owner", "-C", str(dest)],
                                    stdin=subprocess.PIPE, stderr=subprocess.PIPE)
            assert proc.stdin is not None and proc.stderr is not None
            shutil.copyfileobj(f, proc.stdin, 1 << 20)
            proc.stdin.close()
            err = proc.stderr.read()
            if proc.wait() != 0:
                raise OciError(f"unpacking layer {digest}: {err.decode()[-2000:]}")

    def unpack(self, dest: Path) -> None:
        for layer in self.layers:
            self.extract_layer(layer["digest"], dest)


def _blob_name(digest: str) -> str:
    algo, hexdigest = digest.split(":", 1)
    return f"blobs/{algo}/{hexdigest}"
