"""The `bridge` commands the demo runs for real: each one a child process (`python -m bridge ...`, the interpreter
running the demo) against the sandbox's kubeconfig, exactly as the platform engineer following along would type it.
The demo prints the command without `--kubeconfig` (it tells the reader once to `export KUBECONFIG=...`) and reads
the outcome from the exit status and the output, never from inside the command."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Ran:
    shown: str  # the command as a person types it
    code: int
    stdout: str
    stderr: str


class Commands:
    def __init__(self, kubeconfig: Path, *, timeout: float = 120.0) -> None:
        self.kubeconfig = kubeconfig
        self.timeout = timeout

    def run(self, *args: str) -> Ran:
        """Run `bridge ARGS... --kubeconfig <sandbox>`; a command that does not end within the timeout is killed
        and reported with exit status 124 (as `timeout(1)` does)."""
        shown = "bridge " + " ".join(args)
        argv = [sys.executable, "-m", "bridge", *args, "--kubeconfig", str(self.kubeconfig)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as err:
            out = err.stdout.decode(errors="replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
            return Ran(shown, 124, out, f"{shown}: no answer within {self.timeout:.0f}s")
        return Ran(shown, done.returncode, done.stdout, done.stderr)

    def namespace_set(self, namespace: str, mode: str) -> Ran:
        return self.run("namespace", "set", namespace, mode, "--strict")

    def namespace_status(self, namespace: str) -> Ran:
        return self.run("namespace", "status", namespace)

    def report(self, out_dir: Path, name: str) -> tuple[Ran, dict[str, Any] | None, Ran, Path]:
        """`bridge migrate-report` twice on the live sandbox: JSON (what the demo narrates) and the HTML page.
        Returns both runs, the parsed JSON report (None when the command failed) and the HTML file's path."""
        json_path, html_path = out_dir / f"{name}.json", out_dir / f"{name}.html"
        as_json = self.run("migrate-report", "-o", "json", "--file", str(json_path))
        doc = None
        if as_json.code in (0, 1):
            try:
                doc = json.loads(json_path.read_text())
            except (OSError, ValueError):
                doc = None
        as_html = self.run("migrate-report", "-o", "html", "--file", str(html_path))
        return as_json, doc, as_html, html_path
