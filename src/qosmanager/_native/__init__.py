"""The native hot paths and their plain-Python twins.

``StatReader`` / ``NodeReader`` (collector reads) come from the Cython module
``reader``; ``CounterSampler`` (the fast path's counters) from the Cython module ``sampler``;
``write_lines`` (the audit's write records of a batch as JSON lines) from the Cython module ``jsonl``;
``sysio`` (statfs, batch pread/pwrite) wraps the cffi module ``_sysio``.  All are built from
``ext/`` by ``pip install .``.

With ``QOSMANAGER_PURE=1`` the plain-Python reference implementations are used
instead (same API, same numbers, slower).  Without it, a missing extension is an
import error: the agent never silently falls back to the slow path.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

PURE = os.environ.get("QOSMANAGER_PURE", "") == "1"

_reader: ModuleType
_sampler: ModuleType
_jsonl: ModuleType
sysio: ModuleType

if PURE:
    _reader = importlib.import_module("qosmanager._native.pure_reader")
    sysio = importlib.import_module("qosmanager._native.pure_sysio")
    _sampler = importlib.import_module("qosmanager._native.pure_sampler")
    _jsonl = importlib.import_module("qosmanager._native.pure_jsonl")
else:
    try:
        sysio = importlib.import_module("qosmanager._native.sysio")
        _reader = importlib.import_module("qosmanager._native.reader")
        _sampler = importlib.import_module("qosmanager._native.sampler")
        _jsonl = importlib.import_module("qosmanager._native.jsonl")
    except ImportError as exc:  # pragma: no cover - exercised only on broken installs
        raise ImportError(
            "qosmanager's native extensions are not built (" + str(exc) + "). Install the package "
            "with `pip install .` (it compiles ext/ with Cython and cffi), or set QOSMANAGER_PURE=1 "
            "to run the slower plain-Python reference implementations on purpose."
        ) from exc

StatReader: Any = _reader.StatReader
NodeReader: Any = _reader.NodeReader
monotonic_ns: Any = _reader.monotonic_ns
write_lines: Any = _jsonl.write_lines  # the audit's write records as JSON lines (qosmanager.executor.audit)
CounterSampler: Any = _sampler.CounterSampler  # the fast path's counters (qosmanager.framework.fastpath)
SAMPLER_KIND_USAGE_USEC: int = _sampler.KIND_USAGE_USEC
SAMPLER_KIND_NS: int = _sampler.KIND_NS
SAMPLER_WOKE_STOP: int = _sampler.WOKE_STOP
SAMPLER_WOKE_TRIGGER: int = _sampler.WOKE_TRIGGER

IMPLEMENTATION = "pure" if PURE else "native"

# File indices and slot states shared by both reader implementations.
FILE_USAGE = 0
FILE_CPUSTAT = 1
FILE_MEMSTAT = 2
FILE_CPUSET = 3
STATE_FREE = 0
STATE_LIVE = 1
STATE_DEAD = 2
ERR_GARBLED_USAGE = -1
ERR_GARBLED_CPUSTAT = -2
ERR_GARBLED_MEMSTAT = -3
ERR_GARBLED_CPUSET = -4

__all__ = [
    "ERR_GARBLED_CPUSET",
    "ERR_GARBLED_CPUSTAT",
    "ERR_GARBLED_MEMSTAT",
    "ERR_GARBLED_USAGE",
    "FILE_CPUSET",
    "FILE_CPUSTAT",
    "FILE_MEMSTAT",
    "FILE_USAGE",
    "IMPLEMENTATION",
    "PURE",
    "SAMPLER_KIND_NS",
    "SAMPLER_KIND_USAGE_USEC",
    "SAMPLER_WOKE_STOP",
    "SAMPLER_WOKE_TRIGGER",
    "STATE_DEAD",
    "STATE_FREE",
    "STATE_LIVE",
    "CounterSampler",
    "NodeReader",
    "StatReader",
    "monotonic_ns",
    "sysio",
    "write_lines",
]
