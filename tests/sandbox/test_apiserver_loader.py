"""The emulator preloads a `bridge migrate-report snapshot` directory as it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.apiserver.loader import LoadError, read_dir

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster-snapshot"


def test_the_example_snapshot_loads_without_its_version_metadata_files() -> None:
    objects = read_dir(EXAMPLE)
    kinds = {o["kind"] for o in objects}
    assert {"Node", "Pod", "Namespace", "ResourceQuota"} <= kinds
    with ApiServer() as srv:
        srv.load_dir(EXAMPLE)


def test_a_file_without_kind_is_still_refused_with_its_name(tmp_path: Path) -> None:
    (tmp_path / "objects.json").write_text('{"apiVersion": "v1"}')
    with pytest.raises(LoadError, match="objects.json"):
        read_dir(tmp_path)
