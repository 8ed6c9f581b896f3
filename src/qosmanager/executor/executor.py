"""The resource executor: every file the agent changes goes through here.

Strategies never touch files; they hand the executor :class:`Write` requests.  One
:meth:`Executor.apply` call per scheduler round then:

1. **resolves** each request through the registry (``host.resources``) to the file of
   this host's cgroup version, and **validates** the value (invalid values are
   refused and audited, never written);
2. settles **knob ownership**: one strategy owns a file at a time; when another wants
   a different value while the owner's claim is live, the resource's declared merge
   rule decides (e.g. the lower CFS quota wins) and the loser is audited;
3. consults the **write cache**: a value written less than ``force_seconds`` ago costs
   no syscall at all; older entries are re-checked so outside changes get corrected;
4. **reads** the current contents of the remaining files in one native batch and
   drops those already equal (``max`` == int64-max, cpusets as sets, ...);
5. **orders** the writes as a leveled update: limits that rise are written parents
   first, limits that fall children first, cpusets widen to the union parents first
   and narrow to the exact set children first, so a parent never holds less than a
   child at any moment (the kernel rejects that for v1 quotas and cpusets);
6. **writes** each phase with one native batch call (cached descriptors, ``pwrite``,
   one errno per file), caches what succeeded (failures never), and **audits** every
   write with its old and new value.

Cached descriptors count in the process's descriptor budget, shared with the collector
(:mod:`qosmanager.host.descriptors`); a file that gets no descriptor within it is read and
written with open, pread or pwrite, close (one-shot), in the same order.

A missing file is not an error: the cgroup is gone (or the knob does not exist on this
kernel); it is skipped, counted and retried next time.  A write that fails the same way every
tick (the kernel refuses the value, the file is read-only) is logged and audited the first time,
then as a count at most every ``repeat_seconds`` ("failed 240 more times in the last 5 min"); every
failure is still counted in :attr:`Executor.stats`.

**Plans.**  A strategy that hands over thousands of writes that rarely change wraps them in a
:class:`Plan`: a key, a version the strategy computes cheaply, and a function that builds the writes.
While a plan's version is unchanged it is skipped wholesale (its writes are not even built) until its
force window ends (``force_seconds`` after it was last checked); then it is rebuilt and every file it
holds is re-read and corrected, whatever the write cache says.  A new version sends only the writes
that differ from the last one; writes that failed or lost their file are sent again on the next
round.  ``spread=True`` staggers the first force window of plans that appear together (over the second
half of the window) so their re-checks do not all fall on one round.  Many plans of one strategy (one
per pod) go as a :class:`PlanGroup`: while its sequence of plans is the same object, the group costs
one step until the earliest of its windows ends; it is then walked, and the plans whose windows end
within the next ``force_seconds / 10`` are re-checked with the due ones, so a group of staggered plans
is walked a few times per window, not every round.  What a skipped plan would have
decided was audited when it was sent, and is audited again when the forced re-check finds it undone
(also under ``--dry-run``).

**Originals.**  The first time a strategy changes a file, what the file held is remembered; a
:class:`Restore` writes it back (one file, one entry of a multi-entry file, or every entry a strategy
changed except some) and forgets it.  :meth:`Executor.restore` does that for everything a strategy
changed.

**Another writer.**  A file this agent set that is found changed back at ``conflict_after`` checks in
a row (written, then found different on the next re-read, again and again: another agent such as
koordlet owns the same knob) is no longer rewritten at every check: the conflict is reported once (a
warning, an audit record, the degraded condition ``executor/write-conflict/<resource>``, the
:meth:`Executor.conflicts` count exported as a metric, and the ``on_conflict`` callbacks, which the
agent turns into an Event on the Node naming the file), and the write is retried with exponential
backoff (``force_seconds`` doubling up to ``conflict_max_backoff``).  A retry that finds this agent's
value still in place ends the conflict and clears the condition.  Under ``--dry-run`` nothing is
written, so nothing is watched.

Directories (resctrl control groups) are created here too, by :meth:`Executor.mkdir`: validated,
audited (``"action": "mkdir"``) and, under ``--dry-run``, only decided.  A directory the dry run
"created" is remembered, and writes to files that would be in it are decided and audited against
an empty file instead of being skipped as missing.

Kill-mode eviction sends its signals (and writes ``cgroup.kill``) here too, by :meth:`Executor.kill`
(:mod:`qosmanager.executor.kill`): audited before anything is sent, nothing sent under ``--dry-run``.

**Threads.**  One lock: :attr:`Executor.lock`, a re-entrant lock.  The tick thread and the fast path
both go through it; every public entry (``apply``, ``read``, ``read_many``, ``mkdir``, ``kill``,
``restore``, ``release``, ``forget``, ``owner``, ``close``) takes it and holds it for the whole call,
so a batch is never interleaved with another: the write cache, the claims, the originals, the
conflicts and the audit see one batch after the other.  Callbacks (``on_write``, ``on_batch``,
``on_conflict``) run with the lock held; they must not wait for another thread that takes it.
Two reads from the metrics server's thread do not take it: :meth:`Executor.conflicts` (one copy of
a dict, made without running Python code) and :attr:`Executor.stats` (integers), so a scrape never
waits for a batch.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from qosmanager._native import sysio
from qosmanager.executor import kill as _kill
from qosmanager.executor.audit import AuditLog
from qosmanager.executor.files import ONE_SHOT, FileTable
from qosmanager.host import resources as res
from qosmanager.host.cgroups import CgroupLayout
from qosmanager.host.cpuset import format_cpu_list, parse_cpu_list
from qosmanager.host.descriptors import DescriptorBudget
from qosmanager.logfmt import Repeat, RepeatLimiter

if TYPE_CHECKING:
    from qosmanager.framework.conditions import Conditions

log = logging.getLogger(__name__)

READ_CHUNK = 4096
IGNORABLE = (errno.ENOENT, errno.ENODEV, errno.ESRCH)


# Cache and ownership key: the file (its display path), the resource (v2's cpu.max carries two),
# the entry ("" for the file as a whole).  A tuple sharing the display path and the resource's name
# rather than a string of its own: a second copy of the path for each of the tens of thousands of
# files a dense node's first ticks write.
Key = tuple[str, str, str]


def _key(target: str, resource: str, entry: str) -> Key:
    return (target, resource, entry)


# Where a (resource, dir) is: the resource, the absolute path (None where it is the cgroup root joined
# with the display path, made again when the file is read or written: not a third path per file
# kept), the display path, the depth of the dir, and the key of the file.
Loc = tuple[res.Resource, str | None, str, int, Key]


@dataclass(slots=True)
class Write:
    """A strategy's wish: ``resource`` of ``cgroup`` (relative dir) should hold ``value``.

    ``value`` is canonical (cgroup v1 semantics: ``-1`` = unlimited quota, shares for CPU
    weight); the executor renders it for the host.  ``cgroup`` is the resctrl group for
    ``resctrl.*`` resources and empty for sysctls.  ``entry`` names one entry of a file
    holding several (a block device, a schemata line, a scheduler feature).
    """

    strategy: str
    resource: str
    value: str
    cgroup: str = ""
    entry: str = ""
    reason: str = ""
    uid: str | None = None
    cacheable: bool = True
    compare: bool = True  # read-compare before writing (False for append-style files)
    raw: bool = False  # value is file content already (restores)
    lease: float = 5.0  # seconds the strategy's claim on the file lasts without renewal
    recheck: bool = False  # re-read the file even when the write cache vouches for it
    restore: bool = False  # writes back an original (records none of its own)
    # (not frozen only because frozen dataclasses are slow to build; treat as immutable)


@dataclass(slots=True, eq=False)
class Plan:
    """A strategy's writes with an identity (see the module docstring).

    ``key`` names the plan among its strategy's plans; ``version`` stands for its contents (compared
    with ``is``, then ``==``: an equal version promises the same writes); ``build`` returns the writes,
    fresh :class:`Write` objects on every call (the executor marks them), and runs only when needed.
    """

    strategy: str
    key: str
    version: object
    build: Callable[[], Iterable[Write]]
    spread: bool = False  # stagger the first force window (many plans that appear together)
    # the executor's record of this plan, so that a plan object a strategy keeps is skipped without a
    # lookup (checked to belong to the executor and to be current)
    state: _PlanState | None = field(default=None, compare=False, repr=False)


@dataclass(slots=True, eq=False)
class PlanGroup:
    """Many plans of one strategy handed over as one (see the module docstring).

    ``plans`` must be a new sequence whenever any plan in it changes (a new plan object, a new
    version, one added or gone): while it is the same object the group is skipped in one step.
    """

    strategy: str
    key: str
    plans: Sequence[Plan]


@dataclass(slots=True)
class Restore:
    """A strategy's wish: write back what ``resource`` of ``cgroup`` held before it first changed it.

    ``entry`` ``""``: the file (or its only entry); a name: that entry of a multi-entry file; None:
    every entry the strategy changed except those in ``keep``.  Nothing happens where the strategy
    changed nothing (or the original was already written back).
    """

    strategy: str
    resource: str
    cgroup: str = ""
    entry: str | None = ""
    keep: frozenset[str] = frozenset()
    reason: str = ""


Request = Write | Plan | PlanGroup | Restore


@dataclass(slots=True)
class MakeDir:
    """A strategy's wish: directory ``rel`` under the ``root`` (``"cgroup"``, ``"proc"`` or ``"sys"``)
    should exist.  Only the last component is created: its parent must exist (e.g. resctrl mounted)."""

    strategy: str
    root: str
    rel: str
    reason: str = ""
    mode: int = 0o755


@dataclass(slots=True)
class WriteResult:
    write: Write
    target: str
    status: str  # written | unchanged | cached | lost | invalid | unsupported | missing | failed | dry-run
    value: str | None = None
    old: str | None = None
    error: str | None = None


@dataclass(slots=True)
class _CacheEntry:
    value: str  # canonical value written
    ts: float  # when it was written or last confirmed
    content: str | None = None  # what the file held afterwards (saves a read on the next change)


@dataclass(frozen=True, slots=True)
class WriteConflict:
    """A file another writer keeps changing back (``active``), or no longer does (the conflict is over)."""

    strategy: str
    resource: str
    target: str  # display path of the file
    ours: str  # what this agent writes
    theirs: str  # what the file held instead
    times: int  # checks in a row that found it changed back
    active: bool


@dataclass(slots=True)
class _Fight:
    resource: str
    target: str
    ours: str  # the content this agent last wrote (or found) there
    theirs: str  # what the file held instead at the last check
    streak: int = 0  # checks in a row that found this agent's content undone
    active: bool = False  # reported: written only from retry_at on
    retry_at: float = 0.0


CONFLICT_CONDITION = "executor/write-conflict/"


@dataclass(slots=True)
class _Original:
    strategy: str
    value: str  # the file's content, or the entry's own value (``entry_level``)
    write: Write  # the first write that changed it (resource, cgroup, entry, uid)
    entry_level: bool


@dataclass(slots=True)
class _PlanState:
    version: object
    expires: float  # end of the force window: rebuilt and re-checked from then on
    seen: float
    sent: list[Write]  # the writes of the current version
    retry: list[Write]  # failed or lost last time: sent again on the next round
    owner: object = None  # the executor
    alive: bool = True  # False once the executor dropped it


@dataclass(slots=True)
class _GroupState:
    plans: Sequence[Plan]  # the sequence last walked
    due: float  # the next walk: the earliest end of its plans' windows (-inf: a retry is pending)
    seen: float


RETRY_STATUSES = ("failed", "lost")


@dataclass(slots=True)
class _Claim:
    strategy: str
    value: str
    ts: float
    lease: float


@dataclass(slots=True)
class _Item:
    write: Write
    resource: res.Resource
    key: Key
    path: str
    target: str
    depth: int
    result: WriteResult
    current: str | None = None
    # (phase, what to write to a kernel file, what a plain file must hold afterwards)
    steps: list[tuple[int, str, str]] = field(default_factory=list)
    audited: bool = False
    fd: int = -1
    truncate: bool = False
    one_shot: bool = False  # no descriptor kept: opened for the write
    virtual: bool = False  # dry run: a file in a directory the dry run only pretended to create
    read: bool = False  # ``current`` was read from the file (not taken from the write cache)


@dataclass
class ExecutorStats:
    requested: int = 0
    cache_hits: int = 0
    unchanged: int = 0
    written: int = 0
    failed: int = 0
    missing: int = 0
    invalid: int = 0
    lost: int = 0
    read_syscalls: int = 0
    write_syscalls: int = 0
    plans_skipped: int = 0  # plans unchanged within their force window: not even built
    plans_sent: int = 0  # plans built (first time, new version, or forced re-check)
    conflicts: int = 0  # writes held back: another writer keeps changing the file back
    signals: int = 0  # SIGKILLs sent (kill-mode eviction)
    cgroup_kills: int = 0  # cgroup.kill writes (kill-mode eviction on cgroup v2)


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
        self.files = FileTable(max_open_files, budget)
        self.stats = ExecutorStats()
        self._cache: dict[Key, _CacheEntry] = {}
        self._claims: dict[Key, _Claim] = {}
        self._conflicts: dict[Key, tuple[str, str, str]] = {}
        self._originals: dict[Key, dict[str, _Original]] = {}  # file key -> entry ("" the file) -> original
        self._plans: dict[tuple[str, str], _PlanState] = {}
        self._groups: dict[tuple[str, str], _GroupState] = {}
        self.conditions = conditions
        self.conflict_after = max(1, conflict_after)
        self.conflict_max_backoff = conflict_max_backoff
        self._fights: dict[Key, _Fight] = {}  # key -> a file found changed back (the last check(s))
        self._held: dict[Key, str] = {}  # key -> value an uncached write established (watched files)
        # called when a conflict starts and when it ends (the agent's Node Event)
        self.on_conflict: list[Callable[[WriteConflict], None]] = []
        self._last_gc = clock()
        # failed and refused writes: said in full once, then as a count (see the module docstring)
        self._repeats = RepeatLimiter(repeat_seconds, clock=clock)
        self._said: dict[tuple[str, str, str, bool], list[tuple[str, str]]] | None = None  # a batch's lines
        self._last_sweep = self._last_gc
        self._where: dict[tuple[str, str], Loc] = {}
        self._virtual_dirs: set[str] = set()  # dry run: directories decided but not created (absolute)
        self._mkdir_failed: dict[str, int] = {}  # directory -> errno of its last audited failure
        # dry run: uncacheable writes (thread ids into a tasks file) already decided -> (value, when), so
        # the same decision is audited once per force interval, as a cacheable one is
        self._dry_decided: dict[Key, tuple[str, float]] = {}
        self.on_write: list[Callable[[WriteResult], None]] = []
        # after every apply(): its results and how long it took (seconds), for the metrics
        self.on_batch: list[Callable[[list[WriteResult], float], None]] = []

    # ------------------------------------------------------------------
    # resolution
    # ------------------------------------------------------------------
    def resolve(self, resource: str, cgroup: str = "") -> tuple[str, str] | None:
        """``(absolute path, display path)`` of a resource, or None if this host has no such file.

        The display path is relative to its root and prefixed ``proc/`` or ``sys/`` for
        non-cgroup files: the audit's ``target`` and replay's ``file``.
        """
        r = res.get(resource)
        if r.root == "cgroup":
            fname = r.file_name(self.version)
            if fname is None:
                return None
            path = self.layout.file(r.subsystem, cgroup, fname)
            return path, os.path.relpath(path, self.layout.roots.cgroup)
        rel = os.path.normpath(r.rel.format(group=cgroup))
        if r.root == "proc":
            return self.layout.roots.proc_path(rel), f"proc/{rel}"
        return self.layout.roots.sys_path(rel), f"sys/{rel}"

    # ------------------------------------------------------------------
    # directories
    # ------------------------------------------------------------------
    def mkdir(self, d: MakeDir, now: float | None = None) -> str:
        """Make sure directory ``d.rel`` exists under its root; returns ``"exists"``, ``"created"``,
        ``"dry-run"`` (decided, not created) or ``"failed"``.

        Audited as ``"action": "mkdir"`` (``target`` the display path, ``value`` the mode): once when
        created, once per dry run, once per distinct failure (the same errno again is not re-audited
        until the directory has existed in between).  A directory already there costs one ``stat``.
        A ``rel`` that is empty, absolute or climbs with ``..`` is refused (ValueError): a directory is
        only ever made where the strategy's own resource paths point.
        """
        with self.lock:
            parts = d.rel.split("/")
            if not d.rel or d.rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
                raise ValueError(f"mkdir: bad directory {d.rel!r} (relative, no '.' or '..' components)")
            roots = self.layout.roots
            if d.root == "cgroup":
                path, target = roots.cgroup_path(d.rel), d.rel
            elif d.root in ("proc", "sys"):
                path = roots.proc_path(d.rel) if d.root == "proc" else roots.sys_path(d.rel)
                target = f"{d.root}/{d.rel}"
            else:
                raise ValueError(f"mkdir: unknown root {d.root!r} (cgroup, proc or sys)")
            now = self.clock() if now is None else now
            value = f"{d.mode:04o}"
            if os.path.isdir(path):
                self._virtual_dirs.discard(path)
                self._mkdir_failed.pop(path, None)
                return "exists"
            if self.dry_run:
                if path not in self._virtual_dirs:
                    self._virtual_dirs.add(path)
                    self.audit.record(strategy=d.strategy, action="mkdir", target=target, value=value,
                                      reason=d.reason, executed=False, ts=now)
                    self.audit.flush()
                return "dry-run"
            try:
                sysio.mkdir(path, d.mode)  # through sysio: a fake host's kernel populates the new dir
            except FileExistsError:
                return "exists" if os.path.isdir(path) else self._mkdir_error(d, path, target, value, now,
                                                                               errno.EEXIST)
            except OSError as e:
                return self._mkdir_error(d, path, target, value, now, e.errno or errno.EIO)
            self._mkdir_failed.pop(path, None)
            self.audit.record(strategy=d.strategy, action="mkdir", target=target, value=value, reason=d.reason,
                              executed=True, ts=now)
            self.audit.flush()
            return "created"

    def _mkdir_error(self, d: MakeDir, path: str, target: str, value: str, now: float, err: int) -> str:
        if self._mkdir_failed.get(path) != err:
            self._mkdir_failed[path] = err
            error = f"{errno.errorcode.get(err, str(err))}: {os.strerror(err)}"
            self.audit.record(strategy=d.strategy, action="mkdir", target=target, value=value,
                              reason=d.reason, executed=False, error=error, ts=now)
            self.audit.flush()
        return "failed"

    # ------------------------------------------------------------------
    # signals
    # ------------------------------------------------------------------
    def kill(self, k: _kill.Kill, now: float | None = None) -> _kill.KillResult:
        """SIGKILL a pod's processes, pid by pid or by its ``cgroup.kill`` (see :mod:`.kill`)."""
        with self.lock:
            return _kill.kill(self, k, now)

    def _signal(self, pid: int, pidfd: int) -> int:
        """The one place the agent sends a signal: SIGKILL; 0 or the errno."""
        return _kill.send_sigkill(pid, pidfd)

    def _in_virtual_dir(self, path: str) -> bool:
        return bool(self._virtual_dirs) and os.path.dirname(path) in self._virtual_dirs

    # ------------------------------------------------------------------
    # reads (strategies' view of current values, through the context)
    # ------------------------------------------------------------------
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
            out: list[str | None] = [None] * len(cgroups)
            todo: list[tuple[int, str, Key]] = []
            cache, force, where = self._cache, self.force_seconds, self._where
            for i, cg in enumerate(cgroups):
                loc = where.get((resource, cg)) or self._remember(r, cg)
                if loc is None:
                    continue
                entry = cache.get(loc[4])
                if entry is not None and now - entry.ts < force:
                    out[i] = entry.value
                else:
                    todo.append((i, self._path(loc), loc[4]))
            if todo:
                contents = self._read_paths([p for _, p, _ in todo])
                multi = r.multi_entry
                for (i, _, key), content in zip(todo, contents):
                    if isinstance(content, str):
                        value = out[i] = self.canonical(r, content)
                        if not multi and key in cache:  # confirmed now (or found changed: the truth)
                            cache[key] = _CacheEntry(value, now, content)
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
            data = sysio.pread_batch(arr, READ_CHUNK)
            self.stats.read_syscalls += len(idx)
            big = [k for k, d in enumerate(data) if isinstance(d, bytes) and len(d) == READ_CHUNK]
            if big:
                more = sysio.pread_batch(arr[big], 1 << 22)
                self.stats.read_syscalls += len(big)
                for k, d in zip(big, more):
                    data[k] = d
            for i, d in zip(idx, data):
                out[i] = d.decode(errors="replace") if isinstance(d, bytes) else d
        return out

    def _read_once(self, path: str) -> str | int:
        d = self.files.read_once(path, READ_CHUNK)
        self.stats.read_syscalls += 1
        if isinstance(d, bytes) and len(d) == READ_CHUNK:
            d = self.files.read_once(path, 1 << 22)
            self.stats.read_syscalls += 1
        return d.decode(errors="replace") if isinstance(d, bytes) else d

    # ------------------------------------------------------------------
    # the batch
    # ------------------------------------------------------------------
    def apply(self, requests: Iterable[Request], now: float | None = None) -> list[WriteResult]:
        """Carry out writes, plans and restores (see the module docstring); one result per write sent
        (a skipped plan, or a restore with nothing to restore, has none)."""
        with self.lock:
            self._said = {}
            try:
                return self._apply(requests, now)
            finally:
                said, self._said = self._said, None
                self._say_grouped(said)

    def _apply(self, requests: Iterable[Request], now: float | None) -> list[WriteResult]:
        t0 = time.perf_counter()
        now = self.clock() if now is None else now
        writes, spans, walked = self._expand(requests, now)
        results: list[WriteResult] = []
        items: dict[Key, _Item] = {}
        cache, force = self._cache, self.force_seconds
        for w in writes:
            self.stats.requested += 1
            loc = self._locate(w, results)
            if loc is None:
                continue
            r, _, target, depth, base_key = loc
            key = (base_key[0], base_key[1], w.entry) if w.entry else base_key
            # fast path: this strategy already owns the file and wrote this value recently
            claim = self._claims.get(key)
            entry = cache.get(key)
            if (claim is not None and claim.strategy == w.strategy and entry is not None and w.cacheable
                    and entry.value == w.value and now - entry.ts < force and not w.recheck):
                claim.ts, claim.value, claim.lease = now, w.value, w.lease
                self.stats.cache_hits += 1
                results.append(WriteResult(w, target, "cached", w.value))
                continue
            if self.dry_run and not w.cacheable:
                seen = self._dry_decided.get(key)
                if seen is not None and seen[0] == w.value and now - seen[1] < force:
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
                    self._refused(key, "invalid", w, target, w.value, None, result.error, now)
                    continue
            item = _Item(w, r, key, self._path(loc), target, depth, result)
            if self._settle_ownership(item, now) is None:
                continue
            prev = items.get(key)
            if prev is not None:
                prev.result.status = "superseded"
            items[key] = item
        pending = [it for it in items.values() if not self._cache_hit(it, now)]
        if pending:
            self._read_current(pending, now)
            self._plan(pending, now)
            self._execute(pending, now)
        for st, a, b in spans:  # what did not land is sent again on the next round
            st.retry = [r.write for r in results[a:b] if r.status in RETRY_STATUSES]
        for gs in walked:  # the group's next walk: its earliest window end, or at once for a retry
            states = [p.state for p in gs.plans if p.state is not None]
            gs.due = min((-math.inf if ps.retry else ps.expires for ps in states), default=math.inf)
        if self._repeats and now - self._last_sweep >= self._repeats.interval / 10:
            self._sweep_repeats(now)
        self.audit.flush()
        if now - self._last_gc > self.force_seconds:
            self._gc(now)
        if self.on_batch:
            dt = time.perf_counter() - t0
            for cb in self.on_batch:
                cb(results, dt)
        return results

    # ------------------------------------------------------------------
    # plans and restores
    # ------------------------------------------------------------------
    def _expand(self, requests: Iterable[Request], now: float
                ) -> tuple[list[Write], list[tuple[_PlanState, int, int]], list[_GroupState]]:
        """The writes to send this round, which of them (a span) each sent plan contributed, and the
        plan groups walked."""
        out: list[Write] = []
        spans: list[tuple[_PlanState, int, int]] = []
        walked: list[_GroupState] = []
        for r in requests:
            if type(r) is Write:
                out.append(r)
            elif isinstance(r, Plan):
                self._plans_to_send((r,), now, now, out, spans)
            elif isinstance(r, PlanGroup):
                gk = (r.strategy, r.key)
                gs = self._groups.get(gk)
                if gs is not None and gs.plans is r.plans and now < gs.due:
                    gs.seen = now
                    self.stats.plans_skipped += len(r.plans)
                    continue
                # plans whose windows end within the next tenth of the window are re-checked with
                # the ones due now, so a group of staggered plans is walked every force_seconds / 10
                self._plans_to_send(r.plans, now, now + self.force_seconds / 10, out, spans)
                if gs is None:
                    gs = self._groups[gk] = _GroupState(r.plans, now, now)
                gs.plans, gs.seen = r.plans, now
                walked.append(gs)
            elif isinstance(r, Restore):
                self._restore_writes(r, out)
            elif isinstance(r, Write):
                out.append(r)
            else:
                raise TypeError(f"executor: {type(r).__name__} is not a Write, Plan, PlanGroup or Restore")
        return out, spans, walked

    def _plans_to_send(self, plans: Iterable[Plan], now: float, horizon: float, out: list[Write],
                       spans: list[tuple[_PlanState, int, int]]) -> None:
        skipped = 0
        for p in plans:
            st = p.state
            if (st is not None and st.version is p.version and horizon < st.expires and not st.retry
                    and st.alive and st.owner is self):
                st.seen = now  # the steady state: an unchanged plan object the strategy keeps
                skipped += 1
                continue
            start = len(out)
            sent = self._plan_writes(p, now, horizon, out)
            if sent is not None:
                spans.append((sent, start, len(out)))
        self.stats.plans_skipped += skipped

    def _plan_writes(self, p: Plan, now: float, horizon: float, out: list[Write]) -> _PlanState | None:
        """Append what plan ``p`` needs sent now; None when it is skipped (unchanged, and its window
        ends after ``horizon``)."""
        pk = (p.strategy, p.key)
        st = self._plans.get(pk)
        force = self.force_seconds
        if st is not None and horizon < st.expires and (st.version is p.version or st.version == p.version):
            st.version, st.seen = p.version, now  # the same object next time: an identity check
            p.state = st
            if not st.retry:
                self.stats.plans_skipped += 1
                return None
            out.extend(st.retry)
            return st
        built = list(p.build())
        self.stats.plans_sent += 1
        if st is None:
            # a spread plan's first window ends somewhere in the second half of the force window
            window = force
            if p.spread:
                window *= 1.0 - zlib.crc32(f"{p.strategy}/{p.key}".encode()) / 2**33
            st = self._plans[pk] = _PlanState(p.version, now + window, now, built, [], self)
            p.state = st
            out.extend(built)
            return st
        if st.expires <= horizon:  # the force window is over: every file of the plan is re-read
            for w in built:
                w.recheck = True
            st.expires = now + force
            out.extend(built)
        else:  # a new version: what differs from the last one, and what did not land last time
            old = {(w.resource, w.cgroup, w.entry): w.value for w in st.sent}
            again = {(w.resource, w.cgroup, w.entry) for w in st.retry}
            for w in built:
                k = (w.resource, w.cgroup, w.entry)
                if old.get(k) != w.value or k in again:
                    out.append(w)
        st.version, st.seen, st.sent = p.version, now, built
        p.state = st
        return st

    def _restore_writes(self, r: Restore, out: list[Write]) -> None:
        """Append the writes that put back what ``r.strategy`` found in the file (or its entries)."""
        if not self._originals:
            return
        loc = self._where.get((r.resource, r.cgroup)) or self._remember(res.get(r.resource), r.cgroup)
        table = self._originals.get(loc[4]) if loc is not None else None
        if not table:
            return
        names = [r.entry] if r.entry is not None else [e for e in table if e not in r.keep]
        for e in names:
            o = table.get(e)
            if o is not None and o.strategy == r.strategy:
                out.append(self._restore_write(o, r.reason))

    @staticmethod
    def _restore_write(o: _Original, reason: str = "") -> Write:
        w = o.write
        return Write(strategy=o.strategy, resource=w.resource, value=o.value, cgroup=w.cgroup, entry=w.entry,
                     reason=reason or f"restore the value {o.strategy} found", uid=w.uid,
                     raw=not o.entry_level, restore=True)

    def _remember_original(self, it: _Item) -> None:
        """The first change of a file (or entry) by a strategy: keep what it held."""
        w, old = it.write, it.result.old
        if w.raw or w.restore or old is None:
            return
        e = w.entry
        base = (it.key[0], it.key[1], "") if e else it.key
        table = self._originals.setdefault(base, {})
        if e in table:
            return
        getter = it.resource.entry_value
        if e and it.resource.multi_entry and getter is not None:
            value = getter(old, e)
            if value is not None:
                table[e] = _Original(w.strategy, value, w, True)
        else:
            table[e] = _Original(w.strategy, old, w, False)
        if not table:
            del self._originals[base]

    def _forget_original(self, it: _Item) -> None:
        e = it.write.entry
        base = (it.key[0], it.key[1], "") if e else it.key
        table = self._originals.get(base)
        if table is not None and table.pop(e, None) is not None and not table:
            del self._originals[base]

    def _locate(self, w: Write,
                results: list[WriteResult]) -> Loc | None:
        """Resource, path, display target, depth and key base of a write; memoized per (resource, dir)."""
        mk = (w.resource, w.cgroup)
        loc = self._where.get(mk)
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
        loc = self._remember(r, w.cgroup)
        if loc is None:
            results.append(WriteResult(w, w.resource, "unsupported"))
        return loc

    def _remember(self, r: res.Resource, cgroup: str) -> Loc | None:
        where = self.resolve(r.name, cgroup)
        if where is None:
            return None
        path, target = where
        depth = 0 if r.root != "cgroup" or not cgroup else cgroup.count("/") + 1
        kept = None if r.root == "cgroup" and self.layout.roots.cgroup_path(target) == path else path
        loc = (r, kept, target, depth, _key(target, r.name, ""))
        if len(self._where) >= 262_144:
            self._where.clear()
        self._where[(r.name, cgroup)] = loc
        return loc

    def _path(self, loc: Loc) -> str:
        """The absolute path of a located file."""
        path = loc[1]
        return self.layout.roots.cgroup_path(loc[2]) if path is None else path

    def _settle_ownership(self, item: _Item, now: float) -> _Item | None:
        w = item.write
        claim = self._claims.get(item.key)
        if claim is None or claim.strategy == w.strategy or now - claim.ts > claim.lease:
            self._claims[item.key] = _Claim(w.strategy, w.value, now, w.lease)
            return item
        winner = item.resource.merge(claim.value, w.value)
        if winner == w.value and w.value != claim.value:
            self._note_conflict(item, loser=claim.strategy, winner=w.strategy, loser_value=claim.value)
            self._claims[item.key] = _Claim(w.strategy, w.value, now, w.lease)
            return item
        item.result.status = "lost"
        if w.value != claim.value:
            self.stats.lost += 1
            self._note_conflict(item, loser=w.strategy, winner=claim.strategy, loser_value=w.value)
        return None

    def _note_conflict(self, item: _Item, loser: str, winner: str, loser_value: str) -> None:
        sig = (loser, winner, loser_value)
        if self._conflicts.get(item.key) == sig:
            return  # audit a standing conflict once, not every tick
        self._conflicts[item.key] = sig
        self.audit.record(
            strategy=loser, action="write", target=item.target, value=loser_value, uid=item.write.uid,
            executed=False, reason=f"{item.target} is owned by {winner}: {item.resource.merge_rule}",
        )

    def _cache_hit(self, item: _Item, now: float) -> bool:
        if not item.write.cacheable or item.write.recheck:
            return False
        entry = self._cache.get(item.key)
        if entry is not None and entry.value == item.write.value and now - entry.ts < self.force_seconds:
            self.stats.cache_hits += 1
            item.result.status = "cached"
            item.result.value = entry.value
            return True
        return False

    def _read_current(self, items: list[_Item], now: float) -> None:
        """Current contents: from the write cache when fresh (the value changed, the file did not
        change behind our back within the force interval), else from one native batch read."""
        paths = [it.path for it in items]
        fds = self.files.lookup(paths)
        readable: list[int] = []
        for k, (it, f) in enumerate(zip(items, fds)):
            if isinstance(f, int) and -f == errno.ENOENT and self.dry_run and self._in_virtual_dir(it.path):
                it.current, it.virtual = None, True  # would be an empty file of the directory to be made
                continue
            if isinstance(f, int):
                it.current = None
                it.result.error = os.strerror(-f)
                it.result.status = "missing" if -f in IGNORABLE else "failed"
                continue
            it.fd, it.truncate, it.one_shot = f[0], f[1], f[0] == ONE_SHOT
            if not it.write.compare:
                continue
            entry = self._cache.get(it.key)
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
                    items[k].result.status, items[k].result.error = "missing", os.strerror(-c)
                    self.files.drop(items[k].path)

    def _plan(self, items: list[_Item], now: float) -> None:
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
                    self._cache[it.key] = _CacheEntry(self._cached_value(it), now, cur)
                elif it.read and self._watched(it):
                    self._held[it.key] = cur.strip()
                if it.read and self._fights:
                    self._value_stuck(it)
                continue
            if it.read and cur is not None and self._watched(it) and self._undone(it, cur, now):
                continue  # another writer keeps changing it back: held until the retry
            it.result.status = "planned"
            phase_exact = 1
            if cur is not None and r.order == "larger":
                old_c = self.canonical(r, cur)
                new_c = self.canonical(r, content) if w.raw else w.value
                try:
                    phase_exact = 0 if res.larger(old_c, new_c) else 1
                except ValueError:
                    phase_exact = 1
            elif cur is not None and r.order == "looser":
                try:
                    old_set = set(parse_cpu_list(cur))
                    new_set = set(parse_cpu_list(content))
                except ValueError:
                    old_set = new_set = set()
                if not new_set <= old_set:
                    union = format_cpu_list(old_set | new_set)
                    it.steps.append((0, union, union))
                    if old_set | new_set == new_set:
                        continue  # the union is the exact value: one step
            elif r.order == "none":
                phase_exact = 0
            it.steps.append((phase_exact, content, after))
            if r.multi_entry:
                shadow[it.path] = after

    def _execute(self, items: list[_Item], now: float) -> None:
        planned = [it for it in items if it.steps]
        for phase in (0, 1):
            # a kernel file takes the entry; a plain (fake) file is given the whole table it would show
            batch = [(it, kernel, plain if it.truncate else kernel) for it in planned
                     for ph, kernel, plain in it.steps if ph == phase]
            if not batch:
                continue
            # phase 0 (limits rise / widen): parents first; phase 1 (fall / narrow): children first
            batch.sort(key=lambda x: x[0].depth, reverse=(phase == 1))
            self._write_batch(batch, now)
        for it in items:
            self._finish(it, now)

    def _write_batch(self, batch: list[tuple[_Item, str, str]], now: float) -> None:
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
                self._audit(it, content, executed=True)
                if it.key in self._repeats:
                    self._recovered(it, now)
            else:
                it.result.status = "missing" if e in IGNORABLE else "failed"
                it.result.error = f"{errno.errorcode.get(e, str(e))}: {os.strerror(e)}"
                if e in IGNORABLE:
                    self.files.drop(it.path)
                else:
                    self._failed(it, content, now)

    def _pwrite(self, items: list[_Item], payloads: list[bytes]) -> list[int]:
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

    def _audit(self, it: _Item, content: str, executed: bool) -> None:
        w = it.write
        it.audited = True
        self.audit.record(strategy=w.strategy, action="write", target=it.target, value=content.strip(),
                          old=it.result.old, uid=w.uid, reason=w.reason, executed=executed,
                          error=None if executed else it.result.error)
        if executed:
            for cb in self.on_write:
                cb(WriteResult(w, it.target, "written", content.strip(), it.result.old))

    # ------------------------------------------------------------------
    # failures that repeat
    # ------------------------------------------------------------------
    def _failed(self, it: _Item, content: str, now: float) -> None:
        it.audited = True
        self._refused(it.key, "failed", it.write, it.target, content.strip(), it.result.old,
                      it.result.error or "failed", now)

    def _refused(self, key: Key, kind: str, w: Write, target: str, value: str, old: str | None, error: str,
                 now: float) -> None:
        """Log and audit a failed or invalid write: in full the first time (or when it fails another
        way), then as a count at most every ``repeat_seconds``."""
        # the same file failing the same way is one failure, whatever value is wanted this tick
        cause = error if kind == "failed" else kind
        info = (kind, w, target, value, old, error)
        rep = self._repeats.hit(key, (w.strategy, cause), info, now)
        if rep is not None:
            self._report(rep, *info)

    def _report(self, rep: Repeat, kind: str, w: Write, target: str, value: str, old: str | None,
                error: str) -> None:
        verb = "refused (invalid value)" if kind == "invalid" else "failed"
        if rep.first:
            self._say(w.strategy, verb, error, f"{target} = {value}")
            self.audit.record(strategy=w.strategy, action="write", target=target, value=value, old=old,
                              uid=w.uid, reason=w.reason, executed=False, error=error)
            return
        self._say(w.strategy, verb, error, f"{target} = {value}", rep.times())
        self.audit.record(strategy=w.strategy, action="write", target=target, value=value, old=old, uid=w.uid,
                          reason=f"{w.reason} ({verb} {rep.times()})", executed=False, error=error,
                          repeats=rep.count)

    def _recovered(self, it: _Item, now: float) -> None:
        rep = self._repeats.clear(it.key, now)
        if rep is not None:
            self._say(it.write.strategy, "works again", "", it.target, rep.times())

    def _say(self, strategy: str, what: str, error: str, where: str, times: str = "") -> None:
        """One log line about a write; within a batch, lines alike (the same strategy, outcome and
        error: an EMFILE storm over 2,000 files) become one line with a count and an example."""
        if self._said is not None:
            self._said.setdefault((strategy, what, error, bool(times)), []).append((where, times))
            return
        self._say_grouped({(strategy, what, error, bool(times)): [(where, times)]})

    @staticmethod
    def _say_grouped(said: dict[tuple[str, str, str, bool], list[tuple[str, str]]]) -> None:
        for (strategy, what, error, _), lines in said.items():
            where, times = lines[0]
            if what == "works again":
                if len(lines) == 1:
                    log.warning("%s: writing %s works again (it failed %s)", strategy, where, times)
                else:
                    log.warning("%s: writing %d files works again, e.g. %s (it failed %s)", strategy,
                                len(lines), where, times)
                continue
            detail = f" {times}" if times else ""
            if len(lines) == 1:
                log.warning("%s: writing %s %s%s: %s", strategy, where, what, detail, error)
            else:
                log.warning("%s: %d writes %s%s: %s; e.g. writing %s (each is in the audit log)", strategy,
                            len(lines), what, " again" if times else "", error, where)

    def _sweep_repeats(self, now: float) -> None:
        """Sum up failures that stopped repeating (the strategy no longer asks for that write)."""
        self._last_sweep = now
        for _, info, rep in self._repeats.due(now):
            self._report(rep, *info)

    def _finish(self, it: _Item, now: float) -> None:
        st = it.result.status
        w = it.write
        if w.restore and st != "failed":
            self._forget_original(it)  # put back (or gone): a later change records a new original
        if st == "written":
            self.stats.written += 1
            if w.cacheable:
                self._cache[it.key] = _CacheEntry(self._cached_value(it), now, it.result.value)
            elif self._watched(it):
                self._held[it.key] = it.result.value or ""
            f = self._fights.get(it.key) if self._fights else None
            if f is not None:
                f.ours = it.result.value or ""
            self._remember_original(it)
        elif st == "dry-run":
            self.audit.record(strategy=w.strategy, action="write", target=it.target, value=it.result.value,
                              old=it.result.old, uid=w.uid, reason=w.reason, executed=False)
            if w.cacheable:
                self._cache[it.key] = _CacheEntry(w.value, now)
            else:
                self._dry_decided[it.key] = (w.value, now)
        elif st == "missing":
            self.stats.missing += 1
            log.debug("skip %s: %s", it.target, it.result.error)
        elif st == "failed":
            self.stats.failed += 1
            if not it.audited:
                self._failed(it, it.result.value or w.value, now)

    # ------------------------------------------------------------------
    # another writer
    # ------------------------------------------------------------------
    def _watched(self, it: _Item) -> bool:
        """Files whose reverts mean a fight: one value per file (an entry of a table shares the file
        with others), not restores, not under a dry run (nothing is written there)."""
        w = it.write
        return not (self.dry_run or w.raw or w.restore or it.resource.multi_entry)

    def _undone(self, it: _Item, cur: str, now: float) -> bool:
        """A file about to be written was read: if it no longer holds what this agent last wrote (or
        found) there, someone else changed it.  Count that; True when the write is held back (a conflict
        starts now, or stands until its retry)."""
        f = self._fights.get(it.key) if self._fights else None
        if f is not None:
            ours: str | None = f.ours
        elif it.write.cacheable:
            entry = self._cache.get(it.key)
            ours = entry.content if entry is not None else None
        else:
            ours = self._held.get(it.key)
        if ours is None:
            return False  # never written here (or forgotten): an ordinary change
        theirs = cur.strip()
        if theirs == ours.strip() or it.resource.equal(cur, ours, self.version):
            if f is not None:
                self._value_stuck(it)  # ours is still there: only this agent's wish changed
            return False
        if f is None:
            f = self._fights[it.key] = _Fight(it.write.resource, it.target, ours, theirs)
        f.theirs = theirs
        if f.active and now < f.retry_at:
            return self._hold(it, f)
        f.streak += 1
        if f.active:  # the retry: written once more, the next one waits twice as long
            f.retry_at = now + self._backoff(f.streak)
            return False
        if f.streak < self.conflict_after:
            return False
        f.active, f.retry_at = True, now + self._backoff(f.streak)
        self._conflict_changed(it, f, started=True)
        return self._hold(it, f)

    def _hold(self, it: _Item, f: _Fight) -> bool:
        it.result.status = "conflict"
        it.result.old = f.theirs
        self.stats.conflicts += 1
        return True

    def _backoff(self, streak: int) -> float:
        return float(min(self.force_seconds * 2.0 ** min(streak - self.conflict_after, 30),
                         self.conflict_max_backoff))

    def _value_stuck(self, it: _Item) -> None:
        f = self._fights.pop(it.key, None)
        if f is not None and f.active:
            self._conflict_changed(it, f, started=False)

    def _conflict_changed(self, it: _Item, f: _Fight, *, started: bool) -> None:
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
        self._conflict_condition(w.resource)
        for cb in self.on_conflict:
            try:
                cb(event)
            except Exception:  # a reporting hook never stops a write batch
                log.exception("write conflict callback failed")

    def _conflict_condition(self, resource: str) -> None:
        """Raise, restate or clear ``executor/write-conflict/<resource>`` from the standing conflicts."""
        if self.conditions is None:
            return
        key = CONFLICT_CONDITION + resource
        files = sorted(f.target for f in self._fights.values() if f.active and f.resource == resource)
        if not files:
            self.conditions.clear(key)
            return
        what = f"{files[0]}" if len(files) == 1 else f"{len(files)} files ({files[0]}, ...)"
        self.conditions.set(key, f"{what} changed back by another writer again and again; rewritten with "
                                 "backoff instead of at every check (turn off the other agent's feature "
                                 "for this knob)")

    def conflicts(self) -> dict[str, int]:
        """Files in a standing conflict with another writer, by resource (safe from another thread: the
        metrics server's)."""
        out: dict[str, int] = {}
        for f in list(self._fights.values()):  # one copy, taken without running Python code
            if f.active:
                out[f.resource] = out.get(f.resource, 0) + 1
        return out

    def _drop_fights(self, keys: Iterable[Key]) -> None:
        resources = set()
        for key in keys:
            f = self._fights.pop(key, None)
            if f is not None and f.active:
                resources.add(f.resource)
        for resource in resources:
            self._conflict_condition(resource)

    def _cached_value(self, it: _Item) -> str:
        """The canonical value a cache entry holds (a raw write's content made canonical)."""
        w = it.write
        return self.canonical(it.resource, w.value) if w.raw else w.value

    # ------------------------------------------------------------------
    # lifecycle
    # ------------------------------------------------------------------
    def release(self, strategy: str) -> None:
        """Drop every claim, plan and write conflict of ``strategy`` (it was disabled or stopped)."""
        with self.lock:
            self._drop_fights([k for k in self._fights if (c := self._claims.get(k)) is not None
                               and c.strategy == strategy])
            for key in [k for k, c in self._claims.items() if c.strategy == strategy]:
                del self._claims[key]
            for pk in [pk for pk in self._plans if pk[0] == strategy]:
                self._plans.pop(pk).alive = False
            for gk in [gk for gk in self._groups if gk[0] == strategy]:
                del self._groups[gk]

    def restore(self, strategy: str, now: float | None = None) -> list[WriteResult]:
        """Write back what ``strategy`` found before it first changed each file, then release it."""
        with self.lock:
            writes = [self._restore_write(o) for table in self._originals.values() for o in table.values()
                      if o.strategy == strategy]
            self.release(strategy)
            return self.apply(writes, now) if writes else []

    def forget(self, cgroups: Sequence[str]) -> None:
        """A pod went away: drop cache entries, claims and descriptors under its cgroup dirs."""
        with self.lock:
            if not cgroups:
                return
            prefixes: list[str] = []
            for cg in cgroups:
                if self.version == 1:
                    prefixes.extend(os.path.relpath(self.layout.abs_dir(s, cg), self.layout.roots.cgroup) + "/"
                                    for s in ("cpu", "cpuacct", "cpuset", "memory", "blkio"))
                else:
                    prefixes.append(cg + "/")
            pre = tuple(prefixes)
            dirs = tuple(cg + "/" for cg in cgroups)
            for mk in [mk for mk in self._where if mk[1] + "/" in dirs or mk[1].startswith(dirs)]:
                del self._where[mk]
            self._drop_fights([k for k in self._fights if k[0].startswith(pre)])
            for d in (self._cache, self._claims, self._conflicts, self._originals, self._dry_decided, self._held):
                for key in [k for k in d if k[0].startswith(pre)]:
                    del d[key]
            if self._repeats:
                self._repeats.forget(lambda k: isinstance(k, tuple) and k[0].startswith(pre))
            self.files.forget([os.path.join(self.layout.roots.cgroup, p) for p in prefixes])

    def _gc(self, now: float) -> None:
        self._last_gc = now
        for key in [k for k, e in self._cache.items() if now - e.ts > self.cache_ttl]:
            del self._cache[key]
        for key in [k for k, c in self._claims.items() if now - c.ts > max(c.lease, self.cache_ttl)]:
            del self._claims[key]
        for key in [k for k, (_, ts) in self._dry_decided.items() if now - ts > self.force_seconds]:
            del self._dry_decided[key]
        # plans no strategy presents any more (a pod that left, a strategy switched off)
        idle = self.cache_ttl + self.force_seconds
        for pk in [pk for pk, st in self._plans.items() if now - st.seen > idle]:
            self._plans.pop(pk).alive = False
        for gk in [gk for gk, gs in self._groups.items() if now - gs.seen > idle]:
            del self._groups[gk]

    def owner(self, resource: str, cgroup: str = "", entry: str = "") -> str | None:
        with self.lock:
            loc = self.resolve(resource, cgroup)
            if loc is None:
                return None
            claim = self._claims.get(_key(loc[1], resource, entry))
            return claim.strategy if claim else None

    def close(self) -> None:
        with self.lock:
            self.files.close()
            self.audit.flush()
