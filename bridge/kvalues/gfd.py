"""GPU Feature Discovery (GFD) node labels: what they mean, the CEL that selects exactly the devices a label
selected, and which labels say that a node's `nvidia.com/gpu` is not a whole GPU. Pure; shared by the webhook
(translation) and the report (findings).

Written from NVIDIA/k8s-device-plugin internal/lm/resource.go (the labeler GFD runs: `getArchFamily`, `sanitise`,
`getProductName`, `baseLabeler`, `newArchitectureLabels`), internal/lm/mig-strategy.go (`newMigStrategySingleLabeler`,
`newInvalidMigStrategyLabeler`) and internal/resource/nvml-device.go (`GetTotalMemoryMiB`). What GFD writes for a
node of whole GPUs:

* `nvidia.com/gpu.product`: the NVML name sanitised: every character other than `A-Za-z0-9-_.` and space removed,
  then runs of spaces become one `-` and leading/trailing spaces go ("NVIDIA A100-SXM4-80GB" ->
  `NVIDIA-A100-SXM4-80GB`). The label is ambiguous (`NVIDIA-A100-SXM4-80GB` could be "NVIDIA A100 SXM4 80GB"), so
  the CEL does not guess one NVML name: it matches the published `productName` against a regular expression that
  accepts exactly the names sanitise maps to the label (`product_pattern`; `matches`, RE2, in every CEL
  environment). Computing sanitise in CEL instead (`findAll(...).join("").split(" ").filter(...).join("-")`, as
  this module first did) is exact too, but the API server refuses it: cel-go cannot bound the size of a string
  joined from a list a function returned, so its worst-case cost overflows and every ResourceClaimTemplate carrying
  it is `Forbidden: too complex, exceeds cost limit` (seen on kube-apiserver v1.37.2; k8s.io/apiserver
  pkg/cel/library/cost.go `join` over `listElementNode`, whose size is unknown). The pattern's cost is its length
  times the name's (at most 64 characters). Suffixes: `-SHARED` when `nvidia.com/gpu` is replicated (time-slicing
  or MPS with replicas > 1) and not renamed; under MIG strategy `single` the MIG labeler overwrites it with
  `<model>-MIG-<profile>` (or `<model>-MIG-INVALID` for a mixed or empty MIG layout).
* `nvidia.com/gpu.memory`: NVML's total memory in MiB, rounded down (`info.Total / (1024 * 1024)`); absent when 0.
* `nvidia.com/gpu.compute.major` / `.minor`: the CUDA compute capability; `nvidia.com/gpu.family` derives from it,
  **not** from NVML's architecture name, by a rule that changed between GFD releases (`FamilyRule`):
  before v0.18.0 every 8.x was `ampere` and 10.x/12.x were `undefined`; from v0.18.0 8.9 is `ada-lovelace` and
  10.x/12.x are `blackwell`; from v0.20.0 13.x is `rubin`. All three are absent when the major is 0.
* `nvidia.com/gpu.count`, `.replicas`, `.sharing-strategy` (`none`, `time-slicing`, `mps`), `nvidia.com/mig.strategy`
  describe the node or its sharing, not one device.

**Decision: derive the CEL from the attributes the node daemon already publishes, rather than publish GFD-compatible
attributes** (`gfdProduct`, `gfdFamily`) in the ResourceSlice (bridge/dra/slices.py). Publishing would freeze one
GFD release's family rule into every slice (a cluster whose GFD still says `ampere` for an L4 would then disagree
with its own slices), would make selectors fail on slices written by an older node daemon during a rollout (a
missing attribute is a runtime error, which aborts scheduling for the pod), and would spend attribute slots (32 per
device) on copies of `productName` and `cudaComputeCapability`. Deriving keeps the rule in this one module, lets the
webhook pick the rule the cluster's GFD actually uses (`infer_family_rule`, from the node labels) and works on every
slice the bridge has ever published. The cost is a longer expression: GFD's sanitising spelled out in CEL for the
product name and compute-capability comparisons for the family, both exact (tested against every simulated GPU
model).

Every expression is guarded where the attribute is optional (`cudaComputeCapability` is omitted when NVML reports
no numeric capability): `"cudaComputeCapability" in device.attributes["<driver>"] && ...`, because a missing key is
a CEL runtime error and the real scheduler aborts scheduling for the pod on one (structured/allocator.go). Node
affinity semantics are kept: `NotIn` also matches a node without the label, so its CEL is `!(guard && in-set)`.
"""

