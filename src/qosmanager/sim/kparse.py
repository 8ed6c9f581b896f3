"""The kernel's parsers and the fake tree's file helpers, shared by the fake kernel's rooms.

Map of the file:

* :class:`KernelError`: a write or mkdir the kernel refuses, with its errno;
* the kernel's parsers, as strict as the C they follow: ``kstrtoull``/``kstrtoll``/``kstrtoint``,
  ``memparse_pages`` (``memparse`` to pages, with the "max" token), ``cpulist_parse``;
* file helpers for the fake tree: read, write whole, read with a default, an int file, a flat
  ``key value`` file (parse it, bump one key).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Sequence

PAGE_SIZE = 4096
PAGE_COUNTER_MAX = (2**63 - 1) // PAGE_SIZE
U64_MAX = 2**64 - 1
INT32_MAX = 2**31 - 1
WEIGHT_MIN, WEIGHT_MAX = 1, 10_000


class KernelError(Exception):
    """A write or mkdir the kernel refuses; ``errno`` is what the system call returns."""

    def __init__(self, err: int, why: str = "") -> None:
        super().__init__(f"{errno.errorcode.get(err, str(err))}: {why or os.strerror(err)}")
        self.errno = err


def _kv(keys: Sequence[str], values: dict[str, int] | None = None) -> str:
    values = values or {}
    return "".join(f"{k} {values.get(k, 0)}\n" for k in keys)


# ----------------------------------------------------------------------------------------------
# the kernel's parsers
# ----------------------------------------------------------------------------------------------
def _strip_newline(text: str) -> str:
    """kstrto*() accept one trailing newline and nothing else around the number."""
    return text[:-1] if text.endswith("\n") else text


def kstrtoull(text: str, base: int = 0) -> int:
    """The kernel's kstrtoull: a leading '+', base 0 (0x hex, 0 octal), one trailing newline."""
    s = _strip_newline(text)
    if s.startswith("+"):
        s = s[1:]
    if not s or not s[0].isalnum():
        raise KernelError(errno.EINVAL)
    try:
        if base == 0:
            if s[:2].lower() == "0x":
                v = int(s[2:], 16) if s[2:] and re.fullmatch(r"[0-9a-fA-F]+", s[2:]) else -1
            elif s.startswith("0") and len(s) > 1:
                v = int(s[1:], 8) if re.fullmatch(r"[0-7]+", s[1:]) else -1
            else:
                v = int(s, 10) if s.isascii() and s.isdigit() else -1
        else:
            v = int(s, base) if re.fullmatch(r"[0-9a-fA-F]+" if base == 16 else r"[0-9]+", s) else -1
    except ValueError:
        v = -1
    if v < 0:
        raise KernelError(errno.EINVAL)
    if v > U64_MAX:
        raise KernelError(errno.ERANGE)
    return v


def kstrtoll(text: str, base: int = 0) -> int:
    s = _strip_newline(text)
    if s.startswith("-"):
        v = -kstrtoull(s[1:], base)
        if v < -(2**63):
            raise KernelError(errno.ERANGE)
        return v
    v = kstrtoull(s, base)
    if v > 2**63 - 1:
        raise KernelError(errno.ERANGE)
    return v


def kstrtoint(text: str, base: int = 0) -> int:
    v = kstrtoll(text, base)
    if not -(2**31) <= v <= INT32_MAX:
        raise KernelError(errno.ERANGE)
    return v


_MEMPARSE = re.compile(r"(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)?([kKmMgGtTpPeE]?)")


def memparse_pages(text: str, max_token: str) -> int:
    """page_counter_memparse on a stripped buffer: ``max_token`` or bytes with an optional K/M/G/T/P/E
    suffix, in pages (rounded down); anything after the number is EINVAL.  An empty buffer is 0, as
    simple_strtoull makes it."""
    s = text.strip()
    if s == max_token:
        return PAGE_COUNTER_MAX
    m = _MEMPARSE.fullmatch(s)
    if m is None:
        raise KernelError(errno.EINVAL)
    num, suffix = m.group(1) or "0", m.group(2).lower()
    v = int(num, 16) if num[:2].lower() == "0x" else int(num, 8) if num.startswith("0") else int(num)
    v = min(v, U64_MAX)  # simple_strtoull does not report overflow
    v <<= {"": 0, "k": 10, "m": 20, "g": 30, "t": 40, "p": 50, "e": 60}[suffix]
    return min((v & U64_MAX) // PAGE_SIZE, PAGE_COUNTER_MAX)


def cpulist_parse(text: str, nbits: int) -> set[int]:
    """bitmap_parselist: "0-3,8,10-15:2/4", empty means none; a CPU beyond ``nbits`` is ERANGE."""
    s = text.strip()
    out: set[int] = set()
    if not s:
        return out
    for part in s.split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+)/(\d+))?)?", part.strip())
        if m is None:
            raise KernelError(errno.EINVAL)
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise KernelError(errno.EINVAL)
        used, grp = (int(m.group(3)), int(m.group(4))) if m.group(3) is not None else (1, 1)
        if used == 0 or grp == 0 or used > grp:
            raise KernelError(errno.EINVAL)
        if hi >= nbits:
            raise KernelError(errno.ERANGE)
        out.update(c for c in range(lo, hi + 1) if (c - lo) % grp < used)
    return out


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _put(path: str, body: str) -> None:
    with open(path, "w") as f:
        f.write(body)


def _read_or(path: str, default: str) -> str:
    try:
        return _read(path)
    except OSError:
        return default


def _int_file(path: str) -> int:
    try:
        return int(_read(path).strip() or 0)
    except (OSError, ValueError):
        return 0


def _parse_stat(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for ln in text.splitlines():
        k, _, v = ln.partition(" ")
        if k and v.strip().lstrip("-").isdigit():
            out[k] = int(v)
    return out


def _bump(path: str, key: str, n: int) -> None:
    """Add ``n`` to ``key`` of a flat-keyed file (memory.events) that exists."""
    if not os.path.exists(path):
        return
    values = _parse_stat(_read_or(path, ""))
    if key not in values:
        return
    values[key] += n
    _put(path, "".join(f"{k} {v}\n" for k, v in values.items()))
