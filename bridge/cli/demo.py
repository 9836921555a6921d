"""`bridge demo`: the whole migration story on one machine (thin shell over `bridge.sandbox.demo`).

This CLI module is the one place besides `bridge sandbox` that imports the sandbox (the import-linter contract
`sandbox-not-in-production` names both): the demo *is* a sandbox cluster with a story on top, and nothing in the
product (node daemon, webhook, controller, report) can reach it through here.

Exit codes: 0 every step's outcome was the one the demo tells, 1 one was not (which step, what was expected, what was
seen), 2 the sandbox could not start or bad options, 130 interrupted (Ctrl-C/SIGTERM: everything stopped).
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from types import FrameType

import click

from bridge.logs import setup_logging


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _until_stopped() -> None:
    try:
        while True:
            time.sleep(0.5)
    except KeyboardInterrupt:
        click.echo("")


@click.command("demo")
@click.option("--fast/--no-fast", default=False, show_default=True, show_envvar=True, envvar="BRIDGE_DEMO_FAST",
              help="Short timings for CI: Node status every 0.5 s, 2 s controller cool-down, 3 s jobs (default: "
                   "2 s, 10 s, 8 s, easier to follow).")
@click.option("--keep/--no-keep", default=False, show_default=True, show_envvar=True, envvar="BRIDGE_DEMO_KEEP",
              help="Leave the sandbox running at the end, with its kubeconfig printed, until Ctrl-C.")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=None, show_envvar=True,
              envvar="BRIDGE_DEMO_OUT_DIR",
              help="Where the kubeconfig, the reports (JSON, HTML) and summary.json go. Default: a new directory "
                   "under the system's temp dir, kept and printed.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="error",
              show_default=True, show_envvar=True, envvar="BRIDGE_DEMO_LOG_LEVEL",
              help="Log level of the in-process parts (API emulator, kubelets, scheduler); the bridge's own "
                   "processes log to files in the sandbox's work directory.")
def demo(fast: bool, keep: bool, out_dir: Path | None, log_level: str) -> None:
    """The whole story on one machine: two GPU nodes on the device plugin with workloads running, the migration
    report, a namespace to shadow then dra, new pods getting DRA devices while old ones keep theirs, GPUs moving
    between the APIs as demand shifts, the report again. Each step says what happened, what to look at and the
    command that shows it, and checks it.

    \b
    Examples:
      bridge demo
      bridge demo --fast --out-dir /tmp/demo     # CI: summary in /tmp/demo/summary.json
      bridge demo --keep                         # explore the sandbox afterwards (Ctrl-C stops it)
    """
    from bridge.sandbox.demo import EXIT_START, DemoOptions, run_demo

    if out_dir is not None:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            probe = out_dir / ".write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as err:
            raise click.BadParameter(f"cannot write there: {err.strerror or err}", param_hint="--out-dir") from err
    setup_logging("text", log_level.upper())
    # Both signals end the demo (or, with --keep, the wait at its end) the same way: the sandbox stops in order. Set
    # explicitly: a shell starts background jobs with SIGINT ignored, and Python keeps an ignored SIGINT ignored.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupt)
    try:
        code = run_demo(DemoOptions(out_dir=out_dir, fast=fast, keep=keep), click.echo,
                        until_stopped=_until_stopped)
    except KeyboardInterrupt:
        click.echo("bridge demo: interrupted; the sandbox is stopped", err=True)
        sys.exit(130)
    if code == EXIT_START:
        click.echo("bridge demo: could not start the sandbox (see above)", err=True)
    sys.exit(code)
