"""koordlet's aggregations of a series over a window (koordlet-infra §4.4), for the metric cache.

:func:`reduce_columns` reduces every column of a window at once with numpy (a strategy's per-pod view);
:func:`reduce_few` reduces one column of a few samples in plain Python, bit for bit the same (the node
series a strategy asks for a dozen times a tick, over one or two samples).  The semantics are
described in :mod:`qosmanager.metrics.cache`.
"""

from __future__ import annotations

import math

import numpy as np

AGG_AVG = "avg"
AGG_P50 = "p50"
AGG_P90 = "p90"
AGG_P95 = "p95"
AGG_P99 = "p99"
AGG_LAST = "last"
AGG_COUNT = "count"

AGGREGATIONS = (AGG_AVG, AGG_P50, AGG_P90, AGG_P95, AGG_P99, AGG_LAST, AGG_COUNT)

PERCENTILES: dict[str, np.float32] = {
    AGG_P50: np.float32(0.5),
    AGG_P90: np.float32(0.9),
    AGG_P95: np.float32(0.95),
    AGG_P99: np.float32(0.99),
}


def normalize_agg(agg: str) -> str:
    """Return the canonical (lower-case) aggregation name, or raise ``ValueError``.

    koordlet spells two constants in upper case (``"P90"``, ``"P95"``) and silently treats an unknown
    aggregation as AVG.  We accept any case but reject unknown names: a typo in a strategy must not turn a
    percentile into a mean without anyone noticing (deliberate fix of koordlet's fallback).
    """
    if not isinstance(agg, str):
        raise ValueError(f"aggregation must be a string, got {agg!r}")
    name = agg.lower()
    if name not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {agg!r}; expected one of {', '.join(AGGREGATIONS)}")
    return name


def reduce_columns(sub: np.ndarray, agg: str) -> np.ndarray:
    """Aggregate every column of ``sub`` (window rows in time order x columns) at once.

    Returns a float64 vector with one entry per column; NaN where the column has no sample (except for
    ``count``, which is 0 there).  No Python loop over columns.
    """
    cols = sub.shape[1]
    valid = ~np.isnan(sub)
    n = valid.sum(axis=0)
    if agg == AGG_COUNT:
        return n.astype(np.float64)
    out: np.ndarray
    if agg == AGG_AVG:
        total = np.where(valid, sub, 0.0).sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = total / n
    elif agg == AGG_LAST:
        k = sub.shape[0]
        if k == 0:
            return np.full(cols, np.nan)
        # Index of the last valid row per column: first True of the reversed mask.
        last_row = (k - 1) - np.argmax(valid[::-1], axis=0)
        out = sub[last_row, np.arange(cols)]
    else:
        p = PERCENTILES[agg]
        if sub.shape[0] == 0:
            return np.full(cols, np.nan)
        ordered = np.sort(sub, axis=0)  # NaN sorts last, so the first n rows are a column's samples
        # Go: int(float32(n) * p) - 1 in float32 arithmetic, truncated, clamped to >= 0.
        rank = (n.astype(np.float32) * p).astype(np.int64) - 1
        rank = np.clip(rank, 0, np.maximum(n - 1, 0))
        out = np.take_along_axis(ordered, rank[np.newaxis, :], axis=0)[0]
    return np.where(n > 0, out, np.nan)


FEW_ROWS = 8
"""Windows shorter than this are reduced by :func:`reduce_few`: numpy adds fewer than 8 values of a
column one by one, left to right, so the plain-Python sum gives the same bits, at a tenth of the calls."""


def reduce_few(values: list[float], agg: str) -> float:
    """:func:`reduce_columns` of one column of fewer than :data:`FEW_ROWS` samples (time order), exactly.

    A node-level query (the strategies ask a dozen a tick, over one or two samples) costs about 1 us
    here against 10 us of numpy calls on a one-column slice."""
    present = [v for v in values if v == v]  # NaN != NaN: no sample
    n = len(present)
    if agg == AGG_COUNT:
        return float(n)
    if not n:
        return math.nan
    if agg == AGG_LAST:
        return present[-1]
    if agg == AGG_AVG:
        total = 0.0
        for v in present:
            total += v
        return total / n
    rank = int(np.float32(n) * PERCENTILES[agg]) - 1  # Go's float32 arithmetic, as _reduce
    return sorted(present)[min(max(rank, 0), n - 1)]


def reduce_one(column: np.ndarray, agg: str) -> float:
    """:func:`reduce_columns` of one column (1-D, window rows in time order), bit for bit: a few samples
    in plain Python (:func:`reduce_few`), more with a handful of 1-D numpy calls (a 1-D sum adds in the
    same order as the one-column reduction; ``tests/test_metrics_aggregate.py`` holds numpy to it)."""
    k = column.shape[0]
    if k < FEW_ROWS:
        return reduce_few(column.tolist(), agg)
    missing = np.isnan(column)
    n = k - int(np.count_nonzero(missing))
    if agg == AGG_COUNT:
        return float(n)
    if not n:
        return math.nan
    if agg == AGG_AVG:
        return float(np.where(missing, 0.0, column).sum()) / n
    if agg == AGG_LAST:
        return float(column[np.flatnonzero(~missing)[-1]])
    rank = int(np.float32(n) * PERCENTILES[agg]) - 1
    return float(np.sort(column[~missing])[min(max(rank, 0), n - 1)])
