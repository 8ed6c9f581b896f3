"""The agent's metric families on ``prometheus_client``'s registry and encoders.

``prometheus_client`` supplies the registry (:class:`Registry` is its ``CollectorRegistry``, so a
name clash is refused as everywhere else), the two exposition formats (the text format 0.0.4 and
OpenMetrics 1.0.0, chosen per request by :func:`negotiate`) and the standard ``process_*``,
``python_gc_*`` and ``python_info`` collectors.  Its metric objects are not used: each family
here is a *custom collector* that builds its metric family at scrape time from values the agent
keeps anyway, so a scrape costs what the page holds and never a Python object per label set and
sample kept between scrapes beyond the few families' own children.  Two kinds of family:

* **updated**: ``inc``, ``set`` and ``observe`` on a label set's child (the agent's hooks);
* **pulled**: ``pull(fn)`` makes the family call ``fn()`` at scrape time for
  ``{label values: value}`` (or a bare number for an unlabelled family).  Pulled values come from
  counters the agent keeps anyway (``ExecutorStats``, ``CollectorStats``), so the agent's loop
  pays nothing for them.  ``fn`` runs on the HTTP thread and must only read scalars or take
  snapshots; a failing ``fn`` costs its family's samples in that scrape, never the scrape.

Threads: the agent's loop updates values while the HTTP thread collects them.  Each family has
one lock, taken for a single update and, during a scrape, just long enough to copy the family's
children; a scrape therefore never sees a dict change size under it, never sees a histogram's
count without its sum, and never holds the agent up for longer than a copy.

Counter names: both formats name a counter's sample ``<name>_total``.  A counter whose name has
no ``_total`` (koordlet's ``koordlet_pod_eviction``: client_golang's text format adds no suffix,
and dashboards built for koordlet query that exact name) is therefore exposed *untyped* under
its exact name, which both formats keep as it is.
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from qosmanager.exporter import promlib
from qosmanager.exporter.promlib import (
    CONTENT_TYPE_PLAIN_0_0_4,
    Collector,
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    floatToGoString,
)
from qosmanager.exporter.promlib import openmetrics_latest as _openmetrics
from qosmanager.exporter.promlib import text_latest as _text

log = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # text/plain; version=0.0.4; charset=utf-8
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# OpenMetrics versions whose text this library writes (0.0.1 and 1.0.0 differ in nothing the agent uses)
_OPENMETRICS_VERSIONS = ("", "1.0.0", "0.0.1")

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

LabelValues = tuple[str, ...]
PullFn = Callable[[], "Mapping[LabelValues, float] | float | None"]


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """``start * factor**i`` for ``i < count``, rounded to 12 significant digits so the ``le``
    labels read ``0.16`` rather than ``0.16000000000000003``."""
    if start <= 0 or factor <= 1 or count < 1:
        raise ValueError("exponential buckets need start > 0, factor > 1, count >= 1; "
                         f"got {start}, {factor}, {count}")
    return tuple(float(f"{start * factor ** i:.12g}") for i in range(count))


# ---------------------------------------------------------------------------------------------
# content negotiation
# ---------------------------------------------------------------------------------------------
def _media_ranges(header: str) -> list[tuple[str, dict[str, str], float]]:
    """``Accept``-style header -> ``[(type, params, q)]`` in the client's order of preference
    (highest q first, ties in the order written); ranges with q=0 (refused) are left out."""
    out = []
    for i, item in enumerate(header.split(",")):
        parts = [p.strip() for p in item.split(";")]
        if not parts[0]:
            continue
        params: dict[str, str] = {}
        for p in parts[1:]:
            key, _, value = p.partition("=")
            params[key.strip().lower()] = value.strip().strip('"')
        try:
            q = float(params.pop("q", "1"))
        except ValueError:
            q = 0.0
        if not 0 < q <= 1:  # a malformed q is no preference at all
            continue
        out.append((-q, i, parts[0].lower(), params))
    return [(t, params, -nq) for nq, _, t, params in sorted(out, key=lambda x: (x[0], x[1]))]


def wants_openmetrics(accept: str) -> bool:
    """Whether the client prefers OpenMetrics: Prometheus sends
    ``application/openmetrics-text;version=1.0.0,...,text/plain;version=0.0.4;q=0.5,*/*;q=0.1``.
    The first range this server can answer decides; text 0.0.4 is the answer to everything else
    (no header, ``*/*``, ``text/plain`` of any version)."""
    for mtype, params, _ in _media_ranges(accept or ""):
        if mtype == "application/openmetrics-text":
            if params.get("version", "") in _OPENMETRICS_VERSIONS:
                return True
            continue  # a version this library does not write: look further
        if mtype in ("text/plain", "text/*", "*/*"):
            return False
    return False


def accepts_gzip(accept_encoding: str) -> bool:
    """``Accept-Encoding`` names gzip with a q above 0 (``*`` alone gets the page as it is)."""
    return any(coding in ("gzip", "x-gzip") for coding, _, _ in _media_ranges(accept_encoding or ""))


# ---------------------------------------------------------------------------------------------
# families
# ---------------------------------------------------------------------------------------------
class _Family(Collector):
    kind: str = "unknown"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                 registry: Registry | None = None) -> None:
        if not _METRIC_NAME.fullmatch(name):
            raise ValueError(f"invalid metric name {name!r}")
        labelnames = tuple(labelnames)
        for ln in labelnames:
            if not _LABEL_NAME.fullmatch(ln) or ln.startswith("__"):
                raise ValueError(f"metric {name}: invalid label name {ln!r}")
        if len(set(labelnames)) != len(labelnames):
            raise ValueError(f"metric {name}: duplicate label names {labelnames}")
        self.name = name
        self.documentation = documentation
        self.labelnames: tuple[str, ...] = labelnames
        self._lock = threading.Lock()
        self._children: dict[LabelValues, object] = {}
        self._pull: PullFn | None = None
        if registry is not None:
            registry.register(self)

    # -- label sets ------------------------------------------------------------------------
    def _key(self, values: Sequence[object]) -> LabelValues:
        if len(values) != len(self.labelnames):
            raise ValueError(f"metric {self.name} takes labels {self.labelnames}, got {len(values)} value(s)")
        return tuple(str(v) for v in values)

    def _new_child(self) -> object:
        raise NotImplementedError

    def _child(self, values: Sequence[object]) -> object:
        key = self._key(values)
        child = self._children.get(key)
        if child is None:
            with self._lock:
                child = self._children.get(key)
                if child is None:
                    child = self._new_child()
                    self._children[key] = child
        return child

    def remove(self, *values: object) -> None:
        """Drop one label set (its series disappears from the next scrape)."""
        with self._lock:
            self._children.pop(self._key(values), None)

    def clear(self) -> None:
        with self._lock:
            self._children.clear()

    def pull(self, fn: PullFn) -> None:
        """Read the values from ``fn()`` at every scrape instead of from updates."""
        self._pull = fn

    # -- collection (the HTTP thread) --------------------------------------------------------
    def _pulled(self) -> list[tuple[LabelValues, float]]:
        assert self._pull is not None
        try:
            got = self._pull()
        except Exception:  # a broken reader loses its family's samples, never the scrape
            log.exception("metric %s: reading its value failed", self.name)
            return []
        if got is None:
            return []
        if isinstance(got, Mapping):
            out = []
            for k, v in got.items():
                key = (k,) if isinstance(k, str) else tuple(k)
                if len(key) != len(self.labelnames) or v is None:
                    continue
                out.append((tuple(str(x) for x in key), float(v)))
            return sorted(out)
        if self.labelnames:
            return []
        return [((), float(got))]

    def _values(self) -> list[tuple[LabelValues, float]]:
        if self._pull is not None:
            return self._pulled()
        with self._lock:
            return sorted((k, c.value) for k, c in self._children.items())  # type: ignore[attr-defined]

    def _metric(self) -> Metric:
        return Metric(self.name, self.documentation, self.kind)

    def _fill(self, m: Metric) -> None:
        names = self.labelnames
        for values, v in self._values():
            m.add_sample(self.name, dict(zip(names, values)), v)

    def describe(self) -> list[Metric]:
        """The family without samples: what the registry checks names against."""
        return [self._metric()]

    def collect(self) -> list[Metric]:
        m = self._metric()
        self._fill(m)
        return [m]


class _Value:
    """A counter's or gauge's child: one float, updated under the family lock."""

    __slots__ = ("_lock", "value")

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self.value = 0.0


class CounterChild(_Value):
    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"a counter only goes up; got inc({amount})")
        with self._lock:
            self.value += amount


class GaugeChild(_Value):
    __slots__ = ()

    def set(self, value: float) -> None:
        self.value = float(value)

    def inc(self, amount: float = 1.0) -> None:
        with self._lock:
            self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        with self._lock:
            self.value -= amount


class Counter(_Family):
    """A value that only goes up (``_total`` by convention; without it, exposed untyped under its
    exact name: see the module's note on counter names)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                 registry: Registry | None = None) -> None:
        self.kind = "counter" if name.endswith("_total") else "unknown"
        super().__init__(name, documentation, labelnames, registry)

    def _metric(self) -> Metric:
        if self.kind == "counter":
            return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        return Metric(self.name, self.documentation, "unknown")

    def _fill(self, m: Metric) -> None:
        if isinstance(m, CounterMetricFamily):
            for values, v in self._values():
                m.add_metric(values, v)
        else:
            super()._fill(m)

    def _new_child(self) -> CounterChild:
        return CounterChild(self._lock)

    def labels(self, *values: object) -> CounterChild:
        return self._child(values)  # type: ignore[return-value]

    def inc(self, amount: float = 1.0) -> None:
        self.labels().inc(amount)


class Gauge(_Family):
    """A value that goes up and down."""

    kind = "gauge"

    def _metric(self) -> Metric:
        return GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def _new_child(self) -> GaugeChild:
        return GaugeChild(self._lock)

    def labels(self, *values: object) -> GaugeChild:
        return self._child(values)  # type: ignore[return-value]

    def set(self, value: float) -> None:
        self.labels().set(value)


class HistogramChild:
    """Bucket counts (per bucket, made cumulative when collected), sum and count of one label set."""

    __slots__ = ("_lock", "bounds", "count", "counts", "sum")

    def __init__(self, lock: threading.Lock, bounds: tuple[float, ...]) -> None:
        self._lock = lock
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, n: int = 1) -> None:
        """``n`` observations of ``value`` (a batch of equal samples costs one update).  NaN is
        dropped: it would poison the sum for good."""
        if value != value or n <= 0:
            return
        i = bisect.bisect_left(self.bounds, value)  # first bound >= value: buckets are "le"
        with self._lock:
            self.counts[i] += n
            self.sum += value * n
            self.count += n

    def snapshot(self) -> tuple[list[int], float, int]:
        with self._lock:
            return list(self.counts), self.sum, self.count


