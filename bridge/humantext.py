"""Text from outside, made safe for people to read: the one helper for every human output (log lines, CLI output,
Event and error messages). It imports nothing of the project, so every layer may use it.

* `escape(text)`: `text` on one line. Control characters are written as escapes (`\\n` and `\\r` as those two
  characters, `\\t` likewise, others as `\\xNN`, the C1 range too, Unicode line and paragraph separators as
  `\\u2028`/`\\u2029`), so an annotation, a device ID or a pod name can neither forge a log line nor move a
  terminal's cursor, clear its screen or retitle its window (ESC, CR). The text log formatter
  (`bridge.logs.TextFormatter`) and the human renderings of `bridge node status` and `bridge namespace` use it.
* `clip(value)`: a short rendering of an untrusted *value* for a message ("expected a number, got <clip>"): a
  string cut to `limit` characters before it is quoted (with the full length said), a container named by its type
  and size (never `str()` of it: a YAML alias bomb expands there, 516 bytes into gigabytes, and a deep one raises
  RecursionError), a huge integer by its size in bits (`repr` of it refuses above 4300 digits), always escaped.
"""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(m: re.Match[str]) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def escape(text: str) -> str:
    """`text` on one line: control characters (and U+2028/U+2029) written as escapes."""
    return _CONTROL.sub(_escape_char, text)


def clip(value: object, limit: int = 60) -> str:
    """A bounded, escaped rendering of an untrusted value for a message (see the module docstring)."""
    if isinstance(value, str):
        shown = escape(repr(value[:limit]))
        return shown if len(value) <= limit else f"{shown}... ({len(value)} characters)"
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 128 else f"an integer of {value.bit_length()} bits"
    if isinstance(value, bytes):
        shown = repr(value[:limit])
        return shown if len(value) <= limit else f"{shown}... ({len(value)} bytes)"
    if isinstance(value, dict | list | tuple | set):
        return f"a {type(value).__name__} of {len(value)} item{'s' if len(value) != 1 else ''}"
    return f"a {type(value).__name__}"


__all__ = ["clip", "escape"]
