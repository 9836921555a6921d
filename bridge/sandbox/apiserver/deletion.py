"""Graceful deletion: how long a DELETE leaves an object in place (pure: the stored object and the options in, a
decision out).

Written from kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go (`BeforeDelete`),
pkg/registry/core/pod/strategy.go (`CheckGracefulDelete`, the only built-in strategy that deletes gracefully) and
staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go (`Delete`,
`updateForGracefulDeletionAndFinalizers`):

* A pod's grace period is `gracePeriodSeconds` from the request, else the pod's
  `spec.terminationGracePeriodSeconds` (defaulted to 30 on create, pkg/apis/core/v1/defaults.go), else 0; it is 0
  for a pod that is not bound (`spec.nodeName` empty) or already terminal (`Succeeded`/`Failed`); a negative value
  counts as 1. The pod is marked: `deletionTimestamp` = now + grace, `deletionGracePeriodSeconds` = grace,
  `metadata.generation` bumped, and that is written (a MODIFIED event). With a grace above 0 it stays so
  (terminating, its claims still reserved) until its kubelet has stopped it and deletes it with grace 0; with 0 it
  is then removed at once (unless finalizers keep it), and the answer (and the DELETED event) is the marked pod.
  Every other kind is removed as it is (unless finalizers keep it).
* A DELETE of an object already being deleted may only shorten the grace period: a longer or equal one changes
  nothing ("graceful deletion is pending"); a shorter one moves `deletionTimestamp` back by the difference (never
  into the past: then it is now, and a grace that was not 0 becomes 1 so the kubelet still does the final
  delete); 0 marks it with now and grace 0 and removes it. An object marked with grace 0 (or none) is removed as
  it is by any further DELETE.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .clock import now_rfc3339, parse_rfc3339

DEFAULT_TERMINATION_GRACE_S = 30


@dataclass(frozen=True)
class Deletion:
    """`grace` None: not a graceful deletion, remove as it is (finalizers permitting); else mark with
    `deletionTimestamp` = `timestamp` (RFC 3339) and `deletionGracePeriodSeconds` = `grace`, then, when `grace` is
    0, remove it (finalizers permitting). `pending`: already marked, nothing to change."""

    grace: int | None
    timestamp: str = ""
    pending: bool = False


def _requested(options: Mapping[str, Any], query: Mapping[str, str]) -> int | None:
    raw = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
    if raw is None:
        return None
    value = int(raw)
    return 1 if value < 0 else value


def _pod_grace(pod: Mapping[str, Any], requested: int | None) -> int:
    """`CheckGracefulDelete` for pods."""
    spec = pod.get("spec") or {}
    if requested is not None:
        period = requested
    else:
        period = int(spec.get("terminationGracePeriodSeconds", DEFAULT_TERMINATION_GRACE_S) or 0)
    if not spec.get("nodeName"):
        period = 0
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        period = 0
    return 1 if period < 0 else period


def before_delete(obj: Mapping[str, Any], *, is_pod: bool, options: Mapping[str, Any], query: Mapping[str, str],
                  now: float | None = None) -> Deletion:
    """`BeforeDelete` (see the module docstring). `now`: epoch seconds (tests), else the clock."""
    meta = obj.get("metadata") or {}
    requested = _requested(options, query)
    if not is_pod:
        return Deletion(None)
    if meta.get("deletionTimestamp"):
        current = meta.get("deletionGracePeriodSeconds")
        if not current:
            return Deletion(None)
        if requested is None or requested >= int(current):
            return Deletion(int(current), str(meta["deletionTimestamp"]), pending=True)
        start = parse_rfc3339(str(meta["deletionTimestamp"])) - int(current)
        moved = start + requested
        clock = now if now is not None else parse_rfc3339(now_rfc3339())
        period = requested
        if moved < clock:
            moved = clock
            if period != 0:
                period = 1
        return Deletion(period, now_rfc3339(moved - clock, now=clock))
    grace = _pod_grace(obj, requested)
    return Deletion(grace, now_rfc3339(grace, now=now))


__all__ = ["DEFAULT_TERMINATION_GRACE_S", "Deletion", "before_delete"]
