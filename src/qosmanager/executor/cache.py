"""The write cache: which writes cost no syscall at all.

Decides that a value this agent wrote (or found) less than ``force_seconds`` ago is still there: the
same write again is answered ``"cached"`` without a read, and a changed value is compared against
what the file held after the last write instead of a fresh read.  Older entries are re-checked
(read, compared, corrected), so an outside change is found within ``force_seconds``; entries
unused for ``ttl`` are dropped.  Failed writes are never cached.  The pipeline reads
:attr:`WriteCache.entries` directly in its hot loops (one dict lookup per write).
"""

from __future__ import annotations

from dataclasses import dataclass

from qosmanager.executor.types import Key


@dataclass(slots=True)
class CacheEntry:
    value: str  # canonical value written
    ts: float  # when it was written or last confirmed
    content: str | None = None  # what the file held afterwards (saves a read on the next change)
    # ``content`` is the file's exact text, read while it held ``value`` (under a dry run: when ``value``
    # was decided), so a byte compare of the file against it re-checks the file (see Executor._verify)
    exact: bool = False


class WriteCache:
    def __init__(self, force_seconds: float, ttl: float) -> None:
        self.force_seconds = force_seconds
        self.ttl = ttl
        self.entries: dict[Key, CacheEntry] = {}

    def fresh(self, key: Key, value: str, now: float) -> CacheEntry | None:
        """The entry vouching that ``value`` is in the file now, or None (a syscall is needed)."""
        entry = self.entries.get(key)
        if entry is not None and entry.value == value and now - entry.ts < self.force_seconds:
            return entry
        return None

    def put(self, key: Key, value: str, now: float, content: str | None = None, exact: bool = False) -> None:
        self.entries[key] = CacheEntry(value, now, content, exact)

    def gc(self, now: float) -> None:
        for k in [k for k, e in self.entries.items() if now - e.ts > self.ttl]:
            del self.entries[k]

    def forget(self, prefixes: tuple[str, ...]) -> None:
        for k in [k for k in self.entries if k[0].startswith(prefixes)]:
            del self.entries[k]
