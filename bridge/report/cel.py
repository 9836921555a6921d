"""CEL for the report: evaluate DeviceClass/claim selectors against devices, and turn GPU Feature Discovery label
selectors into the CEL a DRA request would carry.

GFD translation is the shared one (`bridge.kvalues.gfd.map_requirement`, which the webhook uses too), so the report
shows the exact CEL the webhook will add, for the GFD family rule the cluster's labels show. Evaluation is the
report's own: the webhook's `evaluate` checks one device of the bridge's driver,
while the capacity simulation evaluates every DeviceClass against devices of any driver across the fleet, memoised.

Evaluation uses `cel-python` with the Kubernetes DRA additions the selectors need: `quantity()` and
`compareTo/isGreaterThan/isLessThan` for capacities, `semver()` with `major()/minor()/patch()` and comparisons for
`version` attributes, and the strings extension (`lowerAscii`, `upperAscii`, `replace`). A selector that fails
to evaluate (missing attribute, type error) does not match, which is what the scheduler does with a device whose
attributes make the expression error out.

Devices that differ only in per-device identity attributes (uuid, index, minor, pciBusID, numaNode) evaluate the
same unless the expression names one of those attributes, so results are memoised by the device's attribute
signature: a 5,000-node fleet costs a handful of evaluations per selector, not one per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import celpy.celtypes as ct

from bridge.kvalues import cel as kcel
from bridge.kvalues import gfd
from bridge.kvalues.quantity import quantity_int
from bridge.report.features import BRIDGE_DRIVER
from bridge.report.model import Device, Node, VersionValue
from bridge.report.podspec import Requirement

_IDENTITY = ("uuid", "index", "minor", "pciBusID", "numaNode")


def _to_attr(v: Any) -> Any:
    if isinstance(v, VersionValue):
        return kcel.Semver(v)
    return v


def device_activation(d: Device) -> dict[str, Any]:
    attrs = {dom: {k: _to_attr(v) for k, v in ids.items()} for dom, ids in d.attributes.items()}
    return kcel.device_activation(d.driver, attrs, d.capacity)


CelError = kcel.CelError


class SelectorEvaluator:
    """Compiles each expression once; memoises results by device signature (see module docstring)."""

    def __init__(self) -> None:
        self._programs: dict[str, Any] = {}
        self._identity: dict[str, bool] = {}
        self._memo: dict[tuple[str, Any], bool] = {}
        self._outcomes: dict[tuple[str, str, Any], bool | str] = {}
        self._sigs: dict[int, tuple[Device, Any]] = {}

    def check(self, expr: str) -> None:
        self._program(expr)

    def _program(self, expr: str) -> Any:
        prog = self._programs.get(expr)
        if prog is None:
            try:
                prog = kcel.program(expr)
            except CelError as err:
                raise CelError(f"{expr!r}: {err}") from err
            self._programs[expr] = prog
            self._identity[expr] = any(name in expr for name in _IDENTITY)
        return prog

    def _signature(self, d: Device) -> Any:
        # Keyed by identity, so the device is kept with its signature: a freed device's id can be reused by a new
        # one, which must not inherit the old signature (and with it the old device's memoised results).
        hit = self._sigs.get(id(d))
        if hit is not None and hit[0] is d:
            return hit[1]
        sig = (
            d.driver,
            tuple(sorted((dom, k, repr(v)) for dom, m in d.attributes.items() for k, v in m.items() if k not in _IDENTITY)),
            tuple(sorted((dom, k, v) for dom, m in d.capacity.items() for k, v in m.items())),
        )
        self._sigs[id(d)] = (d, sig)
        return sig

    def outcome(self, expr: str, d: Device) -> bool | str:
        """True/False, or the runtime error's text: what the real scheduler sees (an error aborts the pod).
        Memoised like `matches`."""
        prog = self._program(expr)
        key = None if self._identity[expr] else ("outcome", expr, self._signature(d))
        if key is not None:
            hit = self._outcomes.get(key)
            if hit is not None:
                return hit
        out: bool | str
        try:
            result = prog.evaluate(device_activation(d))
        except Exception as err:  # CELEvalError, TypeError from our functions
            out = str(err) or type(err).__name__
        else:
            if isinstance(result, Exception):  # cel-python may return its error value instead of raising
                out = str(result) or type(result).__name__
            elif not isinstance(result, (bool, ct.BoolType)):
                out = f"returned {type(result).__name__}, not bool"
            else:
                out = bool(result)
        if key is not None:
            self._outcomes[key] = out
        return out

    def matches(self, expr: str, d: Device) -> bool:
        prog = self._program(expr)
        key = None if self._identity[expr] else (expr, self._signature(d))
        if key is not None:
            hit = self._memo.get(key)
            if hit is not None:
                return hit
        try:
            result = prog.evaluate(device_activation(d))
            ok = isinstance(result, (bool, ct.BoolType)) and bool(result)
        except Exception:  # CELEvalError, TypeError from our functions: the device does not match
            ok = False
        if key is not None:
            self._memo[key] = ok
        return ok


# ---------------------------------------------------------------------------------------------- GFD -> CEL


@dataclass(frozen=True)
class GfdTranslation:
    cel: str | None  # the device selector; None when no requirement maps to one
    node_only: tuple[str, ...]  # requirements on node-level labels: they stay on the pod as node selectors
    problems: tuple[str, ...]  # requirements that cannot be expressed (the webhook refuses to approximate)


def gfd_to_cel(terms: tuple[tuple[Requirement, ...], ...], domain: str = BRIDGE_DRIVER,
               rule: gfd.FamilyRule = gfd.LATEST) -> GfdTranslation:
    """The CEL the webhook adds for these node-selector terms (terms ORed, requirements ANDed), from the shared
    mapping (`bridge.kvalues.gfd.map_requirement`) so the report shows exactly what translation will produce."""
    node_only: set[str] = set()
    problems: set[str] = set()
    ors: list[str] = []
    for term in terms:
        ands: list[str] = []
        for key, op, values in term:
            text = f"{key} {op} {','.join(values)}".strip()
            if key not in gfd.DEVICE_LABELS:
                node_only.add(text)
                continue
            mapped = gfd.map_requirement(gfd.Requirement(key, op, tuple(values)), domain, rule)
            if mapped.reason:
                problems.add(f"{text}: {mapped.reason}")
            elif mapped.expression:
                ands.append(mapped.expression)
        if ands:
            ors.append(gfd.conjunction(ands))
    cel = gfd.disjunction(ors) if ors else None
    return GfdTranslation(cel, tuple(sorted(node_only)), tuple(sorted(problems)))


def gfd_devices(node: Node, count: int, domain: str = BRIDGE_DRIVER) -> list[Device]:
    """Devices a node would publish, derived from its GFD labels (for nodes without slices in a simulated split)."""
    labels = node.labels
    attrs: dict[str, Any] = {}
    if "nvidia.com/gpu.product" in labels:
        attrs["productName"] = labels["nvidia.com/gpu.product"]  # dashes kept: GFD replaced the spaces
    if "nvidia.com/gpu.family" in labels:
        attrs["architecture"] = labels["nvidia.com/gpu.family"]
    if "nvidia.com/gpu.compute.major" in labels:
        attrs["cudaComputeCapability"] = VersionValue(
            f"{quantity_int(labels['nvidia.com/gpu.compute.major'])}.{quantity_int(labels.get('nvidia.com/gpu.compute.minor'))}.0"
        )
    caps: dict[str, Any] = {}
    if "nvidia.com/gpu.memory" in labels:
        caps["memory"] = Fraction(quantity_int(labels["nvidia.com/gpu.memory"]) * 2**20)
    return [
        Device(domain, node.name, f"gpu-{i}", node.name, {domain: {**attrs, "index": i}}, {domain: dict(caps)}, "gfd")
        for i in range(count)
    ]