from __future__ import annotations

import enum
import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


DEFAULT_DRIVER = "gpu.dra-bridge.io"

PREFIX = "nvidia.com/"
PRODUCT = "nvidia.com/gpu.product"
MEMORY = "nvidia.com/gpu.memory"
FAMILY = "nvidia.com/gpu.family"
COMPUTE_MAJOR = "nvidia.com/gpu.compute.major"
COMPUTE_MINOR = "nvidia.com/gpu.compute.minor"
COUNT = "nvidia.com/gpu.count"
REPLICAS = "nvidia.com/gpu.replicas"
SHARING_STRATEGY = "nvidia.com/gpu.sharing-strategy"
MIG_STRATEGY = "nvidia.com/mig.strategy"
# Labels that describe one device and therefore translate to a device selector.
DEVICE_LABELS = frozenset({PRODUCT, MEMORY, FAMILY, COMPUTE_MAJOR, COMPUTE_MINOR})
# Labels that say whether `nvidia.com/gpu` on the node is a whole GPU (`not_whole_gpu`).
SHARING_LABELS = frozenset({PRODUCT, REPLICAS, SHARING_STRATEGY, MIG_STRATEGY})

# The device attributes and capacity the node daemon publishes (bridge/dra/slices.py uses these names).
ATTR_PRODUCT = "productName"
ATTR_COMPUTE = "cudaComputeCapability"
CAPACITY_MEMORY = "memory"

MIB = 1024 * 1024


class FamilyRule(str, enum.Enum):
    """GFD's compute capability -> family rule, by the release that introduced it."""

    BEFORE_V0_18 = "before v0.18.0"
    V0_18 = "v0.18.0"
    V0_20 = "v0.20.0"


LATEST = FamilyRule.V0_20
RULES_NEWEST_FIRST = (FamilyRule.V0_20, FamilyRule.V0_18, FamilyRule.BEFORE_V0_18)


