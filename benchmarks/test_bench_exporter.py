"""The exporter's hooks cost a tick nothing measurable, and idle clients cost a probe nothing
measurable (timing ratios, so they live here rather than in tests/)."""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import check_bounds
from promtext import buckets, parse
from qosmanager.exporter import Exporter, MetricsServer
from qosmanager.exporter.server import MAX_CLIENTS
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


PROBE = "exporter liveness probe"
IDLE = f"{MAX_CLIENTS - 1} idle clients"


@pytest.fixture(scope="module")
def server() -> Iterator[MetricsServer]:
    srv = MetricsServer("127.0.0.1:0", lambda accept: (b"", "text/plain"),
                        lambda liveness=False: (True, {"probe": "liveness"}))
    srv.start()
    yield srv
    srv.stop()


def probe(server: MetricsServer) -> None:
    conn = http.client.HTTPConnection(*server.address, timeout=10)
    try:
        conn.request("GET", "/healthz?probe=liveness")
        r = conn.getresponse()
        assert r.status == 200 and r.read()
    finally:
        conn.close()


@pytest.mark.parametrize("variant", ["alone", IDLE])
def test_probe_beside_idle_connections(bench: Any, server: MetricsServer, variant: str) -> None:
    """A liveness probe's round trip with the connection table all but full of idle clients costs
    what it costs alone: the server never waits on them and each loop pass only scans their
    deadlines.  (With the threaded server they took the request slots and the probe got a 503.)"""
    idle = [socket.create_connection(server.address, timeout=10)
            for _ in range(MAX_CLIENTS - 1 if variant == IDLE else 0)]
    try:
        bench(PROBE, variant, lambda: probe(server))
        # the server notices the last probe's close on its own thread: give it a moment
        deadline = time.monotonic() + 5
        while server.connections != len(idle) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.evicted == 0 and server.connections == len(idle)
    finally:
        for s in idle:
            s.close()


def test_probe_bounds() -> None:
    check_bounds(PROBE, [(IDLE, "alone", "<=", 1.5)])
