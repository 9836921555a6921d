"""JSON output: a stable document described by `bridge/report/render/report.schema.json` (JSON Schema).

Compatibility: `schemaVersion` changes only when a field is removed or changes meaning; new fields may appear in
the same version. Lists are sorted (findings by severity, rule, namespace, kind, name; rows by name) so two runs
over the same input produce byte-identical output. Nothing machine-specific (paths, timestamps) is included.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - a dependency of the package; without it every item takes `_pretty`
    orjson = None  # type: ignore[assignment]

from bridge.report.checks.simulation import Moves
from bridge.report.findings import RULES, Finding
from bridge.report.report import STATUSES, NamespaceRow, NodeRow, Report, WaveStep, WorkloadRow

SCHEMA_VERSION = "1"


def summary(report: Report) -> dict[str, Any]:
    sev = {s: sum(1 for f in report.findings if f.severity == s) for s in ("blocker", "warning", "info")}
    ns = {s: sum(1 for r in report.namespaces if r.status == s) for s in STATUSES}
    nodes = {s: sum(1 for r in report.nodes if r.status == s) for s in STATUSES}
    return {"findings": sev, "namespaces": ns, "nodes": nodes, "counts": dict(report.counts)}


def _namespace(r: NamespaceRow) -> dict[str, Any]:
    return {
        "name": r.name,
        "mode": r.mode,
        "status": r.status,
        "workloads": r.workloads,
        "gpus": r.gpus,
        "rules": list(r.rules),
        "capacity": None if r.capacity is None else {
            "gpus": r.capacity.gpus,
            "pods": r.capacity.pods,
            "matchingDevices": r.capacity.matching_devices,
            "fitsAlone": r.capacity.alone.fits,
            "pendingAlone": r.capacity.alone.pending,
            "fitsInWaveOrder": r.capacity.cumulative.fits,
            "pendingInWaveOrder": r.capacity.cumulative.pending,
            "moves": None if r.capacity.moves is None else _moves(r.capacity.moves),
        },
    }


def _moves(m: Moves) -> dict[str, Any]:
    return {"by": m.by, "devices": m.devices, "nodes": m.nodes, "freedByNamespace": m.freed,
            "fitsAlone": m.alone.fits, "pendingAlone": m.alone.pending,
            "fitsInWaveOrder": None if m.cumulative is None else m.cumulative.fits,
            "pendingInWaveOrder": None if m.cumulative is None else m.cumulative.pending,
            "perNode": dict(sorted(m.per_node.items()))}


def _node(r: NodeRow) -> dict[str, Any]:
    return {"name": r.name, "backends": list(r.backends), "gpus": r.gpus, "devicePluginAllocatable": r.allocatable,
            "draDevices": r.dra_devices, "split": r.split, "status": r.status, "rules": list(r.rules)}


def _workload(w: WorkloadRow) -> dict[str, Any]:
    return {"kind": w.kind, "namespace": w.namespace, "name": w.name, "replicas": w.replicas,
            "gpusPerPod": w.gpus_per_pod, "gpus": w.gpus, "status": w.status, "rules": list(w.rules),
            "api": w.api, "podsByApi": w.pods_by_api, "draUncounted": list(w.dra_unknown)}


def _finding(f: Finding) -> dict[str, Any]:
    return {"rule": f.rule, "title": RULES[f.rule].title, "severity": f.severity,
            "object": {"kind": f.object.kind, "namespace": f.object.namespace, "name": f.object.name},
            "message": f.message, "fix": f.fix, "details": f.details}


def _wave(s: WaveStep) -> dict[str, Any]:
    return {"wave": s.wave, "namespace": s.namespace, "mode": s.mode, "reason": s.reason,
            "command": s.bridge_command, "kubectlCommand": s.kubectl_command}


def _fields(report: Report) -> Iterator[tuple[str, Any, Iterable[dict[str, Any]] | None]]:
    """(key, value, None) for small fields; (key, None, items) for the long lists, built one item at a time."""
    yield "schemaVersion", SCHEMA_VERSION, None
    yield "source", report.source, None
    if report.not_read:  # absent when every object was read
        yield "notRead", dict(report.not_read), None
    yield "kubernetesVersion", report.version, None
    yield "resourceApiVersions", list(report.resource_versions), None
    yield "status", report.status, None
    yield "assumeSplit", report.assume_split, None
    yield "splitController", {"state": report.controller.state, "evidence": report.controller.evidence}, None
    yield "summary", summary(report), None
    yield "gpusByBackend", dict(report.gpus_by_backend), None
    yield "features", [{"gate": f.gate, "kep": f.kep, "stage": f.stage, "use": f.why, "stages": f.stages,
                        "source": f.source} for f in report.features], None
    yield "namespaces", None, map(_namespace, report.namespaces)
    yield "nodes", None, map(_node, report.nodes)
    yield "workloads", None, map(_workload, report.workloads)
    yield "findings", None, map(_finding, report.findings)
    yield "wavePlan", None, map(_wave, report.waves)


def to_dict(report: Report) -> dict[str, Any]:
    return {key: value if items is None else list(items) for key, value, items in _fields(report)}


_SCALAR = json.JSONEncoder().encode  # the C encoder (no indent): no per-call closures


_PADS = ["\n" + "  " * n for n in range(64)]


def _pad(level: int) -> str:
    return _PADS[level] if level < len(_PADS) else "\n" + "  " * level


def _pretty(value: Any, level: int) -> str:
    """`json.dumps(value, indent=2)` nested `level` deep, without json's indenting encoder: that one builds a fresh
    set of closures referring to each other on every call, garbage the cyclic GC must find, and the report renders
    with the GC paused (`bulk_allocation`)."""
    if isinstance(value, str):
        return _SCALAR(value)
    if isinstance(value, dict):
        if not value:
            return "{}"
        pad = _pad(level + 1)
        return "{" + pad + ("," + pad).join([_SCALAR(str(k)) + ": " + _pretty(v, level + 1)
                                              for k, v in value.items()]) + _pad(level) + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        pad = _pad(level + 1)
        return "[" + pad + ("," + pad).join([_pretty(v, level + 1) for v in value]) + _pad(level) + "]"
    return _SCALAR(value)


def _plain(value: Any) -> bool:
    """Whether `value` is made of exactly str, int, bool, None, dict, list and tuple: what orjson writes as the
    standard library's encoder does (no float: their spellings differ, "1e+16" / "1e16"; no subclass or other type,
    which the two encode differently or only one of them at all)."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return True
    if t is dict:
        return all(map(_plain, value.values()))
    if t is list or t is tuple:
        return all(map(_plain, value))
    return False


