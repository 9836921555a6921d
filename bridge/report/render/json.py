"""JSON output: a stable document described by `bridge/report/render/report.schema.json` (JSON Schema).

Compatibility: `schemaVersion` changes only when a field is removed or changes meaning; new fields may appear in
the same version. Lists are sorted (findings by severity, rule, namespace, kind, name; rows by name) so two runs
over the same input produce byte-identical output. Nothing machine-specific (paths, timestamps) is included.
"""

from __future__ import annotations

import json
from typing import Any

from bridge.report.findings import RULES
from bridge.report.report import STATUSES, Report

SCHEMA_VERSION = "1"


def summary(report: Report) -> dict[str, Any]:
    sev = {s: sum(1 for f in report.findings if f.severity == s) for s in ("blocker", "warning", "info")}
    ns = {s: sum(1 for r in report.namespaces if r.status == s) for s in STATUSES}
    nodes = {s: sum(1 for r in report.nodes if r.status == s) for s in STATUSES}
    return {"findings": sev, "namespaces": ns, "nodes": nodes, "counts": dict(report.counts)}


def to_dict(report: Report) -> dict[str, Any]:
    return {
        "schemaVersion": SCHEMA_VERSION,
        "source": report.source,
        "kubernetesVersion": report.version,
        "resourceApiVersions": list(report.resource_versions),
        "status": report.status,
        "assumeSplit": report.assume_split,
        "summary": summary(report),
        "gpusByBackend": dict(report.gpus_by_backend),
        "features": [{"gate": f.gate, "kep": f.kep, "stage": f.stage, "use": f.why, "stages": f.stages,
                      "source": f.source} for f in report.features],
        "namespaces": [
            {
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
                },
            }
            for r in report.namespaces
        ],
        "nodes": [
            {
                "name": r.name,
                "backends": list(r.backends),
                "gpus": r.gpus,
                "devicePluginAllocatable": r.allocatable,
                "draDevices": r.dra_devices,
                "split": r.split,
                "status": r.status,
                "rules": list(r.rules),
            }
            for r in report.nodes
        ],
        "workloads": [
            {
                "kind": w.kind,
                "namespace": w.namespace,
                "name": w.name,
                "replicas": w.replicas,
                "gpusPerPod": w.gpus_per_pod,
                "gpus": w.gpus,
                "status": w.status,
                "rules": list(w.rules),
            }
            for w in report.workloads
        ],
        "findings": [
            {
                "rule": f.rule,
                "title": RULES[f.rule].title,
                "severity": f.severity,
                "object": {"kind": f.object.kind, "namespace": f.object.namespace, "name": f.object.name},
                "message": f.message,
                "fix": f.fix,
                "details": f.details,
            }
            for f in report.findings
        ],
        "wavePlan": [
            {"wave": s.wave, "namespace": s.namespace, "mode": s.mode, "reason": s.reason,
             "command": s.bridge_command, "kubectlCommand": s.kubectl_command}
            for s in report.waves
        ],
    }


def render_json(report: Report) -> str:
    return json.dumps(to_dict(report), indent=2, sort_keys=False) + "\n"
