"""Kubernetes resource quantities ("8", "80Gi", "500m", "1e3") as exact Fractions: the one quantity parser of the
package (the webhook, the report, the controller, the node daemon's slice comparison and the stand-ins all use it).

Written from k8s.io/apimachinery/pkg/api/resource/quantity.go (`ParseQuantity`, suffix.go): a signed decimal number
("1", "1.5", "1.", ".5") followed by at most one suffix: decimal SI `n u m "" k M G T P E`, binary SI
`Ki Mi Gi Ti Pi Ei`, or a decimal exponent `e<n>` / `E<n>` ("1E" alone is 10^18: the suffix E). Whitespace around
the value is not part of the grammar but is tolerated here (YAML hands values over trimmed). As the API server does,
a value is kept down to nano only: a finer non-zero part rounds away from zero ("0.9n" is 1n, "1e-2000000" is 1n).

**Bounded.** A quantity's text is input from anyone who can create a pod, and an exponent makes a short text an
enormous number: "1e30000000" is eight characters, and turning it into an integer took the webhook 70 s of CPU
(the API server keeps it as a mantissa and a scale, so it costs the server nothing and reaches every reader
verbatim). So nothing here does arithmetic before the size is known from the digits alone: a text over
`MAX_TEXT` characters, an exponent that does not fit an int32 (the API server's `Scale`), or a magnitude of
10^`MAX_MAGNITUDE` or more is refused with `QuantityError` ("out of range"), as are a non-finite float and a Python
int of that size. Every value that passes is at most ~40 decimal digits, so Fraction arithmetic on it is cheap.

**Counts.** `whole_count` / `check_count` are the rule for extended resources such as `nvidia.com/gpu`: the API
server accepts only whole numbers there (pkg/apis/core/validation/validation.go `validateResourceQuantityValue`:
`MilliValue() % 1000 == 0`), so "2", "2000m" and "2e0" are all 2 and "500m" is not a count. A count above
`MAX_COUNT` (2^31 - 1, more devices than any node holds) is not a valid GPU count either: callers leave such a pod
untranslated (webhook), count it as unschedulable (controller) or report it (migrate-report), never plan with it.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

MAX_TEXT = 128  # characters of a quantity's text (the longest real one is a few dozen)
MAX_MAGNITUDE = 30  # |value| < 10**30: every real quantity (2^63 bytes is 9.2e18), with room to spare
MAX_COUNT = 2**31 - 1  # the largest device count (extended resource) taken as a count
_LIMIT = 10**MAX_MAGNITUDE
_NANO = 10**9
_INT32 = 2**31

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_RE = re.compile(r"^([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$", re.ASCII)


class QuantityError(ValueError):
    """`reason` is the rule broken in a few words ("out of range", "not a whole number"), for short messages."""

    def __init__(self, message: str, reason: str = "not a quantity") -> None:
        super().__init__(message)
        self.reason = reason


def _show(value: object) -> str:
    """The value for a message, cut short: the text is untrusted and may be long."""
    if isinstance(value, int) and value.bit_length() > 128:  # repr of a huge int is slow, or refused
        return f"an integer of {value.bit_length()} bits"
    text = repr(value) if isinstance(value, str | int | float) else f"a {type(value).__name__}"
    return text if len(text) <= 40 else text[:37] + "..."


def _out_of_range(value: object) -> QuantityError:
    return QuantityError(f"{_show(value)} is out of range (the bridge reads quantities below 1e{MAX_MAGNITUDE})",
                         "out of range")


def _to_nano(q: Fraction) -> Fraction:
    """`q` kept down to nano, a finer non-zero part rounded away from zero (the API server's rule)."""
    if _NANO % q.denominator == 0:
        return q
    scaled = abs(q) * _NANO
    up = Fraction(math.ceil(scaled), _NANO)
    return up if q > 0 else -up


def _parse_text(value: object, s: str) -> Fraction:
    if len(s) > MAX_TEXT:
        raise QuantityError(f"{_show(value)} is not a quantity: over {MAX_TEXT} characters")
    m = _RE.match(s)
    if not m or not (m.group(2) or m.group(3)):  # a number needs a digit before or after the point
        raise QuantityError(f"{_show(value)} is not a quantity")
    sign, whole, frac, exp, suffix = m.group(1), m.group(2), m.group(3) or "", m.group(4), m.group(5) or ""
    exponent = int(exp) if exp is not None else _DECIMAL.get(suffix, 0)  # at most MAX_TEXT digits: cheap
    if not -_INT32 <= exponent < _INT32:
        raise _out_of_range(value)
    digits = (whole + frac).lstrip("0")
    if not digits:
        return Fraction(0)
    # value = int(digits) * 10**scale * 2**binary; decide its size from the digit count before any arithmetic
    scale = exponent - len(frac) if suffix not in _BINARY else -len(frac)
    kept = digits.rstrip("0")
    scale += len(digits) - len(kept)
    binary = _BINARY.get(suffix, 0)
    if len(kept) + scale + (binary * 3 + 9) // 10 > MAX_MAGNITUDE:  # 2**10 < 10**3.0103
        raise _out_of_range(value)
    if scale < -9 - len(kept) - 19:  # far below nano even after 2**60: the API server's smallest non-zero value
        magnitude = Fraction(1, _NANO)
    else:
        number = Fraction(int(kept)) * (2**binary)
        magnitude = _to_nano(number * 10**scale if scale >= 0 else number / 10**-scale)
    if magnitude >= _LIMIT:
        raise _out_of_range(value)
    return -magnitude if sign == "-" else magnitude


def parse_quantity(value: object) -> Fraction:
    """The exact value of a quantity (text, int or float); `QuantityError` when it is not one or is out of range."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        if -_LIMIT < value < _LIMIT:
            return Fraction(value)
        raise _out_of_range(value)
    if isinstance(value, float):
        if not math.isfinite(value) or abs(value) >= _LIMIT:
            raise _out_of_range(value)
        return _to_nano(Fraction(value))
    if not isinstance(value, str):
        raise QuantityError(f"{_show(value)} is not a quantity")
    return _parse_text(value, value.strip())


def check_count(value: object) -> int:
    """A non-negative whole number of units (an extended-resource count) up to `MAX_COUNT`; `QuantityError` saying
    which rule the value breaks."""
    if type(value) is int and 0 <= value <= MAX_COUNT:  # the common cases first, without Fraction arithmetic
        return value
    if isinstance(value, str) and len(value) <= 9 and value.isascii() and value.isdigit():  # "8"
        return int(value)
    q = parse_quantity(value)
    if q < 0:
        raise QuantityError(f"{_show(value)} is negative", "negative")
    if q.denominator != 1:
        raise QuantityError(f"{_show(value)} is not a whole number", "not a whole number")
    if q > MAX_COUNT:
        raise QuantityError(f"{_show(value)} is more than any node holds (the bridge reads counts up to "
                            f"{MAX_COUNT})", "more than any node holds")
    return int(q)


def whole_count(value: object) -> int | None:
    """`check_count`, or None when the value is not a valid count (not a quantity, out of range, negative, not
    whole like "500m", above `MAX_COUNT`)."""
    try:
        return check_count(value)
    except QuantityError:
        return None


def quantity_int(value: object, default: int = 0) -> int:
    """Whole-unit count (for extended resources, which are integers), truncated; `default` when absent, malformed
    or beyond +-`MAX_COUNT`."""
    if value is None:
        return default
    if type(value) is int and -MAX_COUNT <= value <= MAX_COUNT:
        return value
    if isinstance(value, str) and len(value) <= 9 and value.isascii() and value.isdigit():  # "8"
        return int(value)
    try:
        q = parse_quantity(value)
    except QuantityError:
        return default
    return int(q) if -MAX_COUNT <= q <= MAX_COUNT else default
