"""Which NVIDIA XIDs make a GPU unhealthy (pure; shared by the NVML and the simulated source).

NVIDIA's device plugin and DRA driver ignore XIDs 13, 31, 43, 45, 68 and 109 by default: they are raised by a
faulty *application* (illegal memory access, page fault, a preempted or timed-out context), not by a faulty GPU,
and taking a GPU away from the node for them would let one bad job shrink the node's capacity. We use the same
list so a node handed over from the vendor plugin sees the same health verdicts, plus operator additions
(`--ignore-xids`). An ignored XID is logged, never turned into an unhealthy device.
"""

from __future__ import annotations

from collections.abc import Iterable

from bridge.inventory.model import InventoryError

DEFAULT_IGNORED_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})

# Short human descriptions for logs and Kubernetes Events (NVIDIA's XID catalogue).
_DESCRIPTIONS = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup due to a previous error",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapper failure",
    68: "NVDEC0 exception",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
}


def describe(xid: int) -> str:
    text = _DESCRIPTIONS.get(xid)
    return f"XID {xid} ({text})" if text else f"XID {xid}"


def ignored_xids(additional: Iterable[int] = ()) -> frozenset[int]:
    """NVIDIA's default ignore list plus operator additions."""
    return DEFAULT_IGNORED_XIDS | frozenset(additional)


def parse_xid_list(text: str) -> frozenset[int]:
    """Parse an operator's comma-separated XID list ("48, 79"); empty text is the empty set."""
    out: set[int] = set()
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        if not item.isdigit():
            raise InventoryError(f"invalid XID {item!r} in {text!r}: expected comma-separated numbers, e.g. '48,79'")
        out.add(int(item))
    return frozenset(out)


def is_critical(xid: int, ignored: frozenset[int]) -> bool:
    """True when this XID should mark the device unhealthy."""
    return xid not in ignored
