"""The plain-Python reduction of a few samples (a node query) against numpy's, bit for bit, and the
ring's short-window lookup against the general one."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from qosmanager.metrics.aggregate import AGGREGATIONS, FEW_ROWS, reduce_columns, reduce_few, reduce_one
from qosmanager.metrics.cache import SeriesGroup


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_reduce_few_is_numpys_bit_for_bit(agg: str) -> None:
    rng = random.Random(7)
    kinds = [lambda: rng.uniform(-1e6, 1e6), lambda: rng.random() * 1e-3, lambda: float("nan"),
             lambda: rng.uniform(0, 64), lambda: float(rng.randint(0, 3))]
    for _ in range(20000):
        k = rng.randint(0, FEW_ROWS - 1)
        values = [rng.choice(kinds)() for _ in range(k)]
        mat = np.full((FEW_ROWS + 4, 3), np.nan)
        at = rng.randint(0, 4)
        mat[at : at + k, 1] = values
        want = float(reduce_columns(mat[at : at + k, 1:2], agg)[0])
        got = reduce_few(mat[at : at + k, 1].tolist(), agg)
        assert _same(got, want), (agg, values, got, want)


@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_reduce_one_is_the_one_column_reduction_bit_for_bit(agg: str) -> None:
    rng = np.random.default_rng(5)
    rows = 400
    for _ in range(600):
        mat = rng.uniform(-1e6, 1e6, size=(rows, 4)) * rng.choice([1.0, 1e-6, 1e3], size=(rows, 4))
        mat[rng.random((rows, 4)) < rng.choice([0.0, 0.2, 0.9, 1.0])] = np.nan
        a = int(rng.integers(0, rows))
        k = int(rng.integers(0, rows - a + 1))
        c = int(rng.integers(0, 4))
        wrapped = np.concatenate((np.arange(rows - 3, rows), np.arange(0, k)))  # a window over the ring's end
        for window in (slice(a, a + k), wrapped):
            want = float(reduce_columns(mat[window, c : c + 1], agg)[0])
            assert _same(reduce_one(mat[window, c], agg), want), (agg, window)


def test_reduce_few_would_differ_from_numpy_on_long_windows() -> None:
    # why FEW_ROWS: from 8 values numpy sums in 8 lanes, and a left-to-right sum rounds differently
    rng = random.Random(3)
    differ = 0
    for _ in range(2000):
        values = [rng.uniform(-1e6, 1e6) for _ in range(9)]
        want = float(reduce_columns(np.array(values)[:, None], "avg")[0])
        differ += reduce_few(values, "avg") != want
    assert differ > 0


def test_short_window_lookup_matches_the_general_one() -> None:
    rng = random.Random(11)
    for rows in (1, 2, 5, 9, 16):
        g = SeriesGroup("g", ["m"], rows=rows, cols=2)
        t = 100.0
        for _ in range(3 * rows + 5):
            t += rng.choice([0.05, 0.5, 1.0, 1.0, 2.0])
            g.append_row(t, {"m": np.array([t])})
            for _ in range(20):
                lo = t - rng.choice([0.0, 0.5, 1.0, 2.0, 3.0, 10.0, 100.0])
                hi = t + rng.choice([0.0, 0.0, 1.0]) - rng.choice([0.0, 0.0, 0.5, 1.0])
                got = g.window(lo, hi)
                stamps = g._ts
                want = [i for i in _time_order(g) if lo <= stamps[i] <= hi]
                rows_got = list(range(got.start, got.stop)) if isinstance(got, slice) else got.tolist()
                assert rows_got == want, (rows, lo, hi, rows_got, want)


def _time_order(g: SeriesGroup) -> list[int]:
    s, n = g._start, g._n
    return [(s + i) % g.rows for i in range(n)]


def test_append_values_stores_what_append_row_stores() -> None:
    rng = random.Random(5)
    metrics = ["a", "b", "c"]
    by_row = SeriesGroup("rows", metrics, rows=6, cols=1)
    by_value = SeriesGroup("values", metrics, rows=6, cols=1)
    by_row.column("node")
    t = 10.0
    for _ in range(40):
        t += rng.choice([0.0, 1.0, 1.0, -0.5, -20.0])  # equal (merge), older (insert or drop), newer
        row = {m: rng.choice([rng.uniform(0, 9), float("nan"), float("inf")]) for m in metrics if rng.random() < 0.8}
        by_row.append_row(t, {m: np.array([v]) for m, v in row.items()})
        by_value.append_values(t, "node", row)
        assert by_value.dropped == by_row.dropped
        for m in metrics:
            np.testing.assert_array_equal(by_value.values[m], by_row.values[m])
        np.testing.assert_array_equal(by_value._ts, by_row._ts)
    with pytest.raises(KeyError):
        by_value.append_values(t + 1, "node", {"nope": 1.0})


def test_key_columns_follow_the_keys() -> None:
    g = SeriesGroup("g", ["m"], rows=4, cols=2)
    assert g.key_columns()[0] == []
    for k in ("a", "b", "c"):
        g.column(k)
    names, cols = g.key_columns()
    assert (names, cols.tolist()) == (["a", "b", "c"], [0, 1, 2])
    assert g.key_columns()[1] is cols  # kept while no key comes or goes
    g.release("b")
    assert (g.key_columns()[0], g.key_columns()[1].tolist()) == (["a", "c"], [0, 2])
    g.column("d")  # reuses column 1
    names, cols = g.key_columns()
    assert dict(zip(names, cols.tolist())) == g.keys() == {"a": 0, "c": 2, "d": 1}
    with pytest.raises(ValueError):
        cols[0] = 5  # shared: read-only
