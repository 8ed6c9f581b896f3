"""The exporter's hooks cost a tick nothing measurable, a scrape costs the same on a node of 2,000
containers as on one of 6, and idle clients cost a probe nothing measurable (timing ratios, so they
live here rather than in tests/)."""

from __future__ import annotations

import gzip
import http.client
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import check_bounds, until_pods_in_force
from promtext import buckets, parse, parse_openmetrics
from qosmanager.exporter import Exporter, MetricsServer
from qosmanager.exporter.server import GZIP_LEVEL, MAX_CLIENTS
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


SCRAPE = "exporter scrape (OpenMetrics, gzip)"
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
                     "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


@pytest.fixture(scope="module")
def scraped_agents() -> Iterator[list[Any]]:
    """The agents of the scrape benchmark stay open until the bounds are checked: a re-measurement
    must see the 2,000-container agent's ~14,000 open descriptors, as the first measurement did."""
    agents: list[Any] = []
    yield agents
    for agent in agents:
        agent.close()


@pytest.mark.parametrize("n_containers", [6, 2000])
def test_scrape_cost(bench: Any, tmp_path: Path, scraped_agents: list[Any], n_containers: int) -> None:
    """What a Prometheus scrape costs the HTTP thread (every collector, the OpenMetrics encoder,
    gzip) after two collector passes and strategy ticks.  The families are built from the agent's
    counters at scrape time and none is per container, and open descriptors are counted without
    listing them, so 2,000 containers cost what 6 do; a family that grew with the node (a label set
    per container, or prometheus_client's listing of /proc/self/fd: ~37 ms here) breaks the bound."""
    agent, _, t = fake_agent(tmp_path, n_containers=n_containers)
    scraped_agents.append(agent)
    registry = Exporter.for_agent(agent, "127.0.0.1:0").metrics.registry

    def step() -> None:
        for j in agent.scheduler.jobs:
            agent.scheduler.run_job(j)
        t[0] += 1

    # a pods file this big is decoded on a thread of its own: two rounds once the pods are in (on a busy
    # machine the decode outlasted the first two rounds, and the scrape counted 0 containers)
    until_pods_in_force(agent, n_containers // 2, step)  # fake_agent's pods: two containers each
    for _ in range(2):
        step()

    def scrape() -> bytes:
        page, _ = registry.expose(PROMETHEUS_ACCEPT)
        return gzip.compress(page, GZIP_LEVEL, mtime=0)

    body = bench(SCRAPE, f"{n_containers} containers", scrape)
    fams = parse_openmetrics(gzip.decompress(body).decode())
    assert fams["qosmanager_containers_tracked"].value() == n_containers
    assert fams["process_open_fds"].value() > 5 * n_containers  # the readers' descriptors are open


def test_scrape_bounds(scraped_agents: list[Any]) -> None:
    check_bounds(SCRAPE, [("2000 containers", "6 containers", "<=", 1.5)])


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
    # wall time: the round trip's work is on the server's thread
    check_bounds(PROBE, [(IDLE, "alone", "<=", 1.5)], timer="wall")
