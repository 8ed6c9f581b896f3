"""The session-start sweep (tests/leftovers.py) removes exactly a dead run's empty cgroups and symlink roots.

On a fake layout in a tmp dir every case it must leave alone is there next to what it must remove; on the
real cgroup v1 hierarchies, under this process's own cgroups, a dead run's tree goes, while a tree of this
(live) process and a dead run's cgroup that still holds a process stay.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

import kernelcg
import leftovers


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    p = subprocess.Popen(["true"])
    p.wait()
    assert not leftovers.alive(p.pid)
    return p.pid


def test_fake_layout(tmp_path: Path) -> None:
    dead, me = dead_pid(), os.getpid()
    cpu, mem, tmp = tmp_path / "cg" / "cpu", tmp_path / "cg" / "memory", tmp_path / "tmp"
    gone_cpu = cpu / f"qosm-test-{dead}-0123abcd"
    gone_mem = mem / f"qosm-test-{dead}-0123abcd"
    (gone_cpu / "kubepods" / "pod1" / "c0").mkdir(parents=True)
    (gone_cpu / "kubepods" / "pod2").mkdir(parents=True)
    gone_mem.mkdir(parents=True)
    probe = cpu / f"qosm-probe-{dead}-abcdef01"
    probe.mkdir()
    with_file = cpu / f"qosm-test-{dead}-deadbeef" / "kubepods"
    with_file.mkdir(parents=True)
    (with_file / "notes.txt").write_text("not a cgroup's")
    busy = cpu / f"qosm-test-{dead}-11111111" / "busy"
    busy.mkdir(parents=True)
    (busy / "cgroup.procs").write_text("4242\n")
    kept = [
        with_file / "notes.txt", busy / "cgroup.procs",
        cpu / f"qosm-test-{me}-22222222" / "x",  # a live run's
        cpu / f"qosm-test-{dead}-nothex00",  # not the name's form
        cpu / "qosm-testing",
        cpu / "other" / f"qosm-test-{dead}-33333333",  # not directly under the base
    ]
    for p in kept[2:]:
        p.mkdir(parents=True)
    (cpu / f"qosm-test-{dead}-44444444").symlink_to(cpu / "other")  # a symlink, not a cgroup
    kept.append(cpu / f"qosm-test-{dead}-44444444")
    # symlink roots in the temp dir
    tmp.mkdir()
    root = tmp / f"qosm-cgroot-{dead}-ab_c1234"
    root.mkdir()
    (root / "cpu").symlink_to(gone_cpu)
    (root / "memory").symlink_to(gone_mem)
    legacy = tmp / "qosm-cgroot-legacy12"  # an older name: the owner from its links
    legacy.mkdir()
    (legacy / "cpu").symlink_to(cpu / f"qosm-test-{dead}-55555555")
    v2 = tmp / f"qosm-cgroot-{dead}-v2root00"
    v2.symlink_to(tmp_path / "cg" / "unified" / f"qosm-test-{dead}-66666666")
    empty = tmp / f"qosm-cgroot-{dead}-empty000"
    empty.mkdir()
    left = [tmp / f"qosm-cgroot-{dead}-withfile", tmp / f"qosm-cgroot-{me}-mine0000", tmp / "qosm-cgroot-legacy34",
            tmp / "qosm-cgroot-legacy56", tmp / "qosm-cgroot-legacy78", tmp / "qosm-other-dir"]
    for p in left:
        p.mkdir()
    (left[0] / "file").write_text("x")
    (left[1] / "cpu").symlink_to(cpu / f"qosm-test-{me}-22222222")
    (left[2] / "cpu").symlink_to(cpu / "other")  # not a test cgroup
    (left[3] / "cpu").symlink_to(gone_cpu)
    (left[3] / "memory").symlink_to(cpu / f"qosm-test-{me}-22222222")  # two owners
    # left[4]: an older name, empty: no owner to tell
    removed = set(leftovers.sweep(tmp=str(tmp), bases=[str(cpu), str(mem), str(tmp_path / "nowhere")]))
    assert removed == {str(p) for p in (
        gone_cpu / "kubepods" / "pod1" / "c0", gone_cpu / "kubepods" / "pod1", gone_cpu / "kubepods" / "pod2",
        gone_cpu / "kubepods", gone_cpu, gone_mem, probe, root, legacy, v2, empty)}
    for p in kept + left:
        assert os.path.lexists(p), p
    assert os.path.isdir(cpu / "other")  # a link removed, never what it named
    assert leftovers.sweep(tmp=str(tmp), bases=[str(cpu), str(mem)]) == []


@pytest.mark.kernel
def test_real_v1_hierarchy_under_our_own_cgroup(tmp_path: Path) -> None:
    reason = kernelcg.unavailable(1)
    if reason:
        pytest.skip(f"real cgroups unavailable: {reason}")
    own = kernelcg.own_cgroups()
    bases = {h: os.path.join(kernelcg.hierarchy_dir(h), own[h].lstrip("/")) for h in ("cpu", "memory")}
    dead = dead_pid()
    gone = f"qosm-test-{dead}-{uuid.uuid4().hex[:8]}"
    held = f"qosm-test-{dead}-{uuid.uuid4().hex[:8]}"
    made: list[str] = []
    sleeper: subprocess.Popen[bytes] | None = None
    tree = kernelcg.KernelTree(1)  # this live process's: stays
    try:
        for base in bases.values():
            for rel in (gone, f"{gone}/kubepods", f"{gone}/kubepods/pod1", held, f"{held}/busy"):
                os.mkdir(os.path.join(base, rel))
                made.append(os.path.join(base, rel))
        tree.mkdir("kubepods/pod9")
        busy = os.path.join(bases["cpu"], held, "busy")
        sleeper = subprocess.Popen(["sleep", "60"])
        with open(os.path.join(busy, "cgroup.procs"), "w") as f:
            f.write(str(sleeper.pid))
        removed = leftovers.sweep(tmp=str(tmp_path))
        for base in bases.values():
            assert not os.path.exists(os.path.join(base, gone)), base
            assert os.path.join(base, gone, "kubepods", "pod1") in removed
        assert os.path.isdir(busy) and os.path.isdir(os.path.dirname(busy))  # holds a process: stays
        assert not os.path.exists(os.path.join(bases["memory"], held))  # its memory side held none
        assert os.path.isdir(tree.path("cpu", "kubepods/pod9")) and os.path.isdir(tree.root)
    finally:
        if sleeper is not None:
            os.kill(sleeper.pid, signal.SIGKILL)
            sleeper.wait()
        for path in sorted(made, key=lambda p: p.count("/"), reverse=True):
            with contextlib.suppress(FileNotFoundError):
                kernelcg.rmdir_cgroup(path)
        tree.cleanup()