class Histogram(_Family):
    """Observations counted into ``le`` buckets, with ``_bucket``, ``_sum`` and ``_count`` series."""

    kind = "histogram"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
                 buckets: Iterable[float], registry: Registry | None = None) -> None:
        if "le" in tuple(labelnames):
            raise ValueError(f"histogram {name}: 'le' is reserved for buckets")
        bounds = sorted(float(b) for b in buckets if not math.isinf(float(b)))
        if not bounds or len(set(bounds)) != len(bounds) or any(math.isnan(b) for b in bounds):
            raise ValueError(f"histogram {name}: buckets must be distinct finite numbers, got {bounds}")
        self.bounds: tuple[float, ...] = tuple(bounds)
        self._les = [floatToGoString(b) for b in bounds] + ["+Inf"]
        super().__init__(name, documentation, labelnames, registry)

    def _metric(self) -> Metric:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def _new_child(self) -> HistogramChild:
        return HistogramChild(self._lock, self.bounds)

    def labels(self, *values: object) -> HistogramChild:
        return self._child(values)  # type: ignore[return-value]

    def observe(self, value: float, n: int = 1) -> None:
        self.labels().observe(value, n)

    def pull(self, fn: PullFn) -> None:
        raise TypeError(f"histogram {self.name} cannot be pulled; observe into it")

    def _fill(self, m: Metric) -> None:
        assert isinstance(m, HistogramMetricFamily)
        with self._lock:
            children = sorted(self._children.items())
        for values, child in children:
            counts, total, _ = child.snapshot()  # type: ignore[attr-defined]
            acc, cumulative = 0, []
            for le, c in zip(self._les, counts):
                acc += c
                cumulative.append((le, acc))
            m.add_metric(list(values), cumulative, total)


