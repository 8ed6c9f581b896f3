"""The executor's fast lane agrees with the batch pipeline, its reference (:mod:`qosmanager.executor.lane`).

Two executors on two identical fake-kernel trees get the same random batches on the same fake clock:
one with the lane, one with every batch through the pipeline (``lane = None``).  After every batch
everything either could have changed must be equal: the results, stats, write cache, claims,
originals, write conflicts, protection in force, repeat reports, descriptor table (its LRU order
too), the files of the tree, the audit file, its in-memory tail and counts.  The batches are a
strategy's: the same files again and again with values that change (what the lane takes), mixed with
what it must leave to the pipeline (new files, stale cache entries, another strategy's claims,
invalid values, a file named twice, files changed or removed behind the agent's back, writes the
fake kernel refuses).  The lane must have taken a good share of the batches, or the test proves nothing.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
from typing import Any

import pytest

from qosmanager.executor.executor import Executor, Write
from qosmanager.host.cgroups import CgroupLayout
from test_executor import BE, make, put

BURSTABLE = "kubepods/burstable"
PODS = [f"{BURSTABLE}/pod{i}" for i in range(4)] + [f"{BE}/pod{i}" for i in range(4, 6)]
DIRS = [BE, BURSTABLE] + PODS + [f"{p}/c{j}" for p in PODS for j in range(2)]
VALUES = {
    "cpu.cfs_quota_us": ["-1", "50000", "100000", "200000", "300000", "400000", "500", "x"],
    "cpu.shares": ["2", "512", "1024", "4096"],
    "memory.limit_in_bytes": ["-1", "1073741824", "536870912"],
    "cpuset.cpus": ["0-3", "2-5", "0-7"],
}
FILES = {"cpu.cfs_quota_us": ("cpu", "-1\n"), "cpu.shares": ("cpu", "1024\n"),
         "memory.limit_in_bytes": ("memory", "9223372036854771712\n"), "cpuset.cpus": ("cpuset", "0-7\n")}
REASONS = ["", "suppress BE", 'quote " and \\ back', "line\nbreak", "café ☕", "\x01ctl"]


def tree(root: str, version: int, lane: bool) -> tuple[Executor, CgroupLayout, Any]:
    os.makedirs(root)
    ex, layout, clock, _ = make(_Path(root), version)
    if not lane:
        ex.lane = None
    for d in DIRS:
        for name, (sub, content) in FILES.items():
            if version == 2 and name == "memory.limit_in_bytes":
                continue
            put(layout, sub, d, ex.resolve(name, d)[0].rsplit("/", 1)[1], content if version == 1 else "")
    if version == 2:
        for d in DIRS:
            with open(ex.resolve("cpu.cfs_quota_us", d)[0], "w") as f:
                f.write("max 100000\n")
    return ex, layout, clock


class _Path(str):
    """What ``make`` asks of pytest's ``tmp_path``: ``/`` joins."""

    def __truediv__(self, other: str) -> _Path:
        return _Path(os.path.join(self, other))


def snapshot(ex: Executor, root: str, res: list[Any], seen: dict[str, int] | None = None) -> dict[str, Any]:
    """Everything either executor could have changed (the audit file from ``seen[root]`` on)."""
    files: dict[str, str | None] = {}
    for d in DIRS:  # the files the batches write
        for name in FILES:
            where = ex.resolve(name, d)
            if where is not None and where[1] not in files:
                try:
                    with open(where[0]) as f:
                        files[where[1]] = f.read()
                except FileNotFoundError:
                    files[where[1]] = None
    seen = {} if seen is None else seen
    with open(os.path.join(root, "audit.log")) as f:
        f.seek(seen.get(root, 0))
        audit_text = f.read()
        seen[root] = f.tell()
    return {
        "results": [(r.status, r.target, r.value, r.old, r.error, r.write.value) for r in res],
        "stats": dataclasses.asdict(ex.stats),
        "cache": {k: (e.value, e.ts, e.content, e.exact) for k, e in ex.cache.entries.items()},
        "claims": {k: (c.strategy, c.value, c.ts, c.lease) for k, c in ex.claims.claims.items()},
        "lost": dict(ex.claims.lost),
        "originals": {k: {e: (o.strategy, o.value, o.write.resource, o.write.cgroup, o.entry_level)
                          for e, o in t.items()} for k, t in ex.originals.table.items()},
        "fights": {k: dataclasses.astuple(f) for k, f in ex.fights.fights.items()},
        "held": dict(ex.fights.held),
        "inforce": ex.inforce.missing,
        "repeats": sorted(map(repr, ex.reporter.repeats._entries)),
        "descriptors": [os.path.relpath(p, root) for p in ex.files._fds],
        "files": files,
        "audit": audit_text,
        "recent": (len(ex.audit.recent), list(ex.audit.recent)[-64:]),
        "counts": dict(ex.audit.counts),
    }


