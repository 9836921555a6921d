"""The split target: what a node asks for, parsed in ONE place (the node daemon and the migrate-report call this).

Where the target comes from (`requested_split`, first match wins):
1. the Node annotation `dra-bridge.io/dra-devices` (any value, including device lists: `gpu-6,gpu-7`);
2. the Node label `dra-bridge.io/dra-devices` (label values cannot hold commas: `0`, `N`, `all`, one `gpu-7`);
3. the daemon's `--dra-devices` flag (`BRIDGE_DRA_DEVICES`), the cluster default set once per DaemonSet;
4. the default `0`: every GPU stays with the device plugin (a node taken over from the vendor plugin keeps serving
   its legacy pods; DRA capacity is opted into per node).
The node wins over the flag so that one machine can be migrated without redeploying the DaemonSet. When label and
annotation disagree the annotation wins and `SplitRequest.conflict` says so (the caller logs it once).

Values (`parse_split`), surrounding blanks ignored:
* `0` or `none` (or empty): no GPU on DRA;  `all`: every GPU;  `N`: N GPUs, chosen by the daemon
  (`bridge.ledger.choice`);
* a comma-separated list of devices: `gpu-<index>` names or GPU UUIDs (`GPU-…`), pinned.
Keywords, names and UUIDs are case-insensitive (`ALL`, `GPU-7`): they are our own vocabulary and NVIDIA prints UUIDs
in lower case, so no two valid values differ only by case. A list that names a device twice, an empty item, a
negative or non-numeric count are refused with the accepted forms in the message.

Fitting a target to a node (`fit_target`): a count above the node's GPU total and an unknown device are refused
(the daemon keeps its current split and says why), never clamped: `9` on an 8-GPU node is far more likely a typo
for another node than a wish for "all", and the report shows the same refusal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bridge.humantext import clip

SPLIT_KEY = "dra-bridge.io/dra-devices"
DEFAULT_SPLIT = "0"
SPLIT_EXAMPLES = "'0', 'all', a count such as '2', or devices such as 'gpu-6,gpu-7' or GPU UUIDs"
_NAME_RE = re.compile(r"^gpu-(\d{1,9})$", re.IGNORECASE)  # an index, not a number of thousands of digits
# The longest split value read (an annotation may hold 256 KiB): a device list of a few hundred UUIDs fits.
MAX_SPLIT_TEXT = 16 * 1024
_UUID_RE = re.compile(r"^gpu-[0-9a-f]+(-[0-9a-f]+)+$", re.IGNORECASE)

TargetKind = Literal["none", "all", "count", "devices"]
RequestSource = Literal["annotation", "label", "flag", "default"]


class SplitError(ValueError):
    """A split value that cannot be understood, or that does not fit this node."""


@dataclass(frozen=True)
class SplitTarget:
    kind: TargetKind
    count: int = 0
    devices: tuple[str, ...] = ()  # normalised: "gpu-<index>" names and lower-case UUIDs, in the order given
    text: str = ""  # the value as written (blanks trimmed)

    @property
    def canonical(self) -> str:
        """One spelling per meaning (`ALL` and `all` -> `all`): what comparisons and the checkpoint use."""
        if self.kind == "none":
            return "0"
        if self.kind == "all":
            return "all"
        if self.kind == "count":
            return str(self.count)
        return ",".join(self.devices)


def _device_item(item: str) -> str | None:
    m = _NAME_RE.match(item)
    if m:
        return f"gpu-{int(m.group(1))}"
    if _UUID_RE.match(item):
        return "GPU-" + item[4:].lower()
    return None


def parse_split(text: str | None) -> SplitTarget:
    """Parse a split value (see the module docstring); `SplitError` naming the value and the accepted forms."""
    raw = (text or "").strip()
    if len(raw) > MAX_SPLIT_TEXT:
        raise SplitError(f"invalid DRA device split {clip(raw)}: longer than {MAX_SPLIT_TEXT} characters; expected "
                         f"{SPLIT_EXAMPLES}")
    low = raw.lower()
    if low in ("", "0", "none"):
        return SplitTarget("none", text=raw or DEFAULT_SPLIT)
    if low == "all":
        return SplitTarget("all", text=raw)
    if raw.isdigit() and len(raw) <= 9:
        return SplitTarget("count", count=int(raw), text=raw)
    if raw.isdigit():
        raise SplitError(f"invalid DRA device split {clip(raw)}: more devices than any node has; expected "
                         f"{SPLIT_EXAMPLES}")
    if raw.startswith("-") and raw[1:].isdigit():
        raise SplitError(f"invalid DRA device split {clip(raw)}: a count cannot be negative; expected {SPLIT_EXAMPLES}")
    items = [i.strip() for i in raw.split(",")]
    if any(not i for i in items):
        raise SplitError(f"invalid DRA device split {clip(raw)}: empty item; expected {SPLIT_EXAMPLES}")
    devices: list[str] = []
    for item in items:
        norm = _device_item(item)
        if norm is None:
            raise SplitError(f"invalid DRA device split {clip(raw)}: {clip(item)} is neither a count, 'all', a "
                             f"'gpu-<index>' name nor a GPU UUID; expected {SPLIT_EXAMPLES}")
        devices.append(norm)
    if len(set(devices)) != len(devices):
        raise SplitError(f"invalid DRA device split {clip(raw)}: a device is listed twice; expected {SPLIT_EXAMPLES}")
    return SplitTarget("devices", devices=tuple(devices), text=raw)


@dataclass(frozen=True)
class SplitRequest:
    text: str
    source: RequestSource
    conflict: str = ""  # set when label and annotation disagree (the annotation won)

    @property
    def origin(self) -> str:
        return {"annotation": f"node annotation {SPLIT_KEY}", "label": f"node label {SPLIT_KEY}",
                "flag": "--dra-devices", "default": "default (node says nothing)"}[self.source]

    def describe(self) -> str:
        return f"{clip(self.text)} (from {self.origin})"


def _same(a: str, b: str) -> bool:
    try:
        return parse_split(a).canonical == parse_split(b).canonical
    except SplitError:
        return a.strip() == b.strip()


def requested_split(node: Mapping[str, Any] | None, flag: str | None = None) -> SplitRequest:
    """The split this Node object asks for, by the precedence in the module docstring (pure: nothing is logged)."""
    meta = (node or {}).get("metadata") or {}
    annotation = (meta.get("annotations") or {}).get(SPLIT_KEY)
    label = (meta.get("labels") or {}).get(SPLIT_KEY)
    if isinstance(annotation, str) and annotation.strip():
        conflict = ""
        if isinstance(label, str) and label.strip() and not _same(label, annotation):
            conflict = (f"node {meta.get('name')}: annotation {SPLIT_KEY}={clip(annotation.strip())} and label "
                        f"{SPLIT_KEY}={clip(label.strip())} disagree; the annotation wins")
        return SplitRequest(annotation.strip(), "annotation", conflict)
    if isinstance(label, str) and label.strip():
        return SplitRequest(label.strip(), "label")
    if flag is not None and flag.strip():
        return SplitRequest(flag.strip(), "flag")
    return SplitRequest(DEFAULT_SPLIT, "default")


@dataclass(frozen=True)
class Fit:
    """What a valid target means on one node: how many devices go to DRA, and which when the target pins them."""

    count: int
    pinned: tuple[str, ...] | None  # device names ("gpu-3") when the target lists devices; None: the daemon chooses


def fit_target(target: SplitTarget, inventory: Sequence[tuple[str, str]]) -> Fit:
    """Fit `target` to a node whose devices are (name, UUID) pairs (UUID "" when unknown, as in the report).

    Raises `SplitError` for a count above the node's total and for a device the node does not have."""
    total = len(inventory)
    if target.kind == "none":
        return Fit(0, None)
    if target.kind == "all":
        return Fit(total, None)
    if target.kind == "count":
        if target.count > total:
            raise SplitError(f"DRA device split {clip(target.text)} asks for {target.count} devices but this node has "
                             f"{total}")
        return Fit(target.count, None)
    by_uuid = {u.lower(): n for n, u in inventory if u}
    names = {n for n, _ in inventory}
    pinned: list[str] = []
    for ref in target.devices:
        name = ref if ref in names else by_uuid.get(ref.lower())
        if name is None:
            have = ", ".join(n for n, _ in inventory) or "no GPUs"
            raise SplitError(f"DRA device split {clip(target.text)} names unknown device {clip(ref)}: this node has {have}")
        pinned.append(name)
    return Fit(len(pinned), tuple(pinned))


