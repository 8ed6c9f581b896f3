"""Scheduler, feature gates and the manager's isolation of strategy failures."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import ClassVar

import pytest

from qosmanager.executor.executor import Write
from qosmanager.framework.context import Context
from qosmanager.framework.gates import FeatureGates, UnknownGateError
from qosmanager.framework.scheduler import Scheduler, StopEvent
from qosmanager.framework.strategy import REGISTRY, Strategy
from qosmanager.sim.harness import Harness


class FakeTime:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_scheduler_sleeps_the_interval_after_each_run_finishes() -> None:
    mono = FakeTime()
    sched = Scheduler(monotonic=mono, wall=mono, seed=1)
    starts: list[float] = []

    def slow(now: float) -> None:
        starts.append(mono.t)
        mono.t += 0.3  # the job itself takes 0.3 s

    sched.add("slow", 1.0, slow, jitter=0.0)
    stop = threading.Event()

    # drive the loop with a fake clock: waiting advances it
    def fake_wait(timeout: float | None = None) -> bool:
        mono.t += timeout or 0.0
        return False

    stop.wait = fake_wait  # type: ignore[method-assign]
    sched.run(stop, duration=4.0)
    # runs at 0, 1.3, 2.6, 3.9: interval counted from the end of the previous run, no catch-up
    assert starts == pytest.approx([0.0, 1.3, 2.6, 3.9])


def test_scheduler_jitter_is_bounded_and_a_failing_job_keeps_running() -> None:
    mono = FakeTime()
    sched = Scheduler(monotonic=mono, wall=mono, seed=2)
    ok_runs: list[float] = []
    errors: list[str] = []
    bad = sched.add("bad", 1.0, lambda now: 1 / 0, jitter=0.05)
    sched.add("ok", 1.0, lambda now: ok_runs.append(mono.t), jitter=0.05)
    sched.on_error.append(lambda job, e: errors.append(job.name))
    stop = threading.Event()

    def fake_wait(timeout: float | None = None) -> bool:
        mono.t += timeout or 0.0
        return False

    stop.wait = fake_wait  # type: ignore[method-assign]
    sched.run(stop, duration=10.0)
    gaps = [b - a for a, b in itertools.pairwise(ok_runs)]
    assert len(ok_runs) >= 9 and all(0.95 <= g <= 1.05 for g in gaps)
    assert bad.errors >= 9 and bad.runs == bad.errors and set(errors) == {"bad"}
    assert "ZeroDivisionError" in bad.last_error


def test_jobs_that_share_an_interval_run_in_one_wake_up_within_their_jitter() -> None:
    """A wake-up of the loop costs the process CPU: the jobs whose jitter window has opened run in the
    wake-up of the first one due, so five jobs at one interval wake the loop about once per interval
    (five times before), each job's period still within ``interval x (1 +- jitter)``."""
    mono = FakeTime()
    sched = Scheduler(monotonic=mono, wall=mono, seed=3)
    runs: dict[str, list[float]] = {}
    for name in ("a", "b", "c", "d", "e"):
        runs[name] = []
        sched.add(name, 1.0, lambda now, name=name: runs[name].append(mono.t), jitter=0.05)
    stop = threading.Event()
    wakes = []

    def fake_wait(timeout: float | None = None) -> bool:
        wakes.append(mono.t)
        mono.t += timeout or 0.0
        return False

    stop.wait = fake_wait  # type: ignore[method-assign]
    sched.run(stop, duration=30.0)
    for times in runs.values():
        assert len(times) >= 28
        assert all(0.95 - 1e-9 <= b - a <= 1.05 + 1e-9 for a, b in itertools.pairwise(times))
    assert len(wakes) <= len(runs["a"]) + 1