def batch(rng: random.Random, round_: int) -> list[Write]:
    """A strategy's batch: mostly one resource over a steady set of dirs, its value moving."""
    strategy = "cpuBurst" if rng.random() < 0.85 else "cpuSuppress"
    if rng.random() < 0.8:
        resource = rng.choice(["cpu.cfs_quota_us", "cpu.cfs_quota_us", "cpu.shares"])
        dirs = [d for d in DIRS if d.count("/") == 3] if rng.random() < 0.6 else DIRS
        pool = VALUES[resource][:5] if resource == "cpu.cfs_quota_us" else VALUES[resource]
        value = pool[round_ % len(pool)] if rng.random() < 0.8 else rng.choice(VALUES[resource])
        writes = [Write(strategy, resource, value, d, reason=rng.choice(REASONS),
                        uid=rng.choice([None, "uid-1", "ü"])) for d in dirs]
    else:
        writes = [Write(strategy, r, rng.choice(VALUES[r]), rng.choice(DIRS), reason=rng.choice(REASONS))
                  for r in rng.choices(list(VALUES), k=rng.randint(1, 12))]
    if rng.random() < 0.05:
        writes.append(writes[0])  # a file named twice
    return writes


def outside(rng: random.Random, roots: list[str], layouts: list[CgroupLayout], exs: list[Executor]) -> None:
    """The same change behind the agents' backs in both trees."""
    what = rng.random()
    if what < 0.05:  # another writer resets a quota
        d = rng.choice(DIRS)
        for ex in exs:
            if not os.path.exists(ex.resolve("cpu.cfs_quota_us", d)[0]):
                continue  # its container went away
            with open(ex.resolve("cpu.cfs_quota_us", d)[0], "w") as f:
                f.write("-1\n" if ex.version == 1 else "max 100000\n")
    elif what < 0.07:  # a container goes away
        d = rng.choice([d for d in DIRS if d.count("/") == 3])
        for layout in layouts:
            for sub in ("cpu", "memory", "cpuset"):
                shutil.rmtree(layout.abs_dir(sub, d), ignore_errors=True)
    elif what < 0.09:
        d = rng.choice([d for d in DIRS if d.count("/") == 3])
        for ex in exs:
            ex.forget([d])


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("seed", [1, 2])
def test_the_lane_and_the_pipeline_agree(tmp_path, version: int, seed: int) -> None:
    roots = [str(tmp_path / "lane"), str(tmp_path / "ref")]
    (ex, layout, clock), (ref, ref_layout, ref_clock) = (tree(roots[0], version, True),
                                                       tree(roots[1], version, False))
    rng = random.Random(seed)
    rounds = 120
    seen: dict[str, int] = {}
    for k in range(rounds):
        writes = batch(rng, k)
        got = ex.apply([dataclasses.replace(w) for w in writes])
        want = ref.apply([dataclasses.replace(w) for w in writes])
        ex.audit.flush()
        ref.audit.flush()
        a, b = snapshot(ex, roots[0], got, seen), snapshot(ref, roots[1], want, seen)
        for part in a:
            assert a[part] == b[part], f"round {k}: {part} differs"
        step = rng.choice([0.0, 0.5, 1.0, 1.0, 3.0, 3.0, 10.0, 61.0])
        clock.t += step
        ref_clock.t += step
        outside(rng, roots, [layout, ref_layout], [ex, ref])
    assert ex.lane is not None and ex.lane.batches >= rounds // 5, f"the lane took {ex.lane.batches} batches"
    assert {r[0] for r in a["results"]} | {"written"}  # (a last look: every status compared above)


def test_a_write_the_kernel_refuses_in_the_lane_is_the_pipelines_failure(tmp_path) -> None:
    """v1: a child's quota above its parent's is refused (EINVAL) in the middle of a lane batch."""
    roots = [str(tmp_path / "lane"), str(tmp_path / "ref")]
    (ex, _, _), (ref, _, _) = tree(roots[0], 1, True), tree(roots[1], 1, False)
    kids = [d for d in DIRS if d.startswith(BURSTABLE + "/") and d.count("/") == 3]
    for e in (ex, ref):
        e.apply([Write("cpuBurst", "cpu.cfs_quota_us", "100000", d) for d in kids])
        e.apply([Write("cpuBurst", "cpu.cfs_quota_us", "100000", d) for d in kids])
        e.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "150000", f"{BURSTABLE}/pod1")])
    lane_before = ex.lane.batches  # type: ignore[union-attr]
    writes = [Write("cpuBurst", "cpu.cfs_quota_us", "200000", d) for d in kids]
    got, want = ex.apply(list(writes)), ref.apply([dataclasses.replace(w) for w in writes])
    assert ex.lane.batches == lane_before + 1  # type: ignore[union-attr]
    statuses = [r.status for r in got]
    assert "failed" in statuses and "written" in statuses, statuses
    ex.audit.flush()
    ref.audit.flush()
    a, b = snapshot(ex, roots[0], got), snapshot(ref, roots[1], want)
    for part in a:
        assert a[part] == b[part], part
