"""Suite-wide fixtures. Topic fixtures live in each tests/<topic>/conftest.py."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temp directory with a short path: unix socket paths must stay under 107 bytes, and pytest's tmp_path
    can be long on some machines."""
    with tempfile.TemporaryDirectory(prefix="br-", dir="/tmp" if os.path.isdir("/tmp") else None) as d:
        yield Path(d)
