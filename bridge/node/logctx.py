"""A logger adapter that keeps a component's context AND each call's `extra=` on the record.

`logging.LoggerAdapter` (Python 3.11) replaces a call's `extra` with its own, so a line such as
`log.info("Allocate", extra={"devices": ...})` through an adapter carrying `{"resource": ...}` silently lost the
device list. `ContextLogger` merges the two; the call's keys win on a clash. (Python 3.13's `merge_extra=True` does
the same; we support 3.11.)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping
from typing import Any


class ContextLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    def __init__(self, logger: logging.Logger, context: Mapping[str, object]) -> None:
        super().__init__(logger, dict(context))

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs
