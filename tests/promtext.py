"""Readers of what ``/metrics`` returns, for the exporter tests.

:func:`parse` reads the text exposition format 0.0.4 twice: with a strict reader written from the
format's description (not from the exporter's code) so the tests can catch the exporter getting it
wrong (HELP and TYPE before a family's samples, valid names, the three label value escapes and no
others, one sample per series, values Go's ParseFloat accepts, counters never negative, and for
histograms ascending ``le`` bounds ending in ``+Inf`` with cumulative counts, ``+Inf`` equal to
``_count``, and a ``_sum`` per label set), and with ``prometheus_client``'s own parser, which must
read the same families, types, help texts and samples.  :func:`parse_openmetrics` reads
OpenMetrics with ``prometheus_client``'s OpenMetrics parser (strict: ``# EOF``, counter
``_total`` samples, histogram shape) and checks histograms the same way.  Both give families keyed
by the name their samples carry (a counter's ``..._total``), so one test reads either format.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.openmetrics.parser import text_string_to_metric_families as _openmetrics_families
from prometheus_client.parser import text_string_to_metric_families as _text_families

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


class FormatError(AssertionError):
    pass


Labels = tuple[tuple[str, str], ...]


@dataclass
class Family:
    name: str
    help: str | None = None
    type: str | None = None
    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)

    def value(self, **labels: str) -> float:
        """The one sample of this (non-histogram) family with exactly these labels."""
        return self.samples[(self.name, tuple(sorted(labels.items())))]

    def series(self, suffix: str = "") -> dict[Labels, float]:
        return {lb: v for (n, lb), v in self.samples.items() if n == self.name + suffix}


def parse_value(text: str) -> float:
    if text in ("+Inf", "Inf"):
        return math.inf
    if text == "-Inf":
        return -math.inf
    if text == "NaN":
        return math.nan
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text):
        raise FormatError(f"bad sample value {text!r}")
    return float(text)


def _labels(text: str, line: str) -> tuple[Labels, str]:
    """Parse ``{a="x",b="y"}`` at the start of ``text``; returns the labels and the rest."""
    assert text.startswith("{")
    i, out = 1, []
    while True:
        if text[i] == "}":
            i += 1
            break
        m = LABEL.match(text, i)
        if not m:
            raise FormatError(f"bad label name in {line!r}")
        name = m.group()
        i = m.end()
        if text[i:i + 2] != '="':
            raise FormatError(f"expected =\" after label {name} in {line!r}")
        i += 2
        value = []
        while True:
            c = text[i]
            if c == "\\":
                nxt = text[i + 1]
                if nxt not in '\\"n':
                    raise FormatError(f"invalid escape \\{nxt} in {line!r}")
                value.append({"\\": "\\", '"': '"', "n": "\n"}[nxt])
                i += 2
            elif c == '"':
                i += 1
                break
            elif c == "\n":
                raise FormatError(f"raw line feed in a label value: {line!r}")
            else:
                value.append(c)
                i += 1
        out.append((name, "".join(value)))
        if text[i] == ",":
            i += 1
        elif text[i] != "}":
            raise FormatError(f"expected , or }} in {line!r}")
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise FormatError(f"duplicate label names in {line!r}")
    return tuple(sorted(out)), text[i:]


def _unescape_help(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in "\\n":
            out.append("\\" if text[i + 1] == "\\" else "\n")
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def parse(text: str) -> dict[str, Family]:
    """The text format 0.0.4, read strictly and by ``prometheus_client``, which must agree."""
    families = parse_strict(text)
    library = _from_library(_text_families(text))
    if _comparable(families) != _comparable(library):
        raise FormatError(f"prometheus_client reads the page differently:\n{_comparable(families)}\n"
                          f"{_comparable(library)}")
    return families


def parse_openmetrics(text: str) -> dict[str, Family]:
    """OpenMetrics 1.0.0 as ``prometheus_client``'s OpenMetrics parser reads it."""
    try:
        families = _from_library(_openmetrics_families(text))
    except ValueError as e:
        raise FormatError(f"not OpenMetrics: {e}") from e
    for fam in families.values():
        if fam.type == "histogram":
            check_histogram(fam)
    return families


def _from_library(metrics: Iterable[Any]) -> dict[str, Family]:
    out: dict[str, Family] = {}
    for m in metrics:
        # prometheus_client names a counter family without its _total; its samples carry it
        name = m.name + "_total" if m.type == "counter" else m.name
        if name in out:
            raise FormatError(f"family {name} is split")
        fam = out[name] = Family(name, m.documentation, "untyped" if m.type == "unknown" else m.type)
        for smp in m.samples:
            key = (smp.name, tuple(sorted(smp.labels.items())))
            if key in fam.samples:
                raise FormatError(f"duplicate series {key}")
            fam.samples[key] = smp.value
    return out


