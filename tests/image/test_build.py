"""`scripts/build_image.py`'s image as a runtime and a registry see it: reproducible (a rebuild of the same commit gives
the same digest and the same archive bytes), its config (entrypoint, non-root user, environment), the OCI labels
(version, revision, source, licenses, created from the commit time), the names the archive carries for
`ctr images import` and `skopeo`, and that those match the chart's image defaults."""

from __future__ import annotations

import hashlib
import subprocess
import tarfile
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from imagebuild import build, oci, recipe

# The first test to ask for the image builds it (minutes on a cold cache: the Debian base comes from the mirror).
pytestmark = pytest.mark.timeout(1200)

CHART = recipe.ROOT / "charts" / "dra-bridge"
LABEL = "org.opencontainers.image."


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(recipe.ROOT), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.slow
def test_two_builds_of_one_commit_give_the_same_image_digest_and_archive(built: build.BuildResult,
                                                                         tmp_path: Path) -> None:
    again = build.build(tmp_path / "again.oci.tar", log=lambda msg: None)
    assert again.manifest_digest == built.manifest_digest
    assert _sha256(again.archive) == _sha256(built.archive)


def test_bridge_is_the_entrypoint_and_the_default_user_is_not_root(image: oci.OciArchive) -> None:
    config = image.config["config"]
    assert config["Entrypoint"] == ["/usr/local/bin/bridge"]
    assert config["Cmd"] == ["--help"]
    assert config["User"] == f"{recipe.USER_ID}:{recipe.USER_ID}"
    assert {"PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"} <= set(config["Env"])
    assert image.config["os"] == "linux" and image.config["architecture"] == "amd64"


def test_the_oci_labels_name_version_revision_source_licence_and_the_commit_time(image: oci.OciArchive,
                                                                                built: build.BuildResult) -> None:
    project = recipe.project()
    revision = _git("rev-parse", "HEAD")
    created = datetime.fromtimestamp(int(_git("log", "-1", "--format=%ct")), timezone.utc)
    labels = image.config["config"]["Labels"]
    assert labels[LABEL + "version"] == project.version
    assert labels[LABEL + "revision"] in (revision, revision + "-dirty")
    assert labels[LABEL + "source"] == project.source
    assert labels[LABEL + "licenses"] == "Apache-2.0"
    assert labels[LABEL + "created"] == created.strftime("%Y-%m-%dT%H:%M:%SZ") == built.created
    assert image.manifest["annotations"] == labels
    assert image.config["created"] == built.created
    assert [h["created"] for h in image.config["history"]] == [built.created] * 3


def test_three_gzip_layers_debian_then_dependencies_then_dra_bridge(image: oci.OciArchive) -> None:
    assert [layer["mediaType"] for layer in image.layers] == ["application/vnd.oci.image.layer.v1.tar+gzip"] * 3
    assert len(image.config["rootfs"]["diff_ids"]) == 3
    assert [h["created_by"] for h in image.config["history"]] == [
        "mmdebstrap bookworm " + " ".join(recipe.DEBIAN.packages), "install image/requirements.lock",
        f"install dra_bridge-{recipe.project().version}-py3-none-any.whl"]


def test_the_archive_names_the_image_as_the_chart_deploys_it(image: oci.OciArchive) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart["appVersion"] == recipe.project().version
    assert values["image"]["tag"] in ("", chart["appVersion"])
    [entry] = image.index["manifests"]
    assert entry["annotations"] == {
        oci.CONTAINERD_NAME: f"{values['image']['repository']}:{chart['appVersion']}",
        oci.REF_NAME: chart["appVersion"]}
    assert entry["digest"] == image.manifest_digest


def test_the_archive_itself_is_deterministic_sorted_owned_by_root_stamped_with_the_commit_time(
        built: build.BuildResult) -> None:
    epoch = int(datetime.strptime(built.created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp())
    with tarfile.open(built.archive) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert {"oci-layout", "index.json"} <= set(names)
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", epoch)}
