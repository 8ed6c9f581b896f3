"""``read_many`` of the same many files again, from the last read's descriptors (:mod:`qosmanager.executor.rereads`).

Each test reads a list of files twice or more and compares what the memo answers with what the full
read answers on the same executor (its write cache, its descriptor table): whatever should drop the
memo (a descriptor closed, a write-cache entry, another list, a file replaced) is made to happen
where a stale memo would read something else.  The descriptor table's LRU order is checked too: a
file read every tick from the memo is not the first closed when the table sheds.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import pytest

from qosmanager.executor.executor import Executor, Write
from qosmanager.executor.rereads import MIN_FILES
from test_executor import make, put

QUOTA = "cpu.cfs_quota_us"
N = MIN_FILES + 36


def full(ex: Executor, resource: str, dirs: Sequence[str]) -> list[str | None]:
    """What the full read returns now (the memo neither read nor changed)."""
    memos = dict(ex.rereads.memos)
    ex.rereads.memos.clear()
    try:
        return ex.read_many(resource, dirs)
    finally:
        ex.rereads.memos.clear()
        ex.rereads.memos.update(memos)


def setup(tmp_path, n: int = N, **kw):
    ex, layout, clock, _audit = make(tmp_path, 1, **kw)
    dirs = [f"kubepods/burstable/pod{i}" for i in range(n)]
    paths = [put(layout, "cpu", d, QUOTA, f"{1000 + i}\n") for i, d in enumerate(dirs)]
    return ex, layout, clock, dirs, paths


def from_memo(ex: Executor, resource: str, dirs: Sequence[str]) -> list[str | None]:
    """A read that must be answered by the memo (it is used, and kept)."""
    m = ex.rereads.memos[resource]
    m.used = False
    out = ex.read_many(resource, dirs)
    assert ex.rereads.memos.get(resource) is m and m.used
    return out


def test_memo_reads_what_the_full_read_reads_with_the_same_syscalls(tmp_path) -> None:
    ex, _, _, dirs, paths = setup(tmp_path)
    want = [str(1000 + i) for i in range(N)]
    assert ex.read_many(QUOTA, dirs) == want
    assert QUOTA in ex.rereads.memos
    before = ex.stats.read_syscalls
    assert from_memo(ex, QUOTA, dirs) == want
    assert ex.stats.read_syscalls - before == N
    with open(paths[5], "w") as f:  # changed by someone else: read as it is now
        f.write("-1\n")
    with open(paths[7], "w") as f:  # a file filling the first chunk is read whole, as the full read does
        f.write("9" * 5000 + "\n")
    before = ex.stats.read_syscalls
    got = from_memo(ex, QUOTA, dirs)
    assert ex.stats.read_syscalls - before == N + 1
    assert got[5] == "-1" and got[7] == "9" * 5000
    assert got == full(ex, QUOTA, dirs)


def test_few_files_or_a_missing_one_make_no_memo(tmp_path) -> None:
    ex, _, _, dirs, _ = setup(tmp_path)
    ex.read_many(QUOTA, dirs[:MIN_FILES - 1])
    assert ex.rereads.memos == {}
    gone = [*dirs, "kubepods/burstable/nopod"]
    assert ex.read_many(QUOTA, gone)[-1] is None
    assert ex.rereads.memos == {}
    assert ex.read_many(QUOTA, gone) == full(ex, QUOTA, gone)


def test_a_closed_descriptor_drops_the_memo(tmp_path) -> None:
    """The memo's descriptor numbers closed and taken by other files: a stale memo would read those."""
    ex, layout, _, dirs, _ = setup(tmp_path)
    others = [f"kubepods/besteffort/pod{i}" for i in range(N)]
    for d in others:
        put(layout, "cpu", d, "cpu.shares", "2\n")
    ex.read_many(QUOTA, dirs)
    assert QUOTA in ex.rereads.memos
    ex.files.shed(len(ex.files))  # the readers need room: every descriptor closed
    assert ex.read_many("cpu.shares", others) == ["2"] * N  # the same numbers, other files
    assert ex.read_many(QUOTA, dirs) == [str(1000 + i) for i in range(N)] == full(ex, QUOTA, dirs)
    assert from_memo(ex, QUOTA, dirs) == [str(1000 + i) for i in range(N)]
    ex.forget([dirs[3]])  # a pod gone: its descriptor closed
    assert ex.read_many(QUOTA, dirs) == full(ex, QUOTA, dirs)
    assert ex.rereads.memos[QUOTA].closes == ex.files.closes


