"""Another writer: a file this agent sets that keeps being changed back.

Decides when a file is in a fight: found changed back (no longer what this agent last wrote or found
there) at ``conflict_after`` checks in a row.  From then on it is not rewritten at every check but
retried with backoff (``force_seconds`` doubling up to ``conflict_max_backoff``; 1, 2, then every 4 s
for the protection knobs, :mod:`.inforce`: BE must not stay at another writer's value); the conflict is
reported once when it starts and once when it ends (a warning, an audit record, the degraded
condition ``executor/write-conflict/<resource>``, the ``on_conflict`` callbacks: the agent's Node
Event).  A retry that finds this agent's value still in place ends it.  Watched are files holding one
value (not an entry of a table), not restores, and nothing under a dry run (nothing is written).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qosmanager.executor.audit import AuditLog
from qosmanager.executor.cache import CacheEntry
from qosmanager.executor.types import ExecutorStats, Item, Key, Write, WriteConflict, log

if TYPE_CHECKING:
    from qosmanager.framework.conditions import Conditions

CONFLICT_CONDITION = "executor/write-conflict/"


@dataclass(slots=True)
class Fight:
    resource: str
    target: str
    ours: str  # the content this agent last wrote (or found) there
    theirs: str  # what the file held instead at the last check
    streak: int = 0  # checks in a row that found this agent's content undone
    active: bool = False  # reported: written only from retry_at on
    retry_at: float = 0.0


class Fights:
    def __init__(self, audit: AuditLog, stats: ExecutorStats, conditions: Conditions | None, *, version: int,
                 dry_run: bool, force_seconds: float, conflict_after: int, max_backoff: float,
                 short: Callable[[Write], bool] | None = None, short_backoff: Sequence[float] = ()) -> None:
        """``short``: the writes whose conflicts are retried after ``short_backoff`` (seconds, the last
        repeated) instead of ``force_seconds`` doubling: the protection knobs (:mod:`.inforce`)."""
        self.audit = audit
        self.short = short
        self.short_backoff = tuple(short_backoff)
        self.version = version
        self.stats = stats
        self.conditions = conditions
        self.dry_run = dry_run
        self.force_seconds = force_seconds
        self.conflict_after = max(1, conflict_after)
        self.max_backoff = max_backoff
        self.fights: dict[Key, Fight] = {}  # key -> a file found changed back (the last check(s))
        self.held: dict[Key, str] = {}  # key -> value an uncached write established (watched files)
        # called when a conflict starts and when it ends (the agent's Node Event)
        self.on_conflict: list[Callable[[WriteConflict], None]] = []

    def watched(self, it: Item) -> bool:
        """Files whose reverts mean a fight: one value per file (an entry of a table shares the file
        with others), not restores, not under a dry run (nothing is written there)."""
        w = it.write
        return not (self.dry_run or w.raw or w.restore or it.resource.multi_entry)

    def undone(self, it: Item, cur: str, now: float, cache: dict[Key, CacheEntry]) -> bool:
        """A file about to be written was read: if it no longer holds what this agent last wrote (or
        found) there, someone else changed it.  Count that; True when the write is held back (a conflict
        starts now, or stands until its retry)."""
        f = self.fights.get(it.key) if self.fights else None
        if f is not None:
            ours: str | None = f.ours
        elif it.write.cacheable:
            entry = cache.get(it.key)
            ours = entry.content if entry is not None else None
        else:
            ours = self.held.get(it.key)
        if ours is None:
            return False  # never written here (or forgotten): an ordinary change
        theirs = cur.strip()
        if theirs == ours.strip() or it.resource.equal(cur, ours, self.version):
            if f is not None:
                self.stuck(it)  # ours is still there: only this agent's wish changed
            return False
        if f is None:
            f = self.fights[it.key] = Fight(it.write.resource, it.target, ours, theirs)
        f.theirs = theirs
        if f.active and now < f.retry_at:
            return self._hold(it, f)
        f.streak += 1
        if f.active:  # the retry: written once more, the next one waits longer
            f.retry_at = now + self._backoff(f.streak, it)
            return False
        if f.streak < self.conflict_after:
            return False
        f.active, f.retry_at = True, now + self._backoff(f.streak, it)
        self._changed(it, f, started=True)
        return self._hold(it, f)

    def written(self, it: Item) -> None:
        """``it`` was written: what the file holds now is this agent's."""
        if not it.write.cacheable and self.watched(it):
            self.held[it.key] = it.result.value or ""
        f = self.fights.get(it.key) if self.fights else None
        if f is not None:
            f.ours = it.result.value or ""

    def found(self, it: Item, cur: str) -> None:
        """``it`` was read and already holds what it wants."""
        if not it.write.cacheable and self.watched(it):
            self.held[it.key] = cur.strip()
        if self.fights:
            self.stuck(it)

    def _hold(self, it: Item, f: Fight) -> bool:
        it.result.status = "conflict"
        it.result.old = f.theirs
        self.stats.conflicts += 1
        return True

    def _backoff(self, streak: int, it: Item) -> float:
        n = streak - self.conflict_after
        if self.short_backoff and self.short is not None and self.short(it.write):
            return self.short_backoff[min(n, len(self.short_backoff) - 1)]
        return float(min(self.force_seconds * 2.0 ** min(n, 30), self.max_backoff))

    def stuck(self, it: Item) -> None:
        """This agent's value is in the file: a fight over it is over."""
        f = self.fights.pop(it.key, None)
        if f is not None and f.active:
            self._changed(it, f, started=False)

    def _changed(self, it: Item, f: Fight, *, started: bool) -> None:
        w = it.write
        ours = it.result.value or w.value
        event = WriteConflict(w.strategy, w.resource, it.target, ours, f.theirs, f.streak, started)
        if started:
            log.warning("%s: %s is changed back by another writer (%d checks in a row: this agent writes %s, "
                        "the file held %s); no longer rewritten at every check, retried with backoff",
                        w.strategy, it.target, f.streak, ours, f.theirs)
            self.audit.record(strategy=w.strategy, action="write", target=it.target, value=ours, old=f.theirs,
                              uid=w.uid, executed=False,
                              reason=f"{w.reason} (held back: another writer changed the file back "
                                     f"{f.streak} times in a row; retried with backoff)",
                              error="conflict: changed back by another writer")
        else:
            log.warning("%s: %s keeps the value this agent writes again: the conflict with another writer "
                        "is over", w.strategy, it.target)
        self._condition(w.resource)
        for cb in self.on_conflict:
            try:
                cb(event)
            except Exception:  # a reporting hook never stops a write batch
                log.exception("write conflict callback failed")

    def _condition(self, resource: str) -> None:
        """Raise, restate or clear ``executor/write-conflict/<resource>`` from the standing conflicts."""
        if self.conditions is None:
            return
        key = CONFLICT_CONDITION + resource
        files = sorted(f.target for f in self.fights.values() if f.active and f.resource == resource)
        if not files:
            self.conditions.clear(key)
            return
        what = f"{files[0]}" if len(files) == 1 else f"{len(files)} files ({files[0]}, ...)"
        self.conditions.set(key, f"{what} changed back by another writer again and again; rewritten with "
                                 "backoff instead of at every check (turn off the other agent's feature "
                                 "for this knob)")

    def counts(self) -> dict[str, int]:
        """Files in a standing conflict, by resource (safe from another thread: the metrics server's)."""
        out: dict[str, int] = {}
        for f in list(self.fights.values()):  # one copy, taken without running Python code
            if f.active:
                out[f.resource] = out.get(f.resource, 0) + 1
        return out

    def drop(self, keys: Iterable[Key]) -> None:
        """Forget the fights over these files (their strategy stopped, their pod went)."""
        resources = set()
        for k in keys:
            f = self.fights.pop(k, None)
            if f is not None and f.active:
                resources.add(f.resource)
        for resource in resources:
            self._condition(resource)

    def forget(self, prefixes: tuple[str, ...]) -> None:
        self.drop([k for k in self.fights if k[0].startswith(prefixes)])
        for k in [k for k in self.held if k[0].startswith(prefixes)]:
            del self.held[k]
