"""A small table of real NVIDIA data-centre GPUs for the simulated source.

Numbers are what NVML reports on real machines (product name from `nvmlDeviceGetName`, memory total in MiB from
`nvmlDeviceGetMemoryInfo`), not the marketing sizes: an "80GB" H100 reports 81559 MiB. Compute capabilities and
architectures follow NVIDIA's CUDA GPU table. `nvlinks` is the number of NVLink links per GPU; `topology` says how
the SXM boards wire them:

* `nvswitch`: HGX boards of 8 (A100, H100, H200, B200): every link goes to the NVSwitch fabric, so all 8 GPUs of a
  board are peers of each other with the GPU's full link count.
* `hybrid-cube-mesh`: the DGX-1 with V100 SXM2: no switch, 6 links per GPU wired point to point (two quads plus
  cross links), some pairs with 2 links, some with 1, some with none — the case where preferred allocation matters.
* `none`: PCIe cards (L4, L40S, T4) have no NVLink.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Topology = Literal["nvswitch", "hybrid-cube-mesh", "none"]

MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuModel:
    key: str  # the name used in --devices specs, e.g. "H100-80GB"
    product_name: str
    memory_mib: int
    compute_capability: str
    architecture: str
    form_factor: Literal["SXM", "PCIe"]
    nvlinks: int
    topology: Topology
    mig_capable: bool

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB


_MODELS = (
    GpuModel("H100-80GB", "NVIDIA H100 80GB HBM3", 81559, "9.0", "Hopper", "SXM", 18, "nvswitch", True),
    GpuModel("H200-141GB", "NVIDIA H200", 143771, "9.0", "Hopper", "SXM", 18, "nvswitch", True),
    GpuModel("A100-40GB", "NVIDIA A100-SXM4-40GB", 40960, "8.0", "Ampere", "SXM", 12, "nvswitch", True),
    GpuModel("A100-80GB", "NVIDIA A100-SXM4-80GB", 81920, "8.0", "Ampere", "SXM", 12, "nvswitch", True),
    GpuModel("B200", "NVIDIA B200", 183359, "10.0", "Blackwell", "SXM", 18, "nvswitch", True),
    GpuModel("V100-32GB", "Tesla V100-SXM2-32GB", 32768, "7.0", "Volta", "SXM", 6, "hybrid-cube-mesh", False),
    GpuModel("L40S", "NVIDIA L40S", 46068, "8.9", "Ada Lovelace", "PCIe", 0, "none", False),
    GpuModel("L4", "NVIDIA L4", 23034, "8.9", "Ada Lovelace", "PCIe", 0, "none", False),
    GpuModel("T4", "Tesla T4", 15360, "7.5", "Turing", "PCIe", 0, "none", False),
)

MODELS: dict[str, GpuModel] = {m.key.upper(): m for m in _MODELS}
# Common alternative spellings: "B200-180GB", "L4-24GB", "T4-16GB", "L40S-48GB".
_ALIASES = {"B200-180GB": "B200", "B200-192GB": "B200", "L4-24GB": "L4", "T4-16GB": "T4", "L40S-48GB": "L40S",
            "H200": "H200-141GB", "H100": "H100-80GB", "V100": "V100-32GB"}


def model_names() -> list[str]:
    return [m.key for m in _MODELS]


def lookup(name: str) -> GpuModel | None:
    """The model for a spec name (case-insensitive, a few aliases), or None."""
    key = name.strip().upper()
    key = _ALIASES.get(key, key)
    return MODELS.get(key)


# The DGX-1 (V100) hybrid cube-mesh, as `nvidia-smi topo -m` shows it: (a, b) -> number of NVLink links.
# Two fully connected quads (0-3, 4-7) with mixed 1/2-link pairs, plus i <-> i+4 with 2 links. Every GPU has 6.
DGX1_HYBRID_CUBE_MESH: dict[tuple[int, int], int] = {
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2,
    (1, 2): 2, (1, 3): 1, (1, 5): 2,
    (2, 3): 2, (2, 6): 1,
    (3, 7): 1,
    (4, 5): 1, (4, 6): 1, (4, 7): 2,
    (5, 6): 2, (5, 7): 1,
    (6, 7): 2,
}


def group_links(topology: Topology, nvlinks: int, size: int) -> dict[tuple[int, int], int]:
    """Links between positions 0..size-1 of one NVLink group (a board), keyed (a, b) with a < b."""
    if topology == "none" or size < 2:
        return {}
    if topology == "hybrid-cube-mesh":
        return {(a, b): n for (a, b), n in DGX1_HYBRID_CUBE_MESH.items() if b < size}
    return {(a, b): nvlinks for a in range(size) for b in range(a + 1, size)}
