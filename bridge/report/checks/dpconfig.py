"""DRB05x: NVIDIA device-plugin `version: v1` configuration translated to what DRA offers today, with the
semantic differences stated (NVIDIA/k8s-device-plugin api/config/v1: sharing, flags)."""

from __future__ import annotations

from collections.abc import Iterator

from bridge.report.checks.context import CheckContext
from bridge.report.dpconfig import DevicePluginConfig
from bridge.report.features import FEATURE_BY_KEY, GPU
from bridge.report.findings import Finding, ObjectRef, rule
from bridge.report.sharing import CONFIG_LABEL, mig_enabled


def _used_by(ctx: CheckContext, cfg: DevicePluginConfig) -> tuple[tuple[str, ...], str]:
    use = next(u for u in ctx.config_selection.uses if u.config is cfg)
    return use.nodes, use.default_by


def _edit(cfg: DevicePluginConfig, change: str) -> str:
    """Where to make a change to one config: its ConfigMap's key, or the file given with --device-plugin-config."""
    where = (f"kubectl -n {cfg.source.namespace} edit configmap {cfg.source.name}, key {cfg.key}"
             if cfg.source.kind == "ConfigMap" else f"in {cfg.source.name}")
    return f"{change} ({where}; the device plugin restarts with it)"


def _nodes_text(nodes: tuple[str, ...]) -> str:
    return ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")


@rule("DRB050", "Device-plugin config: time-slicing", severities=("blocker", "warning", "info"),
      fix="Rename the shared resource (sharing.timeSlicing.renameByDefault: true) in the device-plugin config.")
def time_slicing(ctx: CheckContext) -> Iterator[Finding]:
    """Time-slicing under a new name (`renameByDefault`) is a separate resource: pods asking it stay legacy
    (DRB021) and the config needs a DRA counterpart (warning). Time-slicing without a rename replicates
    `nvidia.com/gpu` itself: every `nvidia.com/gpu: 1` on those nodes is a time-slice, and translating it to a whole
    DRA device would change what pods get, so nodes running such a config block (the webhook leaves their pods
    alone). A config no node runs is a warning: it blocks the moment a node selects it."""
    consumable = ctx.stage("consumable-capacity")
    for cfg in ctx.dp_configs:
        nodes, default_by = _used_by(ctx, cfg)
        for s in cfg.sharing:
            if s.strategy != "timeSlicing":
                continue
            for r in s.resources:
                dra = ("a DeviceClass on devices with consumable capacity (DRAConsumableCapacity, "
                       f"{'on by default here' if consumable and consumable.on_by_default else 'off by default here'})"
                       " or, with NVIDIA's DRA driver, a per-claim GpuConfig sharing.strategy TimeSlicing")
                details: dict[str, object] = {"config": cfg.key, "resource": r.name, "replicas": r.replicas,
                                              "rename": r.rename, "nodes": list(nodes)}
                if r.name == GPU and not r.rename:
                    where = (f"nodes {_nodes_text(nodes)} run it" + (f" (the default, by {default_by})"
                                                                    if default_by else "")
                             if nodes else f"no node runs it now (nodes labeled {CONFIG_LABEL}={cfg.key} would)")
                    yield Finding("DRB050", "blocker" if nodes else "warning", cfg.source,
                                  f"[{cfg.key}] time-slicing {r.name} x{r.replicas} without a rename: each GPU is "
                                  f"advertised {r.replicas} times as {GPU}, so {GPU}: 1 there is a time-slice, not a "
                                  f"GPU; translating it to a whole DRA device changes what pods get ({where})",
                                  _edit(cfg, "Rename the shared resource: sharing.timeSlicing.renameByDefault: true "
                                        f"advertises {GPU}.shared, so {GPU} is a whole GPU again") + "; pods that "
                                  f"want a time-slice then ask {GPU}.shared (and stay legacy, DRB021)", details)
                    continue
                yield Finding("DRB050", "info", cfg.source,
                              f"[{cfg.key}] time-slicing {r.name} x{r.replicas}"
                              + (f" advertised as {r.rename}" if r.rename else "")
                              + f": DRA equivalent is {dra}. Differences: device-plugin sharing is node-wide and "
                              "implicit; in DRA it is per claim and opt-in, and `count: N` means N independent "
                              "shares, not N slots on one GPU; neither isolates memory",
                              "Nothing to do for the config: pods asking the shared name stay legacy (DRB021); new "
                              "workloads that want a share write claims on a shared-GPU class", details)


@rule("DRB051", "Device-plugin config: renamed shared resources", severities=("info",),
      fix="Nothing to do for the config: pods asking the renamed resource stay legacy (DRB021).")
