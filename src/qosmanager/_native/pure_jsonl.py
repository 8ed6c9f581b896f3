"""Plain-Python twin of the Cython module ``jsonl`` (ext/jsonl.pyx): the audit's write records as JSON lines.

``write_lines(ts, rows, other)``: the UTF-8 bytes of one line per row ``(strategy, target, value, old,
uid, reason)``, each exactly what ``qosmanager.executor.audit._encode`` makes of that write's record
(``executed`` true, no error); ``other`` encodes what is not a ``str``, ``None`` or a finite float ts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

IMPLEMENTATION = "pure"

_str = json.encoder.encode_basestring


def write_lines(ts: list[Any], rows: list[tuple[Any, ...]], other: Callable[[Any], str]) -> bytes:
    if len(ts) != len(rows):
        raise ValueError("one timestamp per row")

    def f(v: Any) -> str:
        return "null" if v is None else _str(v) if type(v) is str else other(v)

    def t(v: Any) -> str:
        return float.__repr__(v) if type(v) is float and math.isfinite(v) else other(v)

    out = []
    for when, row in zip(ts, rows):
        if len(row) != 6:
            raise ValueError("a row is (strategy, target, value, old, uid, reason)")
        s, target, value, old, uid, reason = row
        out.append(f'{{"ts": {t(when)}, "strategy": {f(s)}, "action": "write", "target": {f(target)}, '
                   f'"value": {f(value)}, "old": {f(old)}, "uid": {f(uid)}, "reason": {f(reason)}, '
                   f'"executed": true}}\n')
    return "".join(out).encode()
