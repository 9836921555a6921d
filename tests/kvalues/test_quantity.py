"""Kubernetes quantities: the one parser every part of the bridge uses (apimachinery's grammar)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from bridge.kvalues.quantity import QuantityError, parse_quantity, quantity_int, whole_count


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", 8), ("80Gi", 80 * 2**30), ("81559Mi", 81559 * 2**20), ("500m", Fraction(1, 2)), ("1e3", 1000),
        ("1E3", 1000), ("1E", 10**18), ("1.5", Fraction(3, 2)), ("1.", 1), (".5", Fraction(1, 2)), ("-2", -2),
        ("+2k", 2000), ("250u", Fraction(1, 4000)), ("100n", Fraction(1, 10**7)), ("1Ki", 1024), (" 4 ", 4), (7, 7),
    ],
)
def test_quantities_parse_to_their_exact_value(text: object, value: object) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "1GB", "1 Gi", "1.2.3", "0x10", "1e", "1mi", "NaN", "²", True])
def test_what_is_not_a_quantity_is_refused_by_name(text: object) -> None:
    with pytest.raises(QuantityError, match="not a quantity"):
        parse_quantity(text)


@pytest.mark.parametrize(("text", "count"), [("2", 2), (2, 2), ("2000m", 2), ("2e0", 2), ("0", 0), ("500m", None),
                                             ("-1", None), ("x", None), (2.5, None), ("١٢", None)])
def test_extended_resource_counts_are_whole_numbers(text: object, count: int | None) -> None:
    assert whole_count(text) == count


def test_quantity_int_defaults_for_absent_or_malformed_values() -> None:
    assert quantity_int(None, 3) == 3 and quantity_int("x", 5) == 5 and quantity_int("2Ki") == 2048
