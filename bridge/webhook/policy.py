"""Who gets translated: namespace mode, per-namespace target, pod opt-out, exclusions, idempotence.

The namespace label `dra-bridge.io/mode` is the one switch an operator flips:

* `legacy` (also: label absent, or an unknown value) - nothing changes;
* `shadow` - the translation is computed and recorded on the pod as an annotation (a dry run on real traffic);
* `dra` - the translation is applied.

`dra-bridge.io/target: claims|extended` on the namespace overrides the cluster-wide target. A pod annotated
`dra-bridge.io/translate: "false"` is left alone. `kube-system`, `kube-public`, `kube-node-lease` and the webhook's
own namespace are never acted on (a webhook that mutates its own pods can deadlock its own rollout). A pod that
carries a translation record (`dra-bridge.io/translated` or `dra-bridge.io/shadow-translation`) was already handled:
under `reinvocationPolicy: IfNeeded` the webhook is called again on its own output and must answer "no change".

Everything here is pure: labels and annotations in, a `Decision` out.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

PREFIX = "dra-bridge.io/"
MODE_LABEL = PREFIX + "mode"
TARGET_LABEL = PREFIX + "target"
OPT_OUT_ANNOTATION = PREFIX + "translate"
TRANSLATED_ANNOTATION = PREFIX + "translated"
DETAIL_ANNOTATION = PREFIX + "translation"
SHADOW_ANNOTATION = PREFIX + "shadow-translation"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "dra-bridge"

SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})


class Mode(str, enum.Enum):
    LEGACY = "legacy"
    SHADOW = "shadow"
    DRA = "dra"


class Target(str, enum.Enum):
    CLAIMS = "claims"
    EXTENDED = "extended"


class Action(str, enum.Enum):
    SKIP = "skip"  # leave the pod alone (reason says why)
    SHADOW = "shadow"  # compute and record only
    TRANSLATE = "translate"  # compute and apply


@dataclass(frozen=True)
class PolicyConfig:
    own_namespace: str = ""
    excluded_namespaces: frozenset[str] = field(default_factory=lambda: SYSTEM_NAMESPACES)


@dataclass(slots=True)
class Decision:
    """Not frozen: the review makes one per request, and a frozen dataclass's __init__ costs about as much as the
    rest of `resolve` (one `object.__setattr__` per field); nothing changes a Decision after `resolve`."""

    action: Action
    mode: Mode
    target: Target | None  # the namespace's override, if any (None: use the cluster's)
    reason: str
    warnings: tuple[str, ...] = ()


# Enum members as module constants: in CPython 3.11 `Mode.DRA` goes through a Python-level descriptor
# (enum.property), about as costly as a function call, and the review path names them many times per request.
SKIP, SHADOW, TRANSLATE = Action.SKIP, Action.SHADOW, Action.TRANSLATE
LEGACY_MODE, SHADOW_MODE = Mode.LEGACY, Mode.SHADOW


@functools.lru_cache(maxsize=256)
def parse_mode(value: str | None) -> tuple[Mode, str | None]:
    """The namespace's mode and a warning for an unrecognised value (treated as legacy: fail safe)."""
    if value is None or value == "":
        return Mode.LEGACY, None
    try:
        return Mode(value), None
    except ValueError:
        return Mode.LEGACY, (
            f"namespace label {MODE_LABEL}={value!r} is not one of legacy, shadow, dra; treating it as legacy"
        )


@functools.lru_cache(maxsize=256)
def parse_target(value: str | None) -> tuple[Target | None, str | None]:
    if value is None or value == "":
        return None, None
    try:
        return Target(value), None
    except ValueError:
        return None, f"namespace label {TARGET_LABEL}={value!r} is not claims or extended; using the cluster default"


def annotations_of(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    # `type(x) is dict` first: what JSON gives, answered without the ABC machinery of `isinstance(x, Mapping)`
    # (about 2,000 instructions each, twice per review)
    meta = pod.get("metadata")
    ann = meta.get("annotations") if type(meta) is dict or isinstance(meta, Mapping) else None
    if ann is None:
        return _NO_ANNOTATIONS
    return ann if type(ann) is dict or isinstance(ann, Mapping) else _NO_ANNOTATIONS


_NO_ANNOTATIONS: Mapping[str, Any] = MappingProxyType({})


@functools.lru_cache(maxsize=256)
def _namespace(mode_value: str | None,
               target_value: str | None) -> tuple[Mode, Target | None, tuple[str, ...], Decision]:
    """The namespace labels' mode, target override, warnings and the decision for a pod that is acted on (shared by
    every such pod of those labels: nothing changes a Decision after `resolve`)."""
    mode, mode_warning = parse_mode(mode_value)
    target, target_warning = parse_target(target_value)
    warnings = tuple(w for w in (mode_warning, target_warning) if w)
    act = Decision(SHADOW if mode is SHADOW_MODE else TRANSLATE, mode, target, f"namespace mode is {mode.value}",
                   warnings)
    return mode, target, warnings, act


def resolve(
    namespace: str, namespace_labels: Mapping[str, str] | None, pod: Mapping[str, Any], config: PolicyConfig
) -> Decision:
    """Decide what to do with a pod being created in `namespace`. `namespace_labels` None means unknown namespace
    (not in the cache and not readable): treated as legacy, the safe side."""
    if namespace in config.excluded_namespaces:
        return Decision(SKIP, LEGACY_MODE, None, f"namespace {namespace} is a system namespace")
    if config.own_namespace and namespace == config.own_namespace:
        return Decision(SKIP, LEGACY_MODE, None, "the webhook's own namespace is never mutated")
    if namespace_labels is None:
        return Decision(SKIP, LEGACY_MODE, None, f"namespace {namespace} is unknown; treated as legacy")
    mode, target, warnings, act = _namespace(namespace_labels.get(MODE_LABEL), namespace_labels.get(TARGET_LABEL))
    if mode is LEGACY_MODE:
        return Decision(SKIP, mode, target, "namespace mode is legacy", warnings)
    ann = annotations_of(pod)
    if not ann:
        return act
    if str(ann.get(OPT_OUT_ANNOTATION, "")).lower() == "false":
        return Decision(SKIP, mode, target, f"pod opted out with {OPT_OUT_ANNOTATION}=false", warnings)
    if TRANSLATED_ANNOTATION in ann or SHADOW_ANNOTATION in ann:
        return Decision(SKIP, mode, target, "pod already carries a dra-bridge translation record")
    return act
