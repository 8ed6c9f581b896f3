"""Logging: the command line's set-up (text or JSON lines) and a limiter for repeated failures.

``--log-format json`` prints one JSON object per line, for log shippers: ``ts`` (unix seconds),
``level``, ``logger``, ``msg`` and every extra field the call passed (``log.info(..., extra={...})``);
a traceback goes into ``exc``.

:class:`RepeatLimiter` keeps a failure that repeats every tick (a write the kernel refuses, a
garbled ``/proc/stat``) from flooding the log and the audit: the first occurrence is reported in
full, the repetitions only as a count at most once per interval ("failed 240 more times in the
last 5 min"), and a recovery with the count not yet reported.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, TextIO

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_FORMATS = ("text", "json")

# attributes every LogRecord has: whatever else a record carries came from ``extra``
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime",
                                                                                   "taskName"}


def _plain(v: Any) -> Any:
    """JSON has no NaN or infinity: such floats are written as strings."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_plain(x) for x in v]
    return v


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, msg, the extra fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        obj: dict[str, Any] = {"ts": round(record.created, 6), "level": record.levelname,
                               "logger": record.name, "msg": record.getMessage()}
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_") and key not in obj:
                obj[key] = value
        if record.exc_info:
            obj["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            obj["stack"] = self.formatStack(record.stack_info)
        try:
            return json.dumps(obj, default=str, allow_nan=False)
        except ValueError:  # a non-finite float somewhere in the extra fields
            return json.dumps(_plain(obj), default=str)


def shown(value: object, limit: int = 200) -> str:
    """Text from outside (a pod's name, a NodeSLO key, a host application's name) as a log line may
    hold it: control characters and other unprintable ones spelt out as ``repr`` does (an ANSI escape
    or a newline cannot forge or hide a line), at most ``limit`` characters (``...`` marks a cut)."""
    text = value if isinstance(value, str) else str(value)
    if not text.isprintable():
        text = repr(text)[1:-1]
    return text if len(text) <= limit else text[:max(limit - 3, 0)] + "..."


_handler: logging.Handler | None = None


def setup_logging(level: int, fmt: str = "text", stream: TextIO | None = None) -> logging.Handler:
    """Send every logger's records at ``level`` and above to ``stream`` (stderr) as ``fmt``.

    Replaces the handler an earlier call installed (``main`` may run more than once in a
    process) and leaves any other handler alone."""
    global _handler
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root.addHandler(handler)
    root.setLevel(level)
    _handler = handler
    return handler


# ----------------------------------------------------------------------------------------------
# repeated failures
# ----------------------------------------------------------------------------------------------
def span_text(seconds: float) -> str:
    """``45 s``, ``5 min``, ``2 h``: how long a window of repetitions lasted."""
    if seconds < 90:
        return f"{max(seconds, 0.0):.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


@dataclass(frozen=True, slots=True)
class Repeat:
    """What to report about one failure now.

    ``first``: the failure is new (or differs from the one before): report it in full.
    Otherwise ``count`` more occurrences happened over the last ``seconds``."""

    first: bool
    count: int = 0
    seconds: float = 0.0

    def times(self) -> str:
        """``240 more times in the last 5 min``"""
        return f"{self.count} more time{'' if self.count == 1 else 's'} in the last {span_text(self.seconds)}"


@dataclass(slots=True)
class _Entry:
    signature: Hashable
    reported_at: float  # when the failure was last reported (in full or as a count)
    count: int = 0  # occurrences since then
    info: Any = None  # the latest occurrence's details (for due())


class RepeatLimiter:
    """Keyed rate limit for a failure that repeats (see the module docstring).

    ``key`` says *where* it fails (a file, a reader); ``signature`` says *what* fails (the errno,
    the error class): the same key with another signature is a new failure and reported in full.
    At most ``max_keys`` failures are tracked; the oldest are forgotten beyond that.  Thread-safe.
    """

    def __init__(self, interval: float = 300.0, *, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = 10_000) -> None:
        if interval <= 0:
            raise ValueError("the interval must be positive")
        self.interval = interval
        self.clock = clock
        self.max_keys = max_keys
        self._entries: dict[Hashable, _Entry] = {}
        self._lock = threading.Lock()
        self.suppressed = 0  # occurrences not reported one by one, in total

    def hit(self, key: Hashable, signature: Hashable = None, info: Any = None,
            now: float | None = None) -> Repeat | None:
        """One occurrence: a :class:`Repeat` to report now, or None (counted, said later)."""
        t = self.clock() if now is None else now
        with self._lock:
            e = self._entries.get(key)
            if e is None or e.signature != signature:
                if e is None and len(self._entries) >= self.max_keys:
                    del self._entries[next(iter(self._entries))]
                self._entries[key] = _Entry(signature, t, info=info)
                return Repeat(True)
            e.count += 1
            e.info = info
            self.suppressed += 1
            if t - e.reported_at < self.interval:
                return None
            rep = Repeat(False, e.count, t - e.reported_at)
            e.count, e.reported_at = 0, t
            return rep

    def clear(self, key: Hashable, now: float | None = None) -> Repeat | None:
        """The failure at ``key`` is over: the count not reported yet, if any."""
        with self._lock:
            e = self._entries.pop(key, None)
        if e is None or e.count == 0:
            return None
        t = self.clock() if now is None else now
        return Repeat(False, e.count, t - e.reported_at)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def due(self, now: float | None = None) -> list[tuple[Hashable, Any, Repeat]]:
        """Counts whose interval has passed although the failure did not happen again since:
        ``(key, latest info, Repeat)`` each, so a failure that stopped is still summed up."""
        t = self.clock() if now is None else now
        out = []
        with self._lock:
            for key, e in self._entries.items():
                if e.count and t - e.reported_at >= self.interval:
                    out.append((key, e.info, Repeat(False, e.count, t - e.reported_at)))
                    e.count, e.reported_at = 0, t
        return out

    def forget(self, match: Callable[[Hashable], bool]) -> None:
        """Drop every failure whose key ``match``\\ es (its object went away)."""
        with self._lock:
            for key in [k for k in self._entries if match(k)]:
                del self._entries[key]


__all__ = ["LOG_FORMATS", "TEXT_FORMAT", "JsonFormatter", "Repeat", "RepeatLimiter", "setup_logging", "shown",
           "span_text"]
