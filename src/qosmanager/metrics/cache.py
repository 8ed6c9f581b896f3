"""The metric cache: bounded, column-oriented ring buffers and koordlet's query semantics.

Why this shape
--------------
Collectors sample many series at the same instant: every pod, every container and every host
application once per tick.  koordlet stores each sample as its own TSDB series point and rebuilds a
label set for every append.  Here the store is a set of *series groups*.  A group is one shared ring of
row timestamps plus one 2-D float64 matrix per metric, ``values[metric][row, column]``:

* a **row** is one sampling instant (unix seconds, float) shared by every series of the group;
* a **column** is one series key (a pod uid, a container id, a host-application name, or the single
  column ``"node"`` of the node group);
* ``NaN`` means "no sample" (the pod had not started yet, the read failed, the key was not written).

A tick therefore stores a whole vector with one numpy row assignment, and a strategy asks for the
``last`` CPU usage of *every* pod with one vectorised reduction over a window of rows
(:meth:`SeriesGroup.aggregate_all`) instead of one query per pod.

Query semantics (koordlet-infra §4.4, normative)
------------------------------------------------
Windows are closed intervals ``[start, end]`` on the row timestamps.  Over the non-NaN samples of a
series in the window:

* ``avg``   -- arithmetic mean;
* ``pN``    -- sort ascending, ``idx = int(float32(n) * float32(p)) - 1`` clamped to ``>= 0``, value
  ``sorted[idx]`` (a lower nearest rank, no interpolation; float32 like Go, which matters: for n = 10
  and p = 0.9 the float32 product rounds to exactly 9.0);
* ``last``  -- the value with the greatest timestamp;
* ``count`` -- the number of samples, 0 when empty.

Every other aggregation of an empty window has no value: :meth:`SeriesGroup.aggregate` returns
``None`` (koordlet's "metric input is empty") and :meth:`SeriesGroup.aggregate_all` returns NaN.

Memory is bounded
-----------------
Rows are fixed per group (retention in samples); columns grow, by doubling, only with live keys, and a
released column is cleared and reused (lowest free first).  One column costs
``rows * len(metrics) * 8`` bytes.  With the defaults (containers: 60 rows x 4 metrics, pods: 120 rows x
4 metrics) that is **1,920 B per container** and **3,840 B per pod**: a 1,000-pod, 2,000-container node
holds about 3.8 MB + 3.8 MB of samples (up to twice that transiently, because capacity doubles), plus
``rows * 8`` bytes of timestamps per group.  The node and host-application groups are 1,800 rows
(30 min at 1 s, the longest NodeMetric window) x 11 and x 3 metrics: 158 KB and 43 KB per column.

Ordering
--------
Rows are kept in timestamp order.  Appends at or after the newest row are O(row).  An older timestamp
that falls inside the ring (koordlet tolerates out-of-order samples because every collector stamps its
own ``time.Now()``; replay writes one series after another) is inserted at its sorted position by
shifting the younger rows, which is rare and bounded by the ring size.  A timestamp older than every row
of a *full* ring is dropped (it would be the first row retention discards) and counted in ``dropped``.
"""

from __future__ import annotations

import heapq
import math
import threading
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from qosmanager.metrics.aggregate import (
    AGG_AVG,
    AGG_COUNT,
    AGG_LAST,
    AGG_P50,
    AGG_P90,
    AGG_P95,
    AGG_P99,
    AGGREGATIONS,
    FEW_ROWS,
    normalize_agg,
    reduce_columns,
    reduce_one,
)

NODE_KEY = "node"
"""The single column of the node group."""


def container_key(pod_uid: str, name: str) -> str:
    """Series key for a container addressed as replay does (``pod: <uid>, container: <name>``).

    The cache is key-agnostic: the collector keys containers by their runtime id
    (``containerd://...``); replay, which may not know ids, can key them by ``"<uid>/<name>"``.
    """
    if not pod_uid or not name:
        raise ValueError(f"container_key needs a pod uid and a container name, got {pod_uid!r}, {name!r}")
    return f"{pod_uid}/{name}"


def _check_time(what: str, value: float) -> float:
    t = float(value)
    if not math.isfinite(t):
        raise ValueError(f"{what} must be a finite unix time in seconds, got {value!r}")
    return t


class SeriesGroup:
    """Series sampled together: a ring of row timestamps and one ``rows x cols`` matrix per metric.

    ``rows`` is the retention in samples (the ring size); ``cols`` the current column capacity, which
    grows by doubling as keys are added.  All methods are safe to call from the collector thread and the
    strategy thread at the same time (one lock per group, taken once per call, never per column).
    """

    def __init__(self, name: str, metrics: Sequence[str], rows: int, cols: int = 64) -> None:
        if isinstance(metrics, str) or not metrics:
            raise ValueError(f"series group {name!r} needs a non-empty sequence of metric names")
        if len(set(metrics)) != len(metrics):
            raise ValueError(f"series group {name!r} has duplicate metric names: {list(metrics)}")
        if int(rows) < 1 or int(cols) < 1:
            raise ValueError(f"series group {name!r} needs rows >= 1 and cols >= 1, got {rows}, {cols}")
        self.name = name
        self.metrics: tuple[str, ...] = tuple(metrics)
        self.rows = int(rows)
        self.cols = int(cols)
        self.dropped = 0
        """Samples or rows discarded because they were older than every row of a full ring."""
        self.values: dict[str, np.ndarray] = {
            m: np.full((self.rows, self.cols), np.nan) for m in self.metrics
        }
        """``values[metric][row, column]``; rows are physical ring slots (use :meth:`window`)."""
        self._ts = np.zeros(self.rows)
        self._start = 0  # physical slot of the oldest row
        self._n = 0  # rows in use
        self._keys: dict[str, int] = {}
        self._key_columns: tuple[list[str], np.ndarray] | None = None  # see key_columns()
        self._live = np.zeros(self.cols, dtype=bool)
        self._used = 0  # high-water mark: columns [0, used) have been handed out at least once
        self._free: list[int] = []  # heap of released columns below the high-water mark
        self._lock = threading.RLock()

    # ---- columns -------------------------------------------------------------------------------

    @property
    def used(self) -> int:
        """Columns handed out so far (the high-water mark); vectors are indexed ``[0, used)``."""
        return self._used

    def column(self, key: str) -> int:
        """The column of ``key``, allocating the lowest free one (growing capacity) if it is new."""
        if not isinstance(key, str) or not key:
            raise ValueError(f"series key in group {self.name!r} must be a non-empty string, got {key!r}")
        with self._lock:
            col = self._keys.get(key)
            if col is not None:
                return col
            if self._free:
                col = heapq.heappop(self._free)
            else:
                if self._used == self.cols:
                    self._grow(self.cols * 2)
                col = self._used
                self._used += 1
            self._keys[key] = col
            self._live[col] = True
            self._key_columns = None
            return col

    def lookup(self, key: str) -> int | None:
        """The column of ``key``, or None when the key has none."""
        with self._lock:
            return self._keys.get(key)

    def release(self, key: str) -> None:
        """Free the column of ``key`` and clear its history (a reused column starts empty).

        Releasing an unknown key is a no-op: pods disappear from several places at once.
        """
        with self._lock:
            col = self._keys.pop(key, None)
            if col is None:
                return
            self._key_columns = None
            for mat in self.values.values():
                mat[:, col] = np.nan
            self._live[col] = False
            heapq.heappush(self._free, col)

    def keys(self) -> dict[str, int]:
        """A snapshot of the live keys and their columns."""
        with self._lock:
            return dict(self._keys)

    def key_columns(self) -> tuple[list[str], np.ndarray]:
        """The live keys and their columns (int64), in the same order: kept until a key comes or goes
        (a strategy's per-pod view asks every tick; the pods change far less often).  Read-only."""
        with self._lock:
            kc = self._key_columns
            if kc is None:
                cols = np.fromiter(self._keys.values(), dtype=np.int64, count=len(self._keys))
                cols.flags.writeable = False
                kc = self._key_columns = (list(self._keys), cols)
            return kc

    def reserve(self, cols: int) -> None:
        """Grow the column capacity to at least ``cols`` (one copy), e.g. before adding 1,000 pods."""
        with self._lock:
            if cols > self.cols:
                self._grow(int(cols))

    def _grow(self, cols: int) -> None:
        for metric, mat in self.values.items():
            grown = np.full((self.rows, cols), np.nan)
            grown[:, : self.cols] = mat
            self.values[metric] = grown
        live = np.zeros(cols, dtype=bool)
        live[: self.cols] = self._live
        self._live = live
        self.cols = cols

    # ---- rows ----------------------------------------------------------------------------------

    def timestamps(self) -> np.ndarray:
        """The row timestamps in time order (a copy)."""
        with self._lock:
            return self._ts[self._physical(np.arange(self._n))]

    @property
    def newest(self) -> float | None:
        """Timestamp of the newest row, or None when the group is empty."""
        with self._lock:
            if self._n == 0:
                return None
            return float(self._ts[(self._start + self._n - 1) % self.rows])

    def _physical(self, logical: np.ndarray) -> np.ndarray:
        return (self._start + logical) % self.rows

    def _clear_row(self, phys: int, ts: float) -> None:
        self._ts[phys] = ts
        for mat in self.values.values():
            mat[phys] = np.nan

    def _push_back(self, ts: float) -> int:
        if self._n == self.rows:  # ring full: the oldest row's slot becomes the newest row
            self._start = (self._start + 1) % self.rows
            self._n -= 1
        phys = (self._start + self._n) % self.rows
        self._clear_row(phys, ts)
        self._n += 1
        return phys

    def _insert(self, pos: int, ts: float) -> int | None:
        """Open a row at logical position ``pos`` (0 = oldest) by shifting the younger rows."""
        if self._n == self.rows:
            if pos == 0:
                return None  # older than everything retained: retention would drop it at once
            self._start = (self._start + 1) % self.rows
            self._n -= 1
            pos -= 1
        if pos < self._n:
            src = self._physical(np.arange(pos, self._n))
            dst = (src + 1) % self.rows
            self._ts[dst] = self._ts[src]
            for mat in self.values.values():
                mat[dst] = mat[src]  # fancy-indexed right side is a copy, so overlap is safe
        phys = (self._start + pos) % self.rows
        self._clear_row(phys, ts)
        self._n += 1
        return phys

    def _row_for(self, ts: float) -> tuple[int | None, bool]:
        """Physical row holding exactly ``ts`` (created if missing) and whether it already existed."""
        n = self._n
        if n == 0 or ts > self._ts[(self._start + n - 1) % self.rows]:
            return self._push_back(ts), False
        newest = (self._start + n - 1) % self.rows
        if ts == self._ts[newest]:
            return newest, True
        ordered = self._ts[self._physical(np.arange(n))]
        pos = int(np.searchsorted(ordered, ts, side="left"))
        if pos < n and ordered[pos] == ts:
            return (self._start + pos) % self.rows, True
        return self._insert(pos, ts), False

    def append_row(
        self, ts: float, values: Mapping[str, np.ndarray], *, columns: np.ndarray | None = None
    ) -> None:
        """Store one sampling instant for every column at once.

        ``values[metric]`` is a vector indexed by column, of length at least :attr:`used`; entries of
        free or never-allocated columns are ignored (so a reused column never inherits them), non-finite
        entries count as "no sample" and a missing metric adds no samples.  With ``columns`` (an index array),
        ``values[metric][i]`` goes to column ``columns[i]`` instead -- for a collector whose slot order is
        not the column order.

        Rows should come in non-decreasing ``ts``.  An equal ``ts`` merges into the existing row (new
        non-NaN entries win); an older one is inserted in order (see the module docstring).
        """
        t = _check_time("row timestamp", ts)
        with self._lock:
            if columns is not None:
                idx = np.asarray(columns)
                if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
                    raise ValueError(f"{self.name}: columns must be a 1-D integer array")
                if idx.size and (idx.min() < 0 or idx.max() >= self._used):
                    raise ValueError(f"{self.name}: columns must lie in [0, {self._used}), got {idx}")
                need = idx.size
                keep_cols = self._live[idx]
            else:
                idx = None
                need = self._used
                keep_cols = self._live[:need]
            vectors: dict[str, np.ndarray] = {}
            for metric, vec in values.items():  # validate everything before touching the ring
                if metric not in self.values:
                    raise self._unknown(metric)
                arr = np.asarray(vec, dtype=np.float64)
                if arr.ndim != 1 or arr.shape[0] < need:
                    raise ValueError(
                        f"{self.name}: values[{metric!r}] must be a 1-D vector of length >= {need}, "
                        f"got shape {arr.shape}"
                    )
                vectors[metric] = arr[:need]
            phys, _ = self._row_for(t)
            if phys is None:
                self.dropped += 1
                return
            for metric, arr in vectors.items():
                keep = keep_cols & np.isfinite(arr)
                row = self.values[metric][phys]
                if idx is None:
                    np.copyto(row[:need], arr, where=keep)
                else:
                    row[idx[keep]] = arr[keep]

    def append_values(self, ts: float, key: str, values: Mapping[str, float]) -> None:
        """:meth:`append_row` for one series from plain floats (the node's dozen values a tick: no vector
        to build per value).  The key gets a column if it has none; non-finite values are no sample."""
        t = _check_time("row timestamp", ts)
        with self._lock:
            for metric in values:  # validate everything before touching the ring
                if metric not in self.values:
                    raise self._unknown(metric)
            col = self.column(key)  # first: growing replaces the matrices
            phys, _ = self._row_for(t)
            if phys is None:
                self.dropped += 1
                return
            for metric, value in values.items():
                v = float(value)
                if math.isfinite(v):
                    self.values[metric][phys, col] = v

    def append_sample(self, metric: str, key: str, ts: float, value: float) -> None:
        """Store one sample of one series (replay, host apps): into the row with exactly ``ts`` if the
        ring has one, else into a new row at its sorted position.  A NaN value is "no sample" (no-op)."""
        if metric not in self.values:
            raise self._unknown(metric)
        t = _check_time("sample timestamp", ts)
        v = float(value)
        if math.isnan(v):
            return
        if math.isinf(v):
            raise ValueError(f"{self.name}/{metric}/{key}: sample value must be finite, got {value!r}")
        if not isinstance(key, str) or not key:
            raise ValueError(f"series key in group {self.name!r} must be a non-empty string, got {key!r}")
        with self._lock:
            phys, _ = self._row_for(t)
            if phys is None:  # dropped before a column is spent on it
                self.dropped += 1
                return
            col = self.column(key)  # first: growing replaces the matrices
            self.values[metric][phys, col] = v

    # ---- queries -------------------------------------------------------------------------------

    def window(self, start: float, end: float) -> slice | np.ndarray:
        """Physical rows with ``start <= ts <= end``, in time order: a slice when they are contiguous in
        the ring, else an index array (the window wraps around the ring's end)."""
        lo_t = _check_time("window start", start)
        hi_t = _check_time("window end", end)
        with self._lock:
            s, n, rows = self._start, self._n, self.rows
            if n:  # the usual query: the last few seconds, up to now -- walk back from the newest row
                ts = self._ts
                last = (s + n - 1) % rows
                if hi_t >= ts[last]:
                    k = 0
                    while k < n and k < FEW_ROWS and ts[last - k] >= lo_t:  # [-1]: the ring's end
                        k += 1
                    if (k < FEW_ROWS or k == n) and last - k + 1 >= 0:
                        return slice(last - k + 1, last + 1)
            first_end = min(s + n, rows)
            seg1 = self._ts[s:first_end]
            a0 = s + int(np.searchsorted(seg1, lo_t, side="left"))
            a1 = s + int(np.searchsorted(seg1, hi_t, side="right"))
            wrapped = s + n - rows
            if wrapped <= 0:
                return slice(a0, max(a0, a1))
            seg2 = self._ts[:wrapped]
            b0 = int(np.searchsorted(seg2, lo_t, side="left"))
            b1 = int(np.searchsorted(seg2, hi_t, side="right"))
            if b1 <= b0:
                return slice(a0, max(a0, a1))
            if a1 <= a0:
                return slice(b0, b1)
            return np.concatenate((np.arange(a0, a1), np.arange(b0, b1)))

    def _matrix(self, metric: str) -> np.ndarray:
        try:
            return self.values[metric]
        except KeyError:
            raise self._unknown(metric) from None

    def _unknown(self, metric: str) -> KeyError:
        return KeyError(f"{self.name}: unknown metric {metric!r}; known: {', '.join(self.metrics)}")

    def aggregate(self, metric: str, key: str, start: float, end: float, agg: str) -> float | None:
        """One series' aggregate over ``[start, end]``; None when it has no sample there (count: 0)."""
        name = normalize_agg(agg)
        with self._lock:
            mat = self._matrix(metric)
            col = self._keys.get(key)
            if col is None:
                return 0.0 if name == AGG_COUNT else None
            value = reduce_one(mat[self.window(start, end), col], name)
        return None if math.isnan(value) else value

    def aggregate_all(self, metric: str, start: float, end: float, agg: str) -> np.ndarray:
        """Every column's aggregate over ``[start, end]`` at once (length :attr:`used`, NaN where a
        column has no sample; ``count`` gives 0 there).  Index it with :meth:`keys` / :meth:`lookup`."""
        name = normalize_agg(agg)
        with self._lock:
            mat = self._matrix(metric)
            sub = mat[self.window(start, end), : self._used]
            return reduce_columns(sub, name)

    def aggregate_cols(self, metric: str, cols: np.ndarray, start: float, end: float, agg: str) -> np.ndarray:
        """:meth:`aggregate_all` over the given columns only (in their order)."""
        name = normalize_agg(agg)
        with self._lock:
            mat = self._matrix(metric)
            return reduce_columns(mat[self.window(start, end)][:, cols], name)

    def count_all(self, metric: str, start: float, end: float) -> np.ndarray:
        """Samples per column in ``[start, end]`` (int64, length :attr:`used`)."""
        return self.aggregate_all(metric, start, end, AGG_COUNT).astype(np.int64)

    def aggregate_by_key(
        self, metric: str, start: float, end: float, agg: str, keys: Iterable[str] | None = None
    ) -> dict[str, float]:
        """``{key: aggregate}`` for the given (default: all live) keys that have data in the window --
        koordlet's ``CollectAllPodMetrics`` shape, computed with one vectorised reduction."""
        with self._lock:
            result = self.aggregate_all(metric, start, end, agg)
            if keys is None:
                pairs = list(self._keys.items())
            else:
                pairs = [(k, c) for k in keys if (c := self._keys.get(k)) is not None]
        return {k: float(result[c]) for k, c in pairs if not math.isnan(result[c])}

    def time_range(self, metric: str, key: str, start: float, end: float) -> tuple[float, float] | None:
        """Timestamps of the first and last sample of one series in ``[start, end]``, or None.

        NodeMetric's cold-start filter compares this span with the aggregation duration.
        """
        with self._lock:
            mat = self._matrix(metric)
            col = self._keys.get(key)
            if col is None:
                return None
            rows = self.window(start, end)
            present = ~np.isnan(mat[rows, col])
            if not present.any():
                return None
            stamps = self._ts[rows][present]
            return float(stamps[0]), float(stamps[-1])

    # ---- accounting ----------------------------------------------------------------------------

    def bytes_per_column(self) -> int:
        """Sample memory of one column: ``rows * len(metrics) * 8``."""
        return self.rows * len(self.metrics) * 8

    def nbytes(self) -> int:
        """Bytes held by the numpy buffers (timestamps and every matrix at current capacity)."""
        with self._lock:
            return int(self._ts.nbytes + sum(mat.nbytes for mat in self.values.values()))

    def __repr__(self) -> str:
        return (
            f"SeriesGroup({self.name!r}, metrics={len(self.metrics)}, rows={self._n}/{self.rows}, "
            f"keys={len(self._keys)}, cols={self.cols})"
        )


# Group metric names.
CPU_USAGE = "cpu_usage"
MEMORY_USAGE = "memory_usage"
MEMORY_USAGE_WITH_PAGE_CACHE = "memory_usage_with_page_cache"
CPU_THROTTLED_RATIO = "cpu_throttled_ratio"

NODE_METRICS = (
    "node_cpu_usage",
    "node_memory_usage",
    "node_memory_usage_with_page_cache",
    "sys_cpu_usage",
    "sys_memory_usage",
    "be_cpu_usage",
    "be_cpu_request",
    "be_cpu_real_limit",
    # the kube QoS cgroups' own usage (cores): the kernel's sum over every pod beneath them
    "kubepods_cpu_usage",
    "burstable_cpu_usage",
    "besteffort_cpu_usage",
)
POD_METRICS = (CPU_USAGE, MEMORY_USAGE, MEMORY_USAGE_WITH_PAGE_CACHE, CPU_THROTTLED_RATIO)
CONTAINER_METRICS = POD_METRICS
HOSTAPP_METRICS = (CPU_USAGE, MEMORY_USAGE, MEMORY_USAGE_WITH_PAGE_CACHE)

_NODE, _POD, _CONTAINER, _APP = "node", "pod", "container", "app"


def _names() -> dict[str, tuple[str, str]]:
    """Query name -> (address kind, group metric).

    The docs/interfaces.md names come first; koordlet's TSDB kind names are accepted as aliases so code and
    scenarios written against either vocabulary work.
    """
    names: dict[str, tuple[str, str]] = {m: (_NODE, m) for m in NODE_METRICS}
    for prefix, kind in (("pod_", _POD), ("container_", _CONTAINER)):
        names[prefix + "cpu_usage"] = (kind, CPU_USAGE)
        names[prefix + "memory_usage"] = (kind, MEMORY_USAGE)
        names[prefix + "memory_usage_with_page_cache"] = (kind, MEMORY_USAGE_WITH_PAGE_CACHE)
        names[prefix + "throttled_ratio"] = (kind, CPU_THROTTLED_RATIO)
        names[prefix + "cpu_throttled"] = (kind, CPU_THROTTLED_RATIO)  # koordlet kind
        names[prefix + "cpu_throttled_ratio"] = (kind, CPU_THROTTLED_RATIO)
    for prefix in ("hostapp_", "host_application_"):
        names[prefix + "cpu_usage"] = (_APP, CPU_USAGE)
        names[prefix + "memory_usage"] = (_APP, MEMORY_USAGE)
        names[prefix + "memory_usage_with_page_cache"] = (_APP, MEMORY_USAGE_WITH_PAGE_CACHE)
    return names


