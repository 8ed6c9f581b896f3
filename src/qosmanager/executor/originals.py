"""Originals: what a file held before a strategy first changed it, and putting it back.

Decides what is remembered (the first change of a file, or of one entry of a multi-entry file, by a
strategy; never a raw write or a restore) and what a :class:`~qosmanager.executor.types.Restore`
writes back: one file, one entry, or every entry the strategy changed except some.  An original is
forgotten once it is written back (or its file is gone), so a later change records a new one.
"""

from __future__ import annotations

from dataclasses import dataclass

from qosmanager.executor.types import Item, Key, Restore, Write


@dataclass(slots=True)
class Original:
    strategy: str
    value: str  # the file's content, or the entry's own value (``entry_level``)
    write: Write  # the first write that changed it (resource, cgroup, entry, uid)
    entry_level: bool


class Originals:
    def __init__(self) -> None:
        self.table: dict[Key, dict[str, Original]] = {}  # file key -> entry ("" the file) -> original

    def __bool__(self) -> bool:
        return bool(self.table)

    def remember(self, it: Item) -> None:
        """The first change of a file (or entry) by a strategy: keep what it held."""
        w, old = it.write, it.result.old
        if w.raw or w.restore or old is None:
            return
        e = w.entry
        base = (it.key[0], it.key[1], "") if e else it.key
        table = self.table.setdefault(base, {})
        if e in table:
            return
        getter = it.resource.entry_value
        if e and it.resource.multi_entry and getter is not None:
            value = getter(old, e)
            if value is not None:
                table[e] = Original(w.strategy, value, w, True)
        else:
            table[e] = Original(w.strategy, old, w, False)
        if not table:
            del self.table[base]

    def first(self, k: Key, w: Write, old: str | None) -> None:
        """:meth:`remember` of a plain write (no entry, not raw, no restore) to the file ``k`` that held ``old``."""
        if old is None:
            return
        table = self.table.get(k)
        if table is None:
            table = self.table[k] = {}
        if "" not in table:
            table[""] = Original(w.strategy, old, w, False)

    def put_back(self, it: Item) -> None:
        """A restore was written (or its file is gone): forget the original."""
        e = it.write.entry
        base = (it.key[0], it.key[1], "") if e else it.key
        table = self.table.get(base)
        if table is not None and table.pop(e, None) is not None and not table:
            del self.table[base]

    def writes_for(self, r: Restore, file_key: Key, out: list[Write]) -> None:
        """Append the writes that put back what ``r.strategy`` found in the file (or its entries)."""
        table = self.table.get(file_key)
        if not table:
            return
        names = [r.entry] if r.entry is not None else [e for e in table if e not in r.keep]
        for e in names:
            o = table.get(e)
            if o is not None and o.strategy == r.strategy:
                out.append(restore_write(o, r.reason))

    def all_writes(self, strategy: str) -> list[Write]:
        """The writes that put back everything ``strategy`` changed."""
        return [restore_write(o) for table in self.table.values() for o in table.values()
                if o.strategy == strategy]

    def forget(self, prefixes: tuple[str, ...]) -> None:
        for k in [k for k in self.table if k[0].startswith(prefixes)]:
            del self.table[k]


def restore_write(o: Original, reason: str = "") -> Write:
    w = o.write
    return Write(strategy=o.strategy, resource=w.resource, value=o.value, cgroup=w.cgroup, entry=w.entry,
                 reason=reason or f"restore the value {o.strategy} found", uid=w.uid,
                 raw=not o.entry_level, restore=True)
