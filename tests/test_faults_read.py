"""Host reads that fail or return nonsense, on fake trees: the collector's stat files refused
(EACCES), huge, or holding numbers no counter can be; ``/proc/meminfo`` refused.  Only the
container (or the node series) whose file it is loses its sample, for that tick; the collector keeps
collecting and says what failed; the next good read gives samples again.

Read faults are injected through the plain-Python reader (``QOSMANAGER_PURE``'s reference, which
tests/test_reader_equivalence.py holds to the native one output for output), whose ``os.pread``
is patched to refuse chosen files.  Huge and garbled files run through both readers.

Covered elsewhere: garbled and vanishing stat files per container and per hierarchy
(tests/test_reader_equivalence.py, tests/test_collector.py::test_garbled_file_affects_only_its_container,
``test_vanished_memory_stat_keeps_the_pods_cpu_usage``), a garbled ``/proc/stat``
(``test_garbled_proc_stat_drops_node_cpu_only``), ``/proc/meminfo`` with missing fields
(``test_meminfo_missing_fields_drop_only_their_series``), files missing at start
(``test_missing_proc_files_at_start_do_not_stop_the_collector``).
"""

from __future__ import annotations

import errno
import os

import pytest

from qosmanager._native import pure_reader
from qosmanager.metrics import collector as collector_mod
from qosmanager.metrics.cache import MetricCache
from qosmanager.metrics.collector import COND_PROC_MEMINFO, Collector
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import pod_object
from qosmanager.states.store import StateStore

S = 10**9


class Rig:
    def __init__(self, tmp_path, version: int = 1) -> None:
        self.host = FakeHost(str(tmp_path / "host"), version=version, n_cpus=4)
        self.pods = FakeHost.make_pods(4, containers_per_pod=2, seed=1)
        self.host.add_pods(self.pods)
        self.store = StateStore()
        self.store.set_pods([pod_object(p) for p in self.pods])
        self.cache = MetricCache()
        self.wall, self.mono = 1000.0, 50 * S
        self.col = Collector(self.host.layout, self.cache, self.store, clock=lambda: self.wall,
                             mono=lambda: self.mono)
        self.ctrs = [(p, c) for p in self.pods for c in p.containers]
        self.used = 0

    def tick(self, keep: tuple[int, ...] = ()) -> None:
        """One second on, every container half a core busy (but those in ``keep``: their files stay)."""
        self.wall += 1.0
        self.mono += S
        self.used += S // 2
        for k, (p, c) in enumerate(self.ctrs):
            if k not in keep:
                self.host.set_cpu_usage(self.host.container_dir(p.uid, c.name), self.used)
        self.col.collect(self.wall)

    def cpu(self, k: int) -> float | None:
        return self.cache.query("container_cpu_usage", self.wall - 0.25, self.wall, "last",
                                container=self.ctrs[k][1].container_id)

    def memory(self, k: int) -> float | None:
        return self.cache.query("container_memory_usage", self.wall - 0.25, self.wall, "last",
                                container=self.ctrs[k][1].container_id)

    def file(self, k: int, hierarchy: str, name: str) -> str:
        p, c = self.ctrs[k]
        return self.host.layout.file(hierarchy, self.host.container_dir(p.uid, c.name), name)


