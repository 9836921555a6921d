"""Optimistic concurrency: read, change, write with the read's resourceVersion, and start over on Conflict.

`mutate` receives a private deep copy of the current object and returns the desired object (it may change the copy
in place and return it), or None to mean "nothing to do". No write is sent when the result equals what was read,
so a converged caller costs one GET and never bumps the resourceVersion (watchers see nothing). `mutate` must be a
function of the object it is given: it runs once per attempt, against the freshest state.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable

from bridge.kube.api import KubeAPI, Obj, Resource
from bridge.kube.errors import Conflict

log = logging.getLogger(__name__)


def update_with_retry(
    api: KubeAPI,
    res: Resource,
    name: str,
    namespace: str | None,
    mutate: Callable[[Obj], Obj | None],
    *,
    attempts: int = 10,
    subresource: str | None = None,
) -> Obj:
    """Apply `mutate` until a write succeeds; return the stored object (the current one when nothing changed).
    Raises the last `Conflict` after `attempts` lost races, and NotFound when the object is gone."""
    if attempts < 1:
        raise ValueError("attempts must be >= 1")
    last: Conflict | None = None
    for attempt in range(attempts):
        current = api.get(res, name, namespace)
        desired = mutate(copy.deepcopy(current))
        if desired is None or desired == current:
            return current
        desired.setdefault("metadata", {})["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
        try:
            return api.update(res, desired, namespace, subresource=subresource)
        except Conflict as err:
            last = err
            log.debug("update %s %s: conflict on attempt %d, re-reading", res.kind, name, attempt + 1)
    assert last is not None
    raise Conflict(
        f"update {res.kind} {name}: still conflicting after {attempts} attempts: {last.message}",
        status=last.status,
        reason=last.reason,
    ) from last


__all__ = ["update_with_retry"]
