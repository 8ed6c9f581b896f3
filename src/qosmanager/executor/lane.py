"""The fast lane: a batch of plain writes the write cache knows, in a few passes instead of the pipeline.

Decides nothing of its own.  A batch every write of which the write cache can answer without a read
(the steady state of a strategy that changes many values at once: cpuBurst's container quotas, a
recovery's 2,000 quotas) gets the same outcome here as through the batch pipeline of
:meth:`Executor._pipeline <qosmanager.executor.executor.Executor._pipeline>`, the reference: the same
results, statuses, stats, write-cache entries, claims, originals, syscalls in the same order and the
same audit records in the same order (``tests/test_executor_lane.py`` runs both on random batches and
compares everything).  What it saves is the pipeline's per-write Python: one :class:`Item` per write,
its render, compare, ordering steps and validation (here decided once per distinct (resource, value,
file content) and remembered), one audit call per write (here one per batch,
:meth:`AuditLog.writes <qosmanager.executor.audit.AuditLog.writes>`), the descriptor lookup of every
path (the descriptors and payload arrays of the last batch are kept, and reused while the same files
are written in the same order and no descriptor was closed since).

Top to bottom in :meth:`Lane.apply`:

1. **classify**, without changing anything: each write is a plain one (cacheable, compared, no entry,
   no raw content, no re-check, no restore) of a known file holding one value (not a cpuset, not a
   table), no other strategy holds a live claim on its file, no other write of the batch names it, its
   value is valid, and the write cache holds what the file holds now (fresh, with its content).  It is
   then answered from the cache (``"cached"``), found there already (``"unchanged"``) or planned, in
   the leveled order's phase the pipeline would give it.  Anything else, or a dry run, or a descriptor
   the table does not keep: the lane declines (None) before any change, and the pipeline does the batch.
2. **commit**: claims, results, the write cache for what is already there;
3. **write** the planned files in the leveled order, in one native batch;
4. **settle** each write as the pipeline would (a failed one through the pipeline's own code), audit
   them in one call, then the ``on_write`` callbacks (after the batch's records, not between them).
"""

from __future__ import annotations

import collections
import errno
import itertools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from qosmanager._native import sysio
from qosmanager.executor import order
from qosmanager.executor.cache import CacheEntry
from qosmanager.executor.files import ONE_SHOT
from qosmanager.executor.ownership import Claim
from qosmanager.executor.types import IGNORABLE, Item, Key, Write, WriteResult

MEMO_MAX = 4096  # decisions (and validations) remembered; past it the memo starts again empty
_UNSEEN = object()

# a decision: (value written, as stripped; old content, stripped; already there; phase; payload)
Decision = tuple[str, str, bool, int, bytes]


class _Kept:
    """The last batch's descriptors, payload arrays and paths, for the same files in the same order."""

    __slots__ = ("closes", "fds", "keys", "paths", "trunc")

    def __init__(self, keys: list[Key], closes: int, paths: list[str], fds: np.ndarray, trunc: np.ndarray) -> None:
        self.keys, self.closes, self.paths, self.fds, self.trunc = keys, closes, paths, fds, trunc


