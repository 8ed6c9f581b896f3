"""One descriptor budget for the collector's readers and the executor, reserves for the rest.

At ``ulimit -n 256`` with 200 containers every write used to fail with EMFILE and ``/healthz``
timed out: the readers and the executor's descriptor cache each sized themselves as if alone, and
the health server's sockets came last.  These tests run an agent in a child process whose
``RLIMIT_NOFILE`` is lowered, and check the parts in-process on small budgets.
"""

from __future__ import annotations

import errno
import http.client
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qosmanager._native import sysio
from qosmanager.executor.audit import AuditLog
from qosmanager.executor.executor import Executor, Write
from qosmanager.executor.files import ONE_SHOT
from qosmanager.exporter.server import MAX_CLIENTS, descriptor_reserve
from qosmanager.host.cgroups import CgroupLayout
from qosmanager.host.descriptors import BASE_RESERVE, HEALTH_SERVER_RESERVE, DescriptorBudget, nofile_limit
from qosmanager.metrics.cache import MetricCache
from qosmanager.metrics.collector import Collector
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import pod_object
from qosmanager.states.store import StateStore
from test_executor import make, put

# ----------------------------------------------------------------------------- the parts


def executor(tmp_path: Path, budget: DescriptorBudget | None, **kw: Any) -> tuple[Executor, CgroupLayout]:
    """An executor on a v1 tree of the fake kernel (test_executor's)."""
    ex, layout, _clock, _audit = make(tmp_path, 1, budget=budget, **kw)
    return ex, layout


def quota_dirs(layout: CgroupLayout, n: int, parent: str = "kubepods/burstable") -> list[str]:
    dirs = [f"{parent}/pod{i}" for i in range(n)]
    for d in dirs:
        put(layout, "cpu", d, "cpu.cfs_quota_us", "-1\n")
    return dirs


def quota(layout: CgroupLayout, d: str) -> str:
    return Path(layout.file("cpu", d, "cpu.cfs_quota_us")).read_text().strip()


def test_the_server_reserve_covers_the_servers_descriptors() -> None:
    assert descriptor_reserve(MAX_CLIENTS) <= HEALTH_SERVER_RESERVE
    assert DescriptorBudget.for_process().total > 0
    assert DescriptorBudget(-5).total == 0


def test_the_process_budget_leaves_what_is_already_open_and_both_reserves() -> None:
    before = DescriptorBudget.for_process().total
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(50)]
    try:
        during = DescriptorBudget.for_process().total
    finally:
        for fd in held:
            os.close(fd)
    assert before - during == 50
    assert before <= nofile_limit() - BASE_RESERVE - HEALTH_SERVER_RESERVE


def test_writes_beyond_the_budget_are_written_one_shot(tmp_path: Path) -> None:
    budget = DescriptorBudget(3)
    ex, layout = executor(tmp_path, budget)
    dirs = quota_dirs(layout, 10)
    ex.clock = lambda: 1000.0
    res = ex.apply([Write("s", "cpu.cfs_quota_us", str(10000 + i), d) for i, d in enumerate(dirs)])
    assert [r.status for r in res] == ["written"] * 10
    assert [quota(layout, d) for d in dirs] == [str(10000 + i) for i in range(10)]
    assert len(ex.files) == 3 and budget.held() == 3 and budget.available() == 0
    assert ex.files.one_shot_writes == 7
    # past the force interval the values are read (one-shot too) and found unchanged
    ex.clock = lambda: 10_000.0
    res = ex.apply([Write("s", "cpu.cfs_quota_us", str(10000 + i), d) for i, d in enumerate(dirs)])
    assert [r.status for r in res] == ["unchanged"] * 10
    assert ex.files.one_shot_reads >= 7 and ex.files.one_shot_writes == 7
    # a plain file written one-shot is truncated like one written through a kept descriptor
    Path(layout.file("cpu", dirs[9], "cpu.cfs_quota_us")).write_text("-1" + " " * 40 + "\n")
    ex.clock = lambda: 20_000.0
    assert ex.apply([Write("s", "cpu.cfs_quota_us", "5000", dirs[9])])[0].status == "written"
    assert quota(layout, dirs[9]) == "5000"


def test_with_no_budget_left_every_write_is_one_shot_and_keeps_its_order(tmp_path: Path) -> None:
    """Rising limits go parents first, one-shot or not (cgroup v1 refuses a child above its parent)."""
    ex, layout = executor(tmp_path, DescriptorBudget(1))
    parent = "kubepods/burstable/podp"
    child = [f"{parent}/c{i}" for i in range(3)]
    quota_dirs(layout, 0)
    for d in [parent, *child]:
        path = layout.file("cpu", d, "cpu.cfs_quota_us")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Path(path).write_text("1000\n")
    ex.apply([Write("s", "cpu.cfs_quota_us", "50000", d) for d in [*child, parent]])
    order = [rec["target"] for rec in ex.audit.recent if rec["executed"]]
    assert order[0] == f"cpu/{parent}/cpu.cfs_quota_us" and len(order) == 4
    assert ex.files.one_shot_writes == 3


