"""Cluster operators that decide what `nvidia.com/gpu` means or who may use it: the NVIDIA GPU Operator's
ClusterPolicy (DRB042) and Kueue's ClusterQueues (DRB043)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import yaml

from bridge.report.checks.context import CheckContext, ref_of
from bridge.report.features import BRIDGE_CLASS, GPU, IMPLICIT_PREFIX
from bridge.report.findings import Finding, ObjectRef, rule
from bridge.report.model import Obj
from bridge.report.sharing import mig_enabled


def _names(items: list[str], limit: int = 5) -> str:
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


@rule("DRB042", "GPU Operator ClusterPolicy", severities=("blocker", "warning", "info"),
      fix="kubectl patch clusterpolicy NAME: spec.mig.strategy mixed, or turn MIG off on the nodes "
          "(nvidia.com/mig.config=all-disabled).")
def cluster_policy(ctx: CheckContext) -> Iterator[Finding]:
    """NVIDIA/gpu-operator api/nvidia/v1/clusterpolicy_types.go: `spec.mig.strategy` (none | single | mixed) is
    handed to the device plugin and GFD on every node the operator manages, and wins over a config file's
    `flags.migStrategy`. With `single`, each MIG slice of a MIG-enabled GPU is advertised as `nvidia.com/gpu`.
    `spec.devicePlugin.config.name` is the ConfigMap holding the plugin's configs (checked by DRB050-056)."""
    dp_nodes = [n for n in ctx.model.nodes.values() if "device-plugin" in n.backends]
    configmaps = {(c.get("metadata") or {}).get("name") for c in ctx.model.data.of("ConfigMap")}
    for policy in ctx.operator_policies:
        if not policy.device_plugin:
            continue
        details: dict[str, object] = {"migStrategy": policy.mig_strategy, "configMap": policy.config_map,
                                      "defaultConfig": policy.default_config}
        if policy.mig_strategy == "single":
            mig_nodes = sorted(n.name for n in dp_nodes if mig_enabled(n))
            details["nodes"] = mig_nodes
            if mig_nodes:
                yield Finding("DRB042", "blocker", policy.ref,
                              f"spec.mig.strategy single: on MIG-enabled nodes ({_names(mig_nodes)}) each MIG slice "
                              f"is advertised as {GPU}, so {GPU}: 1 there is one slice; translating it to a whole DRA "
                              "device changes what pods get (the webhook leaves pods on these nodes untouched)",
                              f"Set the mixed strategy (pods then ask nvidia.com/mig-<profile>, see DRB020): kubectl "
                              f"patch clusterpolicy {policy.ref.name} --type merge "
                              "-p '{\"spec\":{\"mig\":{\"strategy\":\"mixed\"}}}'; or turn MIG off on the nodes: "
                              + "; ".join(f"kubectl label node {n} nvidia.com/mig.config=all-disabled --overwrite"
                                          for n in mig_nodes[:5]), details)
            else:
                yield Finding("DRB042", "info", policy.ref,
                              f"spec.mig.strategy single: no node has MIG enabled now, so {GPU} is a whole GPU "
                              "everywhere; a node where MIG is enabled later advertises slices under that name",
                              "Use spec.mig.strategy mixed before enabling MIG on nodes that run DRA workloads",
                              details)
        if policy.config_map and policy.config_map not in configmaps:
            yield Finding("DRB042", "warning", policy.ref,
                          f"spec.devicePlugin.config.name {policy.config_map}: that ConfigMap is not in the input, "
                          "so time-slicing, MPS and MIG settings of the device plugin cannot be checked",
                          "Grant the scan get/list on ConfigMaps in the operator's namespace (or export them into "
                          "the snapshot: kubectl get configmaps -A -o yaml), then rerun", details)


