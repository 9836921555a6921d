"""Kubernetes quantities: the one parser every part of the bridge uses (apimachinery's grammar)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from bridge.kvalues.quantity import MAX_COUNT, QuantityError, check_count, parse_quantity, quantity_int, whole_count


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


# ---- hostile values (issue 27 item 1): bounded before any big-number arithmetic --------------------------------

@pytest.mark.parametrize("value", ["1e30000000", "1e5000", "1e400", "1E30", "9" * 31, "1e2147483648", "1000000000000Ei",
                                   10**40, 1e308, float("inf"), float("-inf"), -(10**31)])
def test_a_huge_quantity_is_out_of_range_without_being_computed(value: object) -> None:
    with pytest.raises(QuantityError, match="out of range"):
        parse_quantity(value)
    assert whole_count(value) is None and quantity_int(value, 7) == 7


@pytest.mark.parametrize(("text", "value"), [("1e-2000000", Fraction(1, 10**9)), ("0.9n", Fraction(1, 10**9)),
                                              ("-1e-30", Fraction(-1, 10**9)), ("1.0000000001", Fraction(1000000001, 10**9)),
                                              ("0." + "0" * 100 + "1", Fraction(1, 10**9))])
def test_a_finer_value_than_nano_rounds_away_from_zero_as_the_api_server_keeps_it(text: str, value: Fraction) -> None:
    """apimachinery's ParseQuantity keeps nano precision and rounds a finer non-zero value away from zero: the API
    server stores "1e-2000000" as 1n (sent on as "1e-9")."""
    assert parse_quantity(text) == value


def test_counts_above_the_largest_a_node_can_hold_are_not_gpu_counts() -> None:
    assert whole_count(str(MAX_COUNT)) == MAX_COUNT and whole_count(MAX_COUNT) == MAX_COUNT
    assert whole_count(str(MAX_COUNT + 1)) is None and whole_count(MAX_COUNT + 1) is None
    with pytest.raises(QuantityError, match="more than any node holds"):
        check_count("1e20")
    with pytest.raises(QuantityError, match="out of range"):
        check_count("1e400")
    with pytest.raises(QuantityError, match="not a whole number"):
        check_count("500m")
    assert quantity_int("1e20", -1) == -1 and quantity_int("2", -1) == 2


def test_a_long_or_structured_value_is_refused_by_its_size_not_rendered() -> None:
    with pytest.raises(QuantityError, match="not a quantity: over 128 characters"):
        parse_quantity("1" * 10_000)
    nested: list[object] = []
    for _ in range(100_000):  # str() of this raises RecursionError
        nested = [nested]
    with pytest.raises(QuantityError, match="a list is not a quantity"):
        parse_quantity(nested)
    assert whole_count("9" * 5000) is None  # int() of this refuses (Python's 4300-digit limit)
