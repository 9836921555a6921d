"""Which NVIDIA device-plugin config each GPU node runs, the GPU Operator's ClusterPolicy, and the nodes where
`nvidia.com/gpu` is not one whole GPU. Pure functions over the model and parsed configs.

Written from the upstream sources:

* NVIDIA/k8s-device-plugin `cmd/config-manager/main.go`: a node's config is the value of its label
  `nvidia.com/device-plugin.config`; without the label, the default config (`--default-config` / `DEFAULT_CONFIG`);
  without a default, the fallbacks in order: "named" (a config called `default`), then "single" (the only config).
* NVIDIA/gpu-operator `api/nvidia/v1/clusterpolicy_types.go`: `spec.devicePlugin.config.name` is the ConfigMap the
  operator's device plugin and GFD read (in the operator's namespace), `spec.devicePlugin.config.default` its
  default key; `spec.mig.strategy` (none | single | mixed) is passed to the device plugin as `MIG_STRATEGY`, and a
  flag or environment variable wins over the config file's `flags.migStrategy`
  (NVIDIA/k8s-device-plugin `api/config/v1/flags.go`: `c.IsSet(flag)` first).
* MIG strategy `single` advertises each MIG slice of a MIG-enabled GPU as `nvidia.com/gpu`; time-slicing or MPS
  `replicas` without a rename advertise each GPU N times as `nvidia.com/gpu` (NVIDIA/k8s-device-plugin
  `api/config/v1/replicas.go`). On such nodes the bridge's translation to whole DRA devices would change what a
  pod gets, so they are blockers.

A node is "MIG-enabled" when GFD labels its product with `-MIG-` (single strategy), it advertises
`nvidia.com/mig-*` (mixed strategy), or the MIG manager's `nvidia.com/mig.config` label asks for a layout other
than `all-disabled`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from bridge.kvalues.nodeselector import requirement_matches
from bridge.report.dpconfig import DevicePluginConfig
from bridge.report.features import GPU, MIG_PREFIX
from bridge.report.findings import ObjectRef
from bridge.report.model import ClusterModel, Node
from bridge.report.podspec import template_spec

Obj = dict[str, Any]

CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
NAMED_FALLBACK = "default"


@dataclass(frozen=True)
class OperatorPolicy:
    """What the report reads from a GPU Operator ClusterPolicy (nvidia.com/v1)."""

    ref: ObjectRef
    mig_strategy: str  # "" when the policy does not set it
    config_map: str  # spec.devicePlugin.config.name ("" = none)
    default_config: str  # spec.devicePlugin.config.default
    device_plugin: bool  # spec.devicePlugin.enabled (default true)


def operator_policies(objs: Iterable[Obj]) -> list[OperatorPolicy]:
    out = []
    for o in objs:
        m = o.get("metadata") or {}
        spec = o.get("spec") or {}
        dp = spec.get("devicePlugin") or {}
        cfg = dp.get("config") or {}
        out.append(OperatorPolicy(
            ObjectRef("ClusterPolicy", "", str(m.get("name", ""))),
            str((spec.get("mig") or {}).get("strategy") or ""),
            str(cfg.get("name") or ""), str(cfg.get("default") or ""),
            dp.get("enabled") is not False,
        ))
    return sorted(out, key=lambda p: p.ref.name)


def mig_enabled(node: Node) -> bool:
    product = node.labels.get("nvidia.com/gpu.product", "")
    layout = node.labels.get(MIG_CONFIG_LABEL, "")
    return "-MIG-" in product or any(k.startswith(MIG_PREFIX) for k in node.capacity) or \
        layout not in ("", "all-disabled")


def _daemonset_config(model: ClusterModel) -> tuple[set[str], str]:
    """ConfigMaps mounted by device-plugin DaemonSets, and a DEFAULT_CONFIG one of them sets."""
    names: set[str] = set()
    default = ""
    roles = {r.ref: r.role for r in model.daemonsets}
    for ds in model.data.of("DaemonSet"):
        m = ds.get("metadata") or {}
        if roles.get(("DaemonSet", m.get("namespace", ""), m.get("name", ""))) != "device-plugin":
            continue
        spec = template_spec("DaemonSet", ds) or {}
        for v in spec.get("volumes") or ():
            cm = (v.get("configMap") or {}).get("name")
            if cm:
                names.add(str(cm))
        for c in list(spec.get("containers") or ()) + list(spec.get("initContainers") or ()):
            for e in c.get("env") or ():
                if e.get("name") == "DEFAULT_CONFIG" and e.get("value"):
                    default = str(e["value"])
    return names, default


@dataclass(frozen=True)
class ConfigUse:
    config: DevicePluginConfig
    nodes: tuple[str, ...]  # vendor device-plugin nodes that run this config
    default_by: str  # why it is the default for unlabeled nodes ("" when it is not)


@dataclass(frozen=True)
class Selection:
    uses: tuple[ConfigUse, ...]
    by_node: dict[str, DevicePluginConfig]
    default_key: str


def select_configs(model: ClusterModel, configs: list[DevicePluginConfig],
                   policies: list[OperatorPolicy]) -> Selection:
    """Which config each vendor device-plugin node runs (see the module docstring for the rules)."""
    policy = next((p for p in policies if p.device_plugin), None)
    mounted, ds_default = _daemonset_config(model)
    if policy is not None and policy.config_map:
        wanted: set[str] | None = {policy.config_map}
    elif mounted:
        wanted = mounted
    else:
        wanted = None  # unknown: every device-plugin config in the input counts
    pool = [c for c in configs if c.source.kind != "ConfigMap" or wanted is None or c.source.name in wanted]
    by_key: dict[str, DevicePluginConfig] = {}
    for c in sorted(pool, key=lambda c: (c.source.namespace, c.source.name, c.key)):
        by_key.setdefault(c.key, c)
    default_key, default_by = "", ""
    if policy is not None and policy.default_config:
        default_key, default_by = policy.default_config, f"spec.devicePlugin.config.default of {policy.ref}"
    elif ds_default:
        default_key, default_by = ds_default, "DEFAULT_CONFIG of the device-plugin DaemonSet"
    elif NAMED_FALLBACK in by_key:
        default_key, default_by = NAMED_FALLBACK, "the config-manager's fallback to a config named `default`"
    elif len(by_key) == 1:
        default_key = next(iter(by_key))
        default_by = "the config-manager's fallback to the only config"
    by_node: dict[str, DevicePluginConfig] = {}
    for node in model.nodes.values():
        if "device-plugin" not in node.backends:
            continue
        key = node.labels.get(CONFIG_LABEL) or default_key
        cfg = by_key.get(key)
        if cfg is not None:
            by_node[node.name] = cfg
    uses = []
    for c in configs:
        nodes = tuple(sorted(n for n, cfg in by_node.items() if cfg is c))
        is_default = c is by_key.get(default_key) if default_key else False
        uses.append(ConfigUse(c, nodes, default_by if is_default else ""))
    return Selection(tuple(uses), by_node, default_key)


def effective_mig_strategy(cfg: DevicePluginConfig | None, policies: list[OperatorPolicy]) -> tuple[str, str]:
    """(strategy, where it comes from): the ClusterPolicy's wins over the config file, as the plugin's flags do."""
    policy = next((p for p in policies if p.device_plugin and p.mig_strategy), None)
    if policy is not None:
        return policy.mig_strategy, f"spec.mig.strategy of {policy.ref}"
    if cfg is not None:
        return cfg.mig_strategy, f"flags.migStrategy of {cfg.label}"
    return "none", ""


def unrenamed_sharing(cfg: DevicePluginConfig) -> list[str]:
    """'timeSlicing x4' for every sharing block that replicates nvidia.com/gpu under its own name."""
    return [f"{s.strategy} x{r.replicas}" for s in cfg.sharing for r in s.resources
            if r.name == GPU and not r.rename and r.replicas > 1]


def not_whole_gpu(model: ClusterModel, selection: Selection, policies: list[OperatorPolicy]) -> dict[str, list[str]]:
    """node -> why its `nvidia.com/gpu` is a MIG slice or a time-slice/MPS share, from the config it runs and the
    ClusterPolicy (node labels are read separately)."""
    out: dict[str, list[str]] = {}
    for node in model.nodes.values():
        if "device-plugin" not in node.backends:
            continue
        cfg = selection.by_node.get(node.name)
        reasons: list[str] = []
        strategy, origin = effective_mig_strategy(cfg, policies)
        if strategy == "single" and mig_enabled(node):
            reasons.append(f"MIG strategy single ({origin}) on a MIG-enabled node: {GPU} is one MIG slice")
        if cfg is not None:
            for share in unrenamed_sharing(cfg):
                reasons.append(f"config {cfg.label} shares {GPU} without a rename ({share}): {GPU} is a share "
                               "of a GPU")
        if reasons:
            out[node.name] = reasons
    return out


def terms_match(terms: tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...], labels: dict[str, str]) -> bool:
    """Node-selector terms (ORed) of requirements (ANDed); no terms select every node."""
    return not terms or any(all(requirement_matches(k, op, vs, labels) for k, op, vs in term) for term in terms)
