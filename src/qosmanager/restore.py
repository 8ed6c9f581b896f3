"""What the agent found before it changed a file, kept on disk, and ``qosmanager restore`` that puts it back.

An agent run with ``--originals-file FILE`` appends one JSON line to FILE the first time it changes a
file (or one entry of a multi-entry file such as a block device's throttle or a resctrl schemata line):
what it held then, and where it is (the executor's resource, cgroup and entry, as a strategy's own
restore uses them).  A file already in FILE is never recorded again, so the line keeps the value the
node had before any agent touched it, across restarts and rolling updates.  A stopping agent writes
nothing back: the next agent takes over the node as it is, and BestEffort is never unlimited between
two agents.  At start the agent drops the lines of files that are gone (pods deleted since), so FILE
follows the node, not its history.

``qosmanager restore --originals-file FILE`` (the uninstall job's command, after the agent is gone)
writes every recorded value back through the executor, audited like any write (``--audit-log``),
skips files that are gone, and prints what it did.  FILE is then renamed ``FILE.restored`` so a later
install starts afresh; entries that could not be written back stay in FILE for another try.  What
is not restored: evictions (a pod evicted stays evicted) and directories the agent made (resctrl
groups), which hold nothing once the agent's pods are gone.

Record format (one JSON object per line)::

    {"resource": "cpu.cfs_quota_us", "cgroup": "kubepods/besteffort", "entry": "", "value": "-1",
     "raw": true, "target": "cpu/kubepods/besteffort/cpu.cfs_quota_us", "strategy": "cpuSuppress",
     "ts": 1700000000.5}

``raw``: ``value`` is the file's content (true), or the entry's own value in the executor's canonical
form (false).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from qosmanager.executor.audit import AuditLog
from qosmanager.executor.executor import Executor, Write, WriteResult
from qosmanager.host import resources as res
from qosmanager.host.cgroups import CgroupLayout, detect_driver, detect_version
from qosmanager.host.roots import HostRoots

log = logging.getLogger(__name__)

STRATEGY = "restore"  # the audit's strategy of the writes ``qosmanager restore`` makes

Key = tuple[str, str, str]  # (resource, cgroup, entry)


@dataclass(frozen=True, slots=True)
class Original:
    resource: str
    cgroup: str
    entry: str
    value: str
    raw: bool
    target: str
    strategy: str
    ts: float

    @property
    def key(self) -> Key:
        return (self.resource, self.cgroup, self.entry)

    def line(self) -> str:
        return json.dumps({"resource": self.resource, "cgroup": self.cgroup, "entry": self.entry,
                           "value": self.value, "raw": self.raw, "target": self.target,
                           "strategy": self.strategy, "ts": self.ts}, ensure_ascii=False) + "\n"


def read_originals(path: str) -> list[Original]:
    """The records of ``path`` (none when it does not exist), the first one of each file kept; a line
    cut short (a node that lost power inside a write) or not a record is skipped."""
    out: dict[Key, Original] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for text in f:
                o = _parse(text)
                if o is not None and o.key not in out:
                    out[o.key] = o
    except FileNotFoundError:
        return []
    return list(out.values())


def _parse(text: str) -> Original | None:
    try:
        d = json.loads(text)
        o = Original(str(d["resource"]), str(d["cgroup"]), str(d["entry"]), str(d["value"]), bool(d["raw"]),
                     str(d["target"]), str(d.get("strategy", "")), float(d.get("ts", 0.0)))
    except (ValueError, KeyError, TypeError):
        return None
    return o if o.resource in res.REGISTRY else None


class OriginalsJournal:
    """The agent's side: an executor ``on_write`` callback appending each file's first original."""

    def __init__(self, path: str, executor: Executor, *, clock: Callable[[], float] = time.time) -> None:
        """Opens ``path`` for appending (its directory created), after dropping the records of files
        that no longer exist; an OSError here means it cannot be kept."""
        self.path = path
        self.clock = clock
        self._executor = executor
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        kept = [o for o in read_originals(path) if _exists(executor, o)]
        self.kept: tuple[Original, ...] = tuple(kept)  # the records found at start (memoryHigh's start reads them)
        self._seen: set[Key] = {o.key for o in kept}
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(o.line() for o in kept)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        self.errors = 0

    def __len__(self) -> int:
        return len(self._seen)

    def on_write(self, r: WriteResult) -> None:
        w = r.write
        if w.raw or w.restore or r.old is None:
            return  # a write-back, or a file that held nothing readable
        key = (w.resource, w.cgroup, w.entry)
        if key in self._seen:
            return
        o = original_of(w, r.old, r.target, self.clock())
        if o is None:
            return
        self._seen.add(key)
        try:
            os.write(self._fd, o.line().encode())
        except OSError as e:
            self.errors += 1
            if self.errors == 1:
                log.warning("cannot record the original of %s in %s: %s (uninstall cannot put it back)",
                            r.target, self.path, e.strerror or e)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def original_of(w: Write, old: str, target: str, ts: float) -> Original | None:
    """What a strategy's own restore would write back (the executor's rule): an entry of a multi-entry
    file by its own value, anything else by the file's content."""
    r = res.get(w.resource)
    if w.entry and r.multi_entry and r.entry_value is not None:
        value = r.entry_value(old, w.entry)
        if value is None:
            return None
        return Original(w.resource, w.cgroup, w.entry, value, False, target, w.strategy, ts)
    return Original(w.resource, w.cgroup, w.entry, old, True, target, w.strategy, ts)