def rename(ctx: CheckContext) -> Iterator[Finding]:
    """Device-plugin configs that advertise a shared GPU under a new name (renameByDefault): no DRA DeviceClass can
    carry that name for a fraction of a GPU yet."""
    for cfg in ctx.dp_configs:
        for s in cfg.sharing:
            renamed = sorted({r.rename for r in s.resources if r.rename})
            if renamed:
                yield Finding("DRB051", "info", cfg.source,
                              f"[{cfg.key}] {s.strategy} advertises {', '.join(renamed)}"
                              + (" (renameByDefault)" if s.rename_by_default else "")
                              + ": no DRA DeviceClass can carry that name for a fraction of a GPU: that needs "
                              f"{FEATURE_BY_KEY['extended-resource-capacity'].history()}; pods requesting it "
                              "cannot be translated",
                              "Nothing to do for the config: pods asking the renamed resource stay legacy (DRB021) "
                              "until a release serves it",
                              {"config": cfg.key, "resources": renamed})


@rule("DRB052", "Device-plugin config: failRequestsGreaterThanOne", severities=("info",),
      fix="Enforce the limit with a ValidatingAdmissionPolicy on claims if you rely on it.")
def fail_gt_one(ctx: CheckContext) -> Iterator[Finding]:
    """Time-slicing with failRequestsGreaterThanOne: the device plugin refuses pods asking more than one share; DRA
    has no such rule."""
    for cfg in ctx.dp_configs:
        for s in cfg.sharing:
            if s.fail_requests_greater_than_one:
                yield Finding("DRB052", "info", cfg.source,
                              f"[{cfg.key}] {s.strategy}.failRequestsGreaterThanOne: the device plugin rejects pods "
                              "asking for more than one shared replica; DRA has no such rule (a claim for 2 gets 2 "
                              "devices or 2 independent shares)",
                              "Enforce the limit with a ValidatingAdmissionPolicy on claims if you rely on it",
                              {"config": cfg.key})


@rule("DRB053", "Device-plugin config: MPS", severities=("blocker", "info"),
      fix="Take MPS out of a MIG config, or rename the MPS resource (renameByDefault) in the device-plugin "
          "config.")
def mps(ctx: CheckContext) -> Iterator[Finding]:
    """MPS sharing in a device-plugin config: with MIG (no DRA driver offers it), or sharing nvidia.com/gpu itself
    on the nodes that run it."""
    for cfg in ctx.dp_configs:
        nodes, _ = _used_by(ctx, cfg)
        for s in cfg.sharing:
            if s.strategy != "mps":
                continue
            names = ", ".join(f"{r.name} x{r.replicas}" for r in s.resources)
            shared_gpu = [r for r in s.resources if r.name == GPU and not r.rename]
            if cfg.mig_strategy != "none":
                yield Finding("DRB053", "blocker", cfg.source,
                              f"[{cfg.key}] MPS ({names}) together with migStrategy {cfg.mig_strategy}: no DRA "
                              "driver offers MPS on MIG devices",
                              _edit(cfg, "Take MPS out of this config (remove sharing.mps), or MIG (flags.migStrategy: "
                                    "none)"), {"config": cfg.key, "nodes": list(nodes)})
            elif shared_gpu and nodes:
                yield Finding("DRB053", "blocker", cfg.source,
                              f"[{cfg.key}] MPS shares {GPU} x{shared_gpu[0].replicas} without a rename on nodes "
                              f"{_nodes_text(nodes)}: {GPU}: 1 there is an MPS share of a GPU, and translating it to "
                              "a whole DRA device changes what pods get",
                              _edit(cfg, "Rename the MPS resource: sharing.mps.renameByDefault: true advertises "
                                    f"{GPU}.shared, so {GPU} is a whole GPU again"),
                              {"config": cfg.key, "nodes": list(nodes)})
            else:
                yield Finding("DRB053", "info", cfg.source,
                              f"[{cfg.key}] MPS ({names}): DRA equivalent is NVIDIA's DRA driver MpsConfig per claim "
                              "(gate MPSSupport, alpha); the bridge does not run an MPS control daemon. Difference: "
                              "the device plugin splits memory and compute equally across replicas; MpsConfig sets "
                              "per-claim limits",
                              "Nothing to do for the config: pods asking MPS shares stay legacy; move them to "
                              "NVIDIA's DRA driver with MPSSupport to use DRA",
                              {"config": cfg.key, "nodes": list(nodes)})


@rule("DRB054", "Device-plugin config: MIG strategy", severities=("blocker", "warning", "info"),
      fix="Switch the config to flags.migStrategy: mixed.")
