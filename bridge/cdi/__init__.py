"""CDI (Container Device Interface) specs that give a container a working CUDA user space.

Pure core: `driver` (values), `edits` and `spec` (building), `names`, `version`, `schema` (validation against our
CDI JSON schema, `schema.json`). I/O shell: `discovery` (the driver root on disk; `ldcache` reads its loader
cache, bounded), `toolkit` (the NVIDIA Container Toolkit's spec on the node), `provider` (`NodeCdi`: inventory cache
and the `--cdi-source` policy), `dpspec` (the device plugin's spec file), `writer` (atomic files, validated before
writing).

Usage (DRA prepare / unprepare, see bridge/dra/stores.py `ClaimCdi`)::

    from bridge.cdi import CdiOptions, CdiSpecWriter, NodeCdi, build_claim_spec, claim_kind

    node_cdi = NodeCdi(CdiOptions(driver_root="/run/nvidia/driver", check_device_nodes=True), gpus)
    for level, line in node_cdi.describe(): log.log(level, line)   # why the specs look the way they do
    names = node_cdi.toolkit_names([gpu3])                     # the toolkit's names, or None: write our own
    kind = claim_kind("gpu.dra-bridge.io")                      # "k8s.gpu.dra-bridge.io/claim"
    built = build_claim_spec(claim_uid, [gpu3], kind=kind, inventory=node_cdi.inventory([gpu3]))
    CdiSpecWriter("/var/run/cdi", kind).write(claim_uid, built.document)  # schema-checked, atomic
    cdi_ids = built.cdi_ids[gpu3.uuid]                          # "k8s.gpu.dra-bridge.io/claim=<uid>-gpu-3"

Device plugin (cdi-annotations / cdi-cri strategies)::

    dp = DevicePluginCdi("/var/run/cdi", node_cdi, gpus)
    dp.start()                                                  # k8s.device-plugin.dra-bridge.io-gpu_node.json
    dp.cdi_devices([gpu0])                                      # ("k8s.device-plugin.dra-bridge.io/gpu=GPU-...",)
"""

from bridge.cdi.driver import DeviceNode, DriverFiles, DriverInventory, HostFile, Root, Symlink
from bridge.cdi.dpspec import DevicePluginCdi
from bridge.cdi.edits import CdiBuildError
from bridge.cdi.names import CdiNameError, parse_qualified_name, qualified_name
from bridge.cdi.provider import CDI_SOURCES, CdiConfigError, CdiOptions, CdiSource, NodeCdi
from bridge.cdi.schema import CdiSpecInvalid, validate_spec
from bridge.cdi.spec import (
    DEVICE_PLUGIN_KIND,
    LEGACY_DEVICE_PLUGIN_KIND,
    ClaimSpec,
    DevicePluginSpec,
    build_claim_spec,
    build_device_plugin_spec,
    claim_device_name,
    claim_kind,
    device_plugin_cdi_ids,
)
from bridge.cdi.toolkit import TOOLKIT_KIND, ToolkitSpecs
from bridge.cdi.version import minimum_cdi_version
from bridge.cdi.writer import CdiSpecWriter, CdiWriteError

__all__ = [
    "CDI_SOURCES",
    "DEVICE_PLUGIN_KIND",
    "LEGACY_DEVICE_PLUGIN_KIND",
    "TOOLKIT_KIND",
    "CdiBuildError",
    "CdiConfigError",
    "CdiNameError",
    "CdiOptions",
    "CdiSource",
    "CdiSpecInvalid",
    "CdiSpecWriter",
    "CdiWriteError",
    "ClaimSpec",
    "DeviceNode",
    "DevicePluginCdi",
    "DevicePluginSpec",
    "DriverFiles",
    "DriverInventory",
    "HostFile",
    "NodeCdi",
    "Root",
    "Symlink",
    "ToolkitSpecs",
    "build_claim_spec",
    "build_device_plugin_spec",
    "claim_device_name",
    "claim_kind",
    "device_plugin_cdi_ids",
    "minimum_cdi_version",
    "parse_qualified_name",
    "qualified_name",
    "validate_spec",
]
