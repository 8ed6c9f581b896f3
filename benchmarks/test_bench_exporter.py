"""The exporter's hooks cost a tick nothing measurable (moved out of tests/: it is a timing ratio)."""

from __future__ import annotations

import time
from pathlib import Path

from promtext import buckets, parse
from qosmanager.exporter import Exporter
from test_exporter_agent import fake_agent, job


def test_hooks_add_no_measurable_cost_to_a_tick(tmp_path: Path) -> None:
    """The collector pass with the metrics hooks attached costs what it costs without them.

    Minimum of alternating runs, so the noise of a shared machine cancels out; the hook itself is a
    histogram observation and two counter reads, a few microseconds against a pass of 400 containers.
    """
    agent, _, t = fake_agent(tmp_path, n_containers=400)
    exporter = Exporter.for_agent(agent, "127.0.0.1:0")
    collect = job(agent, "collect")
    hook = exporter.metrics.on_job_run
    with_hooks, without = [], []
    try:
        agent.scheduler.run_job(collect)  # the first pass opens every file
        for _ in range(15):
            for attached, out in ((True, with_hooks), (False, without)):
                if not attached:
                    agent.scheduler.on_run.remove(hook)
                t[0] += 1
                t0 = time.perf_counter()
                agent.scheduler.run_job(collect)
                out.append(time.perf_counter() - t0)
                if not attached:
                    agent.scheduler.on_run.append(hook)
    finally:
        agent.close()
    assert min(with_hooks) <= min(without) * 1.25 + 100e-6, (min(with_hooks), min(without))
    fams = parse(exporter.metrics.registry.render())
    assert buckets(fams["qosmanager_tick_duration_seconds"], job="collect")[-1][1] == 1 + 15
