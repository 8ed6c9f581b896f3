"""The executor's words: what strategies hand it, what it answers, and the batch's working record.

Decides nothing.  Every room of the executor (:mod:`qosmanager.executor`) and the kill path share these
types, so none of them imports another for its vocabulary:

* requests: :class:`Write`, :class:`Plan`, :class:`PlanGroup`, :class:`Restore` (:data:`Request`),
  :class:`MakeDir`;
* answers: :class:`WriteResult`, :class:`WriteConflict`, :class:`ExecutorStats`;
* the batch: :data:`Key` (a file's cache and ownership key), :data:`Loc` (where a file is),
  :class:`Item` (one write on its way through the pipeline), :class:`PlanState` (the executor's
  record of a plan, kept on the plan object).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from qosmanager.host import resources as res

# the executor's one log, whichever room speaks (what operators and tests filter on)
log = logging.getLogger("qosmanager.executor.executor")

# a read or write failing with one of these: the file (or its cgroup) is not there
IGNORABLE = (errno.ENOENT, errno.ENODEV, errno.ESRCH)

# statuses of a plan's writes that are sent again on the next round
RETRY_STATUSES = ("failed", "lost")

# Cache and ownership key: the file (its display path), the resource (v2's cpu.max carries two),
# the entry ("" for the file as a whole).  A tuple sharing the display path and the resource's name
# rather than a string of its own: a second copy of the path for each of the tens of thousands of
# files a dense node's first ticks write.
Key = tuple[str, str, str]


def key(target: str, resource: str, entry: str) -> Key:
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
    state: PlanState | None = field(default=None, compare=False, repr=False)


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
class PlanState:
    version: object
    expires: float  # end of the force window: rebuilt and re-checked from then on
    seen: float
    sent: list[Write]  # the writes of the current version
    retry: list[Write]  # failed or lost last time: sent again on the next round
    owner: object = None  # the executor room that keeps it (plans.Plans)
    alive: bool = True  # False once the executor dropped it
    prepared: object = None  # what its re-check compares, made ready (verify.Prepared)


@dataclass(slots=True)
class Item:
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
    plans_verified: int = 0  # unchanged plans re-checked at a window's end by the verifier
    verified: int = 0  # files of those found holding what they held when last read (one native compare)
    conflicts: int = 0  # writes held back: another writer keeps changing the file back
    signals: int = 0  # SIGKILLs sent (kill-mode eviction)
    cgroup_kills: int = 0  # cgroup.kill writes (kill-mode eviction on cgroup v2)
    kills_refused: int = 0  # kills refused (the victim's cgroups hold pid 1, the agent or its parent)
