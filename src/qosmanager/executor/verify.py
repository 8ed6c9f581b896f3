"""The re-check of a plan at the end of its force window, in one native compare.

Decides which of a plan's writes need the batch pipeline when its window ends (see :mod:`.plans`).  A
file whose write-cache entry holds the value its write wants and the file's exact text as last read
(:attr:`~qosmanager.executor.cache.CacheEntry.exact`: read while the file held that value; under a dry
run, read when that value was decided) is compared byte for byte with that text, every such file in
one native call (``sysio.pread_compare``) through the descriptors the executor keeps.  A file that
still holds it is as it was at its last check: its entry and claim are renewed, nothing is written or
audited (under a dry run the decision stands: the file is as it was when it was decided and audited).
The others go through the pipeline, to be read, compared, corrected and audited as any re-checked
write: a file that differs (another writer reset it, its cgroup went away), one the write cache cannot
vouch for (not read since it was written, a new value, an entry gone), one without a kept descriptor,
one in a write conflict, one another strategy holds a live claim on, one entry of a file of several.

What is compared is made ready once per plan (:class:`Prepared`: the descriptors and the expected
texts end to end) and kept on the plan's state while it holds: the same list of writes, every entry
still the one it was made from, no descriptor of the table closed since (a closed descriptor's number
may name another file by now).  A re-check then costs the reads and a pass that renews the entries.

A plan's file just written is read back once (:meth:`Verifier.read_back`): the text the kernel shows
for the value written (a cpuset list in its own form, a trailing newline) becomes its entry's exact
content, so the next window's re-check compares it too.

What it saves is the pipeline's work per file (locating, claiming, rendering, comparing, auditing):
the read itself stays, so a reset by another writer is still found within ``force_seconds``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from qosmanager._native import sysio
from qosmanager.executor.cache import CacheEntry, WriteCache
from qosmanager.executor.conflicts import Fights
from qosmanager.executor.files import FileTable
from qosmanager.executor.locate import Locator
from qosmanager.executor.ownership import Claim, Claims
from qosmanager.executor.types import ExecutorStats, Item, Key, PlanState, Write


@dataclass(slots=True, eq=False)
class Prepared:
    """A plan's writes made ready for the compare."""

    writes: list[Write]  # the list it was made from (compared by identity)
    closes: int  # the descriptor table's count of closed descriptors when it was made
    todo: list[Write]  # the writes compared, with their keys, entries and descriptors
    keys: list[Key]
    entries: list[CacheEntry]
    fds: np.ndarray
    expected: tuple[bytes, np.ndarray, np.ndarray]  # sysio.pack of the entries' texts
    rest: list[Write]  # the writes it cannot vouch for: to the pipeline


class Verifier:
    def __init__(self, locator: Locator, cache: WriteCache, files: FileTable, fights: Fights, claims: Claims,
                 stats: ExecutorStats) -> None:
        self.locator = locator
        self.cache = cache
        self.files = files
        self.fights = fights
        self.claims = claims
        self.stats = stats

    def __call__(self, writes: list[Write], now: float, state: PlanState | None = None) -> list[Write]:
        """Of ``writes`` (a plan's, due for their re-check), those to send through the pipeline; what is
        compared is kept on the plan's ``state`` for its next re-check."""
        prep = state.prepared if state is not None else None
        if not (isinstance(prep, Prepared) and self._holds(prep, writes)):
            prep = self._prepare(writes)
            if state is not None:
                state.prepared = prep if not prep.rest else None  # the rest get new entries: made again
        rest = list(prep.rest)
        if not prep.todo:
            return rest
        same = sysio.pread_compare(prep.fds, prep.expected)
        self.stats.read_syscalls += len(prep.todo)
        claims = self.claims.claims
        verified = 0
        for w, k, entry, ok in zip(prep.todo, prep.keys, prep.entries, same.tolist()):
            claim = claims.get(k)
            if claim is not None and claim.strategy != w.strategy and now - claim.ts <= claim.lease:
                ok = False  # another strategy's live claim: ownership is settled in the pipeline
            if not ok:
                rest.append(w)
                continue
            verified += 1
            entry.ts = now  # confirmed: the write cache vouches for it for another window
            if claim is not None and claim.strategy == w.strategy:
                claim.ts = now  # and the claim is renewed, as the pipeline renews it
            else:
                claims[k] = Claim(w.strategy, w.value, now, w.lease)
        self.stats.verified += verified
        if rest and state is not None:
            state.prepared = None
        return rest

    def _holds(self, prep: Prepared, writes: list[Write]) -> bool:
        """``prep`` still stands for ``writes`` (see the module docstring)."""
        fights = self.fights.fights
        return (prep.writes is writes and prep.closes == self.files.closes
                and all(map(operator.is_, map(self.cache.entries.get, prep.keys), prep.entries))
                and (not fights or fights.keys().isdisjoint(prep.keys)))

    def _prepare(self, writes: list[Write]) -> Prepared:
        where, entries, fights, path = self.locator.where, self.cache.entries, self.fights.fights, self.locator.path
        rest: list[Write] = []
        todo: list[Write] = []
        keys: list[Key] = []
        found: list[CacheEntry] = []
        paths: list[str] = []
        for w in writes:
            loc = where.get((w.resource, w.cgroup))
            entry = None if loc is None or w.entry or not w.cacheable or w.raw else entries.get(loc[4])
            if (loc is None or entry is None or not entry.exact or entry.value != w.value or entry.content is None
                    or (fights and loc[4] in fights)):
                rest.append(w)
                continue
            todo.append(w)
            keys.append(loc[4])
            found.append(entry)
            paths.append(path(loc))
        fds = self.files.kept(paths)
        if -1 in fds:  # no descriptor kept for it: the pipeline opens one
            held = [k for k, fd in enumerate(fds) if fd >= 0]
            rest += [todo[k] for k in range(len(todo)) if fds[k] < 0]
            todo, keys, found = [todo[k] for k in held], [keys[k] for k in held], [found[k] for k in held]
            fds = [fds[k] for k in held]
        expected = sysio.pack([e.content.encode() for e in found])  # type: ignore[union-attr]
        return Prepared(writes, self.files.closes, todo, keys, found, np.array(fds, dtype=np.int32), expected, rest)

    def read_back(self, items: list[Item], plan_writes: set[int], read: Callable[[Sequence[str]], list[str | int]],
                  now: float) -> None:
        """The files of ``items`` written for a plan (``plan_writes``: their writes' ids), with a kept
        descriptor, read back in one batch: where a file shows the value written, its entry gets the
        file's exact text (another writer's value read back at once is not taken for ours)."""
        back = [it for it in items if it.result.status == "written" and it.fd >= 0 and id(it.write) in plan_writes
                and it.write.cacheable and not it.write.raw and not it.resource.multi_entry]
        if not back:
            return
        version = self.locator.version
        for it, content in zip(back, read([it.path for it in back])):
            if isinstance(content, str) and it.resource.equal(content, it.result.value or "", version):
                self.cache.put(it.key, it.write.value, now, content, True)
