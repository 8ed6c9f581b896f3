"""The parts of ``prometheus_client`` the exporter uses, loaded without the package's ``__init__``.

``import prometheus_client`` runs its ``__init__``, which imports its push-gateway, WSGI and
threaded-server helpers and with them ``ssl``, ``urllib.request``, ``http.server``, ``wsgiref``
and the ``email`` package: about 9 MiB of resident memory (OpenSSL's libcrypto alone 3.4 MiB) in
an agent whose whole budget at 2,000 containers is 60 MiB, for code it never runs.  The exporter
needs the registry, the metric families, the OpenMetrics encoder and the standard process, GC and
platform collectors -- modules that import none of that.  :func:`_load` imports just those
submodules under an empty package object and then takes that object out of ``sys.modules``, so a
later ``import prometheus_client`` (a test, a plugin) runs the real ``__init__``, which finds and
reuses the same submodules (one ``CollectorRegistry`` class in the process).  When the package is
already imported, it is used as it is.

The text format 0.0.4 encoder lives in the skipped ``exposition`` module, so :func:`text_latest`
writes it here: the same page as ``prometheus_client.exposition.generate_latest`` for metric and
label names in the legacy character set (the registry refuses others), which a test checks.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

_PACKAGE = "prometheus_client"
_PARTS = ("registry", "metrics_core", "utils", "openmetrics.exposition", "process_collector",
          "gc_collector", "platform_collector")


def _load() -> dict[str, Any]:
    if _PACKAGE not in sys.modules:
        spec = importlib.util.find_spec(_PACKAGE)
        if spec is not None and spec.submodule_search_locations is not None:
            shell = importlib.util.module_from_spec(spec)  # the package, its __init__ not run
            sys.modules[_PACKAGE] = shell
            try:
                for part in _PARTS:
                    importlib.import_module(f"{_PACKAGE}.{part}")
            finally:
                if sys.modules.get(_PACKAGE) is shell:
                    del sys.modules[_PACKAGE]
    return {part: importlib.import_module(f"{_PACKAGE}.{part}") for part in _PARTS}


if TYPE_CHECKING:
    from prometheus_client.gc_collector import GCCollector
    from prometheus_client.metrics_core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
    from prometheus_client.platform_collector import PlatformCollector
    from prometheus_client.process_collector import ProcessCollector
    from prometheus_client.registry import Collector, CollectorRegistry
    from prometheus_client.utils import floatToGoString
else:
    _m = _load()
    CollectorRegistry = _m["registry"].CollectorRegistry
    Collector = _m["registry"].Collector
    Metric = _m["metrics_core"].Metric
    CounterMetricFamily = _m["metrics_core"].CounterMetricFamily
    GaugeMetricFamily = _m["metrics_core"].GaugeMetricFamily
    HistogramMetricFamily = _m["metrics_core"].HistogramMetricFamily
    floatToGoString = _m["utils"].floatToGoString
    openmetrics_latest = _m["openmetrics.exposition"].generate_latest
    ProcessCollector = _m["process_collector"].ProcessCollector
    GCCollector = _m["gc_collector"].GCCollector
    PlatformCollector = _m["platform_collector"].PlatformCollector
    del _m

__all__ = ["CONTENT_TYPE_PLAIN_0_0_4", "Collector", "CollectorRegistry", "CounterMetricFamily", "GCCollector",
           "GaugeMetricFamily", "HistogramMetricFamily", "Metric", "PlatformCollector", "ProcessCollector",
           "floatToGoString", "openmetrics_latest", "text_latest"]

CONTENT_TYPE_PLAIN_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"
# OpenMetrics types the text format 0.0.4 names otherwise
_TEXT_TYPES = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped"}
_OPENMETRICS_ONLY = ("_created", "_gsum", "_gcount")  # samples the text format shows as gauges of their own


def _label_value(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _sample_line(s: Any) -> str:
    labels = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(s.labels.items()))
    ts = f" {int(float(s.timestamp) * 1000):d}" if s.timestamp is not None else ""
    return f"{s.name}{{{labels}}} {floatToGoString(s.value)}{ts}\n" if labels else \
        f"{s.name} {floatToGoString(s.value)}{ts}\n"


def text_latest(registry: Any) -> bytes:
    """The registry's page in the text format 0.0.4 (UTF-8)."""
    out: list[str] = []
    for m in registry.collect():
        name = m.name + ("_total" if m.type == "counter" else "_info" if m.type == "info" else "")
        out.append(f"# HELP {name} {_help(m.documentation)}\n# TYPE {name} {_TEXT_TYPES.get(m.type, m.type)}\n")
        extra: dict[str, list[str]] = {}
        for s in m.samples:
            suffix = next((x for x in _OPENMETRICS_ONLY if s.name == m.name + x), None)
            if suffix is None:
                out.append(_sample_line(s))
            else:
                extra.setdefault(suffix, []).append(_sample_line(s))
        for suffix, lines in sorted(extra.items()):
            out.append(f"# HELP {m.name}{suffix} {_help(m.documentation)}\n# TYPE {m.name}{suffix} gauge\n")
            out.extend(lines)
    return "".join(out).encode("utf-8")
