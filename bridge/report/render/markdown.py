"""Markdown output (GitHub-flavoured tables), for pull requests and tickets."""

from __future__ import annotations

from bridge.report.findings import RULES
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

_ICON = {"blocked": "blocked", "needs-config": "needs-config", "ready": "ready"}


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(_esc(c) for c in r) + " |" for r in rows]
    return out


def render_markdown(report: Report) -> str:
    not_read = not_read_text(report)
    lines = [
        "# GPU migration report",
        "",
        f"- Source: {report.source}",
        f"- Kubernetes: {report.version}; resource.k8s.io: {', '.join(report.resource_versions) or 'not served'}",
        f"- DRA split assumed: {report.assume_split}",
        *([f"- Not read: {_esc(not_read)}"] if not_read else []),
        f"- **Overall: {report.status}** ({counts_text(report)})",
        "",
        "## Namespaces",
        "",
    ]
    rows = []
    for r in report.namespaces:
        cap = fmt_capacity(r.capacity)
        rows.append([f"`{r.name}`", r.mode, f"**{r.status}**", str(r.workloads), fmt_gpus(r.gpus), cap,
                     ", ".join(r.rules) or "-"])
    lines += _table(["Namespace", "Mode", "Status", "Workloads", "GPUs", "DRA capacity", "Rules"], rows)
    lines += ["", "## Nodes", ""]
    lines += _table(
        ["Node", "Backends", "GPUs", "Device plugin", "DRA devices", "Split", "Status", "Rules"],
        [[f"`{r.name}`", ", ".join(r.backends) or "-", str(r.gpus), str(r.allocatable), str(r.dra_devices), r.split,
          r.status, ", ".join(r.rules) or "-"] for r in report.nodes],
    )
    lines += ["", "## GPUs by backend", ""]
    lines += _table(["Backend", "GPUs"], [[k, str(v)] for k, v in report.gpus_by_backend.items()])
    lines += ["", "## Workloads", ""]
    lines += _table(
        ["Workload", "Replicas", "Per pod", "API", "Status", "Rules"],
        [[f"`{w.namespace}/{w.kind}/{w.name}`", str(w.replicas), fmt_gpus(w.gpus_per_pod), fmt_api(w.api), w.status,
          ", ".join(w.rules) or "-"] for w in report.workloads],
    )
    if report.findings:
        lines += ["", LEGEND]
    for severity in ("blocker", "warning", "info"):
        fs = grouped_findings(report, severity)
        if not fs:
            continue
        lines += ["", f"## {SEVERITY_HEADING[severity]}", ""]
        for f in fs:
            lines.append(f"- **{f.rule}** {RULES[f.rule].title}: `{f.object}`  ")
            lines.append(f"  {_esc(f.message)}  ")
            if severity != "info":
                lines.append(f"  *Fix:* {_esc(f.fix)}")
    lines += ["", "## Feature availability", ""]
    lines += _table(["Gate", "KEP", "Stage here", "Stages", "Used for", "Source"],
                    [[f.gate or "-", f.kep, f.stage, f.stages, f.why, f.source] for f in report.features])
    lines += ["", "## Wave plan", "", "Lowest risk first, one wave at a time (`sh wave-plan.sh N` from "
              "`--emit-manifests` checks each step's fixes first). Each step is one command (equivalent kubectl in "
              "the comment).", ""]
    for number, steps in waves(report):
        lines += [f"### Wave {number}", "", "```sh"]
        for s in steps:
            lines.append(f"# {s.namespace} -> {s.mode} ({s.reason}); {s.kubectl_command}")
            lines.append(s.bridge_command)
        lines += ["```", ""]
    if not report.waves:
        lines.append("Nothing to move.")
    return "\n".join(lines) + "\n"
