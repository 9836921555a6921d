"""The cluster policy: flags give the defaults, an optional ConfigMap overrides them while the controller runs.

Flags (each also an environment variable, see `bridge controller --help`):
    --min-legacy-share 0.25            every pool keeps at least 25 % of its GPUs on the legacy side
    --pool-min-legacy-share training=0 --pool-min-legacy-share inference=0.5
    --max-moves-per-minute 32          GPUs moved (both directions) in any 60 s window; 0 pauses all moves
    --max-moves-per-decision 500       GPUs one decision moves at most; the rest waits for the next decision
    --cooldown 2m                      a node that changed one way does not change back before this

ConfigMap (`--policy-configmap NAMESPACE/NAME`, key `policy.yaml`), watched: a change applies at the next decision,
every key optional, a key it leaves out keeps the flag's value::

    minLegacyShare: 0.25
    pools:
      training: {minLegacyShare: 0}
      inference: {minLegacyShare: 0.5}
    maxMovesPerMinute: 32
    maxMovesPerDecision: 500
    cooldownSeconds: 120

A document that does not validate is refused as a whole with a message naming the field; the controller keeps the
policy it had (flags, or the last good document), logs it, records a Warning Event on the ConfigMap and counts it
(`dra_bridge_controller_policy_errors_total`). Rejected: silently ignoring unknown keys (a typo such as
`minLegacyshare` would quietly drop a floor an operator relies on).

A pool is the value of the node label `--pool-label` (default `dra-bridge.io/pool`); nodes without it form the
pool "" (shown as "(default)"). The share is of the pool's GPUs on nodes whose split the controller can read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from bridge.controller.limits import MOST_MOVES
from bridge.controller.model import Policy, PoolPolicy
from bridge.humantext import clip
from bridge.kvalues.documents import CONFIGMAP_BYTES, DocumentError, load_yaml

POLICY_KEY = "policy.yaml"
_DOC_KEYS = ("minLegacyShare", "pools", "maxMovesPerMinute", "maxMovesPerDecision", "cooldownSeconds")
_POOL_KEYS = ("minLegacyShare",)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


class PolicyError(ValueError):
    """A policy value that cannot be used; the message names the field and what is accepted."""


def parse_share(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise PolicyError(f"{where}: expected a number between 0 and 1, got {clip(value)}")
    try:
        share = float(value)
    except ValueError:
        raise PolicyError(f"{where}: expected a number between 0 and 1, got {clip(value)}") from None
    if not math.isfinite(share) or not 0.0 <= share <= 1.0:
        raise PolicyError(f"{where}: expected a number between 0 and 1 (a fraction of the pool's GPUs), got {clip(value)}")
    return share


def parse_duration(value: str, where: str = "--cooldown") -> float:
    """`120`, `90s`, `2m`, `1h`, `500ms` -> seconds."""
    m = _DURATION.match(str(value))
    if not m:
        raise PolicyError(f"{where}: expected a duration such as 120, 90s, 2m or 1h, got {clip(value)}")
    number = float(m.group(1))
    return number * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}[m.group(2)]


def parse_pool_shares(items: Iterable[str], where: str = "--pool-min-legacy-share") -> dict[str, PoolPolicy]:
    out: dict[str, PoolPolicy] = {}
    for item in items:
        pool, sep, value = item.partition("=")
        if not sep:
            raise PolicyError(f"{where}: expected POOL=SHARE such as training=0.25, got {clip(item)}")
        pool = pool.strip()
        if pool in out:
            raise PolicyError(f"{where}: pool {clip(pool)} is given twice")
        out[pool] = PoolPolicy(parse_share(value.strip(), f"{where} {pool}"))
    return out


def _moves(value: Any, where: str, least: int = 0, hint: str = "") -> int:
    """A limit on moves: a whole number from `least` to `MOST_MOVES` (the flags' range); `hint` follows the error."""
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MOST_MOVES:
        raise PolicyError(f"{where}: expected a whole number from {least} to {MOST_MOVES}, got {clip(value)}{hint}")
    return value


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or not math.isfinite(value):
        raise PolicyError(f"{where}: expected a number of seconds >= 0, got {clip(value)}")
    return float(value)


def _unknown(keys: Iterable[Any], allowed: tuple[str, ...], where: str) -> None:
    extra = sorted(clip(k) if not isinstance(k, str) else clip(k).strip("'") for k in keys if k not in allowed)
    if extra:
        raise PolicyError(f"{where}: unknown key{'s' if len(extra) > 1 else ''} {', '.join(extra)}; "
                          f"accepted: {', '.join(allowed)}")


def parse_document(text: str, base: Policy, where: str = POLICY_KEY) -> Policy:
    """The policy a `policy.yaml` document sets on top of `base` (see the module docstring)."""
    try:
        doc = load_yaml(text, where, max_bytes=CONFIGMAP_BYTES)  # bounded: no aliases, 64 levels
    except DocumentError as err:
        raise PolicyError(str(err)) from err
    if doc is None:
        return base
    if not isinstance(doc, dict):
        raise PolicyError(f"{where}: expected a mapping with keys {', '.join(_DOC_KEYS)}")
    _unknown(doc, _DOC_KEYS, where)
    policy = base
    if "minLegacyShare" in doc:
        policy = replace(policy, min_legacy_share=parse_share(doc["minLegacyShare"], f"{where}: minLegacyShare"))
    if "pools" in doc:
        pools_doc = doc["pools"] or {}
        if not isinstance(pools_doc, dict):
            raise PolicyError(f"{where}: pools: expected a mapping from pool name to settings")
        pools: dict[str, PoolPolicy] = dict(base.pools)
        for name, settings in pools_doc.items():
            at = f"{where}: pools.{clip(name).strip(chr(39))}"
            if not isinstance(settings, dict):
                raise PolicyError(f"{at}: expected a mapping such as {{minLegacyShare: 0.25}}")
            _unknown(settings, _POOL_KEYS, at)
            if "minLegacyShare" not in settings:
                raise PolicyError(f"{at}: minLegacyShare is required")
            pools[name if isinstance(name, str) else clip(name)] = PoolPolicy(parse_share(settings["minLegacyShare"], f"{at}.minLegacyShare"))
        policy = replace(policy, pools=pools)
    if "maxMovesPerMinute" in doc:
        policy = replace(policy, max_moves_per_minute=_moves(doc["maxMovesPerMinute"], f"{where}: maxMovesPerMinute"))
    if "maxMovesPerDecision" in doc:
        policy = replace(policy, max_moves_per_decision=_moves(
            doc["maxMovesPerDecision"], f"{where}: maxMovesPerDecision", 1, " (maxMovesPerMinute: 0 pauses all moves)"))
    if "cooldownSeconds" in doc:
        policy = replace(policy, cooldown_s=_seconds(doc["cooldownSeconds"], f"{where}: cooldownSeconds"))
    return policy


def policy_from_configmap(cm: Mapping[str, Any], base: Policy) -> Policy:
    meta = cm.get("metadata") or {}
    where = f"ConfigMap {meta.get('namespace')}/{meta.get('name')} key {POLICY_KEY}"
    data = cm.get("data") or {}
    if POLICY_KEY not in data:
        raise PolicyError(f"{where}: missing (the controller reads only this key)")
    return parse_document(str(data[POLICY_KEY]), base, where)


def describe(policy: Policy) -> str:
    pools = ", ".join(f"{p or '(default)'}={v.min_legacy_share:g}" for p, v in sorted(policy.pools.items()))
    return (f"min legacy share {policy.min_legacy_share:g}" + (f" (pools: {pools})" if pools else "")
            + f", at most {policy.max_moves_per_minute} moves per minute and {policy.max_moves_per_decision} per "
              f"decision, cool-down {policy.cooldown_s:g}s")


__all__ = [
    "POLICY_KEY",
    "PolicyError",
    "describe",
    "parse_document",
    "parse_duration",
    "parse_pool_shares",
    "parse_share",
    "policy_from_configmap",
]
