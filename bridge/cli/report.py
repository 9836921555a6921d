"""`bridge migrate-report`: thin click shell over `bridge.report` (validation here, then one library call)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from bridge.report.dpconfig import DevicePluginConfig

EXIT_READY, EXIT_BLOCKED, EXIT_USAGE = 0, 1, 2

_HELP = """Read-only readiness report for moving GPU workloads from the device plugin to DRA.

\b
Scans a live cluster (--kubeconfig/--context, or in-cluster) or a snapshot (--snapshot PATH: a file or directory
of `kubectl get -o yaml|json` output, Lists or multi-document YAML, or `kubectl get --raw /api/v1/pods` lists,
.gz accepted; optional version.json from `kubectl version -o json` and api-versions.txt from
`kubectl api-versions`). Never writes to the cluster.

\b
Exit status:
  0  no blockers (ready, or only needs-config / info findings)
  1  blockers found (usable as a CI gate)
  2  usage error, unreadable snapshot, or the API server cannot be reached

\b
Examples:
  bridge migrate-report --snapshot examples/cluster-snapshot
  bridge migrate-report -o html --file report.html --emit-manifests fixes/
  bridge migrate-report --assume-split all -o json | jq '.findings[] | select(.severity=="blocker")'
  bridge migrate-report snapshot --out cluster-snapshot/
  bridge migrate-report --rules                  # the rule catalogue (docs/rules.md)
