"""CDI (Container Device Interface) specs: pure building (`spec`), naming and version rules, atomic files.

Usage (DRA prepare / unprepare)::

    from bridge.cdi import CdiSpecWriter, build_claim_spec, claim_kind

    kind = claim_kind("gpu.dra-bridge.io")                  # "k8s.gpu.dra-bridge.io/claim"
    writer = CdiSpecWriter("/var/run/cdi", kind)
    built = build_claim_spec(claim_uid, [gpu3], kind=kind)  # GpuDevice objects from the inventory
    writer.write(claim_uid, built.document)                 # atomic; re-writing is idempotent
    cdi_ids = built.cdi_ids[gpu3.uuid]                      # "k8s.gpu.dra-bridge.io/claim=<uid>-gpu-3"
    ...
    writer.remove(claim_uid)                                # False if already gone

Device plugin (static node spec for the cdi-annotations / cdi-cri strategies)::

    dp = CdiSpecWriter("/var/run/cdi", "nvidia.com/gpu")
    dp.write("node", build_device_plugin_spec(devices))
    device_plugin_cdi_ids(["GPU-..."], devices)             # ["nvidia.com/gpu=GPU-..."]
"""

from bridge.cdi.names import CdiNameError, parse_qualified_name, qualified_name
from bridge.cdi.spec import (
    COMMON_DEVICE_NODES,
    DEFAULT_DEVICE_PLUGIN_KIND,
    ClaimSpec,
    build_claim_spec,
    build_device_plugin_spec,
    claim_device_name,
    claim_kind,
    device_plugin_cdi_ids,
)
from bridge.cdi.version import minimum_cdi_version
from bridge.cdi.writer import CdiSpecWriter, CdiWriteError, atomic_write_bytes

__all__ = [
    "COMMON_DEVICE_NODES",
    "DEFAULT_DEVICE_PLUGIN_KIND",
    "CdiNameError",
    "CdiSpecWriter",
    "CdiWriteError",
    "ClaimSpec",
    "atomic_write_bytes",
    "build_claim_spec",
    "build_device_plugin_spec",
    "claim_device_name",
    "claim_kind",
    "device_plugin_cdi_ids",
    "minimum_cdi_version",
    "parse_qualified_name",
    "qualified_name",
]
