"""What killed test runs leave behind: swept at the start of a test session (tests/conftest.py).

A run killed before its cleanup (SIGKILL, a timeout, a closed terminal) leaves real cgroups
``qosm-test-<pid>-<hex>`` (and ``qosm-probe-<pid>-<hex>``) under its own cgroup in each hierarchy
(:mod:`kernelcg`), and the symlink root ``qosm-cgroot-<pid>-*`` in the temp dir pointing at them.  They
cost every later run: a cgroup v1 quota write walks every cpu cgroup of the host (~5 ns each), so
leaked trees of a few thousand cgroups make the executor benchmark's kernel writes measurably slower
and its naive/batch ratio smaller.

:func:`sweep` removes only what is provably a dead run's and empty:

* a cgroup named ``qosm-test-<pid>-<hex>`` or ``qosm-probe-<pid>-<hex>`` directly under this process's
  own cgroup of a hierarchy, whose ``<pid>`` is no running process: its subtree depth first, each
  cgroup by ``rmdir`` only, and only when its ``cgroup.procs`` lists no process (a cgroup that still
  holds one stays, and with it its parents); nothing is written, nothing is killed;
* a ``qosm-cgroot-*`` entry of the temp dir whose owner is dead: the pid in its name, or for older
  names without one the pid of the ``qosm-test-<pid>-`` cgroups all its symlinks point at.  Only its
  symlinks into such cgroups are unlinked (never what they point at), then the directory is removed if
  that left it empty (a v2 root is one such symlink itself).

Anything else, a name that does not match exactly, a pid that runs (or that this process cannot
tell), a regular file, a directory that is not empty, is left alone.
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from typing import Any

import kernelcg

CGROUP_NAME = re.compile(r"^qosm-(?:test|probe)-(?P<pid>[1-9]\d{0,9})-[0-9a-f]{8}$")
ROOT_NAME = re.compile(r"^qosm-cgroot-(?:(?P<pid>[1-9]\d{0,9})-)?[A-Za-z0-9_]+$")
TREE_IN_TARGET = re.compile(r"/qosm-test-(?P<pid>[1-9]\d{0,9})-[0-9a-f]{8}(?:/|$)")


def alive(pid: int) -> bool:
    """True unless no process ``pid`` exists (a process this one may not signal counts as alive)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def cgroup_bases() -> list[str]:
    """This process's own cgroup in each mounted hierarchy (v1 ones and the v2 unified tree)."""
    try:
        own = kernelcg.own_cgroups()
    except OSError:
        return []
    bases = []
    for h in (*kernelcg.V1_HIERARCHIES, *kernelcg.V1_OPTIONAL, "unified"):
        key = "" if h == "unified" else h
        if key not in own:
            continue
        d = kernelcg.hierarchy_dir(h)
        if kernelcg._is_cgroup_mount(d):
            bases.append(os.path.join(d, own[key].lstrip("/")))
    return sorted(set(bases))


def _holds_processes(d: str) -> bool:
    try:
        with open(os.path.join(d, "cgroup.procs")) as f:
            return bool(f.read().strip())
    except FileNotFoundError:
        return False  # not a cgroup (a fake layout's directory): rmdir decides
    except OSError:
        return True  # cannot tell: leave it


def _remove_tree(top: str, removed: list[str]) -> None:
    """rmdir ``top``'s subtree depth first; a directory that cannot go (it holds processes or files) stays."""
    for dirpath, _dirs, _files in os.walk(top, topdown=False, followlinks=False):
        if _holds_processes(dirpath):
            continue
        try:
            os.rmdir(dirpath)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.EBUSY, errno.ENOTEMPTY, errno.EEXIST):
                raise
            continue
        removed.append(dirpath)


def sweep_cgroups(bases: Iterable[str], is_alive: Callable[[int], bool] = alive) -> list[str]:
    """Remove dead runs' empty ``qosm-test-``/``qosm-probe-`` cgroups directly under ``bases``; what was removed."""
    removed: list[str] = []
    for base in bases:
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in sorted(names):
            m = CGROUP_NAME.match(name)
            path = os.path.join(base, name)
            if m is None or os.path.islink(path) or not os.path.isdir(path) or is_alive(int(m["pid"])):
                continue
            _remove_tree(path, removed)
    return removed


def _owner(path: str, name_pid: str | None) -> int | None:
    """The dead-run candidate owning a symlink root: its name's pid, else its links' one pid."""
    links = [path] if os.path.islink(path) else [os.path.join(path, n) for n in os.listdir(path)]
    pids = set()
    for link in links:
        if not os.path.islink(link):
            return None  # something that is not ours
        m = TREE_IN_TARGET.search(os.readlink(link))
        if m is None:
            return None
        pids.add(int(m["pid"]))
    if name_pid is not None:
        pids.add(int(name_pid))
    return pids.pop() if len(pids) == 1 else None


def sweep_roots(tmp: str, is_alive: Callable[[int], bool] = alive) -> list[str]:
    """Remove dead runs' ``qosm-cgroot-*`` symlink roots from ``tmp`` (their links only); what was removed."""
    removed: list[str] = []
    try:
        names = os.listdir(tmp)
    except OSError:
        return removed
    for name in sorted(names):
        m = ROOT_NAME.match(name)
        if m is None:
            continue
        path = os.path.join(tmp, name)
        try:
            if not (os.path.islink(path) or os.path.isdir(path)):
                continue
            pid = _owner(path, m["pid"])
            if pid is None or is_alive(pid):
                continue
            if os.path.islink(path):
                os.unlink(path)
            else:
                for link in os.listdir(path):
                    os.unlink(os.path.join(path, link))
                os.rmdir(path)
        except OSError:
            continue  # gone meanwhile, or not ours to remove
        removed.append(path)
    return removed


def sweep(tmp: str | None = None, bases: Iterable[str] | None = None,
          is_alive: Callable[[int], bool] = alive) -> list[str]:
    """Both sweeps: this process's cgroup hierarchies and the temp dir (see the module docstring)."""
    bases = cgroup_bases() if bases is None else bases
    return sweep_cgroups(bases, is_alive) + sweep_roots(tempfile.gettempdir() if tmp is None else tmp, is_alive)


def at_session_start(session: Any) -> list[str]:
    """The sweep, said on the terminal when it removed something (both conftests call it; a second call
    in one session finds nothing)."""
    removed = sweep()
    tr = session.config.pluginmanager.get_plugin("terminalreporter") if removed else None
    if tr is not None:
        tr.write_line(f"removed {len(removed)} cgroups and directories left by killed test runs "
                      f"(tests/leftovers.py), e.g. {removed[0]}")
    return removed
