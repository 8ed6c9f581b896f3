"""The audit's batch line writer (native ``jsonl`` and its plain-Python twin) writes what ``_encode`` writes.

:meth:`AuditLog.writes <qosmanager.executor.audit.AuditLog.writes>` formats a batch's write records in one
call; every line must be byte for byte the line :func:`qosmanager.executor.audit._encode` makes of the
same record, whatever the strings hold (quotes, backslashes, control characters, non-ASCII), whatever
the timestamp is (a float, an int, NaN), and a field that is not a string goes through the encoder.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qosmanager._native import pure_jsonl
from qosmanager.executor import audit
from qosmanager.executor.audit import AuditLog

native = pytest.importorskip("qosmanager._native.jsonl")

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
field = st.one_of(st.none(), text, st.sampled_from(['"', "\\", "\n\r\t\b\f", "\x00\x1f\x7f", "é☕", ""]))
ts = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**70), 2**70),
               st.sampled_from([1.7e9 + 0.1, 1764920000.123456, 0.0, -0.0, 1e300, 5e-324]))
row = st.tuples(text, text, text, field, field, text)


def expected(stamps: list[Any], rows: list[tuple[Any, ...]]) -> bytes:
    return "".join(audit._encode({"ts": t, "strategy": s, "action": "write", "target": tg, "value": v,
                                  "old": o, "uid": u, "reason": why, "executed": True})
                   for t, (s, tg, v, o, u, why) in zip(stamps, rows)).encode()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(ts, row), max_size=12))
def test_native_twin_and_encoder_agree(pairs: list[tuple[Any, tuple[Any, ...]]]) -> None:
    stamps, rows = [p[0] for p in pairs], [p[1] for p in pairs]
    want = expected(stamps, rows)
    assert pure_jsonl.write_lines(stamps, rows, audit._encode_value) == want
    assert native.write_lines(stamps, rows, audit._encode_value) == want


def test_repeated_timestamps_and_odd_fields() -> None:
    """The native writer remembers the last timestamp's text: equal stamps, then a different one."""
    stamps = [1.5, 1.5, 2.25, 2.25, 1.5, math.inf, 3]
    rows: list[tuple[Any, ...]] = [("s", "t", "1", None, None, "")] * 6 + [("s", "t", 7, ["x"], {"k": 1}, "r")]
    want = expected(stamps, rows)
    assert native.write_lines(stamps, rows, audit._encode_value) == want
    assert pure_jsonl.write_lines(stamps, rows, audit._encode_value) == want
    with pytest.raises(ValueError):
        native.write_lines([1.0], [], audit._encode_value)
    with pytest.raises(ValueError):
        native.write_lines([1.0], [("too", "short")], audit._encode_value)


def test_writes_is_record_for_each_row(tmp_path) -> None:
    """``AuditLog.writes`` leaves the same file, tail and counts as ``record`` once per row; the tail keeps
    only what its length allows."""
    t = [100.0]

    def clock() -> float:
        t[0] += 0.25
        return t[0]

    rows = [("cpuBurst", f"cpu/pod{i}/cpu.cfs_quota_us", str(1000 * i), None if i % 3 else "-1",
             None if i % 2 else f"uid-{i}", 'a "reason"\n') for i in range(10)]
    one, many = AuditLog(str(tmp_path / "one.log"), clock=clock, keep=4), None
    for s, tg, v, o, u, why in rows:
        one.record(strategy=s, action="write", target=tg, value=v, old=o, uid=u, reason=why, executed=True)
    one.flush()
    t[0] = 100.0
    many = AuditLog(str(tmp_path / "many.log"), clock=clock, keep=4)
    many.writes(rows)
    many.flush()
    assert (tmp_path / "one.log").read_bytes() == (tmp_path / "many.log").read_bytes()
    assert list(one.recent) == list(many.recent) and len(many.recent) == 4
    assert one.counts == many.counts
    sunk: list[dict[str, Any]] = []
    t[0] = 100.0
    sinking = AuditLog(str(tmp_path / "sink.log"), clock=clock, keep=4)
    sinking.add_sink(sunk.append)
    sinking.writes(rows)
    assert [r["target"] for r in sunk] == [r[1] for r in rows]
