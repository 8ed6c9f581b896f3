"""Linux CPU lists, the format of ``cpuset.cpus``, ``devices/system/cpu/online`` and friends.

The kernel prints a CPU set as comma-separated ascending ranges (``0-3,8,10-11``) with a
trailing newline, and an empty set as an empty line.  Parsing is strict: anything the
kernel would not print (spaces inside, empty items, reversed ranges, non-ASCII digits)
is a ``ValueError`` naming the offending item, so a garbled file is never mistaken for
a smaller set.
"""

from __future__ import annotations

from collections.abc import Iterable

# Far above any real NR_CPUS (8192 on x86 MAXSMP); it only stops "0-4000000000" from
# allocating billions of ints.
MAX_CPU_ID = 65535


def _cpu_id(token: str, text: str) -> int:
    if not token or not token.isascii() or not token.isdigit():
        raise ValueError(f"bad CPU list {text!r}: {token!r} is not a CPU number")
    value = int(token)
    if value > MAX_CPU_ID:
        raise ValueError(f"bad CPU list {text!r}: CPU {value} is above {MAX_CPU_ID}")
    return value


def parse_cpu_list(text: str) -> list[int]:
    """``"0-3,8,10-11\\n"`` -> ``[0, 1, 2, 3, 8, 10, 11]`` (sorted, unique); ``""`` -> ``[]``."""
    body = text.strip()
    if not body:
        return []
    cpus: set[int] = set()
    for item in body.split(","):
        lo, dash, hi = item.partition("-")
        first = _cpu_id(lo, text)
        last = _cpu_id(hi, text) if dash else first
        if last < first:
            raise ValueError(f"bad CPU list {text!r}: range {item!r} is reversed")
        if first == last:
            cpus.add(first)
        else:
            cpus.update(range(first, last + 1))
    return sorted(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """``[0, 4, 5]`` -> ``"0,4-5"``; ``[]`` -> ``""`` (no trailing newline)."""
    ids = sorted(set(cpus))
    if not ids:
        return ""
    if ids[0] < 0:
        raise ValueError(f"CPU ids must be non-negative, got {ids[0]}")
    parts: list[str] = []
    start = prev = ids[0]
    for cpu in ids[1:]:
        if cpu == prev + 1:
            prev = cpu
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def cpu_lists_equal(a: str, b: str) -> bool:
    """Whether two CPU lists name the same set (``"0-3"`` equals ``"0,1,2,3"``)."""
    return parse_cpu_list(a) == parse_cpu_list(b)