class Lane:
    def __init__(self, ex: Any) -> None:
        """``ex``: the executor whose rooms the lane works in (not imported here: it imports the lane)."""
        self.ex = ex
        self.valid: dict[tuple[str, str], str | None] = {}  # (resource, value) -> why invalid, None: valid
        self.decided: dict[tuple[str, str, str], Decision | None] = {}  # (resource, value, content) -> decision
        self.kept: _Kept | None = None
        self.batches = 0  # batches done here (the rest went through the pipeline)

    def apply(self, writes: Sequence[Write], now: float) -> list[WriteResult] | None:
        """The batch's results, or None (nothing changed) when it is not one for the lane."""
        ex = self.ex
        if ex.dry_run or not writes:
            return None
        where, claims, entries, force = ex.locator.where, ex.claims.claims, ex.cache.entries, ex.force_seconds
        decided, be_dir = self.decided, ex.inforce.be_dir()
        # 1. classify: kinds 0 steady (claim and cache), 1 cached (a claim to settle), 2 compared
        kinds: list[int] = []
        locs: list[Any] = []
        decs: list[Any] = []
        keys: list[Key] = []
        held: list[Any] = []  # each write's claim
        be: list[int] = []
        for i, w in enumerate(writes):
            if (type(w) is not Write or not w.cacheable or not w.compare or w.raw or w.recheck or w.restore
                    or w.entry):
                return None
            loc = where.get((w.resource, w.cgroup))
            if loc is None:
                return None
            k = loc[4]
            claim = claims.get(k)
            entry = entries.get(k)
            if entry is None or now - entry.ts >= force:
                return None  # to be read: the pipeline's
            if claim is not None and claim.strategy != w.strategy:
                if now - claim.ts <= claim.lease:
                    return None  # another strategy's live claim: ownership is the pipeline's
                claim = None  # lapsed: the write takes the file
            if w.cgroup == be_dir:
                be.append(i)
            keys.append(k)
            locs.append(loc)
            held.append(claim)
            value = w.value
            if entry.value == value:
                decs.append(None)
                if claim is not None:
                    kinds.append(0)
                    continue
                kinds.append(1)
                if self._valid(loc[0], value) is not None:
                    return None  # refused and reported by the pipeline
                continue
            cur = entry.content
            if cur is None:
                return None
            d = decided.get((k[1], value, cur), _UNSEEN)
            if d is _UNSEEN:
                d = self._decide(w, loc[0], cur)
            if d is None:
                return None
            kinds.append(2)
            decs.append(d)
        if len(set(keys)) != len(keys):
            return None  # a file named twice: the pipeline says which write was superseded
        pend = [i for i, kind in enumerate(kinds) if kind == 2]  # the pipeline's pending writes, in order
        kept = self._descriptors([keys[i] for i in pend], [locs[i] for i in pend]) if pend else None
        if pend and kept is None:
            return None
        # 2. commit: claims, results, what the cache vouches for or the file holds already
        results: list[WriteResult] = []
        add = results.append
        unchanged = 0
        for w, kind, loc, d, k, claim in zip(writes, kinds, locs, decs, keys, held):
            if claim is None:
                claims[k] = Claim(w.strategy, w.value, now, w.lease)
            else:
                claim.ts, claim.value, claim.lease = now, w.value, w.lease
            if kind != 2:
                add(WriteResult(w, loc[2], "cached", w.value))
            elif d[2]:
                unchanged += 1
                add(WriteResult(w, loc[2], "unchanged", d[0], d[1]))
                e = entries[k]
                if e.exact:  # a plan's compare may hold it (verify.Prepared): a new one
                    entries[k] = CacheEntry(w.value, now, e.content, False)
                else:  # one object fewer per write (and for the garbage collector to walk)
                    e.value, e.ts = w.value, now
            else:
                add(WriteResult(w, loc[2], "planned", d[0], d[1]))
        stats = ex.stats
        stats.requested += len(writes)
        stats.cache_hits += len(writes) - len(pend)
        stats.unchanged += unchanged
        todo = self._order([i for i in pend if not decs[i][2]], decs, locs) if len(pend) > unchanged else []
        if todo:
            assert kept is not None
            if len(todo) == len(pend) and todo == pend:
                fds, trunc = kept
            else:
                at = np.empty(len(writes), dtype=np.intp)
                at[pend] = np.arange(len(pend))
                fds, trunc = kept[0][at[todo]], kept[1][at[todo]]
            self._write(todo, keys, results, decs, fds, trunc, now)
        if be:
            ex.inforce.settle([results[i] for i in be], be_dir)
        self.batches += 1
        return results

    # ------------------------------------------------------------------
    def _valid(self, r: Any, value: str) -> str | None:
        """Why ``value`` is refused for ``r``, None when it is valid (remembered)."""
        problem = self.valid.get((r.name, value), _UNSEEN)
        if problem is _UNSEEN:
            if len(self.valid) >= MEMO_MAX:
                self.valid.clear()
            problem = self.valid[(r.name, value)] = r.validate(value)
        return problem  # type: ignore[return-value]

    def _decide(self, w: Write, r: Any, cur: str) -> Decision | None:
        """What the pipeline's compare and leveled order make of ``w`` on a file holding ``cur``."""
        ex = self.ex
        content = r.render(w.value, cur, ex.version)
        d: Decision | None
        if r.multi_entry or r.order == "looser" or self._valid(r, w.value) is not None:
            d = None  # a table's entry, a cpuset's steps, or refused: the pipeline's
        elif r.equal(cur, content, ex.version):
            d = (content.strip(), cur.strip(), True, 0, b"")
        else:
            probe = Item(w, r, ("", "", ""), "", "", 0, WriteResult(w, "", "planned"))
            steps = order.steps(probe, cur, content, content, ex.canonical)
            # one step whose payload is the content, whatever the file (a kernel file or a plain one)
            d = (content.strip(), cur.strip(), False, steps[0][0], content.encode()) if (
                len(steps) == 1 and steps[0][1] == content and steps[0][2] == content) else None
        if len(self.decided) >= MEMO_MAX:
            self.decided.clear()
        self.decided[(r.name, w.value, cur)] = d
        return d

    @staticmethod
    def _order(planned: list[int], decs: list[Decision | None], locs: list[Any]) -> list[int]:
        """The leveled order of :func:`order.phases`: phase 0 parents first, phase 1 children first."""
        first = [i for i in planned if decs[i][3] == 0]  # type: ignore[index]
        second = [i for i in planned if decs[i][3] == 1]  # type: ignore[index]
        depth = [loc[3] for loc in locs]
        first.sort(key=depth.__getitem__)
        second.sort(key=depth.__getitem__, reverse=True)
        return first + second

    def _descriptors(self, keys: list[Key], locs: list[Any]) -> tuple[np.ndarray, np.ndarray] | None:
        """Kept descriptors (and truncate flags) of these files, in this order; None when one is not kept."""
        files = self.ex.files
        kept = self.kept
        if kept is not None and kept.closes == files.closes and kept.keys == keys:
            table = files._fds
            collections.deque(map(table.move_to_end, kept.paths), maxlen=0)  # as lookup marks them used
            return kept.fds, kept.trunc
        paths = [self.ex.locator.path(loc) for loc in locs]
        found = files.lookup(paths)
        if any(isinstance(f, int) or f[0] == ONE_SHOT for f in found):
            return None
        fds = np.fromiter((f[0] for f in found), dtype=np.int32, count=len(found))
        trunc = np.fromiter((f[1] for f in found), dtype=np.uint8, count=len(found))
        self.kept = _Kept(keys, files.closes, paths, fds, trunc)
        return fds, trunc

    def _write(self, todo: list[int], keys: list[Key], results: list[WriteResult], decs: list[Any],
               fds: np.ndarray, trunc: np.ndarray, now: float) -> None:
        """Write ``todo`` in order, then settle each as the pipeline's write and finish steps do."""
        ex = self.ex
        stats = ex.stats
        errs = sysio.pwrite_batch(fds, [decs[i][4] for i in todo], trunc)
        stats.write_syscalls += len(todo)
        reporter = ex.reporter if ex.reporter.repeats else None
        fights = ex.fights.fights or None
        entries, first, table = ex.cache.entries, ex.originals.first, ex.originals.table
        rows: list[tuple[Any, ...]] = []
        row = rows.append
        done: list[WriteResult] = []
        failed: list[Item] = []
        for i, e in zip(todo, errs.tolist() if errs.any() else itertools.repeat(0)):
            r = results[i]
            w = r.write
            k = keys[i]
            if e:
                ex.audit.writes(rows)  # the records so far, then this one's: the pipeline's order
                rows = []
                row = rows.append
                failed.append(self._failure(r, k, e, now))
                continue
            r.status = "written"
            row((w.strategy, r.target, r.value, r.old, w.uid, w.reason))
            done.append(r)
            if reporter is not None and k in reporter:
                reporter.recovered(k, w.strategy, r.target, now)
            e = entries[k]
            if e.exact:
                entries[k] = CacheEntry(w.value, now, r.value, False)
            else:
                e.value, e.ts, e.content = w.value, now, r.value
            if fights is not None:
                f = fights.get(k)
                if f is not None:
                    f.ours = r.value or ""
            t = table.get(k)
            if t is None or "" not in t:
                first(k, w, r.old)
        ex.audit.writes(rows)
        stats.written += len(done)
        for cb in ex.on_write:
            for r in done:
                cb(WriteResult(r.write, r.target, "written", r.value, r.old))
        for it in failed:
            ex._finish(it, now)

    def _failure(self, r: WriteResult, k: Key, e: int, now: float) -> Item:
        """A write the kernel refused: what the pipeline's write step does with it."""
        ex = self.ex
        w = r.write
        loc = ex.locator.where[(w.resource, w.cgroup)]
        it = Item(w, loc[0], k, ex.locator.path(loc), loc[2], loc[3], r)
        r.status = "missing" if e in IGNORABLE else "failed"
        r.error = f"{errno.errorcode.get(e, str(e))}: {os.strerror(e)}"
        if e in IGNORABLE:
            ex.files.drop(it.path)
        else:
            ex._failed(it, r.value or w.value, now)
        return it