@dataclass(frozen=True)
class TargetResult:
    """What a request means on one node, as the daemon decides it: the devices it puts on DRA, or the refusal."""

    request: SplitRequest
    total: int
    wanted: int | None  # None when refused
    refusal: str = ""

    def column(self) -> str:
        """The request and its meaning here, for reports: `2 (2/8)`, `gpu-7 (1/8)`, `9 (refused)`."""
        return f"{self.request.text} (refused)" if self.wanted is None else \
            f"{self.request.text} ({self.wanted}/{self.total})"

    def short(self) -> str:
        """For narrow tables: `2/8`, `refused`."""
        return "refused" if self.wanted is None else f"{self.wanted}/{self.total}"


def evaluate_request(request: SplitRequest, inventory: Sequence[tuple[str, str]]) -> TargetResult:
    """Parse and fit a request to a node's (name, UUID) inventory: the same answer the daemon's evaluation gives
    (`bridge.ledger.reconcile` refuses with exactly this message and puts exactly this many devices on DRA)."""
    try:
        fit = fit_target(parse_split(request.text), inventory)
    except SplitError as err:
        return TargetResult(request, len(inventory), None, str(err))
    return TargetResult(request, len(inventory), fit.count)


__all__ = [
    "DEFAULT_SPLIT",
    "Fit",
    "SPLIT_EXAMPLES",
    "SPLIT_KEY",
    "SplitError",
    "SplitRequest",
    "SplitTarget",
    "TargetResult",
    "evaluate_request",
    "fit_target",
    "parse_split",
    "requested_split",
]