def family(major: int, minor: int, rule: FamilyRule = LATEST) -> str | None:
    """The `nvidia.com/gpu.family` GFD writes for a compute capability; None when it writes none (major 0)."""
    if major == 0:
        return None
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ada-lovelace" if minor >= 9 and rule is not FamilyRule.BEFORE_V0_18 else "ampere"
    if major in (10, 12):
        return "undefined" if rule is FamilyRule.BEFORE_V0_18 else "blackwell"
    if major == 13:
        return "rubin" if rule is FamilyRule.V0_20 else "undefined"
    return {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper"}.get(major, "undefined")


def _family_conditions(name: str, rule: FamilyRule) -> list[str] | None:
    """The compute-capability conditions (over variables `major` and `minor`) under which `family` is `name`, as
    CEL fragments OR-ed together; None for a name the rule never writes."""
    singles = {"tesla": 1, "fermi": 2, "kepler": 3, "maxwell": 5, "pascal": 6, "hopper": 9}
    if name in singles:
        return [f"major == {singles[name]}"]
    if name == "volta":
        return ["major == 7 && minor < 5"]
    if name == "turing":
        return ["major == 7 && minor >= 5"]
    if name == "ampere":
        return ["major == 8"] if rule is FamilyRule.BEFORE_V0_18 else ["major == 8 && minor < 9"]
    if name == "ada-lovelace" and rule is not FamilyRule.BEFORE_V0_18:
        return ["major == 8 && minor >= 9"]
    if name == "blackwell" and rule is not FamilyRule.BEFORE_V0_18:
        return ["major == 10", "major == 12"]
    if name == "rubin" and rule is FamilyRule.V0_20:
        return ["major == 13"]
    if name == "undefined":
        known = [1, 2, 3, 5, 6, 7, 8, 9] + ([10, 12] if rule is not FamilyRule.BEFORE_V0_18 else []) + (
            [13] if rule is FamilyRule.V0_20 else [])
        return [f"major > 0 && !(major in [{', '.join(map(str, known))}])"]
    return None


_UNSAFE = re.compile(r"[^A-Za-z0-9\-_. ]")


def sanitise(name: str) -> str:
    """GFD's `sanitise`: drop characters other than `A-Za-z0-9-_.` and space, then join the words with `-`."""
    return "-".join(_UNSAFE.sub("", name).split())


def product_label(nvml_name: str) -> str:
    """`nvidia.com/gpu.product` for whole, unshared GPUs of this NVML name."""
    return sanitise(nvml_name)


def memory_label(total_bytes: int) -> str | None:
    """`nvidia.com/gpu.memory` for this NVML memory total (MiB, rounded down); None when GFD writes none."""
    mib = total_bytes // MIB
    return str(mib) if mib else None


def compute_parts(compute_capability: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.\d+)?\s*", compute_capability or "")
    return (int(m[1]), int(m[2])) if m else None


def device_labels(product_name: str, memory_bytes: int, compute_capability: str,
                  rule: FamilyRule = LATEST) -> dict[str, str]:
    """The device labels GFD writes on a node of whole, unshared GPUs with these NVML values."""
    out = {PRODUCT: product_label(product_name)}
    mem = memory_label(memory_bytes)
    if mem is not None:
        out[MEMORY] = mem
    parts = compute_parts(compute_capability)
    if parts is not None and parts[0] != 0:
        out[COMPUTE_MAJOR], out[COMPUTE_MINOR] = str(parts[0]), str(parts[1])
        fam = family(*parts, rule=rule)
        if fam is not None:
            out[FAMILY] = fam
    return out


# RE2 classes (also Python's `re`): a character sanitise drops (anything but A-Za-z0-9-_. and space), and one it
# ignores around a word boundary (a dropped character or a space).
_DROPPED = "[^A-Za-z0-9_. -]"
_IGNORED = "[^A-Za-z0-9_.-]"
MAX_DASH_RUN = 6  # a label's longest run of '-' the pattern spells out (each run: at most 21 alternatives)


def _dash_runs(label: str) -> list[tuple[bool, str]]:
    """The label cut into maximal runs of '-' (True) and of other characters (False), in order."""
    return [(m.group()[0] == "-", m.group()) for m in re.finditer(r"-+|[^-]+", label)]


def _dash_run_pattern(k: int, first: bool, last: bool) -> str:
    """The name segments a run of k dashes in the label comes from: each dash is a '-' of the name or the boundary
    between two words (a run of spaces, dropped characters between them), never two boundaries in a row (the word
    between them would be empty), and no boundary at the label's start or end (sanitise strips those spaces)."""
    alternatives = []
    for bits in range(2 ** k):
        space = [bool(bits >> i & 1) for i in range(k)]
        if any(a and b for a, b in zip(space, space[1:])) or (first and space[0]) or (last and space[-1]):
            continue
        alternatives.append(f"{_DROPPED}*".join(f"[ ]{_IGNORED}*" if s else "-" for s in space))
    return f"{_DROPPED}*" + (alternatives[0] if len(alternatives) == 1 else f"(?:{'|'.join(alternatives)})")


def product_pattern(labels: Sequence[str]) -> str | None:
    """A regular expression (RE2 syntax) matching exactly the product names that GFD's `sanitise` maps to one of
    `labels` (each a sanitised name: `_SANITISED`); None when a label has a run of more than `MAX_DASH_RUN` dashes
    (the alternatives would grow too long for the API server's expression limit)."""
    bodies = []
    for label in labels:
        parts = []
        runs = _dash_runs(label)
        for i, (dashes, text) in enumerate(runs):
            if dashes:
                if len(text) > MAX_DASH_RUN:
                    return None
                parts.append(_dash_run_pattern(len(text), i == 0, i == len(runs) - 1))
            else:
                chars = [re.escape(c) if c == "." else c for c in text]
                parts.append(("" if i == 0 else f"{_DROPPED}*") + f"{_DROPPED}*".join(chars))
        bodies.append("".join(parts))
    body = bodies[0] if len(bodies) == 1 else f"(?:{'|'.join(bodies)})"
    return f"^{_IGNORED}*{body}{_IGNORED}*$"


# --- which nodes serve whole GPUs as nvidia.com/gpu ------------------------------------------------------------

def not_whole_gpu(labels: Mapping[str, str]) -> str | None:
    """Why `nvidia.com/gpu` on a node with these labels is not a whole GPU (a MIG slice, or a time-sliced / MPS
    share), or None when GFD's labels say it is (or say nothing). Reasons are short: they end up in warnings."""
    product = labels.get(PRODUCT)
    if product is not None and "-MIG-" in product:
        return f"nvidia.com/gpu is a MIG slice ({product[product.index('-MIG-') + 5:][:16]})"
    if product is not None and product.endswith("-SHARED"):
        return "nvidia.com/gpu is time-sliced (product -SHARED)"
    replicas = labels.get(REPLICAS, "")
    if replicas.isascii() and replicas.isdigit() and int(replicas) > 1:
        return f"nvidia.com/gpu is shared (gpu.replicas={replicas[:6]})"
    strategy = labels.get(SHARING_STRATEGY, "")
    if strategy in ("time-slicing", "mps"):
        return f"nvidia.com/gpu is shared (sharing-strategy={strategy})"
    if labels.get(MIG_STRATEGY) == "single" and product is None:
        return "MIG strategy single without a gpu.product label: may be MIG slices"
    return None


def infer_family_rule(observations: Iterable[tuple[str, int, int]]) -> tuple[FamilyRule | None, str]:
    """The newest GFD family rule consistent with what the nodes say: `observations` are (family, compute major,
    compute minor) label triples. (None, why) when no single rule explains them all (GFD releases that disagree)."""
    seen = set(observations)
    for rule in RULES_NEWEST_FIRST:
        if all(family(major, minor, rule) == fam for fam, major, minor in seen):
            return rule, ""
    wrong = sorted(seen)[:3]
    return None, "GFD releases on the nodes disagree on gpu.family: " + ", ".join(
        f"{fam} for {major}.{minor}" for fam, major, minor in wrong)


# --- node-selector requirements -> CEL -------------------------------------------------------------------------

@dataclass(frozen=True)
class Requirement:
    """One node-selector requirement: key, operator (In/NotIn/Exists/DoesNotExist/Gt/Lt) and values."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class Mapped:
    """The CEL for a requirement (`expression` None and `always` True: every device of the class satisfies it), or
    the reason it cannot be expressed (`reason` set, `expression` None, `always` False)."""

    expression: str | None
    always: bool = False
    reason: str = ""

    @property
    def ok(self) -> bool:
        return not self.reason


def _attrs(driver: str) -> str:
    return f"device.attributes[{json.dumps(driver)}]"


def _int_list(values: Sequence[int]) -> str:
    return f"[{', '.join(map(str, values))}]"


_INT = re.compile(r"^[0-9]{1,9}$")
_SANITISED = re.compile(r"^[A-Za-z0-9_.-]+$")


def _guarded_compute(driver: str, body: str) -> str:
    """`body` over `major`/`minor` with the capability's presence checked first (an absent attribute would be a
    runtime error)."""
    cc = f"{_attrs(driver)}.{ATTR_COMPUTE}"
    body = body.replace("major", f"{cc}.major()").replace("minor", f"{cc}.minor()")
    return f"{json.dumps(ATTR_COMPUTE)} in {_attrs(driver)} && {body}"


def _negate(expr: str) -> str:
    return f"!({expr})"


@functools.lru_cache(maxsize=4096)
def map_requirement(req: Requirement, driver: str = DEFAULT_DRIVER, rule: FamilyRule = LATEST) -> Mapped:
    """The CEL selecting exactly the devices of `driver` whose node would satisfy `req` (see the module docstring).
    Cached: pure, and every pod of a Deployment carries the same selector."""
    from bridge.kvalues import cel as kcel  # here, not at the top: the node daemon imports the names above only

    op, vals = req.operator, req.values
    if req.key not in DEVICE_LABELS:
        return Mapped(None, reason=f"{req.key} describes the node, not a device")
    if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
        return Mapped(None, reason=f"unknown node-selector operator {op!r}")
    if op in ("In", "NotIn") and not vals:
        return Mapped(None, reason=f"{req.key} {op} needs at least one value")
    if op in ("Gt", "Lt") and (len(vals) != 1 or not _INT.match(vals[0])):
        return Mapped(None, reason=f"{req.key} {op} needs exactly one integer value")

    if req.key in (PRODUCT, MEMORY):  # published for every device
        if op == "Exists":
            return Mapped(None, always=True)
        if op == "DoesNotExist":
            return Mapped(None, reason=f"{req.key} DoesNotExist excludes every GPU; nothing to translate")
    if req.key == PRODUCT:
        if op in ("Gt", "Lt"):
            return Mapped(None, reason=f"{req.key} {op} compares a name numerically")
        for v in vals:
            if v.endswith("-SHARED") or "-MIG-" in v:
                return Mapped(None, reason=f"{req.key}={v} names a shared or MIG GPU; the bridge serves whole GPUs")
        # a value sanitise can never produce (a quote, a '|': not a label value) matches no product name
        values = [v for v in vals if _SANITISED.match(v)]
        if not values:
            expr = "false"
        else:
            pattern = product_pattern(values)
            if pattern is None:
                return Mapped(None, reason=f"{req.key} values with more than {MAX_DASH_RUN} dashes in a row are "
                                           "not expressed in CEL")
            expr = f"{_attrs(driver)}.{ATTR_PRODUCT}.matches({json.dumps(pattern)})"
    elif req.key == MEMORY:
        if not all(_INT.match(v) for v in vals):
            return Mapped(None, reason=f"{req.key} values must be MiB integers, got {list(vals)}")
        cap = f"device.capacity[{json.dumps(driver)}].{CAPACITY_MEMORY}.compareTo(quantity({{}}))"

        def at_least(mib: int) -> str:
            return cap.format(json.dumps(f"{mib}Mi")) + " >= 0"

        def below(mib: int) -> str:
            return cap.format(json.dumps(f"{mib}Mi")) + " < 0"

        if op == "Gt":  # floor(bytes / MiB) > v  <=>  bytes >= (v + 1) MiB
            expr = at_least(int(vals[0]) + 1)
        elif op == "Lt":  # floor(bytes / MiB) < v  <=>  bytes < v MiB
            expr = below(int(vals[0]))
        else:  # floor(bytes / MiB) == v  <=>  v MiB <= bytes < (v + 1) MiB
            parts = [f"{at_least(int(v))} && {below(int(v) + 1)}" for v in vals]
            expr = parts[0] if len(parts) == 1 else "(" + " || ".join(f"({p})" for p in parts) + ")"
    else:  # family, compute major / minor: optional attribute, guarded
        if op == "Exists":
            return Mapped(kcel.compile_checked(_guarded_compute(driver, "major > 0")))
        if op == "DoesNotExist":
            return Mapped(kcel.compile_checked(_negate(_guarded_compute(driver, "major > 0"))))
        if req.key == FAMILY:
            if op in ("Gt", "Lt"):
                return Mapped(None, reason=f"{req.key} {op} compares a name numerically")
            conditions: list[str] = []
            for v in vals:
                found = _family_conditions(v, rule)
                conditions += found or []
            if not conditions:  # a family GFD (of this release) never writes: no node has it
                expr = "false"
            else:
                body = conditions[0] if len(conditions) == 1 else " || ".join(f"({c})" for c in conditions)
                expr = _guarded_compute(driver, body if len(conditions) == 1 else f"({body})")
        else:
            if not all(_INT.match(v) for v in vals):
                return Mapped(None, reason=f"{req.key} values must be integers, got {list(vals)}")
            var = "major" if req.key == COMPUTE_MAJOR else "minor"
            if op == "Gt":
                body = f"{var} > {int(vals[0])}"
            elif op == "Lt":
                body = f"{var} < {int(vals[0])}"
            else:
                ints = [int(v) for v in vals]
                body = f"{var} == {ints[0]}" if len(ints) == 1 else f"{var} in {_int_list(ints)}"
            expr = _guarded_compute(driver, body)
    if op == "NotIn":
        expr = _negate(expr)
    return Mapped(kcel.compile_checked(expr))


def conjunction(exprs: Sequence[str]) -> str:
    """AND of expressions, each parenthesised where needed; '' for none."""
    if not exprs:
        return ""
    if len(exprs) == 1:
        return exprs[0]
    return " && ".join(e if _atomic(e) else f"({e})" for e in exprs)


def disjunction(exprs: Sequence[str]) -> str:
    if len(exprs) == 1:
        return exprs[0]
    return " || ".join(f"({e})" for e in exprs)


def _atomic(e: str) -> bool:
    return "&&" not in e and "||" not in e


__all__ = [
    "ATTR_COMPUTE", "ATTR_PRODUCT", "CAPACITY_MEMORY", "COMPUTE_MAJOR", "COMPUTE_MINOR", "COUNT", "DEFAULT_DRIVER",
    "DEVICE_LABELS", "FAMILY", "FamilyRule", "LATEST", "MEMORY", "MIG_STRATEGY", "Mapped", "PRODUCT", "REPLICAS",
    "Requirement", "SHARING_LABELS", "SHARING_STRATEGY", "compute_parts", "conjunction", "device_labels",
    "disjunction", "family", "infer_family_rule", "map_requirement", "memory_label", "not_whole_gpu",
    "product_label", "product_pattern", "sanitise",
]