def test_a_write_cache_entry_drops_the_memo(tmp_path) -> None:
    """A file this executor wrote is answered from the write cache within its window, as by the full read."""
    ex, _, _, dirs, paths = setup(tmp_path)
    ex.read_many(QUOTA, dirs)
    assert [r.status for r in ex.apply([Write("s", QUOTA, "5000", dirs[4])])] == ["written"]
    with open(paths[4], "w") as f:  # changed back behind the cache's back, within its window
        f.write("1004\n")
    got = ex.read_many(QUOTA, dirs)
    assert got[4] == "5000" and got == full(ex, QUOTA, dirs)
    assert QUOTA not in ex.rereads.memos  # not kept while a file of the list is in the write cache


def test_another_list_drops_the_memo(tmp_path) -> None:
    ex, layout, _, dirs, _ = setup(tmp_path)
    put(layout, "cpu", "kubepods/besteffort/x", QUOTA, "77\n")
    ex.read_many(QUOTA, dirs)
    for other in (dirs[::-1], [*dirs[:-1], "kubepods/besteffort/x"], dirs[:-1], dirs + dirs[:1]):
        got = ex.read_many(QUOTA, other)
        assert got == full(ex, QUOTA, other)
        assert got == [{"kubepods/besteffort/x": "77"}.get(d) or str(1000 + dirs.index(d)) for d in other]
        assert from_memo(ex, QUOTA, other) == got
    # another resource's memo is its own
    assert ex.read_many("cpu.cfs_period_us", dirs) == full(ex, "cpu.cfs_period_us", dirs)
    assert from_memo(ex, QUOTA, dirs + dirs[:1]) == [str(1000 + i) for i in range(N)] + ["1000"]


def test_a_replaced_file_reads_as_by_the_full_read(tmp_path) -> None:
    """A file replaced under a kept descriptor reads as the full read reads it (the same descriptor);
    once the pod is forgotten, the new file."""
    ex, _, _, dirs, paths = setup(tmp_path)
    ex.read_many(QUOTA, dirs)
    tmp = paths[2] + ".new"
    with open(tmp, "w") as f:
        f.write("31\n")
    os.replace(tmp, paths[2])
    got = from_memo(ex, QUOTA, dirs)
    assert got == full(ex, QUOTA, dirs)
    ex.forget([dirs[2]])
    got = ex.read_many(QUOTA, dirs)
    assert got[2] == "31" and got == full(ex, QUOTA, dirs)


def test_files_read_from_the_memo_are_not_the_first_closed(tmp_path) -> None:
    """LRU: read A, read B, read A again (from the memo): the table sheds B's descriptors, not A's."""
    ex, layout, _, dirs, paths = setup(tmp_path)
    b = [f"kubepods/besteffort/pod{i}" for i in range(20)]
    bpaths = [put(layout, "cpu", d, "cpu.shares", "2\n") for d in b]
    ex.read_many(QUOTA, dirs)
    ex.read_many("cpu.shares", b)
    from_memo(ex, QUOTA, dirs)
    ex.files.shed(len(b))
    kept = set(ex.files._fds)
    assert all(p in kept for p in paths)
    assert not any(p in kept for p in bpaths)


@pytest.mark.parametrize("hits", [10, 15])
def test_a_lookup_that_sheds_keeps_its_own_files(tmp_path, hits: int) -> None:
    """A lookup that closes old descriptors to open new ones keeps the files it found (they are read
    next), also after the memo's files were moved up."""
    ex, layout, _, dirs, _paths = setup(tmp_path, max_open_files=N + 20)
    b = [f"kubepods/besteffort/pod{i}" for i in range(30)]
    for d in b:
        put(layout, "cpu", d, "cpu.shares", "2\n")
    ex.read_many(QUOTA, dirs)
    ex.read_many("cpu.shares", b[:20])
    from_memo(ex, QUOTA, dirs)
    c = b[:hits] + b[20:]  # `hits` files kept, 10 to open: 10 descriptors closed
    assert ex.read_many("cpu.shares", c) == ["2"] * len(c)
    kept = set(ex.files._fds)
    assert all(layout.file("cpu", d, "cpu.shares") in kept for d in c)
    assert ex.read_many(QUOTA, dirs) == full(ex, QUOTA, dirs) == [str(1000 + i) for i in range(N)]
