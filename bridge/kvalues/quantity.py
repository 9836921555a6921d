"""Kubernetes resource quantities ("8", "80Gi", "500m", "1e3") as exact Fractions.

Written from k8s.io/apimachinery/pkg/api/resource/quantity.go (suffixes: decimal SI, binary SI, decimal exponent).
"""

from __future__ import annotations

import re
from fractions import Fraction

_SUFFIX = {
    "": Fraction(1),
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
_RE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?)$")


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


def quantity_int(value: object, default: int = 0) -> int:
    """Whole-unit count (for extended resources, which are integers); `default` when absent or malformed."""
    if value is None:
        return default
    if isinstance(value, str) and value.isdigit():  # the common case ("8"), without Fraction arithmetic
        return int(value)
    try:
        return int(parse_quantity(value))
    except QuantityError:
        return default