def test_a_job_without_jitter_and_jittered_jobs_share_one_wake_up_per_interval() -> None:
    """The agent's jobs: the collector without jitter, the strategies at +-5 %, each run taking a little
    time.  A strategy whose random period came out short must not wake the loop on its own a few
    milliseconds before the collector: one wake-up per interval, every period within its bounds."""
    mono = FakeTime()
    sched = Scheduler(monotonic=mono, wall=mono, seed=6)
    runs: dict[str, list[float]] = {}

    def job(name: str) -> Callable[[float], None]:
        def run(now: float) -> None:
            runs[name].append(mono.t)
            mono.t += 0.002  # each run takes 2 ms

        return run

    for name, jitter in (("collect", 0.0), ("a", 0.05), ("b", 0.05), ("c", 0.05), ("d", 0.05)):
        runs[name] = []
        sched.add(name, 1.0, job(name), jitter=jitter, first_delay=0.0 if name == "collect" else 1.0)
    stop = threading.Event()
    wakes = []

    def fake_wait(timeout: float | None = None) -> bool:
        wakes.append(mono.t)
        mono.t += timeout or 0.0
        return False

    stop.wait = fake_wait  # type: ignore[method-assign]
    sched.run(stop, duration=60.0)
    for name, times in runs.items():
        assert len(times) >= 55, name
        # from the end of the run before; the collector first in its wake-up, a strategy after at most
        # the other four jobs' runs
        bounds = (1.0, 1.0) if name == "collect" else (0.95, 1.05 + 4 * 0.002)
        gaps = [b - a - 0.002 for a, b in itertools.pairwise(times)][1:]  # (the first: start-up)
        assert all(bounds[0] - 1e-9 <= g <= bounds[1] + 1e-9 for g in gaps), (name, gaps)
    assert len(wakes) <= len(runs["collect"]) + 2, f"{len(wakes)} wake-ups for {len(runs['collect'])} intervals"
    assert all(runs["collect"][k] < runs["a"][k] for k in range(50)), "the collector first in each wake-up"


def test_a_strategy_that_ran_long_once_comes_back_to_the_collectors_wake_up_within_a_few_intervals() -> None:
    """A slow run (300 ms, a first tick at start-up) leaves a strategy's window past the collector's next
    run: its next due time is moved towards the collector's (its jitter per interval), so the loop wakes
    once per interval again after five or six intervals, not after a random walk of its jitter."""
    mono = FakeTime()
    sched = Scheduler(monotonic=mono, wall=mono, seed=7)
    runs: dict[str, list[float]] = {"collect": [], "a": [], "b": []}

    def job(name: str) -> Callable[[float], None]:
        def run(now: float) -> None:
            runs[name].append(mono.t)
            mono.t += 0.3 if name == "b" and len(runs["b"]) == 10 else 0.001

        return run

    for name in runs:
        sched.add(name, 1.0, job(name), jitter=0.0 if name == "collect" else 0.05)
    stop = threading.Event()
    wakes = []

    def fake_wait(timeout: float | None = None) -> bool:
        wakes.append(mono.t)
        mono.t += timeout or 0.0
        return False

    stop.wait = fake_wait  # type: ignore[method-assign]
    sched.run(stop, duration=40.0)
    slow_end = runs["b"][9] + 0.3
    late = [t for t in wakes if t > slow_end + 7.0]
    collects = [t for t in runs["collect"] if t > slow_end + 7.0]
    assert len(late) <= len(collects) + 1, f"{len(late)} wake-ups for {len(collects)} intervals"
    for name in ("a", "b"):
        gaps = [b - a for a, b in itertools.pairwise(runs[name])]
        assert all(0.95 - 1e-9 <= g <= 1.05 + 0.3 + 0.003 + 1e-9 for g in gaps), (name, gaps)


def test_a_stop_event_wakes_the_scheduler_at_once() -> None:
    stop = StopEvent()
    sched = Scheduler()
    sched.add("idle", 3600.0, lambda now: None, first_delay=3600.0)
    done = threading.Event()
    runner = threading.Thread(target=lambda: (sched.run(stop), done.set()), daemon=True)
    runner.start()
    stop.set()
    assert done.wait(60)  # an hour's sleep cut short
    stop.clear()
    assert stop.sleep(0.01) is False and not stop.is_set()  # clear() drained the pipe
    stop.set()
    assert stop.sleep(3600.0) is True


def test_feature_gates_defaults_overrides_and_typos() -> None:
    g = FeatureGates.from_overrides({})
    assert g.enabled("BECPUSuppress") and g.enabled("CPUBurst") and g.enabled("RdtResctrl")
    assert not g.enabled("BEMemoryEvict") and not g.enabled("CgroupReconcile")
    g = FeatureGates.from_overrides({"AllAlpha": True, "CPUBurst": False})
    assert g.enabled("BEMemoryEvict") and g.enabled("BlkIOReconcile") and not g.enabled("CPUBurst")
    with pytest.raises(UnknownGateError, match="BECPUSupress"):
        FeatureGates.from_overrides({"BECPUSupress": True})


