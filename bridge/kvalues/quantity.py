"""Kubernetes resource quantities ("8", "80Gi", "500m", "1e3") as exact Fractions: the one quantity parser of the
package (the webhook, the report, the node daemon's slice comparison and the stand-ins all use it).

Written from k8s.io/apimachinery/pkg/api/resource/quantity.go (`ParseQuantity`, suffix.go): a signed decimal number
("1", "1.5", "1.", ".5") followed by at most one suffix: decimal SI `n u m "" k M G T P E`, binary SI
`Ki Mi Gi Ti Pi Ei`, or a decimal exponent `e<n>` / `E<n>` ("1E" alone is 10^18: the suffix E). Whitespace around
the value is not part of the grammar but is tolerated here (YAML hands values over trimmed).

`whole_count` is the rule for extended resources such as `nvidia.com/gpu`: the API server accepts only whole
numbers there (pkg/apis/core/validation/validation.go `validateResourceQuantityValue`: `MilliValue() % 1000 == 0`),
so "2", "2000m" and "2e0" are all 2 and "500m" is not a count.
"""

from __future__ import annotations

import re
from fractions import Fraction

_SUFFIX = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_RE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$", re.ASCII)


class QuantityError(ValueError):
    pass


def parse_quantity(value: object) -> Fraction:
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(value)
    s = str(value).strip()
    m = _RE.match(s)
    if not m:
        raise QuantityError(f"not a quantity: {value!r}")
    number = Fraction(m.group(1))
    if m.group(2):
        return number * Fraction(10) ** int(m.group(2)[1:])
    return number * _SUFFIX[m.group(3) or ""]


def whole_count(value: object) -> int | None:
    """A non-negative whole number of units (an extended-resource count), or None: not a quantity, negative, or not
    whole ("500m")."""
    if isinstance(value, str) and value.isascii() and value.isdigit():  # the common case ("8"), without Fraction arithmetic
        return int(value)
    try:
        q = parse_quantity(value)
    except QuantityError:
        return None
    if q < 0 or q.denominator != 1:
        return None
    return int(q)


def quantity_int(value: object, default: int = 0) -> int:
    """Whole-unit count (for extended resources, which are integers); `default` when absent or malformed."""
    if value is None:
        return default
    if isinstance(value, str) and value.isascii() and value.isdigit():  # the common case ("8"), without Fraction arithmetic
        return int(value)
    try:
        return int(parse_quantity(value))
    except QuantityError:
        return default
