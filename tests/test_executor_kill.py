"""The executor's kill room: a kill refused every round (the victim's cgroups hold pid 1, the agent or its
parent, which are never signalled) is logged and audited once, then counted (#16 §4)."""

from __future__ import annotations

import logging
import os

import pytest

from qosmanager.executor.kill import Kill
from test_eviction_coordinator import TARGET_POD_USED, GiB, be_pod, harness, place, pod_rel, task
from test_executor import make


@pytest.mark.parametrize("version", [1, 2])
def test_a_kill_refused_every_round_is_said_once_then_counted(monkeypatch: pytest.MonkeyPatch, caplog,
                                                               version: int) -> None:
    h = harness([be_pod(0)], version=version, evict_mode="kill")
    if version == 2:
        open(h.layout.file("", pod_rel(h, 0), "cgroup.kill"), "w").close()
    signalled: list[int] = []
    # never the real signal here: a regression must not reach init or the test runner
    monkeypatch.setattr(h.executor, "_signal", lambda pid, fd: signalled.append(pid) or 0)
    for pid in (1, os.getpid(), os.getppid()):
        place(h, 0, pid)  # /proc claims each is in the pod
    rounds = 60
    with caplog.at_level(logging.INFO):
        for k in range(rounds):  # one eviction attempt a second, the pod never going
            t = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": GiB}, [(0, {"memory": 2 * GiB})])
            [d] = h.coordinator.execute("memoryEvict", [t], 1000.0 + k).decisions
            assert d.action == "failed" and "agent itself" in (d.error or "")
    assert signalled == []
    ways = 1 if version == 1 else 2  # v2: not by cgroup.kill either, then not pid by pid
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == ways, [r.getMessage() for r in warnings]
    refused = [r for r in h.audit.recent if r["action"] == "kill" and r.get("stage") == "refused"]
    evicts = [r for r in h.audit.recent if r["action"] == "evict"]
    assert len(refused) == ways and len(evicts) == 1
    assert h.executor.stats.kills_refused == ways * rounds


def test_a_refusal_that_goes_on_is_summed_up_with_a_count(tmp_path) -> None:
    ex, _layout, _clock, audit = make(tmp_path)
    k = Kill("memoryEvict", "ns/pod", "u1", [1], reason="BEMemoryEvict")
    assert ex.refuse_kill(k, "pid 1: pid 1 and below are never signalled", 1000.0)
    assert not any(ex.refuse_kill(k, "pid 1: pid 1 and below are never signalled", 1001.0 + i) for i in range(400))
    records = [r for r in audit.recent if r["action"] == "kill"]
    assert [r.get("repeats") for r in records] == [None, 300]  # the first, then the 5 minutes' count
    assert records[0]["stage"] == "refused" and records[0]["error"].startswith("pid 1")
    # refused another way: said in full again
    assert ex.refuse_kill(k, "pid 1: something else", 1500.0)
    assert ex.stats.kills_refused == 402
