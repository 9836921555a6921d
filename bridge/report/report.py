"""The report: model + findings folded into readiness per cluster, node, namespace and workload, plus the wave plan.

Readiness of an object is the worst severity among the findings about it: a blocker makes it `blocked`, a warning
`needs-config`, otherwise `ready`. A namespace also inherits the findings of its workloads and quotas, and the
cluster-wide blockers (no DRA API, an invalid or hijacked DeviceClass), which block every namespace. Everything here
is deterministic (sorted), so renderers can be golden-tested.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from bridge.report.checks import CheckContext, ReportOptions, run_checks
from bridge.report.checks.simulation import NamespaceCapacity, simulate_capacity
from bridge.report.features import BRIDGE_DRIVER, FEATURES, GPU, MODE_LABEL, Stage
from bridge.report.findings import SEVERITY_RANK, Finding, is_cluster_blocker, namespace_of
from bridge.report.model import ClusterModel, Node, Workload, build_model
from bridge.report.shape import find_malformed
from bridge.report.sources import ClusterData, MalformedInput, bulk_allocation
from bridge.report.splitcontroller import SplitController
from bridge.report.waves import flips

STATUS_BY_SEVERITY = {"blocker": "blocked", "warning": "needs-config"}
STATUSES = ("ready", "needs-config", "blocked")


def status_of(findings: list[Finding]) -> str:
    worst = min((SEVERITY_RANK[f.severity] for f in findings if f.severity != "info"), default=None)
    if worst is None:
        return "ready"
    return "blocked" if worst == 0 else "needs-config"


@dataclass(frozen=True)
class WorkloadRow:
    kind: str
    namespace: str
    name: str
    replicas: int
    gpus_per_pod: dict[str, int]
    gpus: dict[str, int]
    status: str
    rules: tuple[str, ...]
    api: str = "none"  # legacy | dra | mixed (its live pods' API, else its spec's) | none (no whole GPU asked)
    pods_by_api: dict[str, int] = field(default_factory=dict)
    dra_unknown: tuple[str, ...] = ()  # DRA requests whose count could not be read


@dataclass(frozen=True)
class NamespaceRow:
    name: str
    mode: str
    workloads: int
    gpus: dict[str, int]
    status: str
    rules: tuple[str, ...]
    capacity: NamespaceCapacity | None


def _split_column(node: Node) -> tuple[str, str]:
    """The SPLIT column, long and short: the request and what the daemon makes of it on this node
    (`bridge.ledger.evaluate_request`: the same parser and fit the node daemon uses)."""
    result = node.split_result()
    return ("-", "-") if result is None else (result.column(), result.short())


@dataclass(frozen=True)
class NodeRow:
    name: str
    backends: tuple[str, ...]
    gpus: int
    allocatable: int  # nvidia.com/gpu through the device plugin
    dra_devices: int  # devices published in ResourceSlices
    split: str  # "2 (2/8)", "9 (refused)", "-"
    status: str
    rules: tuple[str, ...]
    split_short: str = "-"  # "2/8", "refused": for narrow tables


@dataclass(frozen=True)
class WaveStep:
    wave: int
    namespace: str
    mode: str  # target mode
    reason: str
    rules: tuple[str, ...] = ()  # the needs-config findings this step waits for (checked before a dra flip)

    @property
    def bridge_command(self) -> str:
        return f"bridge namespace set {self.namespace} {self.mode}"

    @property
    def kubectl_command(self) -> str:
        return f"kubectl label namespace {self.namespace} {MODE_LABEL}={self.mode} --overwrite"


@dataclass(frozen=True)
class FeatureRow:
    gate: str  # "" when the KEP has no feature gate yet
    kep: str
    stage: str
    why: str
    stages: str = ""  # every stage and its release, as bridge.kvalues.features writes them
    source: str = ""  # where those stages were checked


@dataclass
class Report:
    source: str
    version: str
    resource_versions: tuple[str, ...]
    status: str
    assume_split: str
    findings: list[Finding]
    namespaces: list[NamespaceRow]
    nodes: list[NodeRow]
    workloads: list[WorkloadRow]
    features: list[FeatureRow]
    waves: list[WaveStep]
    gpus_by_backend: dict[str, int]
    counts: dict[str, int] = field(default_factory=dict)
    # Objects of kinds the report does not read (`ClusterData.other_kinds`), by kind: most first, then by name.
    not_read: dict[str, int] = field(default_factory=dict)
    controller: SplitController = field(default_factory=lambda: SplitController("absent", ""))
    model: ClusterModel | None = None

    @property
    def blockers(self) -> int:
        return sum(1 for f in self.findings if f.severity == "blocker")


def _gpus_by_backend(model: ClusterModel) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for node in model.nodes.values():
        total = node.gpu_total
        if not total:
            continue
        bridge_dra = sum(1 for d in node.devices if d.driver == BRIDGE_DRIVER)
        other_dra = sum(1 for d in node.devices if d.driver != BRIDGE_DRIVER)
        if "bridge" in node.backends:
            out["bridge (DRA side)"] += bridge_dra
            out["bridge (device-plugin side)"] += max(total - bridge_dra, 0)
        elif other_dra:
            out["other DRA driver"] += other_dra
        elif "device-plugin" in node.backends:
            out["vendor device plugin"] += total
        else:
            out["not served"] += total
    return dict(sorted(out.items()))


def build_report(data: ClusterData, options: ReportOptions = ReportOptions()) -> Report:
    """Raises `MalformedInput` naming the object and field when an input object has a field of the wrong type."""
    with bulk_allocation():
        try:
            return _build_report(data, options)
        except RecursionError as err:
            raise MalformedInput("malformed input: an object is nested too deeply to check (thousands of levels): "
                                 "not a Kubernetes object") from err
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as err:
            problem = find_malformed(data.objects)
            if problem is None:
                raise  # not an input problem: a bug, keep the traceback
            raise MalformedInput(f"malformed input: {problem}") from err


def _build_report(data: ClusterData, options: ReportOptions) -> Report:
    model = build_model(data)
    ctx = CheckContext(model, options)
    findings = run_checks(ctx)
    by_obj: dict[tuple[str, str, str], list[Finding]] = defaultdict(list)
    by_ns: dict[str, list[Finding]] = defaultdict(list)
    global_findings = [f for f in findings if is_cluster_blocker(f)]
    for f in findings:
        o = f.object
        by_obj[(o.kind, o.namespace, o.name)].append(f)
        if namespace_of(f):
            by_ns[namespace_of(f)].append(f)

    gpu_workloads = ctx.gpu_workloads
    workload_rows = []
    wl_by_ns: dict[str, list[Workload]] = defaultdict(list)
    for w in gpu_workloads:
        fs = by_obj.get((w.kind, w.namespace, w.name), [])
        workload_rows.append(WorkloadRow(w.kind, w.namespace, w.name, w.replicas, dict(sorted(w.spec.per_pod.items())),
                                         dict(sorted(w.demand.items())), status_of(fs),
                                         tuple(sorted({f.rule for f in fs if f.severity != "info"})),
                                         w.api or "none", dict(sorted(w.pods_by_api.items())), w.spec.dra.unknown))
        wl_by_ns[w.namespace].append(w)

    capacity = simulate_capacity(ctx)
    ns_rows = []
    for ns in model.namespaces.values():
        if ns.name not in wl_by_ns and ns.mode == "legacy":
            continue  # no GPU workloads and never flipped: not part of the migration
        fs = by_ns.get(ns.name, []) + (global_findings if ns.name in wl_by_ns else [])
        demand: dict[str, int] = defaultdict(int)
        for w in wl_by_ns.get(ns.name, []):
            for k, v in w.demand.items():
                demand[k] += v
        ns_rows.append(NamespaceRow(ns.name, ns.mode, len(wl_by_ns.get(ns.name, [])), dict(sorted(demand.items())),
                                    status_of(fs), tuple(sorted({f.rule for f in fs if f.severity != "info"})),
                                    capacity.get(ns.name)))

    node_rows = []
    for node in model.nodes.values():
        if not node.gpu_total and not node.backends:
            continue
        fs = by_obj.get(("Node", "", node.name), [])
        split, split_short = _split_column(node)
        node_rows.append(NodeRow(node.name, tuple(sorted(node.backends)), node.gpu_total,
                                 node.allocatable.get(GPU, 0), len(node.devices), split,
                                 status_of(fs), tuple(sorted({f.rule for f in fs if f.severity != "info"})),
                                 split_short))

    version = model.version
    features = [
        FeatureRow(f.gate or "", f.kep, f.stage(version.major, version.minor).value if version.known else "unknown",
                   f.why, f.history().split(": ", 1)[-1], f.source)
        for f in FEATURES
    ]
    return Report(
        source=data.source,
        version=version.git_version or "unknown",
        resource_versions=model.resource_versions,
        status=status_of(findings),
        assume_split=options.assume_split,
        findings=findings,
        namespaces=ns_rows,
        nodes=node_rows,
        workloads=workload_rows,
        features=features,
        waves=plan_waves(ns_rows, model),
        gpus_by_backend=_gpus_by_backend(model),
        counts={
            "nodes": len(model.nodes),
            "gpuNodes": len(node_rows),
            "namespaces": len(model.namespaces),
            "pods": len(data.of("Pod")),
            "gpuWorkloads": len(workload_rows),
            "ignoredPods": model.ignored_pods,
        },
        not_read=dict(sorted(data.other_kinds.items(), key=lambda kv: (-kv[1], kv[0]))),
        model=model,
        controller=ctx.split_controller,
    )


def unresolved(report: Report, namespace: str, rules: frozenset[str]) -> list[Finding]:
    """What still stands between `namespace` and its flip: findings of `rules` about the namespace or its objects,
    plus any blocker about it (or a cluster-wide one) that appeared since the plan was made. Info never counts."""
    out = []
    for f in report.findings:
        if f.severity == "info":
            continue
        about = namespace_of(f) == namespace
        if (about and (f.rule in rules or f.severity == "blocker")) or is_cluster_blocker(f):
            out.append(f)
    return out


def plan_waves(rows: list[NamespaceRow], model: ClusterModel) -> list[WaveStep]:
    """Lowest risk first (bridge.report.waves, the order the capacity simulation checks): wave 1 puts every movable
    legacy namespace in shadow, then one namespace per wave goes to dra. Blocked namespaces are not planned."""
    by_name = {r.name: r for r in rows}
    plan = flips([model.namespaces[r.name] for r in rows if r.status != "blocked" and r.workloads])
    steps = [WaveStep(1, ns.name, "shadow", "dry run: translation recorded, pods unchanged") for ns in plan.to_shadow]
    for i, ns in enumerate(plan.to_dra):
        r = by_name[ns.name]
        reason = "ready" if r.status == "ready" else f"after fixing {', '.join(r.rules)}"
        steps.append(WaveStep(plan.first_dra_wave + i, r.name, "dra", reason, r.rules))
    return steps


__all__ = ["Report", "ReportOptions", "build_report", "STATUSES", "Stage"]