def _covers_gpu(cq: Obj) -> dict[str, str]:
    """{flavor: nominalQuota} for every flavor of a resource group covering nvidia.com/gpu; {} when none does."""
    out: dict[str, str] = {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or ():
        if GPU not in (group.get("coveredResources") or ()):
            continue
        for flavor in group.get("flavors") or ():
            for res in flavor.get("resources") or ():
                if res.get("name") == GPU:
                    out[str(flavor.get("name", ""))] = str(res.get("nominalQuota", "?"))
    return out


def kueue_maps_bridge(configmaps: list[Obj]) -> bool:
    """Whether a Kueue Configuration in the input (a ConfigMap value of kind Configuration, apiVersion
    config.kueue.x-k8s.io/*: kueue-manager-config's controller_manager_config.yaml) maps nvidia.com/gpu to the
    bridge's DeviceClass (`resources.deviceClassMappings`, Kueue's DRA support), so it counts translated pods' claims
    against the nvidia.com/gpu budget."""
    for cm in configmaps:
        for text in ((cm.get("data") or {}).values()):
            if not isinstance(text, str) or "deviceClassMappings" not in text:
                continue
            try:
                doc = yaml.safe_load(text)
            except yaml.YAMLError:
                continue
            if not isinstance(doc, dict) or doc.get("kind") != "Configuration" or \
                    not str(doc.get("apiVersion", "")).startswith("config.kueue.x-k8s.io/"):
                continue
            for m in ((doc.get("resources") or {}).get("deviceClassMappings") or ()):
                if isinstance(m, dict) and m.get("name") == GPU and BRIDGE_CLASS in (m.get("deviceClassNames") or ()):
                    return True
    return False


@rule("DRB043", "Kueue ClusterQueue budgeting nvidia.com/gpu", severities=("blocker", "info"),
      fix="Map nvidia.com/gpu to the bridge's DeviceClass in Kueue's Configuration "
          "(resources.deviceClassMappings); until then keep the namespace's GPU workloads legacy.")
def kueue(ctx: CheckContext) -> Iterator[Finding]:
    """kueue.x-k8s.io ClusterQueue `spec.resourceGroups[].coveredResources` / `flavors[].resources[].nominalQuota`:
    Kueue admits a workload against the quota of the resources its pods request. A translated pod requests no
    `nvidia.com/gpu`: with the `claims` target its GPUs come from a ResourceClaimTemplate, which Kueue counts only
    through a `deviceClassMappings` entry in its Configuration (and only with its DRA support on: without it such
    workloads are admitted with no device usage, bypassing the quota); with the `extended` target it requests
    `deviceclass.resource.kubernetes.io/<class>`, a resource the queue does not cover. Either way the GPU budget no
    longer holds, so each namespace whose LocalQueue feeds such a ClusterQueue is blocked until Kueue is mapped."""
    local: dict[str, list[Obj]] = defaultdict(list)
    for lq in ctx.model.data.of("LocalQueue"):
        local[str((lq.get("spec") or {}).get("clusterQueue", ""))].append(lq)
    gpu_namespaces = {w.namespace for w in ctx.translatable if w.gpus_per_pod}
    if kueue_maps_bridge(ctx.model.data.of("ConfigMap")):
        return  # Kueue counts the bridge's claims as nvidia.com/gpu: the budget holds
    mapping = (f"resources.deviceClassMappings: [{{name: {GPU}, deviceClassNames: [{BRIDGE_CLASS}]}}] to Kueue's "
               "Configuration (kubectl -n kueue-system edit configmap kueue-manager-config), with Kueue's DRA support "
               "enabled, so claims of translated pods count against the same quota (and cover "
               f"{IMPLICIT_PREFIX}{BRIDGE_CLASS} if the webhook uses the extended target)")
    for cq in sorted(ctx.model.data.of("ClusterQueue"), key=lambda o: (o.get("metadata") or {}).get("name", "")):
        flavors = _covers_gpu(cq)
        if not flavors:
            continue
        name = str((cq.get("metadata") or {}).get("name", ""))
        budget = ", ".join(f"{f}: {q}" for f, q in sorted(flavors.items()))
        queues = [lq for lq in local.get(name, []) if ref_of(lq).namespace in gpu_namespaces]
        details: dict[str, object] = {"clusterQueue": name, "nominalQuota": dict(sorted(flavors.items())),
                                      "namespaces": sorted({ref_of(q).namespace for q in queues})}
        if not queues:
            yield Finding("DRB043", "blocker" if gpu_namespaces and not local.get(name) else "info",
                          ObjectRef("ClusterQueue", "", name),
                          f"budgets {GPU} ({budget})"
                          + ("; no LocalQueue in the input points at it, so the namespaces it admits are unknown"
                             if not local.get(name) else "; none of the namespaces it admits runs GPU workloads")
                          + f": pods the webhook translates request no {GPU} and escape this budget",
                          f"Add {mapping}; scan LocalQueues too (get/list localqueues) to see which namespaces "
                          "depend on it", details)
            continue
        for lq in queues:
            ref = ref_of(lq)
            yield Finding("DRB043", "blocker", ref,
                          f"admits into ClusterQueue {name}, which budgets {GPU} ({budget}): pods the webhook "
                          f"translates request no {GPU}, so Kueue admits them without counting their GPUs (or not "
                          "at all, with the extended target): the namespace's GPU budget no longer holds",
                          f"Add {mapping}; until then keep the namespace's GPU workloads legacy (pod template "
                          "annotation dra-bridge.io/translate: \"false\")", details)