"""


def _split(ctx: click.Context, param: click.Parameter, value: str) -> str:
    v = value.strip().lower()
    if v in ("current", "all") or (v.isdigit() and int(v) >= 0):
        return v
    raise click.BadParameter("must be current, all, or a number of devices per GPU node")


def _require(ctx: click.Context, param: click.Parameter,
             value: tuple[str, ...]) -> tuple[tuple[str, frozenset[str]], ...]:
    out = []
    for item in value:
        ns, _, rules = item.partition("=")
        ids = frozenset(r.strip().upper() for r in rules.split(",") if r.strip())
        bad = [r for r in ids if not re.fullmatch(r"DRB\d{3}", r)]
        if not ns.strip() or bad:
            raise click.BadParameter(f"{item!r}: expected NAMESPACE or NAMESPACE=DRB030,DRB032")
        out.append((ns.strip(), ids))
    return tuple(out)


def _bytes(ctx: click.Context, param: click.Parameter, value: str) -> int:
    from bridge.kvalues.quantity import QuantityError, parse_quantity

    try:
        n = parse_quantity(value)
    except QuantityError:
        n = None
    if n is None or n < 1 or n.denominator != 1:
        raise click.BadParameter(f"{value!r}: expected a size in bytes such as 2Gi, 512Mi or 1000000")
    return int(n)


def _connect(kubeconfig: str | None, context: str | None, timeout: float):  # type: ignore[no-untyped-def]
    from bridge.kube import connect
    from bridge.kube.retry import RetryPolicy

    try:
        return connect(kubeconfig, context, timeout=timeout, retry=RetryPolicy(deadline=timeout))
    except Exception as err:  # ConfigError and friends: a usage problem, exit 2
        raise ReportError(f"cannot load Kubernetes configuration: {err}") from err


def _load_live(kubeconfig: str | None, context: str | None, timeout: float):  # type: ignore[no-untyped-def]
    from bridge.report.live import LiveError, Progress, load_live

    api = _connect(kubeconfig, context, timeout)
    try:
        return load_live(api, source=f"context {context}" if context else "live cluster", progress=Progress())
    except LiveError as err:
        raise ReportError(str(err)) from err


class ReportError(click.ClickException):
    """An input or connection problem: exit status 2 (1 is reserved for 'blockers found')."""

    exit_code = EXIT_USAGE


@click.group("migrate-report", invoke_without_command=True, help=_HELP)
@click.option("--snapshot", "snapshot", type=click.Path(exists=True, path_type=Path), show_envvar=True, envvar="BRIDGE_REPORT_SNAPSHOT",
              help="Scan this snapshot file or directory instead of a live cluster.")
@click.option("--kubeconfig", show_envvar=True, envvar="BRIDGE_KUBECONFIG", help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster).")
@click.option("--context", show_envvar=True, envvar="BRIDGE_CONTEXT", help="Kubeconfig context.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True, show_envvar=True, envvar="BRIDGE_REPORT_TIMEOUT",
              help="Seconds per API request, and for retrying an unreachable API server.")
@click.option("-o", "--output", type=click.Choice(["table", "json", "markdown", "html"]), default="table",
              show_default=True, show_envvar=True, envvar="BRIDGE_REPORT_OUTPUT", help="Output format (json: see report.schema.json).")
@click.option("--file", "out_file", type=click.Path(dir_okay=False, path_type=Path), show_envvar=True, envvar="BRIDGE_REPORT_FILE",
              help="Write the report to this file instead of stdout.")
@click.option("--emit-manifests", type=click.Path(file_okay=False, path_type=Path), show_envvar=True, envvar="BRIDGE_REPORT_EMIT_MANIFESTS",
              help="Write remediation YAML (DeviceClasses, paired quotas) and wave-plan.sh into this directory; "
                   "files an earlier run wrote there and this one does not are removed (and named).")
@click.option("--assume-split", default="current", callback=_split, show_envvar=True, envvar="BRIDGE_REPORT_ASSUME_SPLIT",
              show_default=True, help="DRA side for the capacity simulation: current (published devices), all, or N per GPU node.")
@click.option("--device-plugin-config", "dp_configs", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              show_envvar=True, envvar="BRIDGE_REPORT_DEVICE_PLUGIN_CONFIG", help="NVIDIA device-plugin config file (version: v1) to translate; repeatable.")
@click.option("--color/--no-color", "colour", default=None, show_envvar=True, envvar="BRIDGE_REPORT_COLOR",
              help="Colour the table (default: on a terminal unless NO_COLOR is set).")
@click.option("--require-fixed", "require_fixed", multiple=True, callback=_require, show_envvar=True,
              envvar="BRIDGE_REPORT_REQUIRE_FIXED", metavar="NAMESPACE[=RULE,...]",
              help="Instead of the report: exit 0 when NAMESPACE is ready to flip (none of RULES left, no blocker "
                   "about it), else list what is left and exit 1. Repeatable; wave-plan.sh runs it before each flip.")
@click.option("--rules", "list_rules", is_flag=True, show_envvar=True, envvar="BRIDGE_REPORT_RULES",
              help="Print the rule catalogue (every rule ID, what it detects, its severities and fix; Markdown, as "
                   "docs/rules.md) and exit 0, scanning nothing.")
@click.option("--max-file-size", "max_file_size", default="2Gi", show_default=True, callback=_bytes, show_envvar=True,
              envvar="BRIDGE_REPORT_MAX_FILE_SIZE",
              help="Largest snapshot or config file read (after gunzip), e.g. 512Mi, 4Gi; only regular files are read.")
@click.pass_context
def migrate_report(ctx: click.Context, snapshot: Path | None, kubeconfig: str | None, context: str | None,
                   timeout: float, output: str,
                   out_file: Path | None, emit_manifests: Path | None, assume_split: str, dp_configs: tuple[Path, ...],
                   colour: bool | None, max_file_size: int,
                   require_fixed: tuple[tuple[str, frozenset[str]], ...], list_rules: bool) -> None:
    if ctx.invoked_subcommand is not None:
        return
    if list_rules:
        from bridge.report.catalogue import markdown

        click.echo(markdown(), nl=False)
        ctx.exit(EXIT_READY)
    from bridge.report.dpconfig import parse_config
    from bridge.report.findings import ObjectRef
    from bridge.report.sources import SnapshotError, bulk_allocation, read_regular

    if snapshot is not None and (kubeconfig or context):
        raise click.UsageError("--snapshot cannot be combined with --kubeconfig/--context")
    configs = []
    for p in dp_configs:
        try:
            text = read_regular(p, max_file_size).decode("utf-8", errors="replace")
        except SnapshotError as err:
            raise click.BadParameter(str(err), param_hint="--device-plugin-config") from err
        cfg = parse_config(text, ObjectRef("File", "", p.name), p.name)
        if cfg is None:
            raise click.BadParameter(f"{p}: not an NVIDIA device-plugin config (expected `version: v1` with flags/sharing)",
                                     param_hint="--device-plugin-config")
        configs.append(cfg)
    if colour is None:
        target_tty = out_file is None and sys.stdout.isatty()
        colour = target_tty and not os.environ.get("NO_COLOR")
    # The cyclic GC is paused for the whole scan, loading to output: the run allocates millions of objects that hold
    # no cycles, and every collection would walk all of them to find nothing (between the stages too: the first
    # collection after a pause walks everything allocated during it). They are freed when `_scan` returns, before
    # the GC runs again.
    with bulk_allocation():
        code = _scan(snapshot, kubeconfig, context, timeout, output, out_file, emit_manifests, assume_split,
                     tuple(configs), colour, max_file_size, require_fixed)
    ctx.exit(code)


def _scan(snapshot: Path | None, kubeconfig: str | None, context: str | None, timeout: float, output: str,
          out_file: Path | None, emit_manifests: Path | None, assume_split: str,
          configs: tuple[DevicePluginConfig, ...], colour: bool, max_file_size: int,
          require_fixed: tuple[tuple[str, frozenset[str]], ...]) -> int:
    """Load, report, write: the exit status."""
    from bridge.report import run_report
    from bridge.report.sources import SnapshotError, load_snapshot

    if snapshot is not None:
        try:
            data = load_snapshot(snapshot, max_file_bytes=max_file_size)
        except SnapshotError as err:
            raise ReportError(str(err)) from err
    else:
        data = _load_live(kubeconfig, context, timeout)
    if require_fixed:
        _check_ready(data, require_fixed, assume_split, configs)
    try:
        result = run_report(data, output=output, assume_split=assume_split, device_plugin_configs=configs,
                            colour=colour)
    except SnapshotError as err:  # MalformedInput: an object with a field of the wrong type
        raise ReportError(str(err)) from err
    if out_file is not None:
        out_file.write_text(result.text)
        click.echo(f"report written to {out_file}", err=True)
    else:
        click.echo(result.text, nl=False, color=colour)
    if emit_manifests is not None:
        from bridge.report.emit import write_manifests

        done = write_manifests(emit_manifests, result.manifests)
        click.echo(f"{len(done.written)} remediation file(s) written to {emit_manifests}", err=True)
        if done.removed:
            click.echo(f"removed {len(done.removed)} file(s) an earlier run wrote there and this one does not: "
                       f"{', '.join(done.removed)}", err=True)
        if done.kept:
            click.echo(f"left {len(done.kept)} file(s) of an earlier run that were changed since it wrote them "
                       f"(remove them if they no longer apply): {', '.join(done.kept)}", err=True)
    return EXIT_BLOCKED if result.report.blockers else EXIT_READY


def _check_ready(data, wanted, assume_split: str, configs) -> None:  # type: ignore[no-untyped-def]
    """`--require-fixed`: one line per namespace (and per finding still open); exit 0 ready, 1 not yet."""
    from bridge.report import ReportOptions, build_report
    from bridge.report.report import unresolved
    from bridge.report.sources import SnapshotError

    try:
        report = build_report(data, ReportOptions(assume_split=assume_split, device_plugin_configs=configs))
    except SnapshotError as err:
        raise ReportError(str(err)) from err
    ready = True
    for ns, rules in wanted:
        left = unresolved(report, ns, rules)
        if not left:
            done = f": {', '.join(sorted(rules))} fixed" if rules else ""
            click.echo(f"{ns}: ready to flip{done}, no blocker")
            continue
        ready = False
        click.echo(f"{ns}: NOT ready: {len(left)} finding(s) still open")
        for f in left:
            click.echo(f"  {f.rule} {f.severity} {f.object}: {f.message}")
            click.echo(f"    fix: {f.fix}")
    sys.exit(EXIT_READY if ready else EXIT_BLOCKED)


@migrate_report.command("snapshot")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path), show_envvar=True, envvar="BRIDGE_REPORT_SNAPSHOT_OUT",
              help="Directory to write the snapshot into (created).")
@click.pass_context
def snapshot_cmd(ctx: click.Context, out: Path) -> None:
    """Write a snapshot of a live cluster (the objects the report reads, as the API server sends them) for scanning
    elsewhere with --snapshot. Each list is written page by page, so memory stays at one page of objects whatever
    the cluster's size; the files take their names only once every list is read, so a failed snapshot leaves none."""
    from bridge.report.live import LiveError, Progress, snapshot_live
    from bridge.report.sources import SnapshotError

    parent = ctx.parent.params if ctx.parent else {}
    api = _connect(parent.get("kubeconfig"), parent.get("context"), parent.get("timeout", 30.0))
    try:
        snap = snapshot_live(api, out, progress=Progress())
    except (LiveError, SnapshotError) as err:
        raise ReportError(str(err)) from err
    except OSError as err:
        raise ReportError(f"cannot write the snapshot to {out}: {err}") from err
    click.echo(f"wrote {sum(snap.counts.values())} objects in {len(snap.files)} files to {out}", err=True)
    for plural, reason in sorted(snap.unreadable.items()):
        click.echo(f"warning: {plural}: {reason}", err=True)
