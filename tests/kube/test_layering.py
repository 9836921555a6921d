"""Importing `bridge.kube` itself (for the Protocol, constants and errors) does not load the official client, so
code that only names the types starts fast and works where the client is not configured.

The static half of the rule (only `bridge/kube/` imports `kubernetes`) is the `kube-only` import-linter contract,
checked by tests/test_architecture.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_bridge_kube_does_not_load_the_client() -> None:
    code = "import sys, bridge.kube; assert 'kubernetes' not in sys.modules, sorted(m for m in sys.modules if m.startswith('kubernetes'))"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
