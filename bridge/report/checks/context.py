"""What every check gets: the model, the options, a CEL evaluator, and a few derived facts computed once."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from bridge.kvalues import gfd
from bridge.kvalues.placement import Constraints
from bridge.report.cel import GfdTranslation, SelectorEvaluator, gfd_to_cel
from bridge.report.dpconfig import DevicePluginConfig, configs_from_configmaps
from bridge.report.features import BRIDGE_CLASS, BRIDGE_DRIVER, FEATURE_BY_KEY, SYSTEM_NAMESPACES, Stage
from bridge.report.findings import ObjectRef
from bridge.report.model import ClusterModel, Workload
from bridge.report.offers import DoubleOffer, double_offers
from bridge.report.sharing import OperatorPolicy, Selection, not_whole_gpu, operator_policies, select_configs
from bridge.report.podspec import OPT_OUT_ANNOTATION
from bridge.report.splitcontroller import SplitController, component_args, detect
from bridge.report.supply import BoundGpuPod, Supply, bound_gpu_pods, build_supply

Obj = dict[str, Any]


@dataclass(frozen=True)
class ReportOptions:
    # "current" (devices published now), "all" (every GPU on the DRA side), or a number of devices per GPU node.
    assume_split: str = "current"
    # Extra device-plugin configs (from --device-plugin-config files); ConfigMaps in the input are always read.
    device_plugin_configs: tuple[DevicePluginConfig, ...] = ()


def ref_of(obj: Obj) -> ObjectRef:
    m = obj.get("metadata") or {}
    return ObjectRef(str(obj.get("kind", "")), str(m.get("namespace", "")), str(m.get("name", "")))


def workload_ref(w: Workload) -> ObjectRef:
    return ObjectRef(w.kind, w.namespace, w.name)


@dataclass
class CheckContext:
    model: ClusterModel
    options: ReportOptions = ReportOptions()
    evaluator: SelectorEvaluator = field(default_factory=SelectorEvaluator)
    _gfd: dict[Any, GfdTranslation] = field(default_factory=dict, repr=False)
    _admitted: dict[Constraints, frozenset[str]] = field(default_factory=dict, repr=False)
    # (namespaces a blocker holds back, whether a cluster-wide blocker holds back all): set by `run_checks` before
    # the late rules run (the capacity simulation's wave order leaves them out, as the wave plan does).
    blocked: tuple[frozenset[str], bool] = (frozenset(), False)

    def admitted(self, constraints: Constraints) -> frozenset[str]:
        """The nodes the scheduler's node filters let a pod with these constraints onto (node selector, required
        affinity, taints, cordon: `bridge.kvalues.placement`). Computed once per distinct constraints: the pods of a
        workload, and most workloads of a cluster, share one."""
        hit = self._admitted.get(constraints)
        if hit is None:
            hit = self._admitted[constraints] = frozenset(
                n.name for n in self.model.nodes.values() if n.admits(constraints))
        return hit

    def stage(self, feature: str) -> Stage | None:
        v = self.model.version
        return FEATURE_BY_KEY[feature].stage(v.major, v.minor) if v.known else None

    @cached_property
    def bridge_class(self) -> Obj | None:
        for c in self.model.device_classes:
            if (c.get("metadata") or {}).get("name") == BRIDGE_CLASS:
                return c
        return None

    @cached_property
    def bridge_class_cel(self) -> str:
        """The AND of the bridge DeviceClass's selectors; the driver match when the class does not exist yet."""
        return class_cel(self.bridge_class) if self.bridge_class else f'device.driver == "{BRIDGE_DRIVER}"'

    @cached_property
    def dp_configs(self) -> list[DevicePluginConfig]:
        return configs_from_configmaps(self.model.data.of("ConfigMap")) + list(self.options.device_plugin_configs)

    @cached_property
    def operator_policies(self) -> list[OperatorPolicy]:
        return operator_policies(self.model.data.of("ClusterPolicy"))

    @cached_property
    def config_selection(self) -> Selection:
        """Which device-plugin config each vendor device-plugin node runs (bridge.report.sharing)."""
        return select_configs(self.model, self.dp_configs, self.operator_policies)

    @cached_property
    def not_whole_gpu(self) -> dict[str, list[str]]:
        """node -> why `nvidia.com/gpu` there is a MIG slice or a share, not one whole GPU: the config it runs, the
        ClusterPolicy, and GFD's labels on it (`bridge.kvalues.gfd.not_whole_gpu`, the webhook's own test)."""
        out = not_whole_gpu(self.model, self.config_selection, self.operator_policies)
        for node in self.model.nodes.values():
            why = gfd.not_whole_gpu(node.labels) if node.gpu_total or node.capacity else None
            if why:
                out.setdefault(node.name, []).append(f"GFD labels: {why}")
        return dict(sorted(out.items()))

    @cached_property
    def family_rule(self) -> tuple[gfd.FamilyRule, str]:
        """The GFD release rule for `nvidia.com/gpu.family` the nodes' labels show (family vs compute capability),
        and why it could not be told ("" when it could; the newest rule is used then)."""
        seen = set()
        for n in self.model.nodes.values():
            fam = n.labels.get(gfd.FAMILY)
            major, minor = n.labels.get(gfd.COMPUTE_MAJOR, ""), n.labels.get(gfd.COMPUTE_MINOR, "")
            if fam and major.isdigit() and minor.isdigit():
                seen.add((fam, int(major), int(minor)))
        rule, why = gfd.infer_family_rule(seen)
        return (rule, "") if rule is not None else (gfd.LATEST, why)

    def workload_cel(self, w: Workload) -> GfdTranslation:
        key = w.spec.gfd_terms
        hit = self._gfd.get(key)
        if hit is None:
            hit = self._gfd[key] = gfd_to_cel(key, rule=self.family_rule[0])
        return hit

    def request_cel(self, w: Workload) -> str:
        """What one device of this workload must satisfy on the DRA side: class selectors AND translated GFD terms
        AND, for pods already on DRA, their claims' own selectors."""
        extras = [e for e in (self.workload_cel(w).cel,) if e] + [e for e in w.spec.dra.selectors if e]
        if not extras:
            return self.bridge_class_cel
        return f"({self.bridge_class_cel}) && " + " && ".join(f"({e})" for e in dict.fromkeys(extras))

    @cached_property
    def double_offers(self) -> dict[str, DoubleOffer]:
        """Bridge nodes whose GPUs are offered through both APIs (bridge.report.offers): DRB017, and not capacity."""
        return double_offers(self.model, self.bound_gpu_pods)

    @cached_property
    def bound_gpu_pods(self) -> dict[str, list[BoundGpuPod]]:
        """bridge node -> its pods holding nvidia.com/gpu (bridge.report.supply): read once for DRB017 and the
        supply."""
        return bound_gpu_pods(self.model)

    @cached_property
    def translated_schedulers(self) -> frozenset[str]:
        """The schedulers besides default-scheduler whose pods the webhook translates: `--translate-scheduler` (or
        BRIDGE_WEBHOOK_TRANSLATE_SCHEDULERS, names separated by spaces) of every Deployment running `bridge
        webhook` in the input."""
        out: set[str] = set()
        for dep in self.model.data.of("Deployment"):
            for c in (((dep.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or ():
                args = component_args(c, "webhook") if isinstance(c, dict) else None
                if args is None:
                    continue
                for i, a in enumerate(args):
                    if a == "--translate-scheduler" and i + 1 < len(args):
                        out.add(args[i + 1])
                    elif a.startswith("--translate-scheduler="):
                        out.add(a.split("=", 1)[1])
                for e in c.get("env") or ():
                    if isinstance(e, dict) and e.get("name") == "BRIDGE_WEBHOOK_TRANSLATE_SCHEDULERS":
                        out.update(str(e.get("value") or "").split())
        return frozenset(out)

    @cached_property
    def split_controller(self) -> SplitController:
        """Does `bridge controller` run and act (bridge.report.splitcontroller)?"""
        return detect(self.model.data)

    @cached_property
    def supply(self) -> Supply:
        """What can move between the sides on each bridge node, and what the controller would do with the pods
        pending now (bridge.report.supply). Built on first use: only when some capacity does not fit, or pods wait."""
        return build_supply(self.model, self.split_controller, self.bound_gpu_pods)

    @cached_property
    def translatable(self) -> list[Workload]:
        """The GPU workloads the webhook may translate: all but those whose pods opt out
        (`dra-bridge.io/translate: "false"`, the "keep it legacy" of every rule that says so). Rules about what
        translation would change read these; rules about what a pod does on a shared node read `gpu_workloads`."""
        return [w for w in self.gpu_workloads if not w.opted_out]

    @cached_property
    def gpu_workloads(self) -> list[Workload]:
        """Workloads to migrate: GPU agents themselves (device plugins, exporters, DRA drivers, the bridge) and
        system namespaces are left out."""
        infra = {r.ref for r in self.model.daemonsets if r.role}
        return [w for w in self.model.workloads if w.ref not in infra and w.namespace not in SYSTEM_NAMESPACES]


def keep_legacy(w: Workload) -> str:
    """The command that keeps a workload on the device plugin: the webhook's opt-out annotation
    (`dra-bridge.io/translate: "false"`) on its pods, through the controller's pod template (a bare pod is annotated
    in place: the webhook only reads pods it admits, and the report reads the annotation)."""
    if w.kind == "Pod":
        return f"kubectl -n {w.namespace} annotate pod {w.name} {OPT_OUT_ANNOTATION}=false --overwrite"
    if w.kind == "Job":  # batch/v1 Job: spec.template is immutable
        return (f"re-create Job {w.namespace}/{w.name} with the pod template annotation {OPT_OUT_ANNOTATION}: "
                "\"false\" (a Job's template cannot be changed)")
    template = '{"template":{"metadata":{"annotations":{"' + OPT_OUT_ANNOTATION + '":"false"}}}}'
    if w.kind == "CronJob":
        template = '{"jobTemplate":{"spec":' + template + '}}'
    return f"kubectl -n {w.namespace} patch {w.kind.lower()} {w.name} --type merge -p '{{\"spec\":{template}}}'"


def class_cel(cls: Obj) -> str:
    exprs = [
        str((s.get("cel") or {}).get("expression", "")).strip()
        for s in (cls.get("spec") or {}).get("selectors") or ()
        if (s.get("cel") or {}).get("expression")
    ]
    if not exprs:
        return "true"
    return exprs[0] if len(exprs) == 1 else " && ".join(f"({e})" for e in exprs)