class Boom(Strategy):
    name = "testBoom"
    gates: ClassVar[tuple[str, ...]] = ("CPUBurst",)

    def tick(self, ctx: Context) -> list[Write]:
        raise RuntimeError("boom")


class Echo(Strategy):
    """Writes the NodeSLO's suppress threshold into a file: shows NodeSLO changes reach the next tick."""

    name = "testEcho"
    gates: ClassVar[tuple[str, ...]] = ("CPUBurst",)

    def tick(self, ctx: Context) -> list[Write]:
        pct = ctx.nodeslo.resource_used_threshold_with_be.cpu_suppress_threshold_percent
        return [self.write("cpu.shares", ctx.qos_dir("Burstable"), 1000 + int(pct or 0), "echo")]


def test_a_failing_strategy_is_audited_and_the_others_keep_running(monkeypatch) -> None:
    monkeypatch.setitem(REGISTRY, Boom.name, Boom)
    monkeypatch.setitem(REGISTRY, Echo.name, Echo)
    h = Harness(strategies=["testBoom", "testEcho"])
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": 40}})
    h.tick("testBoom", 1000.0)
    h.tick("testEcho", 1000.0)
    shares = h.cgroup_file("cpu", h.layout.qos_dir("Burstable"), "cpu.shares")
    assert h.read_file(shares) == "1040\n"
    err = [r for r in h.audit.recent if r["action"] == "error"]
    assert len(err) == 1 and err[0]["strategy"] == "testBoom" and "boom" in err[0]["error"]
    assert h.manager.stats["testBoom"].errors == 1
    # a NodeSLO change reaches the strategy on its next tick
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": 55}})
    h.tick("testEcho", 1001.0)
    assert h.read_file(shares) == "1055\n"


def test_a_watcher_wakes_a_job_now_on_the_loops_thread_coalesced_and_nothing_else_moves() -> None:
    """``Scheduler.wake`` from another thread: the job runs at once (an hour before it is due), once for
    three wakes, on the loop's thread; the other job keeps its due time; the woken job's next run is due an
    interval after this one."""
    stop = StopEvent()
    sched = Scheduler(seed=4)
    threads: list[int] = []
    ran = threading.Event()

    def job(now: float) -> None:
        threads.append(threading.get_ident())
        ran.set()

    woken = sched.add("mem", 3600.0, job, first_delay=3600.0, jitter=0.0)
    other = sched.add("other", 3600.0, lambda now: None, first_delay=3600.0, jitter=0.0)
    other_due = other.next_at

    class Waker:  # a watcher: run() starts it with the loop and stops it when the loop ends
        thread: threading.Thread | None = None
        stopped = False

        def start(self) -> None:
            self.thread = threading.Thread(target=lambda: sched.wake("mem", "mem", "no-such-job"))
            self.thread.start()

        def stop(self) -> None:
            assert self.thread is not None
            self.thread.join()
            self.stopped = True

    waker = Waker()
    sched.watchers.append(waker)
    loop = threading.Thread(target=sched.run, args=(stop,), daemon=True)
    loop.start()
    try:
        assert ran.wait(60), "the woken job did not run (it was due in an hour)"
        sched.wake("mem")
    finally:
        stop.set()
        loop.join(60)
    assert not loop.is_alive() and waker.stopped
    assert threads and set(threads) == {loop.ident}, "the job runs on the loop's thread, not the waker's"
    assert woken.runs <= 2 and other.runs == 0 and other.next_at == other_due
    assert woken.next_at >= woken.earliest and woken.next_at - sched.monotonic() > 3000  # due an interval on


def test_wakes_before_the_loop_looks_run_the_job_once() -> None:
    mono = FakeTime()
    sched = Scheduler(monotonic=mono, wall=mono, seed=5)
    runs: list[float] = []
    sched.add("mem", 10.0, lambda now: runs.append(mono.t), first_delay=10.0, jitter=0.0)
    sched.add("other", 10.0, lambda now: None, first_delay=10.0, jitter=0.0)
    mono.t = 1.0
    for _ in range(3):
        sched.wake("mem")
    assert sched.run_ripe() == 1 and runs == [1.0], "three wakes, one run, at once"
    assert sched.run_ripe() == 0 and sched.wakes == 1
    mono.t = 10.5  # "other" at its time; "mem" an interval after its woken run (11.0)
    assert sched.run_ripe() == 1 and runs == [1.0]
    mono.t = 11.0
    assert sched.run_ripe() == 1 and runs == [1.0, 11.0]
