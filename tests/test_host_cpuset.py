"""Kernel CPU lists: parse, format, compare."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qosmanager.host.cpuset import MAX_CPU_ID, cpu_lists_equal, format_cpu_list, parse_cpu_list


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("\n", []),
        ("0", [0]),
        ("0-3\n", [0, 1, 2, 3]),
        ("0-3,8,10-11\n", [0, 1, 2, 3, 8, 10, 11]),
        ("5,1,3", [1, 3, 5]),
        ("2-4,3-5", [2, 3, 4, 5]),
        ("7-7", [7]),
        ("4095", [4095]),
    ],
)
def test_parse_cpu_list(text: str, expected: list[int]) -> None:
    assert parse_cpu_list(text) == expected


@pytest.mark.parametrize(
    "text",
    ["a", "0-", "-3", "3-1", "0,,1", "0 - 3", "1,", ",1", "0-3:2/4", "\u0663", "1.5", f"0-{MAX_CPU_ID + 1}"],
)
def test_parse_cpu_list_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="CPU"):
        parse_cpu_list(text)


@pytest.mark.parametrize(
    ("cpus", "expected"),
    [([], ""), ([0], "0"), ([0, 4, 5], "0,4-5"), ([3, 2, 1, 0], "0-3"), ([1, 1, 2], "1-2"),
     ([0, 2, 4], "0,2,4"), ([0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11")],
)
def test_format_cpu_list(cpus: list[int], expected: str) -> None:
    assert format_cpu_list(cpus) == expected


def test_format_rejects_negative() -> None:
    with pytest.raises(ValueError):
        format_cpu_list([-1, 0])


def test_equal() -> None:
    assert cpu_lists_equal("0-3", "0,1,2,3\n")
    assert cpu_lists_equal("", "\n")
    assert not cpu_lists_equal("0-3", "0-4")


@given(st.sets(st.integers(min_value=0, max_value=4095), max_size=300))
def test_round_trip(cpus: set[int]) -> None:
    text = format_cpu_list(cpus)
    assert parse_cpu_list(text) == sorted(cpus)
    assert parse_cpu_list(text + "\n") == sorted(cpus)
    # The canonical form has no adjacent ranges that should have been merged.
    for item in filter(None, text.split(",")):
        lo, _, hi = item.partition("-")
        assert not hi or int(hi) > int(lo)


@given(st.sets(st.integers(min_value=0, max_value=200), max_size=60))
def test_format_is_canonical(cpus: set[int]) -> None:
    # Counting ranges independently: a new range starts at every cpu whose predecessor is absent.
    starts = sum(1 for c in cpus if c - 1 not in cpus)
    text = format_cpu_list(cpus)
    assert (len(text.split(",")) if text else 0) == starts