def mig_strategy(ctx: CheckContext) -> Iterator[Finding]:
    """`migStrategy: single` makes `nvidia.com/gpu` one MIG slice on MIG-enabled nodes; on nodes without MIG it is
    still a whole GPU. A ClusterPolicy's spec.mig.strategy wins over the file (the plugin's flags do), so the
    policy's own finding (DRB042) speaks for operator-managed nodes."""
    policy = next((p for p in ctx.operator_policies if p.device_plugin and p.mig_strategy), None)
    for cfg in ctx.dp_configs:
        nodes, _ = _used_by(ctx, cfg)
        details: dict[str, object] = {"config": cfg.key, "nodes": list(nodes)}
        if policy is not None and cfg.mig_strategy not in ("none", policy.mig_strategy):
            yield Finding("DRB054", "info", cfg.source,
                          f"[{cfg.key}] migStrategy {cfg.mig_strategy} is overridden by spec.mig.strategy="
                          f"{policy.mig_strategy} of {policy.ref}: the operator passes it to the plugin as "
                          "MIG_STRATEGY, and the plugin's flag wins over its config file",
                          "Set the strategy in the ClusterPolicy (see DRB042), not in the config", details)
            continue
        if cfg.mig_strategy == "single":
            mig_nodes = [n for n in nodes if mig_enabled(ctx.model.nodes[n])]
            yield Finding("DRB054", "blocker" if mig_nodes else "warning", cfg.source,
                          f"[{cfg.key}] migStrategy single: {GPU} means one MIG slice on MIG-enabled nodes "
                          + (f"({_nodes_text(tuple(mig_nodes))} run this config)" if mig_nodes else
                             "(no MIG-enabled node runs this config now)")
                          + "; the bridge would translate it to a whole GPU, changing what pods get",
                          _edit(cfg, "Switch the config to flags.migStrategy: mixed (pods then ask "
                                "nvidia.com/mig-<profile>, served by per-profile DeviceClasses, DRB020)"), details)
        elif cfg.mig_strategy == "mixed":
            yield Finding("DRB054", "info", cfg.source,
                          f"[{cfg.key}] migStrategy mixed: each nvidia.com/mig-<profile> name needs its own "
                          "DeviceClass (extendedResourceName) on a driver publishing MIG devices",
                          "See DRB020 findings and mig-*.yaml in --emit-manifests", details)


@rule("DRB055", "Per-node device-plugin configs", severities=("warning", "info"),
      fix="Label the nodes with a config that exists (nvidia.com/device-plugin.config), or add the config.")
def per_node(ctx: CheckContext) -> Iterator[Finding]:
    """Nodes choosing device-plugin configs by label: DRA has no per-node config label, and a label naming no config
    is a mistake."""
    chosen = sorted({n.labels[CONFIG_LABEL] for n in ctx.model.nodes.values() if CONFIG_LABEL in n.labels})
    if chosen:
        known = {c.key for c in ctx.dp_configs}
        unknown = [c for c in chosen if known and c not in known]
        fix = ("Group nodes by config into separate node-daemon DaemonSets (node selectors) when migrating" if not unknown
               else "Label those nodes with a config that exists ("
               + "; ".join(f"kubectl label node {n.name} {CONFIG_LABEL}={sorted(known)[0]} --overwrite"
                           for n in ctx.model.nodes.values() if n.labels.get(CONFIG_LABEL) in unknown)
               + f"), or add {', '.join(unknown)} to the device-plugin config ConfigMap")
        yield Finding("DRB055", "warning" if unknown else "info", ObjectRef("Cluster", "", "cluster"),
                      f"nodes select device-plugin configs by label {CONFIG_LABEL} ({', '.join(chosen)})"
                      + (f"; not found in any config: {', '.join(unknown)}" if unknown else "")
                      + ": DRA has no per-node config label; NVIDIA's DRA driver has PerNodeGPUConfig (chosen once "
                      "at plugin start), the bridge applies one config per node daemon",
                      fix, {"configs": chosen})


@rule("DRB056", "Device-plugin config problems", severities=("warning",),
      fix="Fix the device-plugin config as the finding says (the device plugin rejects it the same way).")
def problems(ctx: CheckContext) -> Iterator[Finding]:
    """Device-plugin configs the device plugin itself would reject (replicas below 2, ...)."""
    for cfg in ctx.dp_configs:
        for p in cfg.problems:
            yield Finding("DRB056", "warning", cfg.source, f"[{cfg.key}] {p}",
                          _edit(cfg, "Fix the config as the message says: the device plugin rejects it the same "
                                "way"))
