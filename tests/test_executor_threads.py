"""The executor's threading rule: one lock, held by every public entry for its whole call, so the tick
thread and the fast path never interleave inside a batch."""

from __future__ import annotations

import itertools
import json
import os
import threading
from collections.abc import Callable

import pytest

from qosmanager.executor.executor import Executor, MakeDir, Write
from qosmanager.executor.kill import Kill
from test_executor import BE, make, put, read


def _free_elsewhere(lock: threading.RLock) -> bool:
    """Whether another thread could take ``lock`` right now (taken and given back at once if so)."""
    got: list[bool] = []

    def probe() -> None:
        if lock.acquire(blocking=False):
            lock.release()
            got.append(True)
        else:
            got.append(False)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return got[0]


class ProbeClock:
    """The executor's clock, which every timed entry calls from inside: notes whether the lock was
    free for another thread at that moment."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.ex: Executor | None = None
        self.free: list[bool] = []

    def __call__(self) -> float:
        if self.ex is not None:
            self.free.append(_free_elsewhere(self.ex.lock))
        return self.t


ENTRIES: dict[str, Callable[[Executor], object]] = {
    "apply": lambda ex: ex.apply([Write("s", "cpu.cfs_quota_us", "120000", BE)]),
    "read": lambda ex: ex.read("cpu.cfs_quota_us", BE),
    "read_many": lambda ex: ex.read_many("cpu.cfs_quota_us", [BE, "kubepods"]),
    "mkdir": lambda ex: ex.mkdir(MakeDir("s", "cgroup", "cpu/kubepods/new")),
    "kill": lambda ex: ex.kill(Kill("s", "ns/pod", None, [])),
    "restore": lambda ex: ex.restore("s"),
}


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_every_public_entry_holds_the_lock(tmp_path, entry: str) -> None:
    clock = ProbeClock()
    ex, layout, _, _ = make(tmp_path)
    ex.clock = clock
    put(layout, "cpu", BE, "cpu.cfs_quota_us", "-1\n")
    ex.apply([Write("s", "cpu.cfs_quota_us", "120000", BE)])  # something to restore
    clock.ex = ex
    clock.t += 200  # past every cache window: the entry reads (and calls the clock)
    ENTRIES[entry](ex)
    assert clock.free and not any(clock.free), f"{entry} called the clock without holding the lock"
    assert _free_elsewhere(ex.lock), f"{entry} kept the lock after it returned"


def test_callbacks_run_inside_the_batch(tmp_path) -> None:
    ex, layout, _, _ = make(tmp_path)
    put(layout, "cpu", BE, "cpu.cfs_quota_us", "-1\n")
    free: list[bool] = []
    ex.on_write.append(lambda _r: free.append(_free_elsewhere(ex.lock)))
    ex.on_batch.append(lambda _rs, _dt: free.append(_free_elsewhere(ex.lock)))
    ex.apply([Write("s", "cpu.cfs_quota_us", "120000", BE)])
    assert free == [False, False]


def test_two_threads_applying_at_once_keep_cache_stats_and_audit_consistent(tmp_path) -> None:
    """The tick thread and a fast path each set their own files and fight over a shared one: every
    request is counted once, every write is audited once with the value the file then held, and the
    write cache agrees with the files."""
    ex, layout, _clock, audit = make(tmp_path)
    # their own files beside the shared one, not below it (v1 refuses a parent's quota below a child's)
    own = {name: [f"kubepods/burstable/{name}{i}" for i in range(20)] for name in ("tick", "fast")}
    for cgs in own.values():
        for cg in cgs:
            put(layout, "cpu", cg, "cpu.cfs_quota_us", "-1\n")
    shared = put(layout, "cpu", BE, "cpu.cfs_quota_us", "-1\n")
    rounds = 150
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def run(name: str, base: int) -> None:
        try:
            start.wait()
            for k in range(rounds):
                value = str(base + 1000 * k)
                ws = [Write(name, "cpu.cfs_quota_us", value, cg, cacheable=False) for cg in own[name]]
                ws.append(Write("shared", "cpu.cfs_quota_us", value, BE, cacheable=False))
                ex.apply(ws)
        except BaseException as e:  # reported by the test thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(n, b)) for n, b in (("tick", 100_000), ("fast", 200_000))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    per_batch = len(own["tick"]) + 1
    assert ex.stats.requested == 2 * rounds * per_batch
    audit.flush()
    with open(str(tmp_path / "audit.log")) as f:
        written = [r for r in map(json.loads, f) if r["executed"]]
    assert ex.stats.written == len(written)
    # each file's audit trail is a chain: every write's "old" is the value the write before it left
    chains: dict[str, list[tuple[str, str]]] = {}
    for r in written:
        chains.setdefault(r["target"], []).append((r["old"], r["value"]))
    for target, chain in chains.items():
        for (_, before), (old, _) in itertools.pairwise(chain):
            assert old == before, f"{target}: a write saw {old}, the one before it left {before}"
    for name, base in (("tick", 100_000), ("fast", 200_000)):
        last = str(base + 1000 * (rounds - 1))
        for cg in own[name]:
            assert read(layout.file("cpu", cg, "cpu.cfs_quota_us")) == last + "\n"
    assert read(shared) == chains[os.path.relpath(shared, layout.roots.cgroup)][-1][1] + "\n"
    assert ex.read("cpu.cfs_quota_us", BE) == read(shared).strip()
