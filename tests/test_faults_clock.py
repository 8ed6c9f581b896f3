"""Wall-clock steps while the monotonic clock runs on: the agent's clock (qosmanager.steadyclock)
never jumps, so no cool-down, metric window, lease or pending eviction moves with the step; rates
come from the monotonic clock and stay right."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from qosmanager.agent import Agent, AgentConfig
from qosmanager.host.cgroups import KubeQoS
from qosmanager.metrics.cache import MetricCache
from qosmanager.metrics.collector import Collector
from qosmanager.sim.fakehost import FakeContainer, FakeHost, FakePod
from qosmanager.sim.harness import Harness
from qosmanager.sim.objects import node_object, pod_object
from qosmanager.states.store import StateStore
from qosmanager.steadyclock import SLEW, SteadyClock

GiB = 1 << 30
HOUR = 3600.0
S = 10**9


class Clocks:
    """A system clock the test can step and a monotonic clock that only runs."""

    def __init__(self) -> None:
        self.wall = 1_700_000_000.0
        self.mono = 500.0

    def run(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds

    def mono_ns(self) -> int:
        return int(self.mono * S)


def steady(c: Clocks) -> SteadyClock:
    return SteadyClock(wall=lambda: c.wall, monotonic=lambda: c.mono)


@pytest.mark.parametrize("step", [-HOUR, HOUR])
def test_the_clock_follows_a_step_slowly_and_never_runs_backwards(step: float, caplog) -> None:
    c = Clocks()
    clock = steady(c)
    assert clock() == c.wall  # in step with the system clock ...
    c.run(10.0)
    assert clock() == c.wall  # ... exactly, while nobody steps it
    with caplog.at_level(logging.WARNING, logger="qosmanager.steadyclock"):
        last = clock()
        c.wall += step
        readings = []
        for _ in range(int(abs(step) / SLEW) + 10):
            c.run(1.0)
            readings.append(clock())
    deltas = [b - a for a, b in zip([last, *readings], readings)]
    assert all(1 - SLEW - 1e-9 <= d <= 1 + SLEW + 1e-9 for d in deltas)  # each second is 0.9 .. 1.1 s
    assert readings[-1] == c.wall  # caught up after |step| / 10 % seconds
    assert sum("the system clock moved" in m for m in caplog.messages) == 1


def test_the_agent_runs_on_the_steady_clock_everywhere(tmp_path) -> None:
    host = FakeHost(str(tmp_path / "host"), n_cpus=4)
    (tmp_path / "pods.json").write_text('{"kind": "PodList", "apiVersion": "v1", "items": []}')
    agent = Agent(AgentConfig(roots=host.roots, pods_file=str(tmp_path / "pods.json"), metrics_addr=""))
    try:
        clock = agent.clock
        assert isinstance(clock, SteadyClock)
        assert agent.executor.clock is clock and agent.coordinator.clock is clock and agent.collector.clock is clock
        assert agent.audit.clock is clock and agent.manager.clock is clock
    finally:
        agent.close()


def test_a_cool_down_after_an_eviction_lasts_its_seconds_across_a_step_back(tmp_path) -> None:
    """memoryEvict waits 4 s after an eviction.  The system clock steps back an hour right after one:
    on the wall clock the wait would last an hour and an hour of memory pressure would go unanswered."""
    c = Clocks()
    clock = steady(c)

    def be(i: int) -> dict[str, Any]:
        fp = FakePod(f"{i:08d}-0000-4000-8000-00000000c10c", "default", f"be-{i}", KubeQoS.BESTEFFORT,
                     [FakeContainer("c", f"containerd://{i:064x}")])
        return pod_object(fp, memory=GiB)

    h = Harness(gates={"BEMemoryEvict": True}, strategies=["memoryEvict"], memory_bytes=100 * GiB, now=clock(),
                root=str(tmp_path))
    h.set_node(node_object(h.host))
    pods = [be(0), be(1)]
    h.set_pods(pods)
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"enable": True, "memoryEvictThresholdPercent": 70}})

    def tick() -> list[str]:
        c.run(1.0)
        now = clock()
        h.add_samples("node_memory_usage", [(now, 80.0 * GiB)])  # 80 % > 70 %: 12 GiB to release
        for p, used in zip(h.store.pods, (8.0, 20.0) if len(h.store.pods) == 2 else (20.0,)):
            h.add_samples("pod_memory_usage", [(now, used * GiB)], pod=p)
        h.tick("memoryEvict", now)
        return [r["pod"].split("/")[1] for r in h.recorded.evictions]

    assert tick() == ["be-1"]  # 20 GiB >= 12
    h.now = clock()
    h.set_pods(pods[:1])  # be-1 is gone
    c.wall -= HOUR  # the step
    seen = [tick() for _ in range(6)]
    # the 4 s (memory-evict-cool-time-seconds) on the agent's clock, which runs at most 10 % slow while it
    # catches up with the step: over after 4 .. 4.4 s, so the tick 5 s after evicts the next pod
    assert [len(s) for s in seen] == [1, 1, 1, 1, 2, 2], seen
    assert seen[-1] == ["be-1", "be-0"]


def test_metric_windows_and_rates_hold_across_a_step_forward(tmp_path) -> None:
    """The collector stamps samples with the agent's clock and measures rates on the monotonic one:
    after an hour's step forward the last 10 ticks are still in the window (1 to 1.1 s apart while the
    clock catches up), at the right rate."""
    c = Clocks()
    clock = steady(c)
    host = FakeHost(str(tmp_path / "host"), version=2, n_cpus=4)
    pods = FakeHost.make_pods(2, containers_per_pod=1, seed=2)
    host.add_pods(pods)
    store = StateStore()
    store.set_pods([pod_object(p) for p in pods])
    cache = MetricCache()
    col = Collector(host.layout, cache, store, clock=clock, mono=c.mono_ns)
    ctr = pods[0].containers[0]
    cdir = host.container_dir(pods[0].uid, ctr.name)
    used = 0
    for k in range(20):
        if k == 12:
            c.wall += HOUR
        c.run(1.0)
        used += S // 2  # half a core
        host.set_cpu_usage(cdir, used)
        col.collect(clock())
    now, w = clock(), 9 * (1 + SLEW) + 0.5
    assert cache.query("container_cpu_usage", now - w, now, "count", container=ctr.container_id) == 10
    for how in ("avg", "p50", "p99", "last"):
        assert cache.query("container_cpu_usage", now - w, now, how, container=ctr.container_id) == pytest.approx(0.5)
