"""The resource executor: every file the agent changes goes through here.

Strategies never touch files; they hand the executor :class:`Write` requests.  :class:`Executor` is
the one door (``apply``, ``read``, ``read_many``, ``mkdir``, ``kill``, ``restore``); behind it each
job is a room of its own, with its own state and tests:

=================  ===========================================================================
:mod:`.types`      the words: requests, results, stats, the batch's working record
:mod:`.locate`     which file a (resource, dir) is on this host, its display path, depth and key
:mod:`.cache`      the write cache: which writes cost no syscall
:mod:`.ownership`  knob ownership: which strategy's value a file gets when two want it
:mod:`.plans`      plans and plan groups: which of many rarely-changing writes are sent this round
:mod:`.verify`     a plan's re-check at its window's end: one native compare, the pipeline for the rest
:mod:`.originals`  what a file held before a strategy changed it, and putting it back
:mod:`.order`      the leveled order: parents first when limits rise, children first when they fall
:mod:`.conflicts`  another writer changing a file back: held back, retried with backoff, reported
:mod:`.inforce`    whether the BE protection decided is in force; a degraded condition where not
:mod:`.report`     failures that repeat: said in full once, then as a count
:mod:`.dryrun`     what ``--dry-run`` pretends is on the host
:mod:`.lane`       the fast lane: a batch the write cache knows, in a few passes (agrees with the pipeline)
:mod:`.mkdir`      directories (resctrl groups); :mod:`.kill` signals and ``cgroup.kill``
:mod:`.psi`        PSI triggers (registered on a pressure file, held by their descriptor)
:mod:`.files`      the descriptor table; :mod:`.audit` the JSON-lines audit
:mod:`.rereads`    ``read_many`` of the same many files again: from the last read's descriptors, one batch
=================  ===========================================================================

One :meth:`Executor.apply` call per scheduler round runs the batch pipeline, top to bottom in
:meth:`Executor._pipeline` (or the fast lane, :mod:`.lane`, to the same outcome, when every write of the
batch is a plain one whose file the write cache knows):

1. **expand** plans, plan groups and restores into writes (:mod:`.plans`, :mod:`.originals`);
2. **validate**: resolve each request through the registry (``host.resources``) to the file of this
   host's cgroup version (:mod:`.locate`) and validate the value (invalid values are refused and
   audited, never written);
3. settle **knob ownership** (:mod:`.ownership`);
4. consult the **write cache** (:mod:`.cache`): a value written less than ``force_seconds`` ago costs
   no syscall at all; older entries are re-checked so outside changes get corrected (an unchanged
   plan's files by one native compare first, :mod:`.verify`);
5. **read** the current contents of the remaining files in one native batch and drop those already
   equal (``max`` == int64-max, cpusets as sets, ...); a file changed back again and again is held
   (:mod:`.conflicts`);
6. **order** the writes as a leveled update (:mod:`.order`);
7. **write** each phase with one native batch call (cached descriptors, ``pwrite``, one errno per
   file), cache what succeeded (failures never) and **audit** every write with its old and new value
   (a plan's files written are read back once, for its re-check: :mod:`.verify`);
8. note whether the BE protection decided is **in force** (:mod:`.inforce`).

Cached descriptors count in the process's descriptor budget, shared with the collector
(:mod:`qosmanager.host.descriptors`); a file that gets no descriptor within it is read and
written with open, pread or pwrite, close (one-shot), in the same order.

A missing file is not an error where its cgroup is gone (the directory too), where the knob is marked
optional (``if_exists``: it does not exist on every kernel) or where a pid written is gone: it is
skipped, counted (``missing``) and retried next time.  A file missing in a directory that exists is a
failed write like any other (the kernel makes a cgroup's files with the directory).  A write that
fails the same way every tick (the kernel refuses the value, the file is read-only) is logged and
audited the first time, then as a count at most every ``repeat_seconds`` (:mod:`.report`); every
failure is still counted in :attr:`Executor.stats`.

**Plans.**  A strategy that hands over thousands of writes that rarely change wraps them in a
:class:`Plan`: a key, a version the strategy computes cheaply, and a function that builds the writes;
many plans of one strategy go as a :class:`PlanGroup` (see :mod:`.plans`).  What a skipped plan would
have decided was audited when it was sent, and is audited again when the forced re-check finds it
undone (also under ``--dry-run``).

**Originals.**  The first time a strategy changes a file, what the file held is remembered; a
:class:`Restore` writes it back, :meth:`Executor.restore` everything a strategy changed.

**Another writer.**  A file this agent set that is found changed back at ``conflict_after`` checks
in a row is no longer rewritten at every check: the conflict is reported once (a warning, an audit
record, the degraded condition ``executor/write-conflict/<resource>``, the :meth:`Executor.conflicts`
count exported as a metric, and the ``on_conflict`` callbacks, which the agent turns into an Event on
the Node naming the file), and the write is retried with backoff (see :mod:`.conflicts`).

Directories (resctrl control groups) are created here too, by :meth:`Executor.mkdir` (see
:mod:`.mkdir`).  Kill-mode eviction sends its signals (and writes ``cgroup.kill``) here too, by
:meth:`Executor.kill` (:mod:`qosmanager.executor.kill`): audited before anything is sent, nothing
sent under ``--dry-run``.

**Threads.**  One lock: :attr:`Executor.lock`, a re-entrant lock.  The tick thread and the fast path
both go through it; every public entry (``apply``, ``read``, ``read_many``, ``mkdir``, ``kill``,
``refuse_kill``, ``restore``, ``release``, ``forget``, ``owner``, ``close``) takes it and holds it for the whole call,
so a batch is never interleaved with another: the write cache, the claims, the originals, the
conflicts and the audit see one batch after the other.  Callbacks (``on_write``, ``on_batch``,
``on_conflict``) run with the lock held; they must not wait for another thread that takes it.
Three reads from the metrics server's thread do not take it: :meth:`Executor.conflicts` and
:meth:`Executor.not_in_force` (one copy of a dict, made without running Python code) and
:attr:`Executor.stats` (integers), so a scrape never waits for a batch.  The rooms take no lock of
their own: only the executor calls them.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from qosmanager._native import sysio
from qosmanager.executor import kill as _kill
from qosmanager.executor import order
from qosmanager.executor.audit import AuditLog
from qosmanager.executor.cache import CacheEntry, WriteCache
from qosmanager.executor.conflicts import CONFLICT_CONDITION, Fights
from qosmanager.executor.dryrun import DryRun
from qosmanager.executor.files import ONE_SHOT, FileTable
from qosmanager.executor.inforce import BACKOFF, InForce
from qosmanager.executor.lane import Lane
from qosmanager.executor.locate import Locator
from qosmanager.executor.mkdir import Dirs
from qosmanager.executor.originals import Originals
from qosmanager.executor.ownership import Claims
from qosmanager.executor.plans import GroupState, Plans, Span
from qosmanager.executor.psi import PressureTrigger, TriggerResult, Triggers
from qosmanager.executor.report import Reporter
from qosmanager.executor.rereads import READ_CHUNK, Rereads, read_fds
from qosmanager.executor.types import (
    IGNORABLE,
    ExecutorStats,
    Item,
    Key,
    Loc,
    MakeDir,
    Plan,
    PlanGroup,
    Request,
    Restore,
    Write,
    WriteConflict,
    WriteResult,
    key,
    log,
)
from qosmanager.executor.verify import Verifier
from qosmanager.host import resources as res
from qosmanager.host.cgroups import CgroupLayout
from qosmanager.host.descriptors import DescriptorBudget

if TYPE_CHECKING:
    from qosmanager.framework.conditions import Conditions

# the words every caller imports from here (kept where they always were)
__all__ = ["CONFLICT_CONDITION", "Executor", "ExecutorStats", "MakeDir", "Plan", "PlanGroup", "Request",
           "Restore", "Write", "WriteConflict", "WriteResult"]


class Executor:
    """Validated, cached, ordered, audited batch writes (see the module docstring)."""

    def __init__(self, layout: CgroupLayout, audit: AuditLog, *, dry_run: bool = False,
                 force_seconds: float = 60.0, cache_ttl: float = 120.0, max_open_files: int = 4096,
                 budget: DescriptorBudget | None = None, clock: Callable[[], float] = time.time,
                 repeat_seconds: float = 300.0, conditions: Conditions | None = None,
                 conflict_after: int = 5, conflict_max_backoff: float = 3600.0) -> None:
        """``budget``: the descriptor budget shared with the collector (None: ``max_open_files`` only);
        ``conditions``: where a write conflict is raised as a degraded condition."""
        self.layout = layout
        self.version = layout.version
        # the one lock every public entry holds for its whole call (see "Threads" in the module docstring)
        self.lock = threading.RLock()
        self.audit = audit
        self.dry_run = dry_run
        self.force_seconds = force_seconds
        self.cache_ttl = cache_ttl
        self.clock = clock
        self.conditions = conditions
        self.files = FileTable(max_open_files, budget)
        self.stats = ExecutorStats()
        # the rooms (see the module docstring)
        self.locator = Locator(layout)
        self.cache = WriteCache(force_seconds, cache_ttl)
        self.claims = Claims(audit, self.stats)
        self.originals = Originals()
        self.inforce = InForce(layout, conditions)
        self.fights = Fights(audit, self.stats, conditions, version=self.version, dry_run=dry_run,
                             force_seconds=force_seconds, conflict_after=conflict_after,
                             max_backoff=conflict_max_backoff, short=self.inforce.protection,
                             short_backoff=BACKOFF)
        self.verifier = Verifier(self.locator, self.cache, self.files, self.fights, self.claims, self.stats)
        self.plans = Plans(force_seconds, self.stats, self.verifier)
        self.reporter = Reporter(audit, repeat_seconds, clock)
        self.shadow = DryRun(force_seconds)
        self.dirs = Dirs(layout.roots, audit, self.shadow if dry_run else None)
        self.triggers = Triggers(layout.roots, audit, dry_run)
        self.refusals = _kill.Refusals(audit, self.stats, repeat_seconds, clock)
        # called when a conflict with another writer starts and when it ends (the agent's Node Event)
        self.on_conflict: list[Callable[[WriteConflict], None]] = self.fights.on_conflict
        self.on_write: list[Callable[[WriteResult], None]] = []
        # after every apply(): its results and how long it took (seconds), for the metrics
        self.on_batch: list[Callable[[list[WriteResult], float], None]] = []
        self._last_gc = clock()
        self.lane: Lane | None = Lane(self)  # None: every batch through the pipeline (the reference)
        self.rereads = Rereads(self.files, self.stats)

    # ------------------------------------------------------------------
    # the door
    # ------------------------------------------------------------------
    def resolve(self, resource: str, cgroup: str = "") -> tuple[str, str] | None:
        """``(absolute path, display path)`` of a resource, or None if this host has no such file.

        The display path is relative to its root and prefixed ``proc/`` or ``sys/`` for
        non-cgroup files: the audit's ``target`` and replay's ``file``.
        """
        return self.locator.resolve(resource, cgroup)

    def mkdir(self, d: MakeDir, now: float | None = None) -> str:
        """Make sure directory ``d.rel`` exists under its root; returns ``"exists"``, ``"created"``,
        ``"dry-run"`` (decided, not created) or ``"failed"`` (see :mod:`.mkdir`)."""
        with self.lock:
            return self.dirs.mkdir(d, self.clock() if now is None else now)

    def psi_trigger(self, t: PressureTrigger, now: float | None = None) -> TriggerResult:
        """Register a PSI trigger; the descriptor holding it is the caller's to poll and close (see :mod:`.psi`)."""
        with self.lock:
            return self.triggers.register(t, self.clock() if now is None else now)

    def kill(self, k: _kill.Kill, now: float | None = None) -> _kill.KillResult:
        """SIGKILL a pod's processes, pid by pid or by its ``cgroup.kill`` (see :mod:`.kill`)."""
        with self.lock:
            return _kill.kill(self, k, now)

    def refuse_kill(self, k: _kill.Kill, why: str, now: float | None = None) -> bool:
        """A kill the caller does not send, because of ``why``: logged and audited the first time, then
        counted (see :mod:`.kill`); True the first time."""
        with self.lock:
            return self.refusals.refuse(k, why, self.clock() if now is None else now)

    def _signal(self, pid: int, pidfd: int) -> int:
        """The one place the agent sends a signal: SIGKILL; 0 or the errno."""
        return _kill.send_sigkill(pid, pidfd)

    def read(self, resource: str, cgroup: str = "") -> str | None:
        return self.read_many(resource, [cgroup])[0]

    def read_many(self, resource: str, cgroups: Sequence[str]) -> list[str | None]:
        """Current canonical values of one resource in many cgroups, in one native read.

        A value this executor wrote or confirmed within ``force_seconds`` comes from the write
        cache (no syscall).  A file the cache knows whose entry is older is read, and what it holds
        now renews the entry: a strategy that reads the same files every tick (cpuBurst's quotas)
        reads each from the kernel once per window, not every tick once the window of its last
        write has passed.  None where the file is missing or unreadable.
        """
        with self.lock:
            r = res.get(resource)
            now = self.clock()
            cache, force, where, canonical = self.cache.entries, self.force_seconds, self.locator.where, self.canonical
            again = self.rereads.again(resource, cgroups, cache)  # the same files as last time (see .rereads)
            if again is not None:
                return [canonical(r, d.decode(errors="replace")) if isinstance(d, bytes) else None for d in again]
            out: list[str | None] = [None] * len(cgroups)
            todo: list[tuple[int, str, Key]] = []
            for i, cg in enumerate(cgroups):
                loc = where.get((resource, cg)) or self.locator.remember(r, cg)
                if loc is None:
                    continue
                entry = cache.get(loc[4])
                if entry is not None and now - entry.ts < force:
                    out[i] = entry.value
                else:
                    todo.append((i, self.locator.path(loc), loc[4]))
            if todo:
                contents = self._read_paths(paths := [p for _, p, _ in todo])
                self.rereads.remember(resource, cgroups, paths, [k for _, _, k in todo], cache)
                multi = r.multi_entry
                for (i, _, k), content in zip(todo, contents):
                    if isinstance(content, str):
                        value = out[i] = canonical(r, content)
                        if not multi and k in cache:  # confirmed now (or found changed: the truth)
                            cache[k] = CacheEntry(value, now, content, True)
            return out

    def canonical(self, r: res.Resource, content: str) -> str:
        """File content -> canonical (v1-style) value."""
        text = content.strip()
        if self.version == 2:
            if r.name == "cpu.cfs_quota_us":
                q = text.split()[0] if text else "max"
                return "-1" if q == "max" else q
            if r.name == "cpu.cfs_period_us":
                parts = text.split()
                return parts[1] if len(parts) > 1 else str(res.CFS_PERIOD_US)
            if r.name == "cpu.shares" and text.isdigit():
                return str(res.weight_to_shares(int(text)))
            if r.name == "memory.limit_in_bytes" and text == "max":
                return "-1"
        elif r.name == "memory.limit_in_bytes" and text.isdigit() and int(text) >= res.V1_MEMORY_UNLIMITED:
            return "-1"
        return text

    def apply(self, requests: Iterable[Request], now: float | None = None) -> list[WriteResult]:
        """Carry out writes, plans and restores (see the module docstring); one result per write sent
        (a skipped plan, or a restore with nothing to restore, has none)."""
        with self.lock, self.reporter.batch():
            return self._apply(requests, now)

    def conflicts(self) -> dict[str, int]:
        """Files in a standing conflict with another writer, by resource (safe from another thread: the
        metrics server's)."""
        return self.fights.counts()

    def not_in_force(self) -> dict[tuple[str, str], int]:
        """Files whose decided protection (the BE quota, the BE cpuset) is not in force, by (strategy,
        resource) (see :mod:`.inforce`; safe from another thread: the metrics server's)."""
        return self.inforce.counts()

    def release(self, strategy: str) -> None:
        """Drop every claim, plan and write conflict of ``strategy`` (it was disabled or stopped)."""
        with self.lock:
            self.fights.drop([k for k in self.claims.keys_of(strategy) if k in self.fights.fights])
            self.claims.release(strategy)
            self.plans.release(strategy)
            self.inforce.release(strategy)

    def restore(self, strategy: str, now: float | None = None) -> list[WriteResult]:
        """Write back what ``strategy`` found before it first changed each file, then release it."""
        with self.lock:
            writes = self.originals.all_writes(strategy)
            self.release(strategy)
            return self.apply(writes, now) if writes else []

    def forget(self, cgroups: Sequence[str]) -> None:
        """A pod went away: drop cache entries, claims and descriptors under its cgroup dirs."""
        if not cgroups:
            return
        with self.lock:
            prefixes = self.locator.prefixes(cgroups)
            self.locator.forget(cgroups)
            self.fights.forget(prefixes)
            self.cache.forget(prefixes)
            self.claims.forget(prefixes)
            self.originals.forget(prefixes)
            self.shadow.forget(prefixes)
            self.reporter.forget(prefixes)
            self.files.forget([os.path.join(self.layout.roots.cgroup, p) for p in prefixes])

    def owner(self, resource: str, cgroup: str = "", entry: str = "") -> str | None:
        with self.lock:
            loc = self.resolve(resource, cgroup)
            return None if loc is None else self.claims.owner(key(loc[1], resource, entry))

    def close(self) -> None:
        with self.lock:
            self.files.close()
            self.audit.flush()

    # ------------------------------------------------------------------
    # the batch pipeline
    # ------------------------------------------------------------------
    def _apply(self, requests: Iterable[Request], now: float | None) -> list[WriteResult]:
        t0 = time.perf_counter()
        now = self.clock() if now is None else now
        # 1. expand plans, groups and restores into writes
        writes, spans, walked = self._expand(requests, now)
        # a batch of plain writes the write cache knows: the fast lane (the same outcome, see :mod:`.lane`)
        results = self.lane.apply(writes, now) if self.lane is not None and not spans else None
        if results is None:
            results = self._pipeline(writes, spans, now)
            self.inforce.settle(results, self.inforce.be_dir())
        self.plans.landed(spans, walked, results)
        self.reporter.sweep(now)
        self.audit.flush()
        if now - self._last_gc > self.force_seconds:
            self._gc(now)
        if self.on_batch:
            dt = time.perf_counter() - t0
            for cb in self.on_batch:
                cb(results, dt)
        return results

    def _pipeline(self, writes: list[Write], spans: list[Span], now: float) -> list[WriteResult]:
        """Steps 2. to 7. of the module docstring: the reference the fast lane (:mod:`.lane`) agrees with."""
        results: list[WriteResult] = []
        items: dict[Key, Item] = {}
        cache, force, claims = self.cache.entries, self.force_seconds, self.claims.claims
        for w in writes:
            self.stats.requested += 1
            # 2. validate: which file, and is the value one it takes
            loc = self._locate(w, results)
            if loc is None:
                continue
            r, _, target, depth, base_key = loc
            k = (base_key[0], base_key[1], w.entry) if w.entry else base_key
            # the steady state: this strategy already owns the file and wrote this value recently
            claim = claims.get(k)
            entry = cache.get(k)
            if (claim is not None and claim.strategy == w.strategy and entry is not None and w.cacheable
                    and entry.value == w.value and now - entry.ts < force and not w.recheck):
                claim.ts, claim.value, claim.lease = now, w.value, w.lease
                self.stats.cache_hits += 1
                results.append(WriteResult(w, target, "cached", w.value))
                continue
            if self.dry_run and not w.cacheable and self.shadow.seen(k, w.value, now):
                self.stats.cache_hits += 1
                results.append(WriteResult(w, target, "cached", w.value))
                continue
            result = WriteResult(w, target, "cached")
            results.append(result)
            if not w.raw:
                problem = r.validate(w.value)
                if problem is not None:
                    result.status, result.error = "invalid", f"invalid value for {w.resource}: {problem}"
                    self.stats.invalid += 1
                    self.reporter.refused(k, "invalid", w, target, w.value, None, result.error, now)
                    continue
            item = Item(w, r, k, self.locator.path(loc), target, depth, result)
            # 3. ownership
            if not self.claims.settle(item, now):
                continue
            prev = items.get(k)
            if prev is not None:
                prev.result.status = "superseded"
            items[k] = item
        # 4. the write cache
        pending = [it for it in items.values() if not self._cache_hit(it, now)]
        if pending:
            self._read_current(pending, now)  # 5. read
            self._compare(pending, now)  # 5./6. drop what is there already, order the rest
            self._execute(pending, now)  # 7. write, cache, audit
            if spans and not self.dry_run:  # a plan's files just written: what they show, for the re-check
                self.verifier.read_back(pending, {id(w) for _, a, b in spans for w in writes[a:b]},
                                        self._read_paths, now)
        return results

    def _expand(self, requests: Iterable[Request], now: float
                ) -> tuple[list[Write], list[Span], list[GroupState]]:
        """The writes to send this round, which of them (a span) each sent plan contributed, and the
        plan groups walked."""
        out: list[Write] = []
        spans: list[Span] = []
        walked: list[GroupState] = []
        for r in requests:
            if type(r) is Write:
                out.append(r)
            elif isinstance(r, Plan):
                self.plans.plan(r, now, out, spans)
            elif isinstance(r, PlanGroup):
                self.plans.group(r, now, out, spans, walked)
            elif isinstance(r, Restore):
                if self.originals:
                    loc = self.locator.get(res.get(r.resource), r.cgroup)
                    if loc is not None:
                        self.originals.writes_for(r, loc[4], out)
            elif isinstance(r, Write):
                out.append(r)
            else:
                raise TypeError(f"executor: {type(r).__name__} is not a Write, Plan, PlanGroup or Restore")
        return out, spans, walked

    def _locate(self, w: Write, results: list[WriteResult]) -> Loc | None:
        """Resource, path, display target, depth and key base of a write; memoized per (resource, dir)."""
        loc = self.locator.where.get((w.resource, w.cgroup))
        if loc is not None:
            return loc
        try:
            r = res.get(w.resource)
        except KeyError as e:
            results.append(WriteResult(w, w.resource, "invalid", error=str(e)))
            self.stats.invalid += 1
            self.audit.record(strategy=w.strategy, action="write", target=w.resource, value=w.value,
                              reason=w.reason, executed=False, error=str(e), uid=w.uid)
            return None
        loc = self.locator.remember(r, w.cgroup)
        if loc is None:
            results.append(WriteResult(w, w.resource, "unsupported"))
        return loc

    def _cache_hit(self, item: Item, now: float) -> bool:
        if not item.write.cacheable or item.write.recheck:
            return False
        entry = self.cache.fresh(item.key, item.write.value, now)
        if entry is not None:
            self.stats.cache_hits += 1
            item.result.status = "cached"
            item.result.value = entry.value
            return True
        return False

    def _read_current(self, items: list[Item], now: float) -> None:
        """Current contents: from the write cache when fresh (the value changed, the file did not
        change behind our back within the force interval), else from one native batch read."""
        fds = self.files.lookup([it.path for it in items])
        readable: list[int] = []
        for k, (it, f) in enumerate(zip(items, fds)):
            if isinstance(f, int) and -f == errno.ENOENT and self.dry_run and self.shadow.in_dir(it.path):
                it.current, it.virtual = None, True  # would be an empty file of the directory to be made
                continue
            if isinstance(f, int):
                it.current = None
                it.result.error = os.strerror(-f)
                it.result.status = self._not_there(it, -f) if -f in IGNORABLE else "failed"
                continue
            it.fd, it.truncate, it.one_shot = f[0], f[1], f[0] == ONE_SHOT
            if not it.write.compare:
                continue
            entry = self.cache.entries.get(it.key)
            fresh = entry is not None and now - entry.ts < self.force_seconds
            if (fresh and entry is not None and entry.content is not None and it.write.cacheable
                    and not it.write.recheck and not it.resource.multi_entry):
                it.current = entry.content
            elif f[2]:
                readable.append(k)
        if readable:
            contents = self._read_paths([items[k].path for k in readable])
            for k, c in zip(readable, contents):
                if isinstance(c, str):
                    items[k].current, items[k].read = c, True
                elif -c in IGNORABLE:
                    items[k].result.error = os.strerror(-c)
                    items[k].result.status = self._not_there(items[k], -c)
                    self.files.drop(items[k].path)

    def _compare(self, items: list[Item], now: float) -> None:
        """What each file gets, and whether it needs a write at all: a file that already holds it is
        ``"unchanged"``, one changed back by another writer again and again is held
        (:mod:`.conflicts`), the rest get their steps in the leveled order (:mod:`.order`)."""
        # Several entries of one multi-entry file (devices, schemata lines, task ids) in one batch
        # are planned against the content the previous entries leave, not the same pre-read.
        shadow: dict[str, str | None] = {}
        for it in items:
            if it.result.status in ("missing", "failed"):
                continue
            w, r = it.write, it.resource
            cur = shadow.get(it.path, it.current) if r.multi_entry else it.current
            content = w.value if w.raw else r.render(w.value, cur, self.version)
            after = r.merge_entry(cur, content) if (r.merge_entry is not None and not w.raw) else content
            it.result.value = content.strip()
            it.result.old = None if cur is None else cur.strip()
            if cur is not None and w.compare and r.equal(cur, content, self.version):
                it.result.status = "unchanged"
                self.stats.unchanged += 1
                if w.cacheable:
                    self.cache.put(it.key, self._cached_value(it), now, cur, it.read and not r.multi_entry)
                if it.read:
                    self.fights.found(it, cur)
                continue
            if (it.read and cur is not None and self.fights.watched(it)
                    and self.fights.undone(it, cur, now, self.cache.entries)):
                continue  # another writer keeps changing it back: held until the retry
            it.result.status = "planned"
            it.steps = order.steps(it, cur, content, after, self.canonical)
            if r.multi_entry:
                shadow[it.path] = after

    def _execute(self, items: list[Item], now: float) -> None:
        for batch in order.phases([it for it in items if it.steps]):
            if batch:
                self._write_batch(batch, now)
        for it in items:
            self._finish(it, now)

    def _write_batch(self, batch: list[tuple[Item, str, str]], now: float) -> None:
        """Write ``(item, entry, payload)`` in order; the audit names the entry written."""
        # descriptors were looked up when the current values were read (an LRU eviction in
        # between would only close descriptors of files not in this batch)
        todo = [k for k, (it, _, _) in enumerate(batch)
                if it.result.status != "failed" and (it.fd >= 0 or it.one_shot)]
        if self.dry_run:
            for it, _, _ in batch:
                if it.result.status != "failed" and (it.fd >= 0 or it.virtual):
                    it.result.status = "dry-run"
            return
        if not todo:
            return
        payloads = [batch[k][2].encode() for k in todo]
        errs = self._pwrite([batch[k][0] for k in todo], payloads)
        self.stats.write_syscalls += len(todo)
        for k, e in zip(todo, errs):
            it, content, _ = batch[k]
            if e == 0:
                it.result.status = "written"
                self._audit(it, content)
                if it.key in self.reporter:
                    self.reporter.recovered(it.key, it.write.strategy, it.target, now)
            else:
                # gone after it was opened: its cgroup is being removed (a file never there failed above)
                it.result.status = "missing" if e in IGNORABLE else "failed"
                it.result.error = f"{errno.errorcode.get(e, str(e))}: {os.strerror(e)}"
                if e in IGNORABLE:
                    self.files.drop(it.path)
                else:
                    self._failed(it, content, now)

    def _not_there(self, it: Item, err: int) -> str:
        """``"missing"`` for a file whose cgroup is gone (its directory too), a pid that is gone, or a
        knob marked optional (``if_exists``); ``"failed"`` for a file missing in a directory that exists:
        the kernel should have made it, and a write that never lands is reported like any failure."""
        if err != errno.ENOENT or it.resource.if_exists or not os.path.isdir(os.path.dirname(it.path)):
            return "missing"
        it.result.error = "ENOENT: no such file in a directory that exists"
        return "failed"

    def _audit(self, it: Item, content: str) -> None:
        w = it.write
        it.audited = True
        self.audit.record(strategy=w.strategy, action="write", target=it.target, value=content.strip(),
                          old=it.result.old, uid=w.uid, reason=w.reason, executed=True, error=None)
        for cb in self.on_write:
            cb(WriteResult(w, it.target, "written", content.strip(), it.result.old))

    def _failed(self, it: Item, content: str, now: float) -> None:
        it.audited = True
        self.reporter.refused(it.key, "failed", it.write, it.target, content.strip(), it.result.old,
                              it.result.error or "failed", now)

    def _finish(self, it: Item, now: float) -> None:
        """The write's outcome into the rooms: cache, conflicts, originals, the dry run's shadow."""
        st = it.result.status
        w = it.write
        if w.restore and st != "failed":
            self.originals.put_back(it)  # put back (or gone): a later change records a new original
        if st == "written":
            self.stats.written += 1
            if w.cacheable:
                self.cache.put(it.key, self._cached_value(it), now, it.result.value)
            self.fights.written(it)
            self.originals.remember(it)
        elif st == "dry-run":
            self.audit.record(strategy=w.strategy, action="write", target=it.target, value=it.result.value,
                              old=it.result.old, uid=w.uid, reason=w.reason, executed=False)
            if w.cacheable:  # what the file holds still (read when decided: the re-check compares it)
                self.cache.put(it.key, w.value, now, it.current, it.read and not it.resource.multi_entry)
            else:
                self.shadow.decide(it.key, w.value, now)
        elif st == "missing":
            self.stats.missing += 1
            log.debug("skip %s: %s", it.target, it.result.error)
        elif st == "failed":
            self.stats.failed += 1
            if not it.audited:
                self._failed(it, it.result.value or w.value, now)

    def _cached_value(self, it: Item) -> str:
        """The canonical value a cache entry holds (a raw write's content made canonical)."""
        w = it.write
        return self.canonical(it.resource, w.value) if w.raw else w.value

    def _gc(self, now: float) -> None:
        self._last_gc = now
        self.cache.gc(now)
        self.claims.gc(now, self.cache_ttl)
        self.shadow.gc(now)
        self.plans.gc(now, self.cache_ttl + self.force_seconds)

    # ------------------------------------------------------------------
    # reads and writes (native batches)
    # ------------------------------------------------------------------
    def _read_paths(self, paths: Sequence[str]) -> list[str | int]:
        """Contents of files (via cached descriptors), or -errno."""
        fds = self.files.lookup(paths)
        out: list[str | int] = [0] * len(paths)
        idx: list[int] = []
        for i, f in enumerate(fds):
            if isinstance(f, int):
                out[i] = f
            elif not f[2]:
                out[i] = -errno.EACCES  # write-only file
            elif f[0] == ONE_SHOT:
                out[i] = self._read_once(paths[i])
            else:
                idx.append(i)
        if idx:
            arr = np.fromiter((fds[i][0] for i in idx), dtype=np.int32, count=len(idx))  # type: ignore[index]
            for i, d in zip(idx, read_fds(arr, self.stats)):
                out[i] = d.decode(errors="replace") if isinstance(d, bytes) else d
        return out

    def _read_once(self, path: str) -> str | int:
        d = self.files.read_once(path, READ_CHUNK)
        self.stats.read_syscalls += 1
        if isinstance(d, bytes) and len(d) == READ_CHUNK:
            d = self.files.read_once(path, 1 << 22)
            self.stats.read_syscalls += 1
        return d.decode(errors="replace") if isinstance(d, bytes) else d

    def _pwrite(self, items: list[Item], payloads: list[bytes]) -> list[int]:
        """Write in order: runs of kept descriptors in one native batch, one-shot files one by one."""
        errs: list[int] = []
        k = 0
        while k < len(items):
            one_shot = items[k].one_shot
            j = k
            while j < len(items) and items[j].one_shot == one_shot:
                j += 1
            if one_shot:
                errs.extend(self.files.write_once(it.path, p) for it, p in zip(items[k:j], payloads[k:j]))
            else:
                run = items[k:j]
                fd_arr = np.fromiter((it.fd for it in run), dtype=np.int32, count=len(run))
                trunc = np.fromiter((it.truncate for it in run), dtype=np.uint8, count=len(run))
                errs.extend(sysio.pwrite_batch(fd_arr, payloads[k:j], trunc).tolist())
            k = j
        return errs
