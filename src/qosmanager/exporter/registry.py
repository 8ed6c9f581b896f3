"""A tiny Prometheus registry: counters, gauges and histograms with label sets, rendered in the
text exposition format 0.0.4.

Why not ``prometheus_client``: the format is a few dozen lines, the agent's memory budget is
tight, and a dependency would be one more thing to ship on every node.

Threads: the agent's loop updates values (``inc``, ``set``, ``observe``) while the HTTP thread
renders them.  Each family has one lock, taken for a single update and, during a scrape, just long
enough to copy the family's children; a scrape therefore never sees a dict change size under it,
never sees a histogram's count without its sum, and never holds the agent up for longer than a copy.

A family may instead be *pulled*: ``pull(fn)`` makes it call ``fn()`` at scrape time for
``{label values: value}`` (or a bare number for an unlabelled family).  Pulled values come from
counters the agent keeps anyway (``ExecutorStats``, ``CollectorStats``), so the agent's loop
pays nothing for them.  ``fn`` runs on the HTTP thread and must only read scalars or take
snapshots; a failing ``fn`` costs its family's samples in that scrape, never the scrape.
"""

from __future__ import annotations

import bisect
import logging
import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

LabelValues = tuple[str, ...]
PullFn = Callable[[], "Mapping[LabelValues, float] | float | None"]


# ---------------------------------------------------------------------------------------------
# the text format
# ---------------------------------------------------------------------------------------------
def escape_label_value(value: str) -> str:
    """Label values escape backslash, double quote and line feed (in that order: ``\\`` first)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """HELP text escapes backslash and line feed only (a quote is literal there)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """A sample value as Go's ParseFloat reads it: ``+Inf``, ``-Inf``, ``NaN``, integers bare."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    v = float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    return repr(v)


def _labels_text(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{escape_label_value(v)}"' for n, v in zip(names, values)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """``start * factor**i`` for ``i < count``, rounded to 12 significant digits so the ``le``
    labels read ``0.16`` rather than ``0.16000000000000003``."""
    if start <= 0 or factor <= 1 or count < 1:
        raise ValueError("exponential buckets need start > 0, factor > 1, count >= 1; "
                         f"got {start}, {factor}, {count}")
    return tuple(float(f"{start * factor ** i:.12g}") for i in range(count))


# ---------------------------------------------------------------------------------------------
# families
# ---------------------------------------------------------------------------------------------
class _Family:
    kind = "untyped"

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

    # -- rendering ---------------------------------------------------------------------------
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

    def render(self, out: list[str]) -> None:
        out.append(f"# HELP {self.name} {escape_help(self.documentation)}")
        out.append(f"# TYPE {self.name} {self.kind}")
        self._render_samples(out)

    def _render_samples(self, out: list[str]) -> None:
        if self._pull is not None:
            for values, v in self._pulled():
                out.append(f"{self.name}{_labels_text(self.labelnames, values)} {format_value(v)}")
            return
        with self._lock:
            items = sorted((k, c.value) for k, c in self._children.items())  # type: ignore[attr-defined]
        for values, v in items:
            out.append(f"{self.name}{_labels_text(self.labelnames, values)} {format_value(v)}")


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
    """A value that only goes up (``_total`` by convention)."""

    kind = "counter"

    def _new_child(self) -> CounterChild:
        return CounterChild(self._lock)

    def labels(self, *values: object) -> CounterChild:
        return self._child(values)  # type: ignore[return-value]

    def inc(self, amount: float = 1.0) -> None:
        self.labels().inc(amount)


class Gauge(_Family):
    """A value that goes up and down."""

    kind = "gauge"

    def _new_child(self) -> GaugeChild:
        return GaugeChild(self._lock)

    def labels(self, *values: object) -> GaugeChild:
        return self._child(values)  # type: ignore[return-value]

    def set(self, value: float) -> None:
        self.labels().set(value)


class HistogramChild:
    """Bucket counts (per bucket, made cumulative when rendered), sum and count of one label set."""

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
        super().__init__(name, documentation, labelnames, registry)

    def _new_child(self) -> HistogramChild:
        return HistogramChild(self._lock, self.bounds)

    def labels(self, *values: object) -> HistogramChild:
        return self._child(values)  # type: ignore[return-value]

    def observe(self, value: float, n: int = 1) -> None:
        self.labels().observe(value, n)

    def pull(self, fn: PullFn) -> None:
        raise TypeError(f"histogram {self.name} cannot be pulled; observe into it")

    def _render_samples(self, out: list[str]) -> None:
        with self._lock:
            children = sorted(self._children.items())
        les = [f'le="{format_value(b)}"' for b in self.bounds] + ['le="+Inf"']
        names = self.labelnames
        for values, child in children:
            counts, total, count = child.snapshot()  # type: ignore[attr-defined]
            acc = 0
            for le, c in zip(les, counts):
                acc += c
                out.append(f"{self.name}_bucket{_labels_text(names, values, le)} {acc}")
            lt = _labels_text(names, values)
            out.append(f"{self.name}_sum{lt} {format_value(total)}")
            out.append(f"{self.name}_count{lt} {count}")


# ---------------------------------------------------------------------------------------------
# the registry
# ---------------------------------------------------------------------------------------------
class Registry:
    """The families one ``/metrics`` page shows, in registration order."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}
        self._lock = threading.Lock()

    def register(self, family: _Family) -> None:
        with self._lock:
            if family.name in self._families:
                raise ValueError(f"metric {family.name} is registered twice")
            self._families[family.name] = family

    def get(self, name: str) -> _Family:
        return self._families[name]

    def render(self) -> str:
        """The whole page in the text format (every family, ending with a line feed)."""
        with self._lock:
            families = list(self._families.values())
        out: list[str] = []
        for fam in families:
            fam.render(out)
        return "\n".join(out) + "\n" if out else ""