def _comparable(families: dict[str, Family]) -> dict[str, Any]:
    return {name: (f.help, f.type, {k: "NaN" if math.isnan(v) else v for k, v in f.samples.items()})
            for name, f in families.items()}


def parse_strict(text: str) -> dict[str, Family]:
    if text and not text.endswith("\n"):
        raise FormatError("the exposition must end with a line feed")
    families: dict[str, Family] = {}
    current: Family | None = None
    for line in text.split("\n")[:-1]:
        if not line:
            raise FormatError("empty line")
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if not NAME.fullmatch(name):
                    raise FormatError(f"bad metric name {name!r}")
                fam = families.get(name)
                if fam is None:
                    fam = families[name] = Family(name)
                elif fam is not current:
                    raise FormatError(f"family {name} is split")
                if fam.samples:
                    raise FormatError(f"{parts[1]} of {name} after its samples")
                if parts[1] == "HELP":
                    if fam.help is not None:
                        raise FormatError(f"two HELP lines for {name}")
                    fam.help = _unescape_help(parts[3] if len(parts) > 3 else "")
                else:
                    if fam.type is not None:
                        raise FormatError(f"two TYPE lines for {name}")
                    if len(parts) != 4 or parts[3] not in TYPES:
                        raise FormatError(f"bad TYPE line {line!r}")
                    fam.type = parts[3]
                current = fam
            continue
        m = NAME.match(line)
        if not m:
            raise FormatError(f"bad sample line {line!r}")
        name, rest = m.group(), line[m.end():]
        labels: Labels = ()
        if rest.startswith("{"):
            labels, rest = _labels(rest, line)
        if not rest.startswith(" "):
            raise FormatError(f"expected a space before the value in {line!r}")
        fields = rest[1:].split(" ")
        if len(fields) not in (1, 2):
            raise FormatError(f"bad value/timestamp in {line!r}")
        value = parse_value(fields[0])
        if current is None:
            raise FormatError(f"sample before any TYPE: {line!r}")
        allowed = {current.name}
        if current.type == "histogram":
            allowed = {current.name + s for s in ("_bucket", "_sum", "_count")}
        if name not in allowed:
            raise FormatError(f"sample {name} outside its family ({current.name})")
        key = (name, labels)
        if key in current.samples:
            raise FormatError(f"duplicate series {line!r}")
        current.samples[key] = value
    for fam in families.values():
        if fam.type is None or fam.help is None:
            raise FormatError(f"{fam.name} lacks HELP or TYPE")
        if fam.type == "counter":
            bad = [v for v in fam.samples.values() if math.isnan(v) or v < 0]
            if bad:
                raise FormatError(f"counter {fam.name} has values {bad}")
        if fam.type == "histogram":
            check_histogram(fam)
    return families


def check_histogram(fam: Family) -> None:
    buckets: dict[Labels, list[tuple[float, float]]] = {}
    for lb, v in fam.series("_bucket").items():
        le = dict(lb).get("le")
        if le is None:
            raise FormatError(f"{fam.name}_bucket without le")
        rest = tuple(x for x in lb if x[0] != "le")
        buckets.setdefault(rest, []).append((parse_value(le), v))
    sums, counts = fam.series("_sum"), fam.series("_count")
    if set(buckets) != set(sums) or set(buckets) != set(counts):
        raise FormatError(f"{fam.name}: _bucket, _sum and _count label sets differ")
    for rest, bs in buckets.items():
        bs.sort()
        if bs[-1][0] != math.inf:
            raise FormatError(f"{fam.name}{dict(rest)}: no +Inf bucket")
        vals = [v for _, v in bs]
        if any(b < a for a, b in itertools.pairwise(vals)):
            raise FormatError(f"{fam.name}{dict(rest)}: bucket counts are not cumulative: {vals}")
        if vals[-1] != counts[rest]:
            raise FormatError(f"{fam.name}{dict(rest)}: +Inf bucket {vals[-1]} != _count {counts[rest]}")


def buckets(fam: Family, **labels: str) -> list[tuple[float, float]]:
    """``[(le, cumulative count), ...]`` of one label set, ascending."""
    want = tuple(sorted(labels.items()))
    out = []
    for lb, v in fam.series("_bucket").items():
        if tuple(x for x in lb if x[0] != "le") == want:
            out.append((parse_value(dict(lb)["le"]), v))
    return sorted(out)