@pytest.fixture
def pure(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The collector on the plain-Python readers, with ``os.pread`` refusing paths listed in the fixture."""
    monkeypatch.setattr(collector_mod, "StatReader", pure_reader.StatReader)
    monkeypatch.setattr(collector_mod, "NodeReader", pure_reader.NodeReader)
    refused: list[str] = []
    real = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        if any(r in path for r in refused):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real(fd, n, offset)

    monkeypatch.setattr(os, "pread", pread)
    return refused


def test_a_stat_file_refused_costs_only_its_containers_metric(tmp_path, pure: list[str]) -> None:
    rig = Rig(tmp_path)
    rig.tick()
    rig.tick()
    assert all(rig.cpu(k) == pytest.approx(0.5) for k in range(len(rig.ctrs)))
    errors = rig.col.stats.read_errors
    pure.append(rig.file(1, "cpuacct", "cpuacct.usage"))
    for _ in range(3):
        rig.tick()
        assert rig.cpu(1) is None  # that container's CPU: no sample
        assert rig.memory(1) is not None  # its memory file is read as before
        assert all(rig.cpu(k) == pytest.approx(0.5) for k in range(len(rig.ctrs)) if k != 1)
    assert rig.col.stats.read_errors > errors  # counted (the exporter's read-error metric)
    pure.clear()
    rig.tick()
    rig.tick()
    assert rig.cpu(1) == pytest.approx(0.5)  # readable again: samples again, no bogus rate


def test_proc_meminfo_refused_drops_the_node_memory_series_only(tmp_path, pure: list[str]) -> None:
    rig = Rig(tmp_path)
    rig.host.set_meminfo(total_kb=64 << 20, free_kb=10 << 20, available_kb=40 << 20)
    rig.tick()
    rig.tick()
    pure.append(rig.host.roots.proc_path("meminfo"))
    rig.tick()
    got = rig.cache.query("node_memory_usage", rig.wall - 0.5, rig.wall, "last")
    assert got is None and rig.cpu(0) == pytest.approx(0.5)
    cond = rig.store.conditions.get(COND_PROC_MEMINFO)
    assert cond is not None and "Permission denied" in cond.message
    pure.clear()
    rig.tick()
    assert rig.cache.query("node_memory_usage", rig.wall - 0.5, rig.wall, "last") == 24 * (1 << 30)
    assert rig.store.conditions.get(COND_PROC_MEMINFO) is None


@pytest.mark.parametrize("impl", ["native", "pure"])
def test_huge_and_impossible_stat_files_cost_only_their_container(tmp_path, monkeypatch, impl: str) -> None:
    if impl == "pure":
        monkeypatch.setattr(collector_mod, "StatReader", pure_reader.StatReader)
        monkeypatch.setattr(collector_mod, "NodeReader", pure_reader.NodeReader)
    rig = Rig(tmp_path)
    rig.tick()
    rig.tick()
    good_memory = rig.memory(0)
    assert good_memory is not None
    # container 1: a memory.stat of 4 MiB of unknown keys; container 2: a usage of 100,000 digits;
    # container 3: a usage that is not a number at all
    junk = "".join(f"unknown_key_{i} {i}\n" for i in range(200_000))
    memory_path = rig.file(1, "memory", "memory.stat")
    with open(memory_path) as f:
        real_stat = f.read()
    with open(memory_path, "w") as f:
        f.write(junk + real_stat)
    with open(rig.file(2, "cpuacct", "cpuacct.usage"), "w") as f:
        f.write("9" * 100_000 + "\n")
    with open(rig.file(3, "cpuacct", "cpuacct.usage"), "w") as f:
        f.write("lots\n")
    rig.tick(keep=(2, 3))
    assert rig.cpu(2) is None and rig.cpu(3) is None  # no sample, not a huge or bogus rate
    assert rig.cpu(0) == pytest.approx(0.5) and rig.cpu(1) == pytest.approx(0.5)  # the others as usual
    # the keys after 4 MiB of others: beyond what a memory.stat can hold, no sample rather than a guess
    assert rig.memory(1) is None and rig.memory(0) == good_memory
    with open(memory_path, "w") as f:
        f.write(real_stat)
    rig.tick()
    rig.tick()
    assert all(rig.cpu(k) == pytest.approx(0.5) for k in (0, 1, 2, 3))  # good files again: good rates
    assert rig.memory(1) == good_memory


def test_a_state_file_whose_read_fails_is_read_again_though_unchanged(tmp_path, monkeypatch) -> None:
    """The pods file changed, but reading it failed (EACCES, EMFILE, EIO): it is read again on the next
    poll even though it does not change again (it was taken as seen, and the update lost for good)."""
    import json

    from qosmanager.states import files as files_mod
    from qosmanager.states.files import FileSource

    pods = FakeHost.make_pods(4, containers_per_pod=1, seed=5)
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"kind": "PodList", "items": [pod_object(p) for p in pods[:2]]}))
    store = StateStore()
    src = FileSource(store, pods_file=str(path))
    assert src.poll(1.0) and len(store.pods) == 2
    path.write_text(json.dumps({"kind": "PodList", "items": [pod_object(p) for p in pods]}))
    real = files_mod.read_document_file
    monkeypatch.setattr(files_mod, "read_document_file",
                        lambda p, **kw: (_ for _ in ()).throw(PermissionError(errno.EACCES, "Permission denied")))
    assert not src.poll(2.0) and len(store.pods) == 2  # the last good set stays
    assert "Permission denied" in store.conditions.get("state/pods-file").message
    monkeypatch.setattr(files_mod, "read_document_file", real)
    assert src.poll(3.0) and len(store.pods) == 4
    assert store.conditions.get("state/pods-file") is None


def test_a_state_file_readable_again_unchanged_clears_its_condition(tmp_path, monkeypatch, caplog) -> None:
    """``stat`` of an unchanged pods file fails for a while (EACCES, a mount hiccup): the fault is said
    once, the condition names it, and it is cleared as soon as the same file can be read again
    (before, it stayed until the file changed: degraded for good over a passing fault)."""
    import json
    import logging

    from qosmanager.states import files as files_mod
    from qosmanager.states.files import FileSource

    pods = FakeHost.make_pods(2, containers_per_pod=1, seed=5)
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"kind": "PodList", "items": [pod_object(p) for p in pods]}))
    store = StateStore()
    src = FileSource(store, pods_file=str(path))
    assert src.poll(1.0) and len(store.pods) == 2
    real_stat = files_mod.os.stat

    def denied(p, *a, **kw):
        if str(p) == str(path):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_stat(p, *a, **kw)

    monkeypatch.setattr(files_mod.os, "stat", denied)
    with caplog.at_level(logging.ERROR, logger=files_mod.log.name):
        for t in (2.0, 3.0, 4.0):
            assert not src.poll(t) and len(store.pods) == 2
    assert "Permission denied" in store.conditions.get("state/pods-file").message
    assert sum("cannot read pods file" in r.getMessage() for r in caplog.records) == 1  # said once
    monkeypatch.setattr(files_mod.os, "stat", real_stat)
    assert not src.poll(5.0) and len(store.pods) == 2  # unchanged: nothing to apply ...
    assert store.conditions.get("state/pods-file") is None  # ... and the fault is over
    assert store.health["pods"].last_sync == 5.0
