"""What the checkpoint stores: prepared claims and the ownership sides (frozen values, JSON round-trip).

Claims go through two states: `PrepareStarted` is recorded BEFORE any side effect (CDI file), `PrepareCompleted`
after all of them, so a crash in between is visible at start and the half-done prepare is undone (or finished)
instead of being forgotten. `from_dict` validates everything and raises `ValueError` naming the bad field; the
checkpoint turns that into a corrupt-file report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from bridge.inventory.model import DeviceID
from bridge.ledger.sides import Side, parse_side

ClaimState = Literal["PrepareStarted", "PrepareCompleted"]
CLAIM_STATES: tuple[ClaimState, ...] = ("PrepareStarted", "PrepareCompleted")


def _str(d: Mapping[str, Any], key: str, where: str) -> str:
    v = d.get(key)
    if not isinstance(v, str):
        raise ValueError(f"{where}.{key}: expected a string, got {v!r}")
    return v


def _str_list(d: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    v = d.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ValueError(f"{where}.{key}: expected a list of strings, got {v!r}")
    return tuple(v)


@dataclass(frozen=True)
class PreparedDevice:
    device: str  # the ResourceSlice device name, e.g. "gpu-3"
    pool: str
    request_names: tuple[str, ...]
    uuid: DeviceID
    cdi_ids: tuple[str, ...] = ()
    admin_access: bool = False  # an adminAccess request only observes the device: exempt from exclusivity

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"device": self.device, "pool": self.pool, "requestNames": list(self.request_names),
                               "uuid": self.uuid, "cdiIDs": list(self.cdi_ids)}
        if self.admin_access:
            out["adminAccess"] = True
        return out

    @classmethod
    def from_dict(cls, d: Any, where: str) -> PreparedDevice:
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected an object")
        admin = d.get("adminAccess", False)
        if not isinstance(admin, bool):
            raise ValueError(f"{where}.adminAccess: expected a boolean, got {admin!r}")
        return cls(device=_str(d, "device", where), pool=_str(d, "pool", where),
                   request_names=_str_list(d, "requestNames", where), uuid=DeviceID(_str(d, "uuid", where)),
                   cdi_ids=_str_list(d, "cdiIDs", where), admin_access=admin)


@dataclass(frozen=True)
class PreparedClaim:
    uid: str
    namespace: str
    name: str
    state: ClaimState
    devices: tuple[PreparedDevice, ...] = ()
    cdi_spec_file: str = ""
    updated_at: str = ""  # RFC 3339, UTC

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"namespace": self.namespace, "name": self.name, "state": self.state,
                               "devices": [d.to_dict() for d in self.devices], "updatedAt": self.updated_at}
        if self.cdi_spec_file:  # optional: the per-claim spec path follows from the claim UID (bridge.cdi.writer)
            out["cdiSpecFile"] = self.cdi_spec_file
        return out

    @classmethod
    def from_dict(cls, uid: str, d: Any) -> PreparedClaim:
        where = f"claims[{uid}]"
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected an object")
        state = d.get("state")
        if state not in CLAIM_STATES:
            raise ValueError(f"{where}.state: expected one of {', '.join(CLAIM_STATES)}, got {state!r}")
        devices = d.get("devices", [])
        if not isinstance(devices, list):
            raise ValueError(f"{where}.devices: expected a list")
        return cls(uid=uid, namespace=_str(d, "namespace", where), name=_str(d, "name", where), state=state,
                   devices=tuple(PreparedDevice.from_dict(x, f"{where}.devices[{i}]") for i, x in enumerate(devices)),
                   cdi_spec_file=_str(d, "cdiSpecFile", where) if "cdiSpecFile" in d else "",
                   updated_at=_str(d, "updatedAt", where) if "updatedAt" in d else "")


@dataclass(frozen=True)
class CheckpointData:
    """The checkpoint's payload. Treat as a value: the `with_*`/`without_*` helpers return new instances.

    `moves`: for each withdrawn device, the move under way (source, target), so a restart resumes it instead of
    guessing where the device came from (a withdrawn device without one is checked on both sides)."""

    claims: Mapping[str, PreparedClaim] = field(default_factory=dict)
    sides: Mapping[DeviceID, Side] = field(default_factory=dict)
    split: str = ""  # the target split last evaluated, e.g. "2"
    moves: Mapping[DeviceID, tuple[Side, Side]] = field(default_factory=dict)

    def with_claim(self, claim: PreparedClaim) -> CheckpointData:
        return replace(self, claims={**self.claims, claim.uid: claim})

    def without_claim(self, uid: str) -> CheckpointData:
        return replace(self, claims={k: v for k, v in self.claims.items() if k != uid})

    def without_claims(self) -> CheckpointData:
        """After a reboot: prepared claims are void (CDI specs lived in tmpfs), sides stay (the kubelet's device
        assignments survive a reboot in its own checkpoint)."""
        return replace(self, claims={})

    def with_sides(self, sides: Mapping[DeviceID, Side | str], split: str | None = None,
                   moves: Mapping[DeviceID, tuple[Side, Side]] | None = None) -> CheckpointData:
        parsed = {DeviceID(u): parse_side(s, f"side of {u}") for u, s in sides.items()}
        kept_moves = self.moves if moves is None else moves
        return replace(self, sides=parsed, split=self.split if split is None else split,
                       moves={u: m for u, m in kept_moves.items() if parsed.get(u) is Side.WITHDRAWN})

    def claims_in(self, state: ClaimState) -> tuple[PreparedClaim, ...]:
        return tuple(c for c in self.claims.values() if c.state == state)

    def to_dict(self) -> dict[str, Any]:
        own: dict[str, Any] = {"sides": {u: str(s) for u, s in sorted(self.sides.items())}, "split": self.split}
        if self.moves:
            own["moves"] = {u: {"from": str(a), "to": str(b)} for u, (a, b) in sorted(self.moves.items())}
        return {"preparedClaims": {uid: c.to_dict() for uid, c in sorted(self.claims.items())}, "ownership": own}

    @classmethod
    def from_dict(cls, d: Any) -> CheckpointData:
        if not isinstance(d, dict):
            raise ValueError("data: expected an object")
        claims_raw = d.get("preparedClaims", {})
        own = d.get("ownership", {})
        if not isinstance(claims_raw, dict) or not isinstance(own, dict):
            raise ValueError("data: preparedClaims and ownership must be objects")
        sides_raw = own.get("sides", {})
        if not isinstance(sides_raw, dict):
            raise ValueError("ownership.sides: expected an object uuid -> side")
        sides = {DeviceID(u): parse_side(s, f"ownership.sides[{u}]") for u, s in sides_raw.items()}
        split = own.get("split", "")
        if not isinstance(split, str):
            raise ValueError("ownership.split: expected a string")
        moves_raw = own.get("moves", {})
        if not isinstance(moves_raw, dict):
            raise ValueError("ownership.moves: expected an object uuid -> {from, to}")
        moves: dict[DeviceID, tuple[Side, Side]] = {}
        for u, m in moves_raw.items():
            if not isinstance(m, dict):
                raise ValueError(f"ownership.moves[{u}]: expected an object")
            moves[DeviceID(u)] = (parse_side(m.get("from"), f"ownership.moves[{u}].from"),
                                  parse_side(m.get("to"), f"ownership.moves[{u}].to"))
        return cls(claims={uid: PreparedClaim.from_dict(uid, c) for uid, c in claims_raw.items()},
                   sides=sides, split=split, moves=moves)
