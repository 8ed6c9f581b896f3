"""Quantity parsing: expected values are worked out by hand from the suffix definitions."""

from __future__ import annotations

from fractions import Fraction

import pytest

from qosmanager.api.quantity import milli_value, parse_quantity, round_away_from_zero, value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Fraction(0)),
        ("1", Fraction(1)),
        ("100m", Fraction(1, 10)),
        ("1500m", Fraction(3, 2)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("5.", Fraction(5)),
        ("2k", Fraction(2000)),
        ("3M", Fraction(3_000_000)),
        ("4G", Fraction(4 * 10**9)),
        ("1T", Fraction(10**12)),
        ("1P", Fraction(10**15)),
        ("1E", Fraction(10**18)),  # E alone is exa
        ("250000n", Fraction(250_000, 10**9)),
        ("7u", Fraction(7, 10**6)),
        ("1Ki", Fraction(1024)),
        ("1Mi", Fraction(1024 * 1024)),
        ("1.5Gi", Fraction(3 * 2**29)),  # 1.5 * 2^30
        ("2Ti", Fraction(2 * 2**40)),
        ("1Pi", Fraction(2**50)),
        ("1Ei", Fraction(2**60)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),  # E followed by digits is an exponent
        ("1E-3", Fraction(1, 1000)),
        ("2.5e+2", Fraction(250)),
        ("+4", Fraction(4)),
        ("-4", Fraction(-4)),
        ("-1.5Gi", Fraction(-3 * 2**29)),
        ("  8Gi ", Fraction(8 * 2**30)),  # surrounding whitespace, as the JSON decoder trims it
        ("007", Fraction(7)),
    ],
)
def test_parse_table(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        (3, Fraction(3)),
        (0, Fraction(0)),
        (0.1, Fraction(1, 10)),  # the decimal text, not the binary double 0.1000000000000000055...
        (2.5, Fraction(5, 2)),
        (1e20, Fraction(10**20)),
        (-0.25, Fraction(-1, 4)),
    ],
)
def test_json_numbers(number: int | float, expected: Fraction) -> None:
    assert parse_quantity(number) == expected


def test_sub_nano_rounds_up_to_a_nano_like_upstream() -> None:
    assert parse_quantity("1e-10") == Fraction(1, 10**9)
    assert parse_quantity("0.0000000011") == Fraction(2, 10**9)
    assert parse_quantity("-1e-10") == Fraction(-1, 10**9)  # away from zero
    assert parse_quantity("0.000000001") == Fraction(1, 10**9)  # exactly a nano stays


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "   ",
        "abc",
        "1.5.5",
        "1 k",
        "e3",
        "1e",
        "1i",
        "Ki",
        "1K",
        "1kk",
        "--1",
        "1e3.5",
        "0x10",
        "1_000",
        "1m1",
        "ten",
        ".",
        "+",
        "1e999999",
        "١٢",
    ],
)
def test_garbage_is_a_clear_error(garbage: str) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(garbage)


@pytest.mark.parametrize("bad", [True, None, float("nan"), float("inf"), [1], {"a": 1}])
def test_non_quantities_are_rejected(bad: object) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "v", "milli"),
    [
        ("1", 1, 1000),
        ("1.5", 2, 1500),  # Value() rounds up
        ("1.0001", 2, 1001),  # 1000.1 milli -> 1001
        ("100m", 1, 100),
        ("0.5m", 1, 1),  # half a milli rounds up to one
        ("250000n", 1, 1),  # 0.25 milli -> 1
        ("1Gi", 2**30, 2**30 * 1000),
        ("3", 3, 3000),
        ("-1.5", -2, -1500),  # away from zero, as Quantity does for negatives
        ("0", 0, 0),
    ],
)
def test_value_and_milli_value(text: str, v: int, milli: int) -> None:
    assert value(text) == v
    assert milli_value(text) == milli


def test_round_away_from_zero() -> None:
    assert round_away_from_zero(Fraction(6, 5)) == 2
    assert round_away_from_zero(Fraction(-6, 5)) == -2
    assert round_away_from_zero(Fraction(3)) == 3


def test_value_accepts_parsed_fractions_and_numbers() -> None:
    assert value(Fraction(7, 2)) == 4
    assert milli_value(2) == 2000
    assert milli_value(0.0005) == 1
