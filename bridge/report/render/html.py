"""HTML output: ONE self-contained file (inline CSS, inline SVG charts, a few lines of inline script), no external
resources of any kind, so it opens offline and can be attached to a ticket.

Charts: readiness by namespace (one bar per namespace, length = GPUs requested, colour = status; at most 40
bars, the largest namespaces) and GPUs by backend. The script only adds severity filters to the findings list; when it has run it sets
`<body data-report-ready="true">`, which the browser test reads to prove the page ran without script errors.
"""

from __future__ import annotations

from html import escape

from bridge.report.findings import RULES
from bridge.report.render.common import (
    LEGEND,
    fmt_api,
    fmt_capacity,
    fmt_gpus,
    not_read_text,
    severity_counts,
    waves,
)
from bridge.report.report import Report

COLOURS = {"ready": "#2e7d32", "needs-config": "#ef8f00", "blocked": "#c62828",
           "blocker": "#c62828", "warning": "#ef8f00", "info": "#1565c0"}
_BACKEND_COLOURS = ["#1565c0", "#42a5f5", "#6a1b9a", "#78909c", "#bdbdbd", "#00897b"]

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1f;background:#f6f7f9}
header{background:#1d2733;color:#fff;padding:18px 28px}
header h1{margin:0 0 4px;font-size:22px}
header p{margin:0;opacity:.85}
main{padding:20px 28px;max-width:1200px}
section{background:#fff;border:1px solid #e1e4e8;border-radius:8px;padding:14px 18px;margin:0 0 18px}
h2{font-size:17px;margin:0 0 10px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid #eceef1;vertical-align:top}
th{background:#f3f4f6;font-weight:600}
.pill{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:12px;font-weight:600}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin-bottom:18px}
.card{flex:1;min-width:150px;background:#fff;border:1px solid #e1e4e8;border-radius:8px;padding:10px 14px}
.card b{display:block;font-size:24px}
.charts{display:flex;gap:18px;flex-wrap:wrap}
.charts section{flex:1;min-width:380px}
.finding{border-left:4px solid #999;padding:6px 10px;margin:8px 0;background:#fafbfc}
.finding .fix{color:#444}
.finding code,td code{background:#eef1f4;padding:0 3px;border-radius:3px}
.filters button{margin-right:6px;border:1px solid #ccd;background:#fff;border-radius:4px;padding:3px 10px;cursor:pointer}
.filters button.on{background:#1d2733;color:#fff}
pre{background:#1d2733;color:#e8eaed;padding:10px 14px;border-radius:6px;overflow-x:auto;font-size:12.5px}
"""

_SCRIPT = """
(function(){
  var buttons=document.querySelectorAll('.filters button');
  function apply(sev){
    document.querySelectorAll('.finding').forEach(function(el){
      el.style.display=(sev==='all'||el.getAttribute('data-severity')===sev)?'':'none';});
    buttons.forEach(function(b){b.classList.toggle('on',b.getAttribute('data-filter')===sev);});
  }
  buttons.forEach(function(b){b.addEventListener('click',function(){apply(b.getAttribute('data-filter'));});});
  apply('all');
  document.body.setAttribute('data-report-ready','true');
})();
"""


def _pill(word: str) -> str:
    return f'<span class="pill" style="background:{COLOURS.get(word, "#555")}">{escape(word)}</span>'


MAX_BARS = 40  # a 10,000-namespace cluster gets the 40 largest by GPU requests, and a note


def readiness_chart(report: Report) -> str:
    rows = report.namespaces
    if not rows:
        return "<p>No namespaces with GPU workloads.</p>"
    note = ""
    if len(rows) > MAX_BARS:
        rows = sorted(sorted(rows, key=lambda r: (-sum(r.gpus.values()), r.name))[:MAX_BARS], key=lambda r: r.name)
        note = (f"<p>The {MAX_BARS} namespaces with the most GPU requests of {len(report.namespaces)}; "
                "all are in the table below.</p>")
    bar_h, gap, label_w, width = 22, 6, 150, 560
    total = max((sum(r.gpus.values()) for r in rows), default=1) or 1
    height = len(rows) * (bar_h + gap) + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="Readiness by namespace" '
             f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    for i, r in enumerate(rows):
        y = i * (bar_h + gap)
        gpus = sum(r.gpus.values())
        w = max(4, int((width - label_w - 110) * gpus / total))
        parts.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end" font-size="12">{escape(r.name)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y}" width="{w}" height="{bar_h}" rx="3" fill="{COLOURS[r.status]}">'
                     f'<title>{escape(r.name)}: {escape(r.status)}, {gpus} GPU requests</title></rect>')
        parts.append(f'<text x="{label_w + w + 6}" y="{y + 15}" font-size="12">{gpus} · {escape(r.status)}</text>')
    y = len(rows) * (bar_h + gap) + 10
    x = label_w
    for status in ("ready", "needs-config", "blocked"):
        parts.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{COLOURS[status]}"/>')
        parts.append(f'<text x="{x + 16}" y="{y + 11}" font-size="12">{status}</text>')
        x += 110
    parts.append("</svg>")
    return note + "".join(parts)


def backend_chart(report: Report) -> str:
    items = [(k, v) for k, v in report.gpus_by_backend.items() if v > 0]
    if not items:
        return "<p>No GPUs found.</p>"
    total = sum(v for _, v in items)
    width, bar_y, bar_h = 520, 10, 34
    height = bar_y + bar_h + 24 + 20 * len(items)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="GPUs by backend" '
             f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    x = 0.0
    for i, (name, v) in enumerate(items):
        w = (width - 2) * v / total
        colour = _BACKEND_COLOURS[i % len(_BACKEND_COLOURS)]
        parts.append(f'<rect x="{x:.1f}" y="{bar_y}" width="{w:.1f}" height="{bar_h}" fill="{colour}">'
                     f'<title>{escape(name)}: {v}</title></rect>')
        x += w
    for i, (name, v) in enumerate(items):
        y = bar_y + bar_h + 14 + 20 * i
        colour = _BACKEND_COLOURS[i % len(_BACKEND_COLOURS)]
        parts.append(f'<rect x="0" y="{y}" width="12" height="12" fill="{colour}"/>')
        parts.append(f'<text x="18" y="{y + 11}" font-size="12">{escape(name)}: {v} GPUs '
                     f'({100 * v / total:.0f}%)</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(report: Report) -> str:
    sev = severity_counts(report)
    ns_status = {s: sum(1 for r in report.namespaces if r.status == s) for s in ("ready", "needs-config", "blocked")}
    cards = "".join(
        f'<div class="card">{label}<b style="color:{colour}">{value}</b></div>'
        for label, value, colour in (
            ("Overall", escape(report.status), COLOURS[report.status]),
            ("Blockers", sev["blocker"], COLOURS["blocker"]),
            ("Warnings", sev["warning"], COLOURS["warning"]),
            ("Namespaces ready", f"{ns_status['ready']} / {len(report.namespaces)}", COLOURS["ready"]),
            ("GPU workloads", report.counts.get("gpuWorkloads", 0), "#1d2733"),
        )
    )
    ns_rows = []
    for r in report.namespaces:
        cap = fmt_capacity(r.capacity)
        ns_rows.append([f"<code>{escape(r.name)}</code>", escape(r.mode), _pill(r.status), str(r.workloads),
                        escape(fmt_gpus(r.gpus)), escape(cap), escape(", ".join(r.rules) or "-")])
    node_rows = [[f"<code>{escape(r.name)}</code>", escape(", ".join(r.backends) or "-"), str(r.gpus),
                  str(r.allocatable), str(r.dra_devices), escape(r.split), _pill(r.status),
                  escape(", ".join(r.rules) or "-")] for r in report.nodes]
    wl_rows = [[f"<code>{escape(w.namespace)}/{escape(w.kind)}/{escape(w.name)}</code>", str(w.replicas),
                escape(fmt_gpus(w.gpus_per_pod)), escape(fmt_api(w.api)), _pill(w.status),
                escape(", ".join(w.rules) or "-")]
               for w in report.workloads]
    findings = "".join(
        f'<div class="finding" data-severity="{f.severity}" style="border-color:{COLOURS[f.severity]}">'
        f"{_pill(f.severity)} <b>{escape(f.rule)}</b> {escape(RULES[f.rule].title)} · <code>{escape(str(f.object))}</code>"
        f"<div>{escape(f.message)}</div>"
        + (f'<div class="fix"><b>Fix:</b> {escape(f.fix)}</div>' if f.severity != "info" else "")
        + "</div>"
        for f in report.findings
    )
    wave_text = "\n\n".join(
        f"# --- wave {number}\n" + "\n".join(
            f"# {escape(s.namespace)} -> {s.mode} ({escape(s.reason)})\n#   {escape(s.kubectl_command)}\n"
            f"{escape(s.bridge_command)}" for s in steps)
        for number, steps in waves(report)
    ) or "# nothing to move"
    features = [[escape(f.gate or "-"), escape(f.kep), escape(f.stage), escape(f.stages), escape(f.why), escape(f.source)]
                for f in report.features]
    not_read = not_read_text(report)
    not_read_line = f"\n<p>Not read: {escape(not_read)}</p>" if not_read else ""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>GPU migration report: {escape(report.status)}</title>
<style>{_CSS}</style>
</head>
<body data-report-ready="false">
<header><h1>GPU migration report</h1>
<p>{escape(report.source)} · Kubernetes {escape(report.version)} · resource.k8s.io
{escape(", ".join(report.resource_versions) or "not served")} · split {escape(report.assume_split)}</p>{not_read_line}</header>
<main>
<div class="cards">{cards}</div>
<div class="charts">
<section><h2>Readiness by namespace (GPU requests)</h2>{readiness_chart(report)}</section>
<section><h2>GPUs by backend</h2>{backend_chart(report)}</section>
</div>
<section><h2>Namespaces</h2>{_table(["Namespace", "Mode", "Status", "Workloads", "GPUs", "DRA capacity", "Rules"], ns_rows)}</section>
<section><h2>Findings</h2><p>{escape(LEGEND)}</p>
<div class="filters"><button data-filter="all">all</button><button data-filter="blocker">blockers ({sev["blocker"]})</button><button data-filter="warning">warnings ({sev["warning"]})</button><button data-filter="info">info ({sev["info"]})</button></div>
{findings}</section>
<section><h2>Wave plan (lowest risk first; one wave per run: wave-plan.sh N)</h2><pre>{wave_text}</pre></section>
<section><h2>Nodes</h2>{_table(["Node", "Backends", "GPUs", "Device plugin", "DRA devices", "Split", "Status", "Rules"], node_rows)}</section>
<section><h2>Workloads</h2>{_table(["Workload", "Replicas", "Per pod", "API", "Status", "Rules"], wl_rows)}</section>
<section><h2>Feature availability</h2>{_table(["Gate", "KEP", "Stage here", "Stages", "Used for", "Source"], features)}</section>
</main>
<script>{_SCRIPT}</script>
</body>
</html>
"""
