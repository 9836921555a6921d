"""The container image built once per test session (`built`), for tests/image and the chart on the real backend.

`built` runs `scripts/build_image.py`'s pipeline (the Debian base and the wheels come from ~/.cache/dra-bridge/image,
made on the first run) into the session's temp directory. Under pytest-xdist the workers share it: the first to
get the lock builds, the others read its result. The build needs root, mmdebstrap and umoci (`.ci/run` installs
them); without them the tests are skipped with that command, except under CI (`CI` set), where they fail.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO / "scripts"))  # scripts/imagebuild, as scripts/build_image.py imports it

from imagebuild import build, oci  # noqa: E402

__all__ = ["build", "oci"]

INSTALL_HINT = "run as root with Debian's mmdebstrap and umoci installed (apt-get install mmdebstrap umoci)"


def require_image_tools() -> None:
    problems = [f"{t} is not installed" for t in ("mmdebstrap", "umoci") if shutil.which(t) is None]
    if os.geteuid() != 0:
        problems.append("not root")
    if not problems:
        return
    message = f"the image build needs root, mmdebstrap and umoci ({'; '.join(problems)}): {INSTALL_HINT}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of this test session that every xdist worker sees (the workers' base temps share a parent)."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "dra-bridge-image"
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(scope="session")
def built(shared_dir: Path) -> build.BuildResult:
    require_image_tools()
    result_file = shared_dir / "result.json"
    with _locked(shared_dir / "build.lock"):
        if not result_file.exists():
            result = build.build(shared_dir / "dra-bridge.oci.tar", log=lambda msg: None)
            fields = {k: str(v) if isinstance(v, Path) else v for k, v in result.__dict__.items()}
            result_file.write_text(json.dumps(fields))
    fields = json.loads(result_file.read_text())
    return build.BuildResult(**{**fields, "archive": Path(fields["archive"])})