# ---------------------------------------------------------------------------------------------
# the standard process families
# ---------------------------------------------------------------------------------------------
class ProcessCollector(promlib.ProcessCollector):
    """``prometheus_client``'s ``process_*`` families (same names, help and sources), with open
    descriptors counted in O(1).

    The library counts ``process_open_fds`` by listing ``/proc/self/fd``: the agent holds a few
    descriptors per container (about 14,000 at 2,000 containers), and listing them cost each scrape
    about 37 ms, ten times the rest of the page.  Since Linux 6.2 ``stat`` of that directory gives
    the count as its size; older kernels give 0, and there the directory is listed as the library
    does (its own descriptor not counted).  The library's constructor (boot time, clock ticks, page
    size) is used as it is; :meth:`collect` reads ``stat`` and ``limits`` as the library does.
    """

    def collect(self) -> list[Metric]:
        if not self._btime:  # no /proc: the library's rule
            return []
        pid = os.path.join(self._proc, str(self._pid()).strip())
        p = self._prefix
        out: list[Metric] = []
        try:
            with open(os.path.join(pid, "stat"), "rb") as f:
                # the fields after the command (which may itself hold ")"): parts[k - 3] is field k
                parts = f.read().rsplit(b")", 1)[-1].split()
            ticks = float(self._ticks)
            out += [
                GaugeMetricFamily(p + "virtual_memory_bytes", "Virtual memory size in bytes.",
                                  value=float(parts[20])),
                GaugeMetricFamily(p + "resident_memory_bytes", "Resident memory size in bytes.",
                                  value=float(parts[21]) * self._pagesize),
                GaugeMetricFamily(p + "start_time_seconds",
                                  "Start time of the process since unix epoch in seconds.",
                                  value=float(parts[19]) / ticks + self._btime),
                CounterMetricFamily(p + "cpu_seconds_total",
                                    "Total user and system CPU time spent in seconds.",
                                    value=(float(parts[11]) + float(parts[12])) / ticks),
            ]
        except (OSError, IndexError, ValueError):
            pass
        fd_dir = os.path.join(pid, "fd")
        try:
            n = os.stat(fd_dir).st_size if self._proc == "/proc" else 0
            if n <= 0:
                n = len(os.listdir(fd_dir)) - 1
            out.append(GaugeMetricFamily(p + "open_fds", "Number of open file descriptors.", value=float(n)))
            with open(os.path.join(pid, "limits"), "rb") as f:
                for line in f:
                    if line.startswith(b"Max open files"):
                        out.append(GaugeMetricFamily(p + "max_fds",
                                                     "Maximum number of open file descriptors.",
                                                     value=float(line.split()[3])))
                        break
        except (OSError, IndexError, ValueError):
            pass
        return out


# ---------------------------------------------------------------------------------------------
# the registry
# ---------------------------------------------------------------------------------------------
class Registry(CollectorRegistry):
    """The collectors one ``/metrics`` page shows, in registration order: the agent's families and
    any ``prometheus_client`` collector (``ProcessCollector(registry=r)`` registers itself)."""

    def __init__(self) -> None:
        super().__init__(auto_describe=True)
        self._families: dict[str, _Family] = {}
        self._names_lock = threading.Lock()

    def register(self, collector: Collector) -> None:
        if not isinstance(collector, _Family):
            super().register(collector)
            return
        with self._names_lock:
            if collector.name in self._families:
                raise ValueError(f"metric {collector.name} is registered twice")
            super().register(collector)
            self._families[collector.name] = collector

    def get(self, name: str) -> _Family:
        return self._families[name]

    def render(self) -> str:
        """The whole page in the text format 0.0.4."""
        return _text(self).decode()

    def expose(self, accept: str = "") -> tuple[bytes, str]:
        """``(page, content type)`` in the format ``accept`` (an HTTP Accept header) prefers."""
        if wants_openmetrics(accept):
            return _openmetrics(self), OPENMETRICS_CONTENT_TYPE
        return _text(self), CONTENT_TYPE