def _item(value: Any) -> str:
    """`_pretty(value, 2)`, written by orjson where that gives the same bytes (ten times faster on a 150,000-pod
    report): plain values (`_plain`) whose keys are strings and integers fit 64 bits (orjson refuses the others),
    ASCII only (the standard library writes every other character as a 4-hex-digit \\u escape), with DEL escaped
    as the standard library does."""
    if orjson is not None and _plain(value):
        try:
            raw = orjson.dumps(value, option=orjson.OPT_INDENT_2)
        except TypeError:  # a key that is not a string, an integer beyond 64 bits, a lone surrogate
            return _pretty(value, 2)
        if raw.isascii():
            return raw.replace(b"\x7f", b"\\u007f").replace(b"\n", b"\n    ").decode("ascii")
    return _pretty(value, 2)


def render_json(report: Report) -> str:
    """Byte for byte `json.dumps(to_dict(report), indent=2) + "\n"`, written one list item at a time: on a
    150,000-pod cluster the whole document as one dict, then one chunk list, was the report's memory peak."""
    out: list[str] = ["{"]
    for n, (key, value, items) in enumerate(_fields(report)):
        out.append(("\n  " if n == 0 else ",\n  ") + json.dumps(key) + ": ")
        if items is None:
            out.append(_pretty(value, 1))
            continue
        count = 0
        for item in items:
            out.append(("[\n    " if count == 0 else ",\n    ") + _item(item))
            count += 1
        out.append("[]" if count == 0 else "\n  ]")
    out.append("\n}\n")
    return "".join(out)