def test_an_emfile_on_a_one_shot_closes_cached_descriptors_and_tries_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ex, layout = executor(tmp_path, None, max_open_files=4)
    dirs = quota_dirs(layout, 6)
    ex.apply([Write("s", "cpu.cfs_quota_us", "20000", d) for d in dirs[:4]])
    assert len(ex.files) == 4
    real_open = sysio.open_batch
    refused: list[str] = []

    def open_once_refused(paths: Any, flags: int) -> Any:
        if not refused:
            refused.append(str(paths[0]))
            return np.full(len(paths), -errno.EMFILE, dtype=np.int32)
        return real_open(paths, flags)

    monkeypatch.setattr(sysio, "open_batch", open_once_refused)
    assert ex.files.write_once(layout.file("cpu", dirs[5], "cpu.cfs_quota_us"), b"7000") == 0
    assert refused and len(ex.files) == 0  # the cache gave its descriptors back
    assert quota(layout, dirs[5]) == "7000"
    # refused twice: the errno, not an exception
    refused.clear()
    monkeypatch.setattr(sysio, "open_batch", lambda paths, flags: np.full(len(paths), -errno.EMFILE, dtype=np.int32))
    assert ex.files.write_once(layout.file("cpu", dirs[4], "cpu.cfs_quota_us"), b"7000") == errno.EMFILE


def test_a_path_twice_in_one_lookup_gets_one_descriptor(tmp_path: Path) -> None:
    ex, layout = executor(tmp_path, DescriptorBudget(8))
    path = layout.file("cpu", quota_dirs(layout, 1)[0], "cpu.cfs_quota_us")
    before = len(os.listdir("/proc/self/fd"))
    a, b = ex.files.lookup([path, path])  # two entries of one file (devices, schemata lines)
    assert a == b and not isinstance(a, int) and a[0] != ONE_SHOT and len(ex.files) == 1
    ex.files.close()
    assert len(os.listdir("/proc/self/fd")) == before  # it used to open it twice and leak one
    assert ex.files.lookup([str(tmp_path / "nothing")]) == [-errno.ENOENT]


def test_the_readers_take_the_executors_cached_descriptors_when_the_budget_is_spent(tmp_path: Path) -> None:
    host = FakeHost(str(tmp_path / "host"), version=2, n_cpus=4)
    pods = FakeHost.make_pods(8, containers_per_pod=2, seed=1, be_fraction=0.0)  # 4 pods
    host.add_pods(pods[:1])
    store = StateStore()
    store.set_pods([pod_object(pods[0])])
    budget = DescriptorBudget(14)
    col = Collector(host.layout, MetricCache(), store, budget=budget)
    col.collect()
    held = budget.held()  # one pod, two containers: cpu.stat and memory.stat each
    assert held == 6
    ex = Executor(host.layout, AuditLog(None), budget=budget)
    ctr = [host.layout.container_dir(host.layout.pod_dir(p.qos, p.uid), c.container_id)
           for p in pods for c in p.containers]
    host.add_pods(pods[1:])
    res = ex.apply([Write("s", "cpu.cfs_quota_us", "30000", d) for d in ctr])
    assert {r.status for r in res} == {"written"}
    assert len(ex.files) == 8 and budget.available() == 0
    store.set_pods([pod_object(p) for p in pods])
    col.collect()
    # 3 more pods of 2 containers: 18 files; the executor gave up all 8 of its descriptors
    assert len(ex.files) == 0 and budget.held() == 14 == col._held_fds()
    assert col.stats.pending == 0 and col.stats.containers == 8
    ex.close()
    col.close()


# ----------------------------------------------------------------------------- a whole agent