METRIC_NAMES: dict[str, tuple[str, str]] = _names()


def _metric_name(name: str) -> tuple[str, str]:
    try:
        return METRIC_NAMES[name]
    except (KeyError, TypeError):
        raise KeyError(f"unknown metric name {name!r}; known: {', '.join(sorted(METRIC_NAMES))}") from None


def rows_for(window: float, interval: float, *, floor: int = 4) -> int:
    """Ring rows that hold every sample of a closed ``window`` (seconds) taken every ``interval``
    seconds: one per interval, one for the sample at each end, one for a late tick; at least
    ``floor``.  A group sized this way keeps what its queries read and nothing older."""
    if not (interval > 0 and window >= 0):
        raise ValueError(f"rows_for: need interval > 0 and window >= 0, got {window}, {interval}")
    return max(floor, math.ceil(window / interval) + 3)


class MetricCache:
    """The agent's in-memory time-series store: four series groups addressed by metric name.

    Units as in docs/interfaces.md: CPU in cores, memory in bytes, ``be_cpu_*`` in milli-cores, throttled
    ratios in 0..1.  Defaults keep 30 min of node and host-app history at 1 s (NodeMetric's longest
    window), 2 min per pod and 1 min per container (strategies look back 2 x interval, or one window).
    """

    def __init__(
        self,
        *,
        node_rows: int = 1800,
        pod_rows: int = 120,
        container_rows: int = 60,
        hostapp_rows: int = 1800,
    ) -> None:
        self.node = SeriesGroup("node", NODE_METRICS, node_rows, cols=1)
        self.node.column(NODE_KEY)
        self.pods = SeriesGroup("pods", POD_METRICS, pod_rows)
        self.containers = SeriesGroup("containers", CONTAINER_METRICS, container_rows)
        self.hostapps = SeriesGroup("hostapps", HOSTAPP_METRICS, hostapp_rows, cols=8)
        self._groups = {_NODE: self.node, _POD: self.pods, _CONTAINER: self.containers, _APP: self.hostapps}

    def group_of(self, name: str) -> tuple[SeriesGroup, str]:
        """The group and group metric of a metric name, for per-key (vectorised) queries."""
        kind, metric = _metric_name(name)
        return (self.node if kind == _NODE else self._groups[kind]), metric

    def resolve(
        self, name: str, *, pod: str | None = None, container: str | None = None, app: str | None = None
    ) -> tuple[SeriesGroup, str, str]:
        """Map a metric name and its address to ``(group, group metric, series key)``.

        Exactly the address the name needs must be given: ``pod=`` for ``pod_*``, ``container=`` for
        ``container_*`` (a runtime id or a :func:`container_key`), ``app=`` for ``hostapp_*``, none for
        node, ``sys_*`` and ``be_*`` names.  koordlet merges every series of a kind when a query names no
        property; no strategy relies on that and it hides addressing mistakes, so it is an error here
        (use :meth:`query_all` for the per-key view).
        """
        kind, metric = _metric_name(name)
        given = {_POD: pod, _CONTAINER: container, _APP: app}
        extra = [k for k, v in given.items() if v is not None and k != kind]
        if extra:
            raise ValueError(f"metric {name!r} takes no {'/'.join(extra)}= address")
        if kind == _NODE:
            return self.node, metric, NODE_KEY
        key = given[kind]
        if not isinstance(key, str) or not key:
            raise ValueError(f"metric {name!r} needs {kind}=<non-empty string>, got {key!r}")
        return self._groups[kind], metric, key

    def query(
        self,
        name: str,
        start: float,
        end: float,
        agg: str,
        *,
        pod: str | None = None,
        container: str | None = None,
        app: str | None = None,
    ) -> float | None:
        """Aggregate of one series over ``[start, end]``; None when it has no sample (count: 0)."""
        group, metric, key = self.resolve(name, pod=pod, container=container, app=app)
        return group.aggregate(metric, key, start, end, agg)

    def query_all(self, name: str, start: float, end: float, agg: str) -> dict[str, float]:
        """``{key: aggregate}`` over every live series of ``name`` that has data in the window."""
        kind, metric = _metric_name(name)
        return self._groups[kind].aggregate_by_key(metric, start, end, agg)

    def add_sample(
        self,
        name: str,
        ts: float,
        value: float,
        *,
        pod: str | None = None,
        container: str | None = None,
        app: str | None = None,
    ) -> None:
        """Store one sample by metric name (replay's entry point)."""
        group, metric, key = self.resolve(name, pod=pod, container=container, app=app)
        group.append_sample(metric, key, ts, value)

    def nbytes(self) -> int:
        """Bytes held by every group's numpy buffers."""
        return sum(g.nbytes() for g in self._groups.values())

    def bytes_per_container(self) -> int:
        """Sample memory one container series costs (``container_rows * 4 metrics * 8``)."""
        return self.containers.bytes_per_column()

    def bytes_per_pod(self) -> int:
        """Sample memory one pod series costs (``pod_rows * 4 metrics * 8``)."""
        return self.pods.bytes_per_column()


__all__ = [
    "AGGREGATIONS",
    "AGG_AVG",
    "AGG_COUNT",
    "AGG_LAST",
    "AGG_P50",
    "AGG_P90",
    "AGG_P95",
    "AGG_P99",
    "CONTAINER_METRICS",
    "HOSTAPP_METRICS",
    "METRIC_NAMES",
    "NODE_KEY",
    "NODE_METRICS",
    "POD_METRICS",
    "MetricCache",
    "SeriesGroup",
    "container_key",
    "normalize_agg",
]
