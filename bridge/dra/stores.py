"""Adapters from the prepare core's two seams (`ClaimStore`, `CdiStore`) to the project's ledger and CDI packages.

`prepare.py` depends only on the Protocols; the concrete persistence lives in `bridge/ledger` (checkpoint file,
file lock, boot ID) and `bridge/cdi` (spec building, atomic writer). This module is the only glue.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bridge.cdi import CdiSpecWriter, build_claim_spec, claim_kind
from bridge.inventory.model import GpuDevice


class ClaimCdi:
    """`CdiStore` over `bridge.cdi`: one spec file per claim under `root` (e.g. /var/run/cdi)."""

    def __init__(self, root: str | Path, driver: str) -> None:
        self.kind = claim_kind(driver)
        self.writer = CdiSpecWriter(root, self.kind)
        self.writer.sweep_temp_files()

    def write(self, claim_uid: str, devices: Sequence[tuple[str, GpuDevice]]) -> dict[str, tuple[str, ...]]:
        built = build_claim_spec(claim_uid, [gpu for _, gpu in devices], kind=self.kind)
        self.writer.write(claim_uid, built.document)
        return {name: (built.cdi_ids[gpu.uuid],) for name, gpu in devices}

    def remove(self, claim_uid: str) -> bool:
        return self.writer.remove(claim_uid)

    def exists(self, claim_uid: str) -> bool:
        return self.writer.path_for(claim_uid).is_file()

    def claim_uids(self) -> set[str]:
        return set(self.writer.list())
