"""Where a resource of a cgroup is on this host: the executor's paths.

Decides which file a (resource, dir) names on this host's cgroup version (or that there is none:
the knob does not exist here), its display path (relative to its root, ``proc/`` or ``sys/`` for
non-cgroup files: the audit's ``target`` and replay's ``file``), the depth of its dir (the leveled
order's sort key) and the key its cache entry, claim and original are kept under.  Each
(resource, dir) is worked out once and remembered until its pod goes (:meth:`Locator.forget`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from qosmanager.executor.types import Loc, key
from qosmanager.host import resources as res
from qosmanager.host.cgroups import CgroupLayout

MAX_REMEMBERED = 262_144  # (resource, dir) pairs kept; past it the memo starts again empty


class Locator:
    def __init__(self, layout: CgroupLayout) -> None:
        self.layout = layout
        self.version = layout.version
        self.where: dict[tuple[str, str], Loc] = {}  # (resource, dir) -> where it is

    def resolve(self, resource: str, cgroup: str = "") -> tuple[str, str] | None:
        """``(absolute path, display path)`` of a resource, or None if this host has no such file."""
        r = res.get(resource)
        if r.root == "cgroup":
            fname = r.file_name(self.version)
            if fname is None:
                return None
            path = self.layout.file(r.subsystem, cgroup, fname)
            root = self.layout.roots.cgroup.rstrip("/") + "/"
            tail = path[len(root):]
            if path.startswith(root) and tail[:1] not in ("", "/", ".") and "/." not in tail and "//" not in tail:
                return path, tail  # what relpath gives, without its cost (100,000 writes of a recovery)
            return path, os.path.relpath(path, self.layout.roots.cgroup)
        rel = os.path.normpath(r.rel.format(group=cgroup))
        if r.root == "proc":
            return self.layout.roots.proc_path(rel), f"proc/{rel}"
        return self.layout.roots.sys_path(rel), f"sys/{rel}"

    def get(self, r: res.Resource, cgroup: str) -> Loc | None:
        """Where ``r`` of ``cgroup`` is (memoized); None if this host has no such file."""
        return self.where.get((r.name, cgroup)) or self.remember(r, cgroup)

    def remember(self, r: res.Resource, cgroup: str) -> Loc | None:
        where = self.resolve(r.name, cgroup)
        if where is None:
            return None
        path, target = where
        depth = 0 if r.root != "cgroup" or not cgroup else cgroup.count("/") + 1
        # the absolute path is kept only where it is not the cgroup root joined with the display path
        kept = None if r.root == "cgroup" and self.layout.roots.cgroup_path(target) == path else path
        loc = (r, kept, target, depth, key(target, r.name, ""))
        if len(self.where) >= MAX_REMEMBERED:
            self.where.clear()
        self.where[(r.name, cgroup)] = loc
        return loc

    def path(self, loc: Loc) -> str:
        """The absolute path of a located file."""
        path = loc[1]
        return self.layout.roots.cgroup_path(loc[2]) if path is None else path

    def prefixes(self, cgroups: Sequence[str]) -> tuple[str, ...]:
        """The display-path prefixes of every file under these cgroup dirs (each v1 hierarchy's)."""
        prefixes: list[str] = []
        for cg in cgroups:
            if self.version == 1:
                prefixes.extend(os.path.relpath(self.layout.abs_dir(s, cg), self.layout.roots.cgroup) + "/"
                                for s in ("cpu", "cpuacct", "cpuset", "memory", "blkio"))
            else:
                prefixes.append(cg + "/")
        return tuple(prefixes)

    def forget(self, cgroups: Sequence[str]) -> None:
        """Drop what is remembered about files under these cgroup dirs."""
        dirs = tuple(cg + "/" for cg in cgroups)
        for mk in [mk for mk in self.where if mk[1] + "/" in dirs or mk[1].startswith(dirs)]:
            del self.where[mk]
