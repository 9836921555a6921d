"""What a device-plugin caller may send, checked before any device is looked at (pure, side-effect free).

The kubelet sends one container request per `Allocate` and per `GetPreferredAllocation` call, with distinct IDs
this plugin advertised (kubernetes/kubernetes pkg/kubelet/cm/devicemanager/manager.go, `allocateContainerResources`
and `devicesToAllocate`). Anything else comes from a buggy or hostile caller and is refused with a message that says
what is wrong:

* a call without container requests, or a container request without devices;
* the same device ID twice in one container request, or in two container requests of one call: granting one GPU to
  two containers is exactly the sharing the ownership ledger exists to prevent.

Every message names the offending IDs but stays short whatever the input: at most `MAX_NAMED` IDs, each cut to
`MAX_ID_CHARS` and escaped (`ascii()`: a control character in an ID cannot forge a log line), then "and N more".
gRPC carries the message in a trailer; one over the caller's metadata limit (8 KiB by default) reaches it as
RESOURCE_EXHAUSTED instead of the real error, so `clip()` bounds the whole text to `MAX_MESSAGE_CHARS`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

MAX_NAMED = 5
MAX_ID_CHARS = 64  # upstream: device IDs are at most 63 characters
MAX_MESSAGE_CHARS = 1000


def show_id(device_id: str) -> str:
    """One ID as it appears in a message: quoted, escaped, at most `MAX_ID_CHARS` characters of it."""
    if len(device_id) <= MAX_ID_CHARS:
        return ascii(device_id)
    return ascii(device_id[:MAX_ID_CHARS]) + f"... ({len(device_id):,} characters)"


def name_ids(ids: Iterable[str], limit: int = MAX_NAMED) -> str:
    """`'a', 'b', 'c' and 9,997 more` (in the order given)."""
    items = list(ids)
    shown = ", ".join(show_id(i) for i in items[:limit])
    rest = len(items) - limit
    return shown + (f" and {rest:,} more" if rest > 0 else "")


def clip(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`message` cut to `limit` characters (an ellipsis marks the cut)."""
    return message if len(message) <= limit else message[: limit - 3] + "..."


def _containers(indexes: Sequence[int]) -> str:
    distinct = sorted(set(indexes))
    where = ", ".join(str(i) for i in distinct[:MAX_NAMED]) + (" ..." if len(distinct) > MAX_NAMED else "")
    return f"container request{'s' if len(distinct) > 1 else ''} {where}"


def allocate_problem(requests: Sequence[Sequence[str]]) -> str | None:
    """Why an `Allocate` call's device lists (one per container request) cannot be served, or None."""
    if not requests:
        return "the request has no container requests"
    empty = [i for i, ids in enumerate(requests) if not ids]
    if empty:
        return f"{_containers(empty)} list{'s' if len(empty) == 1 else ''} no devices"
    where: dict[str, list[int]] = {}
    for index, ids in enumerate(requests):
        for device_id in ids:
            where.setdefault(device_id, []).append(index)
    repeated = [(device_id, found) for device_id, found in where.items() if len(found) > 1]
    if not repeated:
        return None
    described = "; ".join(f"{show_id(device_id)} {len(found):,} times in {_containers(found)}"
                          for device_id, found in repeated[:MAX_NAMED])
    more = f"; and {len(repeated) - MAX_NAMED:,} more duplicated IDs" if len(repeated) > MAX_NAMED else ""
    return clip(f"duplicate device IDs (one GPU goes to one container): {described}{more}")


__all__ = ["MAX_MESSAGE_CHARS", "allocate_problem", "clip", "name_ids", "show_id"]