CHILD = r"""
import json, os, resource, sys
root, limit, version, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

from qosmanager.agent import Agent, AgentConfig
from qosmanager.executor.executor import Write
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object

S = 10**9
host = FakeHost(os.path.join(root, "host"), version=version, n_cpus=8)
pods = FakeHost.make_pods(n, seed=7)
host.add_pods(pods)
files = {k: os.path.join(root, k + ".json") for k in ("pods", "node", "slo")}
for k, obj in (("pods", pod_list(pod_object(p) for p in pods)), ("node", node_object(host)),
               ("slo", nodeslo_object({}))):
    with open(files[k], "w") as f:
        json.dump(obj, f)
clk = {"wall": 1000.0, "mono": 50 * S}
agent = Agent(AgentConfig(roots=host.roots, node_name="n1", pods_file=files["pods"], node_file=files["node"],
                          node_slo_file=files["slo"], metrics_addr="127.0.0.1:0",
                          audit_log=os.path.join(root, "audit.log"),
                          collect_mode="all"),  # every container's files, read through the budget
              clock=lambda: clk["wall"], monotonic_ns=lambda: clk["mono"], seed=1)
assert agent.exporter is not None and agent.exporter.start()
lay = agent.layout
ctrs = [(c.container_id, host.container_dir(p.uid, c.name),
         lay.container_dir(lay.pod_dir(p.qos, p.uid), c.container_id)) for p in pods for c in p.containers]
k = 0

def set_usage():
    for i, (_, fake_dir, _) in enumerate(ctrs):
        host.set_cpu_usage(fake_dir, k * (i % 7 + 1) * S // 10)

set_usage()
agent.scheduler.run_job(next(j for j in agent.scheduler.jobs if j.name == "collect"))  # first samples

def round_():
    global k
    k += 1
    set_usage()
    clk["wall"] += 1
    clk["mono"] += S
    for job in agent.scheduler.jobs:  # the collector, then every strategy
        agent.scheduler.run_job(job)
    # new values for every container (the first round reads every file first)
    res = agent.executor.apply([Write("t", "cpu.cfs_quota_us", str(10000 + 100 * k + i), rel)
                                for i, (_, _, rel) in enumerate(ctrs)])
    values = [host.read(f"cgroup/{r.target}").split()[0] for r in res]  # v2: cpu.max "quota period"
    cpu = agent.cache.query_all("container_cpu_usage", clk["wall"] - 0.5, clk["wall"], "last")
    want = {cid: (i % 7 + 1) / 10 for i, (cid, _, _) in enumerate(ctrs)}
    st = agent.executor.stats
    return {"url": agent.exporter.url, "limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
            "statuses": sorted({r.status for r in res}),
            "values_ok": values == [str(10000 + 100 * k + i) for i in range(len(ctrs))],
            "cpu_right": sum(1 for cid, v in want.items() if abs(cpu.get(cid, -1) - v) < 1e-6),
            "containers": agent.collector.stats.containers, "pending": agent.collector.stats.pending,
            "read_errors": agent.collector.stats.read_errors, "failed": st.failed,
            "strategy_errors": sum(s.errors for s in agent.manager.stats.values()),
            "one_shot_writes": agent.executor.files.one_shot_writes,
            "budget": agent.fd_budget.total, "held": agent.fd_budget.held(),
            "open_fds": len(os.listdir("/proc/self/fd"))}

print(json.dumps(round_()), flush=True)
for line in sys.stdin:
    if line.strip() != "again":
        break
    print(json.dumps(round_()), flush=True)
agent.close()
"""


def get(url: str, path: str) -> tuple[int, dict[str, Any]]:
    host, _, port = url.removeprefix("http://").rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


@pytest.mark.parametrize("version", [1, 2])
def test_an_agent_at_ulimit_256_with_200_containers_writes_reads_and_answers(tmp_path: Path,
                                                                              version: int) -> None:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), "256", str(version), "200"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    idle: list[socket.socket] = []
    try:
        assert proc.stdout is not None and proc.stdin is not None
        first = proc.stdout.readline()
        assert first, proc.communicate(timeout=30)[1][-3000:]
        report = json.loads(first)
        # both reserves and the few descriptors the child holds when the agent starts come off
        assert report["limit"] == 256
        reserved = 256 - BASE_RESERVE - HEALTH_SERVER_RESERVE
        assert reserved - 10 <= report["budget"] < reserved
        assert report["containers"] == 200 and report["pending"] == 0 and report["read_errors"] == 0
        assert report["cpu_right"] == 200  # every container read, most of them in reopen mode
        assert report["statuses"] == ["written"] and report["values_ok"] and report["failed"] == 0
        assert report["strategy_errors"] == 0
        assert report["held"] <= report["budget"] and report["one_shot_writes"] > 0
        assert report["open_fds"] <= 256 - HEALTH_SERVER_RESERVE
        url = report["url"]
        host, _, port = url.removeprefix("http://").rpartition(":")
        # clients fill the server's table (and more): the probes still get in
        idle = [socket.create_connection((host, int(port)), timeout=5) for _ in range(MAX_CLIENTS + 10)]
        code, body = get(url, "/healthz?probe=liveness")
        assert code == 200 and body["probe"] == "liveness"
        code, body = get(url, "/healthz")
        assert code == 200, body
        # another round while the clients hold their connections
        proc.stdin.write("again\n")
        proc.stdin.flush()
        report = json.loads(proc.stdout.readline())
        assert report["statuses"] == ["written"] and report["values_ok"] and report["failed"] == 0
        assert report["cpu_right"] == 200 and report["read_errors"] == 0
        assert get(url, "/healthz?probe=liveness")[0] == 200
        proc.stdin.write("done\n")
        proc.stdin.flush()
        assert proc.wait(30) == 0
    finally:
        for s in idle:
            s.close()
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


SERVER_CHILD = r"""
import os, sys
from qosmanager.exporter.server import MetricsServer
server = MetricsServer("127.0.0.1:0", lambda accept: (b"up 1\n", "text/plain"),
                       lambda liveness=False: (True, {"status": "ok"}))
server.start()
held = []
while True:  # take every descriptor left
    try:
        held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        break
print(server.url, len(held), flush=True)
sys.stdin.readline()
server.stop()
"""


def test_the_server_accepts_a_probe_with_no_descriptor_left_in_the_process() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SERVER_CHILD], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()
        assert line, proc.communicate(timeout=30)[1][-3000:]
        url, n_held = line.split()
        assert int(n_held) > 0
        for _ in range(3):  # the spare descriptor is given up, then taken back after each answer
            assert get(url, "/healthz") == (200, {"status": "ok"})
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
