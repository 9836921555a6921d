r"""Logging setup shared by every long-running component.

Standard `logging`, one formatter for humans (`text`) and one for log pipelines (`json`). Context such as the
claim, pod or device is passed with `extra={...}` and shows up as key=value pairs (text) or fields (json).

`ContextLogger` carries a component's fixed context (node, resource, driver) AND keeps each call's `extra=`:
`logging.LoggerAdapter` (Python 3.11) replaces a call's `extra` with its own, so a line such as
`log.info("Allocate", extra={"devices": ...})` through an adapter carrying `{"resource": ...}` silently lost the
device list. `ContextLogger` merges the two; the call's keys win on a clash. (Python 3.13's `merge_extra=True` does
the same; we support 3.11.)

One record is one line, whatever callers send. Messages and context values carry text from outside (device IDs in
an `Allocate`, pod and claim names, request paths), so the text formatter escapes control characters (`\n` and
`\r` as those two characters, others as `\xNN`, Unicode line and paragraph separators as `\u2028`/`\u2029`:
`bridge.humantext.escape`, the one escaping helper of every human output) and
quotes a context value that holds a space, `"` or `=` (`pod="a b"`, inner quotes as `\"`), so nobody can forge a
log line or a `key=value` pair; a traceback follows its record indented by two spaces, so only record lines start
at the margin. The JSON formatter needs no such care: `json.dumps` escapes control characters itself.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Mapping, MutableMapping
from typing import Any

from bridge.humantext import escape

# Attributes every LogRecord has; anything else on a record came in through `extra=` and is context.
_STANDARD_ATTRS = frozenset(
    vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None)).keys() | {"message", "asctime", "taskName"}
)


def _context(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS and not k.startswith("_")}


_NEEDS_QUOTES = re.compile(r'[\s"=]')


def _value(v: object) -> str:
    text = escape(str(v))
    if not text or _NEEDS_QUOTES.search(text):
        return '"' + text.replace('"', '\\"') + '"'
    return text


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        line = f"{ts} {record.levelname:<5} {record.name}: {escape(record.getMessage())}"
        ctx = _context(record)
        if ctx:
            line += " " + " ".join(f"{escape(str(k))}={_value(v)}" for k, v in ctx.items())
        if record.exc_info:
            line += "\n" + "\n".join("  " + escape(t) for t in self.formatException(record.exc_info).splitlines())
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update(_context(record))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def setup_logging(fmt: str = "text", level: str | int = "INFO") -> None:
    """Configure the root logger once for a process. `fmt` is `text` or `json`."""
    if fmt not in ("text", "json"):
        raise ValueError(f"unknown log format {fmt!r}: use 'text' or 'json'")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level if isinstance(level, int) else level.upper())


class ContextLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A component's context on every record, merged with (not replaced by) each call's `extra=`."""

    def __init__(self, logger: logging.Logger, context: Mapping[str, object]) -> None:
        super().__init__(logger, dict(context))

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs
