"""The HTML report in a real browser: headless Chromium renders it, runs its script, and takes a screenshot.

The page sets <body data-report-ready="true"> only after its script ran to the end, so a script error leaves
"false" in the dumped DOM. Skipped (with the reason) only when no Chromium binary exists.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bridge.report import load_snapshot, run_report
from tests.report.conftest import EXAMPLE

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"), "/usr/bin/chromium")
                 if p and Path(p).exists()), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)


@pytest.mark.timeout(240)
def test_report_page_renders_runs_its_script_and_screenshots(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(run_report(load_snapshot(EXAMPLE), output="html").text)
    dom = _chromium(tmp_path / "profile", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-report-ready="true"' in dom.stdout, "the page script did not finish (script error?)"
    assert "team-research" in dom.stdout and "<svg" in dom.stdout
    shot = tmp_path / "report.png"
    res = _chromium(tmp_path / "profile", "--window-size=1280,1600", f"--screenshot={shot}", page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


@pytest.mark.timeout(240)
def test_a_broken_script_is_detected(tmp_path: Path) -> None:
    """The marker really depends on the script: the same page with a throwing script stays 'false'."""
    html = run_report(load_snapshot(EXAMPLE), output="html").text.replace("(function(){", "(function(){throw 1;", 1)
    page = tmp_path / "broken.html"
    page.write_text(html)
    dom = _chromium(tmp_path / "profile", "--dump-dom", page.as_uri())
    assert 'data-report-ready="false"' in dom.stdout