def _exists(executor: Executor, o: Original) -> bool:
    where = executor.resolve(o.resource, o.cgroup)
    return where is not None and os.path.exists(where[0])


def restore(executor: Executor, originals: list[Original], now: float | None = None) -> dict[str, list[WriteResult]]:
    """Write ``originals`` back (parents before children, as the executor orders them); the results by
    status (``written``, ``unchanged``, ``missing``, ``failed``, ``dry-run``, ...)."""
    writes = [Write(strategy=STRATEGY, resource=o.resource, value=o.value, cgroup=o.cgroup, entry=o.entry,
                    reason=f"uninstall: restore what the node held before {o.strategy or 'the agent'} changed it",
                    raw=o.raw, restore=True)
              for o in originals]
    by: dict[str, list[WriteResult]] = {}
    for r in executor.apply(writes, now):
        by.setdefault(r.status, []).append(r)
    return by


def add_restore_parser(sub: Any, parents: list[argparse.ArgumentParser],
                       add_host_flags: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("restore", parents=parents,
                       help="uninstall: write back what the agent changed on this node (from --originals-file)",
                       description="Write back every file value the agent recorded before it first changed the "
                                   "file (run's --originals-file), through the same executor and audit.  Run it "
                                   "after the agent is gone (the uninstall job does).")
    add_host_flags(p)
    p.add_argument("--originals-file", required=True,
                   help="the file the agent kept with run --originals-file (required)")
    p.add_argument("--audit-log", default=None, help="JSON-lines audit of the writes back (default: none)")
    p.add_argument("--dry-run", action="store_true", help="say what would be written back; write nothing "
                                                           "(default: off)")


def restore_from_args(args: argparse.Namespace) -> int:
    """``qosmanager restore``: 0 when every recorded file still there was put back, 1 when some could
    not be (they stay in the file), 2 when the command cannot run."""
    roots = HostRoots(cgroup=args.cgroup_root, proc=args.proc_root, sys=args.sys_root,
                      kubelet_cgroup_root=args.kubelet_cgroup_root)
    path = args.originals_file
    try:
        version = detect_version(roots.cgroup) if args.cgroup_version == "auto" else int(args.cgroup_version)
        driver = detect_driver(roots, version) if args.cgroup_driver == "auto" else args.cgroup_driver
        originals = read_originals(path)
        audit = AuditLog(args.audit_log)
    except (OSError, ValueError) as e:
        print(f"qosmanager restore: {e}", file=sys.stderr)
        return 2
    executor = Executor(CgroupLayout(roots, version, driver), audit, dry_run=args.dry_run)
    try:
        by = restore(executor, originals)
    finally:
        executor.close()
        audit.close()
    for status, results in sorted(by.items()):
        for r in results:
            log.info("%s %s: %s", status, r.target, r.write.value)
    failed = [r for s, rs in by.items() if s not in ("written", "unchanged", "missing", "dry-run") for r in rs]
    counts = ", ".join(f"{len(rs)} {s}" for s, rs in sorted(by.items())) or "nothing recorded"
    print(f"qosmanager restore: {len(originals)} recorded in {path}: {counts}")
    for r in failed:
        print(f"  not restored: {r.target} ({r.status}{': ' + r.error if r.error else ''})")
    if args.dry_run:
        return 0
    if os.path.exists(path):
        left = {(r.write.resource, r.write.cgroup, r.write.entry) for r in failed}
        if left:
            _rewrite(path, (o for o in originals if o.key in left))
        else:
            os.replace(path, f"{path}.restored")
    return 1 if failed else 0


def _rewrite(path: str, originals: Iterator[Original]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(o.line() for o in originals)
    os.replace(tmp, path)
