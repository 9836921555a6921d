"""NVIDIA device-plugin configuration (`version: v1` files), as far as the migration cares.

Read from a ConfigMap in the input (any data key whose value is a `version: v1` plugin config; the key is the
config name that nodes select with the label `nvidia.com/device-plugin.config`) or from a file given with
`--device-plugin-config`. Parsing never raises for content problems: they become `problems` on the result so the
report can name them (a malformed config is a finding, not a crash). The text is read by the bounded YAML decoder
(`bridge.kvalues.documents.load_yaml`: no aliases, 64 levels, 1 MiB), so a 516-byte alias bomb is a problem named
in the report, not 87 s and 5.65 GB of expansion.

What the plugin does with a config, from NVIDIA/k8s-device-plugin `api/config/v1`:

* `replicas.go` `ReplicatedResource.UnmarshalJSON`: `replicas` is required and must be at least 2 ("number of
  replicas must be >= 2"); the plugin refuses the whole config otherwise.
* `config.go` `DisableResourceNamingInConfig` (called by the plugin, GFD and the MPS daemon at start): an explicit
  `rename` is ignored (renaming through the config is disabled; only `renameByDefault: true` renames, to
  `<name>.shared`), and so are `devices` other than "all". So `rename: nvidia.com/gpu-shared` without
  `renameByDefault` still advertises `nvidia.com/gpu`: the resource is shared under its own name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bridge.humantext import clip
from bridge.kvalues.documents import DocumentError, load_yaml
from bridge.report.findings import ObjectRef


@dataclass(frozen=True)
class SharedResource:
    name: str
    replicas: int
    rename: str  # the name the plugin advertises it under when renamed ("" = shared under its own name)
    devices: str  # "all" (the plugin ignores any other selection)


@dataclass(frozen=True)
class Sharing:
    strategy: str  # "timeSlicing" | "mps"
    rename_by_default: bool
    fail_requests_greater_than_one: bool
    resources: tuple[SharedResource, ...]


@dataclass(frozen=True)
class DevicePluginConfig:
    source: ObjectRef  # the ConfigMap (or a File ref for --device-plugin-config)
    key: str  # data key / config name
    mig_strategy: str  # "none" | "single" | "mixed"
    sharing: tuple[Sharing, ...]
    problems: tuple[str, ...] = field(default=())

    @property
    def label(self) -> str:
        return f"{self.source}:{self.key}" if self.key else str(self.source)


def looks_like_config(text: str) -> bool:
    return "version" in text and ("sharing" in text or "flags" in text or "migStrategy" in text)


def parse_config(text: str, source: ObjectRef, key: str) -> DevicePluginConfig | None:
    """None when the text is not a device-plugin config at all (other ConfigMaps)."""
    try:
        doc = load_yaml(text, "the config")  # bounded: a ConfigMap's size, 64 levels, no aliases
    except DocumentError as err:
        if looks_like_config(text):
            return DevicePluginConfig(source, key, "none", (), (str(err),))
        return None
    if not isinstance(doc, dict) or doc.get("version") != "v1":
        return None
    if not any(k in doc for k in ("flags", "sharing", "resources", "plugin")):
        return None
    problems: list[str] = []
    flags = doc.get("flags") or {}
    if not isinstance(flags, dict):
        problems.append("flags: expected a mapping")
        flags = {}
    mig = flags.get("migStrategy", "none")
    if mig not in ("none", "single", "mixed"):
        problems.append(f"flags.migStrategy: unknown value {clip(mig)} (none, single, mixed)")
        if not isinstance(mig, str):
            mig = "none"
    sharing_out: list[Sharing] = []
    sharing = doc.get("sharing") or {}
    if not isinstance(sharing, dict):
        problems.append("sharing: expected a mapping")
        sharing = {}
    for strategy in ("timeSlicing", "mps"):
        block = sharing.get(strategy)
        if block is None:
            continue
        if not isinstance(block, dict):
            problems.append(f"sharing.{strategy}: expected a mapping")
            continue
        rename_default = bool(block.get("renameByDefault", False))
        resources = []
        for i, r in enumerate(block.get("resources") or ()):
            if not isinstance(r, dict) or "name" not in r:
                problems.append(f"sharing.{strategy}.resources[{i}]: needs a name")
                continue
            try:
                replicas = int(r.get("replicas", 0))
            except (TypeError, ValueError):
                problems.append(f"sharing.{strategy}.resources[{i}].replicas: not an integer: {clip(r.get('replicas'))}")
                continue
            if replicas < 2:
                problems.append(f"sharing.{strategy}.resources[{i}].replicas: {replicas}; the device plugin refuses "
                                "the config (\"number of replicas must be >= 2\")")
            asked = str(r.get("rename") or "")
            rename = f"{r['name']}.shared" if rename_default else ""
            if asked and asked != rename:
                problems.append(f"sharing.{strategy}.resources[{i}].rename: {asked} is ignored by the device plugin "
                                "(renaming in the config is disabled; only renameByDefault renames, to "
                                f"{r['name']}.shared): it is advertised as {rename or r['name']}")
            devices = r.get("devices", "all")
            if devices != "all":
                problems.append(f"sharing.{strategy}.resources[{i}].devices: ignored by the device plugin (every "
                                "device is shared)")
                devices = "all"
            resources.append(SharedResource(str(r["name"]), replicas, rename, str(devices)))
        sharing_out.append(
            Sharing(strategy, rename_default, bool(block.get("failRequestsGreaterThanOne", False)), tuple(resources))
        )
    return DevicePluginConfig(source, key, mig, tuple(sharing_out), tuple(problems))


def configs_from_configmaps(configmaps: list[dict[str, Any]]) -> list[DevicePluginConfig]:
    out = []
    for cm in configmaps:
        m = cm.get("metadata") or {}
        ref = ObjectRef("ConfigMap", m.get("namespace", ""), m.get("name", ""))
        for key, text in sorted((cm.get("data") or {}).items()):
            if not isinstance(text, str) or not looks_like_config(text):
                continue
            cfg = parse_config(text, ref, key)
            if cfg is not None:
                out.append(cfg)
    return out
