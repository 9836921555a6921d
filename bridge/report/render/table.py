"""Terminal output: fits 100 columns; colour only when asked (the CLI asks on a TTY without NO_COLOR)."""

from __future__ import annotations

import textwrap

from bridge.humantext import escape
from bridge.report.render.common import (
    LEGEND,
    SEVERITY_HEADING,
    counts_text,
    fmt_api,
    fmt_capacity,
    fmt_gpus,
    grouped_findings,
    not_read_text,
    waves,
)
from bridge.report.report import Report

WIDTH = 100
_COLOURS = {"blocked": "31", "blocker": "31", "needs-config": "33", "warning": "33", "ready": "32", "info": "36"}


class _Style:
    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def status(self, word: str, width: int = 0) -> str:
        padded = word.ljust(width)
        code = _COLOURS.get(word)
        return f"\x1b[{code}m{padded}\x1b[0m" if self.colour and code else padded

    def bold(self, text: str) -> str:
        return f"\x1b[1m{text}\x1b[0m" if self.colour else text


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


def _table(headers: list[str], rows: list[list[str]], widths: list[int], style: _Style, status_col: int = -1) -> list[str]:
    """Cells longer than their column are cut (`~`), except the last column (rule IDs), which wraps onto continuation
    lines under itself, so every rule of a row is shown whole."""
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    indent = sum(w + 2 for w in widths[:-1])
    for r in rows:
        cells = []
        wrapped: list[str] = []
        for i, (c, w) in enumerate(zip(r, widths)):
            if i == len(widths) - 1:
                wrapped = textwrap.wrap(c, w, break_long_words=True) or [""]
                cells.append(wrapped[0])
                continue
            c = _cut(c, w)
            cells.append(style.status(c, w) if i == status_col else c.ljust(w))
        out.append("  ".join(cells).rstrip())
        out += [" " * indent + more for more in wrapped[1:]]
    return out


def render_table(report: Report, colour: bool = False) -> str:
    s = _Style(colour)
    lines: list[str] = []
    lines.append(s.bold("dra-bridge migrate-report") + "  " + _cut(report.source, WIDTH - 27))
    lines.append(
        f"Kubernetes {report.version}, resource.k8s.io {', '.join(report.resource_versions) or 'not served'}, "
        f"split {report.assume_split}"
    )
    not_read = not_read_text(report)
    if not_read:  # kinds come from the input: control characters escaped
        lines += textwrap.wrap(f"Not read: {escape(not_read)}", WIDTH, subsequent_indent="    ")
    overall = textwrap.wrap(
        f"Overall: {report.status}  ({counts_text(report)}; "
        f"{report.counts.get('gpuWorkloads', 0)} GPU workloads, {report.counts.get('pods', 0)} pods, "
        f"{report.counts.get('nodes', 0)} nodes)", WIDTH, subsequent_indent="    ")
    overall[0] = "Overall: " + s.status(report.status) + overall[0][len("Overall: ") + len(report.status):]
    lines += overall
    lines.append("")
    lines.append(s.bold("Namespaces"))
    rows = []
    for r in report.namespaces:
        cap = fmt_capacity(r.capacity, short=True)
        rows.append([r.name, r.mode, r.status, str(r.workloads), fmt_gpus(r.gpus), cap, " ".join(r.rules)])
    lines += _table(["NAMESPACE", "MODE", "STATUS", "WL", "GPUS", "DRA CAPACITY", "RULES"], rows,
                    [20, 6, 12, 3, 22, 12, 13], s, status_col=2)
    lines.append("")
    lines.append(s.bold("Nodes"))
    rows = [[r.name, ",".join(r.backends) or "-", str(r.gpus), str(r.allocatable), str(r.dra_devices), r.split_short,
             r.status, " ".join(r.rules)] for r in report.nodes]
    lines += _table(["NODE", "BACKENDS", "GPUS", "DP", "DRA", "SPLIT", "STATUS", "RULES"], rows,
                    [20, 22, 4, 4, 4, 7, 12, 13], s, status_col=6)
    lines.append("")
    lines.append(s.bold("Workloads"))
    rows = [[f"{w.namespace}/{w.kind}/{w.name}", str(w.replicas), fmt_gpus(w.gpus_per_pod), fmt_api(w.api), w.status,
             " ".join(w.rules)] for w in report.workloads]
    lines += _table(["WORKLOAD", "REPL", "PER POD", "API", "STATUS", "RULES"], rows, [46, 4, 14, 6, 12, 8], s,
                    status_col=4)
    if report.findings:
        lines.append("")
        lines += textwrap.wrap(LEGEND, WIDTH)
    for severity in ("blocker", "warning", "info"):
        groups = grouped_findings(report, severity)
        if not groups:
            continue
        lines.append("")
        lines.append(s.bold(SEVERITY_HEADING[severity]))
        for f in groups:
            # Object names can be 253 characters: wrap (breaking inside the name), colour only the rule ID.
            head = textwrap.wrap(f"{f.rule} {f.object}", WIDTH, subsequent_indent="    ")
            head[0] = s.status(f.rule) + head[0][len(f.rule):]
            lines += head
            # messages quote what the cluster holds (annotations, config values): control characters escaped
            lines += textwrap.wrap(escape(f.message), WIDTH, initial_indent="    ", subsequent_indent="    ")
            if severity != "info":
                lines += textwrap.wrap("fix: " + escape(f.fix), WIDTH, initial_indent="    ",
                                       subsequent_indent="         ")
    lines.append("")
    lines.append(s.bold("Wave plan") + " (lowest risk first; one wave per run: wave-plan.sh N from --emit-manifests)")
    if not report.waves:
        lines.append("    nothing to move")
    for number, steps in waves(report):
        for i, step in enumerate(steps):
            label = f"wave {number:<3}" if i == 0 else " " * 8
            lines += textwrap.wrap(f"{label}{step.bridge_command}  # {step.reason}", WIDTH,
                                   initial_indent="  ", subsequent_indent=" " * 12)
    lines.append("")
    lines.append("Exit status: 0 ready, 1 blockers found, 2 usage or connection error.")
    return "\n".join(line.rstrip() for line in lines) + "\n"
