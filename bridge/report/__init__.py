"""`bridge migrate-report`: a read-only readiness report for moving GPU workloads from the device plugin to DRA.

Pipeline (each stage pure except the first):

    sources.load_snapshot(path) | live.load_live(api)  -> ClusterData (plain dicts + version/discovery facts)
    model.build_model(data)                            -> ClusterModel (top-owner workloads, namespaces, nodes)
    checks.run_checks(CheckContext(model, options))    -> [Finding] (rule ID, severity, object, message, fix)
    report.build_report(data, options)                 -> Report (readiness per cluster/node/namespace/workload,
                                                          capacity simulation, wave plan)
    render.render(report, fmt) / remediation.manifests(report)

Public entry point: `run_report(data, ...)`. Rule IDs (DRB0nn) are stable; see `bridge/report/checks/`.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.report.checks.context import ReportOptions
from bridge.report.dpconfig import DevicePluginConfig
from bridge.report.report import Report, build_report
from bridge.report.sources import ClusterData, MalformedInput, SnapshotError, bulk_allocation, load_snapshot


@dataclass(frozen=True)
class RunResult:
    report: Report
    text: str
    manifests: dict[str, str]

    @property
    def exit_code(self) -> int:
        return 1 if self.report.blockers else 0


def run_report(data: ClusterData, *, output: str = "table", assume_split: str = "current",
               device_plugin_configs: tuple[DevicePluginConfig, ...] = (), colour: bool = False) -> RunResult:
    from bridge.report.remediation import manifests
    from bridge.report.render import render

    report = build_report(data, ReportOptions(assume_split=assume_split, device_plugin_configs=device_plugin_configs))
    with bulk_allocation():  # rendering allocates millions of small strings next to a huge live heap
        try:
            return RunResult(report, render(report, output, colour=colour), manifests(report))
        except RecursionError as err:  # a quota copied into a manifest, nested thousands of levels deep
            raise MalformedInput("malformed input: an object is nested too deeply to render (thousands of levels): "
                                 "not a Kubernetes object") from err


__all__ = ["ClusterData", "Report", "ReportOptions", "RunResult", "SnapshotError", "build_report", "load_snapshot",
           "run_report"]
