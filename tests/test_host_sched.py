"""``qosmanager.host.sched``: the fast path's sampler thread in SCHED_FIFO where the kernel allows it, an
ordinary thread (and why) where it does not; a process it starts is an ordinary one."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from qosmanager.exporter.agent_metrics import AgentMetrics
from qosmanager.exporter.health import Health, HealthBounds
from qosmanager.framework import fastpath
from qosmanager.framework.fastpath import REALTIME_NOTE, FastPath
from qosmanager.host import procfs, sched
from test_strategy_cpu_suppress import make, slo, with_pods


def on_a_thread(fn: Callable[[], Any]) -> Any:
    """``fn`` on a thread of its own (its class ends with it), its result or exception."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # handed back to the test
            out.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def test_realtime_puts_the_calling_thread_in_fifo_or_leaves_it_and_says_why() -> None:
    def go() -> tuple[str, bool, int, int]:
        before = os.sched_getscheduler(0)
        why = sched.realtime()
        return why, sched.is_realtime(0), os.sched_getparam(0).sched_priority, before

    why, rt, priority, before = on_a_thread(go)
    assert not sched.is_realtime(0)  # the test's own thread is untouched
    if why:
        assert not rt and before == os.SCHED_OTHER
    else:
        assert rt and priority == sched.REALTIME_PRIORITY


def test_a_process_started_from_the_realtime_thread_is_an_ordinary_one() -> None:
    def go() -> tuple[str, str]:
        why = sched.realtime()
        child = subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
                               capture_output=True, text=True, check=True, timeout=60)
        return why, child.stdout.strip()

    why, policy = on_a_thread(go)
    if why:
        pytest.skip(f"no real-time class for this test process: {why}")
    assert policy == str(os.SCHED_OTHER)


def test_a_refusal_is_said_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(sched.os, "sched_setscheduler", refuse)
    why = on_a_thread(sched.realtime)
    assert "Operation not permitted" in why and "CAP_SYS_NICE" in why


def fast_path() -> FastPath:
    h = make(2, n_cpus=8)
    with_pods(h)
    slo(h, policy="cfsQuota")
    return FastPath(h.layout, h.store, h.executor, h.strategy("cpuSuppress"))  # type: ignore[arg-type]


def started(fp: FastPath) -> int:
    """Start the sampler's thread; its id once it has asked for its class."""
    fp.start()
    assert fp._thread is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        tid = fp._thread.native_id
        if tid and (fp.not_realtime or sched.is_realtime(tid)):
            return tid
        time.sleep(0.01)
    raise AssertionError("the sampler's thread never asked for its scheduling class")


def test_the_fast_paths_sampler_thread_runs_in_fifo_where_allowed() -> None:
    can = not on_a_thread(sched.realtime)
    fp = fast_path()
    try:
        tid = started(fp)
        assert sched.is_realtime(tid) == can
        assert (fp.not_realtime == "") == can
        assert not sched.is_realtime(0)
        assert (fp.store.conditions.notes().get(REALTIME_NOTE) is None) == can
    finally:
        fp.stop()


@pytest.mark.parametrize("cap_held", [False, True], ids=["no CAP_SYS_NICE", "CAP_SYS_NICE held"])
def test_refused_the_sampler_thread_warns_once_and_samples_all_the_same(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, cap_held: bool) -> None:
    def refuse(*_: Any) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(sched.os, "sched_setscheduler", refuse)
    monkeypatch.setattr(fastpath, "cap_sys_nice", lambda: cap_held)
    fp = fast_path()
    try:
        with caplog.at_level(logging.INFO, logger="qosmanager.framework.fastpath"):
            tid = started(fp)
            taken = fp.samples
            deadline = time.monotonic() + 30
            while fp.samples < taken + 2 and time.monotonic() < deadline:
                time.sleep(0.02)
        assert fp.samples >= taken + 2
        assert not sched.is_realtime(tid)
        assert "Operation not permitted" in fp.not_realtime
        said = [r for r in caplog.records if "stays an ordinary one" in r.getMessage()]
        assert len(said) == 1
        # held, the kernel's per-cgroup real-time budget refused it: the node's configuration, not an alarm
        assert said[0].levelno == (logging.INFO if cap_held else logging.WARNING)
        assert ("CONFIG_RT_GROUP_SCHED" in said[0].getMessage()) == cap_held
        # /healthz says it under info, not as a fault: the agent stays ok (a healthy start)
        metrics = AgentMetrics()
        ok, body = Health(metrics, HealthBounds(), store=fp.store, clock=lambda: metrics.started_at).check()
        assert ok and body["status"] == "ok" and "degraded" not in body
        detail = body["info"][REALTIME_NOTE]["detail"]
        assert "ordinary thread" in detail and "Operation not permitted" in detail
    finally:
        fp.stop()


def test_capabilities_are_read_from_the_effective_set(tmp_path: Any) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tx\nCapInh:\t0000000000000000\nCapPrm:\t0000000001800000\n"
                      "CapEff:\t0000000000800000\n")  # 23 effective, 24 permitted
    assert procfs.cap_sys_nice(str(status)) and not procfs.cap_sys_resource(str(status))
    status.write_text("CapEff:\tzz\n")
    assert not procfs.cap_sys_nice(str(status))
    assert not procfs.cap_sys_nice(str(tmp_path / "missing"))
