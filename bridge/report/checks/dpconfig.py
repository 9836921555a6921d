"""DRB05x: NVIDIA device-plugin `version: v1` configuration translated to what DRA offers today, with the
semantic differences stated (NVIDIA/k8s-device-plugin api/config/v1: sharing, flags)."""

from __future__ import annotations

from collections.abc import Iterator

from bridge.report.checks.context import CheckContext
from bridge.report.features import FEATURE_BY_KEY
from bridge.report.findings import Finding, ObjectRef, rule

_CONFIG_LABEL = "nvidia.com/device-plugin.config"


@rule("DRB050", "Device-plugin config: time-slicing")
def time_slicing(ctx: CheckContext) -> Iterator[Finding]:
    consumable = ctx.stage("consumable-capacity")
    for cfg in ctx.dp_configs:
        for s in cfg.sharing:
            if s.strategy != "timeSlicing":
                continue
            for r in s.resources:
                dra = ("a DeviceClass on devices with consumable capacity (DRAConsumableCapacity, "
                       f"{'on by default here' if consumable and consumable.on_by_default else 'off by default here'})"
                       " or, with NVIDIA's DRA driver, a per-claim GpuConfig sharing.strategy TimeSlicing")
                yield Finding("DRB050", "warning", cfg.source,
                              f"[{cfg.key}] time-slicing {r.name} x{r.replicas}"
                              + (f" advertised as {r.rename}" if r.rename else "")
                              + f": DRA equivalent is {dra}. Differences: device-plugin sharing is node-wide and "
                              "implicit; in DRA it is per claim and opt-in, and `count: N` means N independent "
                              "shares (KEP-6406), not N slots on one GPU; neither isolates memory",
                              "Keep workloads using the shared name legacy; for new workloads write claims on a "
                              "shared-GPU class",
                              {"config": cfg.key, "resource": r.name, "replicas": r.replicas, "rename": r.rename})


@rule("DRB051", "Device-plugin config: renamed shared resources")
def rename(ctx: CheckContext) -> Iterator[Finding]:
    for cfg in ctx.dp_configs:
        for s in cfg.sharing:
            renamed = sorted({r.rename for r in s.resources if r.rename})
            if renamed:
                yield Finding("DRB051", "warning", cfg.source,
                              f"[{cfg.key}] {s.strategy} advertises {', '.join(renamed)}"
                              + (" (renameByDefault)" if s.rename_by_default else "")
                              + ": no DRA DeviceClass can carry that name for a fraction of a GPU: that needs "
                              f"{FEATURE_BY_KEY['extended-resource-capacity'].history()}; pods requesting it "
                              "cannot be translated",
                              "Keep namespaces using the renamed resource legacy until a release serves it",
                              {"config": cfg.key, "resources": renamed})


@rule("DRB052", "Device-plugin config: failRequestsGreaterThanOne")
def fail_gt_one(ctx: CheckContext) -> Iterator[Finding]:
    for cfg in ctx.dp_configs:
        for s in cfg.sharing:
            if s.fail_requests_greater_than_one:
                yield Finding("DRB052", "info", cfg.source,
                              f"[{cfg.key}] {s.strategy}.failRequestsGreaterThanOne: the device plugin rejects pods "
                              "asking for more than one shared replica; DRA has no such rule (a claim for 2 gets 2 "
                              "devices or 2 independent shares)",
                              "Enforce the limit with a ValidatingAdmissionPolicy on claims if you rely on it",
                              {"config": cfg.key})


@rule("DRB053", "Device-plugin config: MPS")
def mps(ctx: CheckContext) -> Iterator[Finding]:
    for cfg in ctx.dp_configs:
        for s in cfg.sharing:
            if s.strategy != "mps":
                continue
            names = ", ".join(f"{r.name} x{r.replicas}" for r in s.resources)
            if cfg.mig_strategy != "none":
                yield Finding("DRB053", "blocker", cfg.source,
                              f"[{cfg.key}] MPS ({names}) together with migStrategy {cfg.mig_strategy}: no DRA "
                              "driver offers MPS on MIG devices",
                              "Keep these nodes on the device plugin", {"config": cfg.key})
            else:
                yield Finding("DRB053", "warning", cfg.source,
                              f"[{cfg.key}] MPS ({names}): DRA equivalent is NVIDIA's DRA driver MpsConfig per claim "
                              "(gate MPSSupport, alpha); the bridge does not run an MPS control daemon. Difference: "
                              "the device plugin splits memory and compute equally across replicas; MpsConfig sets "
                              "per-claim limits",
                              "Keep MPS workloads legacy, or move them to NVIDIA's DRA driver with MPSSupport",
                              {"config": cfg.key})


@rule("DRB054", "Device-plugin config: MIG strategy")
def mig_strategy(ctx: CheckContext) -> Iterator[Finding]:
    for cfg in ctx.dp_configs:
        if cfg.mig_strategy == "single":
            yield Finding("DRB054", "blocker", cfg.source,
                          f"[{cfg.key}] migStrategy single: nvidia.com/gpu means one MIG slice on these nodes; "
                          "the bridge would translate it to a whole GPU, changing what pods get",
                          "Keep nodes with migStrategy single on the device plugin (or switch them to mixed and "
                          "per-profile DeviceClasses)", {"config": cfg.key})
        elif cfg.mig_strategy == "mixed":
            yield Finding("DRB054", "info", cfg.source,
                          f"[{cfg.key}] migStrategy mixed: each nvidia.com/mig-<profile> name needs its own "
                          "DeviceClass (extendedResourceName) on a driver publishing MIG devices",
                          "See DRB020 findings and mig-*.yaml in --emit-manifests", {"config": cfg.key})


@rule("DRB055", "Per-node device-plugin configs")
def per_node(ctx: CheckContext) -> Iterator[Finding]:
    chosen = sorted({n.labels[_CONFIG_LABEL] for n in ctx.model.nodes.values() if _CONFIG_LABEL in n.labels})
    if chosen:
        known = {c.key for c in ctx.dp_configs}
        unknown = [c for c in chosen if known and c not in known]
        yield Finding("DRB055", "warning" if unknown else "info", ObjectRef("Cluster", "", "cluster"),
                      f"nodes select device-plugin configs by label {_CONFIG_LABEL} ({', '.join(chosen)})"
                      + (f"; not found in any config: {', '.join(unknown)}" if unknown else "")
                      + ": DRA has no per-node config label; NVIDIA's DRA driver has PerNodeGPUConfig (chosen once "
                      "at plugin start), the bridge applies one config per node daemon",
                      "Group nodes by config into separate node-daemon DaemonSets (node selectors) when migrating",
                      {"configs": chosen})


@rule("DRB056", "Device-plugin config problems")
def problems(ctx: CheckContext) -> Iterator[Finding]:
    for cfg in ctx.dp_configs:
        for p in cfg.problems:
            yield Finding("DRB056", "warning", cfg.source, f"[{cfg.key}] {p}",
                          "Fix the device-plugin config; the device plugin rejects it the same way")
