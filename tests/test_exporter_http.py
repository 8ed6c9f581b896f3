"""``/metrics`` and ``/healthz`` over HTTP on an ephemeral port, and the health checks' verdicts.

Health bounds are worked out by hand: with a 1 s collect interval the collector bound is
3 x 1 + 5 = 8 s; the Kubernetes sync bound is 60 s; a strategy fails the check at 5 failures in a row.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from promtext import parse, parse_openmetrics
from qosmanager.agent import Agent, AgentConfig
from qosmanager.exporter import Exporter, parse_addr
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object

T0 = 1000.0


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def health(exporter: Exporter) -> tuple[int, dict[str, Any]]:
    code, _, body = get(exporter.url + "/healthz")
    return code, json.loads(body)


def fake_agent(tmp_path: Path, version: int = 2, **cfg: Any) -> tuple[Agent, list[float]]:
    """An agent on a koordinator node (4 CPUs, one LS and one BE pod of two containers: the BE pod's
    and containers' cgroups hold koordlet's batch quota, 1 core a container), its clock at ``T0``."""
    host = FakeHost(str(tmp_path / "host"), version=version, n_cpus=4)
    pods = FakeHost.make_pods(4, seed=5)
    host.add_pods(pods)
    (tmp_path / "pods.json").write_text(json.dumps(pod_list(pod_object(p) for p in pods)))
    (tmp_path / "node.json").write_text(json.dumps(node_object(host)))
    (tmp_path / "slo.json").write_text(json.dumps(nodeslo_object({})))
    kw = {"pods_file": str(tmp_path / "pods.json"), "node_file": str(tmp_path / "node.json"),
          "node_slo_file": str(tmp_path / "slo.json"), "metrics_addr": "127.0.0.1:0"}
    kw.update(cfg)
    t = [T0]
    agent = Agent(AgentConfig(roots=host.roots, node_name="n1", **kw),
                  clock=lambda: t[0], seed=1)
    return agent, t


@pytest.fixture
def running(tmp_path: Path) -> Any:
    agent, t = fake_agent(tmp_path)
    assert agent.exporter is not None and agent.exporter.start()
    try:
        yield agent, agent.exporter, t
    finally:
        agent.close()


def run(agent: Agent, name: str) -> None:
    agent.scheduler.run_job(next(j for j in agent.scheduler.jobs if j.name == name))


def test_endpoints(running: Any) -> None:
    agent, exporter, _ = running
    run(agent, "collect")
    code, headers, body = get(exporter.url + "/metrics")
    assert code == 200 and headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    fams = parse(body.decode())
    assert fams["qosmanager_pods_tracked"].value() == 2  # make_pods(4): 2 pods of 2 containers
    code, headers, body = get(exporter.url + "/healthz")
    report = json.loads(body)
    assert code == 200 and headers["Content-Type"] == "application/json"
    assert report["status"] == "ok" and set(report["checks"]) == {"collector", "state", "strategies"}
    assert all(c["ok"] for c in report["checks"].values())
    assert get(exporter.url + "/metrics?x=1")[0] == 200
    assert get(exporter.url + "/nothing")[0] == 404


PROMETHEUS = {  # the headers Prometheus 2.x scrapes with
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
              "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}


def test_a_prometheus_scrape_gets_gzipped_openmetrics_with_the_standard_names(running: Any) -> None:
    agent, exporter, _ = running
    run(agent, "collect")
    code, headers, body = get(exporter.url + "/metrics", PROMETHEUS)
    assert code == 200 and headers["Content-Encoding"] == "gzip"
    assert headers["Content-Type"] == "application/openmetrics-text; version=1.0.0; charset=utf-8"
    page = gzip.decompress(body).decode()
    assert page.endswith("# EOF\n")
    fams = parse_openmetrics(page)
    assert fams["qosmanager_pods_tracked"].value() == 2
    assert fams["process_resident_memory_bytes"].value() > 0 and fams["process_open_fds"].value() > 0
    assert fams["process_cpu_seconds_total"].type == "counter"
    assert fams["koordlet_resource_update_duration_milliseconds"].type == "histogram"
    # a scraper that asks for nothing in particular gets the text format, not gzipped
    code, headers, body = get(exporter.url + "/metrics", {"Accept": "*/*"})
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "Content-Encoding" not in headers and "process_resident_memory_bytes" in parse(body.decode())


def test_a_degraded_condition_is_named_in_health_and_metrics_but_answers_200(running: Any) -> None:
    agent, exporter, _ = running
    run(agent, "collect")
    code, report = health(exporter)
    assert code == 200 and report["status"] == "ok" and "degraded" not in report
    agent.store.conditions.set("cpuSuppress/node-cpu", "node CPU usage cannot be read; holding the BE limit")
    code, report = health(exporter)
    assert code == 200 and report["status"] == "degraded"
    assert report["degraded"]["cpuSuppress/node-cpu"]["detail"].startswith("node CPU usage cannot be read")
    fams = parse(get(exporter.url + "/metrics")[2].decode())
    assert fams["qosmanager_degraded"].series() == {(("condition", "cpuSuppress/node-cpu"),): 1}
    agent.store.conditions.clear("cpuSuppress/node-cpu")
    code, report = health(exporter)
    assert code == 200 and report["status"] == "ok" and "degraded" not in report
    assert parse(get(exporter.url + "/metrics")[2].decode())["qosmanager_degraded"].series() == {}


def test_health_fails_when_the_collector_stops(running: Any) -> None:
    agent, exporter, t = running
    run(agent, "collect")  # a good pass at T0
    t[0] = T0 + 8
    assert health(exporter)[0] == 200  # 8 s old: exactly the bound

    def broken(now: float) -> None:
        raise OSError("the cgroup mount is gone")

    agent.collector.collect = broken  # type: ignore[method-assign]
    t[0] = T0 + 20
    run(agent, "collect")  # the job runs but fails: not a pass
    code, report = health(exporter)
    assert code == 503 and report["status"] == "unhealthy"
    check = report["checks"]["collector"]
    # 20 s since the last good pass: 12 s over the bound of 8 s
    assert check["ok"] is False and check["age_seconds"] == 20 and check["over_seconds"] == 12
    assert "12.0 s over the bound of 8 s" in check["detail"]
    assert report["checks"]["state"]["ok"] and report["checks"]["strategies"]["ok"]


def test_health_before_the_first_pass_counts_from_start(running: Any) -> None:
    _, exporter, t = running
    t[0] = T0 + 7.5
    assert health(exporter)[0] == 200
    t[0] = T0 + 9
    code, report = health(exporter)
    assert code == 503 and report["checks"]["collector"]["over_seconds"] == 1
    assert "no collector pass yet" in report["checks"]["collector"]["detail"]


def test_health_fails_when_a_strategy_fails_five_times_in_a_row(running: Any) -> None:
    agent, exporter, _ = running
    run(agent, "collect")
    name = agent.strategy_names[0]
    strategy = agent.manager.strategies[name]
    good_tick = strategy.tick

    def bad_tick(ctx: Any) -> list[Any]:
        raise RuntimeError("bad NodeSLO arithmetic")

    strategy.tick = bad_tick  # type: ignore[method-assign]
    for _ in range(4):
        run(agent, name)
    assert health(exporter)[0] == 200
    strategy.tick = good_tick  # type: ignore[method-assign]
    run(agent, name)  # a good tick resets the streak
    strategy.tick = bad_tick  # type: ignore[method-assign]
    for _ in range(4):
        run(agent, name)
    assert health(exporter)[0] == 200
    run(agent, name)
    code, report = health(exporter)
    check = report["checks"]["strategies"]
    assert code == 503 and check["failing"] == {name: 5}
    assert f"{name} failed 5 times in a row" in check["detail"]
    assert "bad NodeSLO arithmetic" in check["detail"]
    fams = parse(get(exporter.url + "/metrics")[2].decode())
    assert fams["qosmanager_strategy_errors_total"].value(strategy=name) == 9
    assert fams["qosmanager_job_consecutive_failures"].value(job=name) == 5


def test_health_fails_when_a_state_file_cannot_be_read(running: Any, tmp_path: Path) -> None:
    agent, exporter, _ = running
    run(agent, "collect")
    (tmp_path / "pods.json").unlink()
    run(agent, "collect")  # the agent keeps the last pods
    code, report = health(exporter)
    assert code == 503
    assert f"pods file {tmp_path / 'pods.json'} cannot be read" in report["checks"]["state"]["detail"]
    assert report["checks"]["collector"]["ok"]


@pytest.mark.parametrize(("content", "says"), [
    ("{not json", "cannot parse"),
    ('{"kind": "Pod", "metadata": {"name": "p"}}', "refused: not a PodList"),
])
def test_a_state_file_that_fails_is_named_and_degraded(running: Any, tmp_path: Path, content: str,
                                                        says: str) -> None:
    """A pods file that exists but cannot be used: the last good pods stay in force (still 200), and
    /healthz says so instead of "fresh"; the metric names the condition."""
    agent, exporter, _ = running
    run(agent, "collect")
    pods_file = tmp_path / "pods.json"
    good = pods_file.read_text()
    pods_file.write_text(content)
    run(agent, "collect")
    assert len(agent.store.pods) == 2  # kept
    code, report = health(exporter)
    assert code == 200 and report["status"] == "degraded"
    state = report["checks"]["state"]
    assert state["ok"]  # the agent works on with the last good pods
    assert says in state["detail"] and str(pods_file) in state["detail"]
    assert "stays in force" in state["detail"]
    cond = report["degraded"]["state/pods-file"]["detail"]
    assert says in cond and str(pods_file) in cond
    fams = parse(get(exporter.url + "/metrics")[2].decode())
    assert fams["qosmanager_degraded"].series() == {(("condition", "state/pods-file"),): 1}
    pods_file.write_text(good + "\n")  # good again (a different size, so it is read again)
    run(agent, "collect")
    code, report = health(exporter)
    assert code == 200 and report["status"] == "ok" and report["checks"]["state"]["detail"] == "fresh"


def test_missing_kube_qos_cgroups_are_named_after_five_passes(running: Any) -> None:
    agent, exporter, t = running
    be = agent.layout.abs_dir("", agent.layout.qos_dir("BestEffort"))
    shutil.rmtree(be)
    for k in range(4):
        t[0] = T0 + k
        run(agent, "collect")
    assert "degraded" not in health(exporter)[1]
    t[0] = T0 + 4
    run(agent, "collect")
    code, report = health(exporter)
    assert code == 200 and report["status"] == "degraded"
    assert "kubepods/besteffort" in report["degraded"]["collector/qos-cgroups"]["detail"]


def test_unreadable_node_cpu_holds_the_be_quota_and_says_so(tmp_path: Path) -> None:
    """/proc/stat garbled in a running agent: cpuSuppress holds its BE quota, /healthz stays 200 and
    names both the unreadable file and the hold, the metric lists both conditions."""
    agent, t = fake_agent(tmp_path)
    slo = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": "cfsQuota",
                                           "cpuSuppressThresholdPercent": 65}}
    (tmp_path / "slo.json").write_text(json.dumps(nodeslo_object(slo)))
    exporter = agent.exporter
    assert exporter is not None and exporter.start()
    quota = agent.layout.file("", agent.layout.qos_dir("BestEffort"), "cpu.max")
    try:
        for k in range(2):
            t[0] = T0 + k
            run(agent, "collect")
        run(agent, "cpuSuppress")
        held = Path(quota).read_text()
        assert not held.startswith("max")
        stat = Path(agent.layout.roots.proc_path("stat"))
        good = stat.read_text()
        stat.write_text("cpu  1 2 x\n")
        for k in range(2, 5):
            t[0] = T0 + k
            run(agent, "collect")
        Path(quota).write_text("max 100000\n")  # someone lifts the BE limit meanwhile
        run(agent, "cpuSuppress")
        assert Path(quota).read_text() == held
        code, report = health(exporter)
        assert code == 200 and report["status"] == "degraded"
        assert set(report["degraded"]) == {"collector/proc-stat", "cpuSuppress/node-cpu"}
        assert "holding the last BE limit (BE quota" in report["degraded"]["cpuSuppress/node-cpu"]["detail"]
        fams = parse(get(exporter.url + "/metrics")[2].decode())
        assert set(fams["qosmanager_degraded"].series()) == {(("condition", "collector/proc-stat"),),
                                                              (("condition", "cpuSuppress/node-cpu"),)}
        stat.write_text(good)
        t[0] = T0 + 5
        run(agent, "collect")
        run(agent, "cpuSuppress")
        code, report = health(exporter)
        assert code == 200 and report["status"] == "ok"
    finally:
        agent.close()


def test_a_refused_nodeslo_is_named_but_not_fatal(running: Any, tmp_path: Path) -> None:
    agent, exporter, _ = running
    run(agent, "collect")
    bad = {"kind": "Node", "spec": {}}  # not a NodeSLO at all
    assert not agent.store.set_nodeslo(bad)
    code, report = health(exporter)
    assert code == 200 and "nodeslo: bad NodeSLO" in report["checks"]["state"]["detail"]
    assert report["status"] == "degraded"
    assert "the last good one stays" in report["degraded"]["nodeslo"]["detail"]


def test_a_dropped_nodeslo_field_makes_health_degraded_naming_it(running: Any, tmp_path: Path) -> None:
    agent, exporter, _ = running
    run(agent, "collect")
    assert agent.store.set_nodeslo({"spec": {"systemStrategy": {"watermarkScaleFactor": 500}}})
    code, report = health(exporter)
    assert code == 200 and report["status"] == "degraded"
    assert "spec.systemStrategy.watermarkScaleFactor" in report["degraded"]["nodeslo"]["detail"]
    assert agent.store.set_nodeslo({"spec": {"systemStrategy": {"watermarkScaleFactor": 150}}})
    code, report = health(exporter)
    assert code == 200 and "nodeslo" not in report.get("degraded", {})


def test_health_fails_when_kubernetes_sync_is_stale(tmp_path: Path) -> None:
    agent, t = fake_agent(tmp_path, pods_file=None, node_file=None, node_slo_file=None)
    exporter = agent.exporter
    assert exporter is not None and exporter.start()
    try:
        class Kube:
            connected = False
            watch_restarts = {"pods": 3}

        agent.kube_source = Kube()  # type: ignore[attr-defined]
        for kind in ("node", "pods", "nodeslo"):
            agent.store.health[kind].last_sync = T0 + 10
        agent.store.health["pods"].last_sync = T0 - 5
        t[0] = T0 + 60
        run(agent, "collect")
        code, report = health(exporter)
        assert code == 503
        state = report["checks"]["state"]
        # pods: 65 s since the last sync, 5 s over 60; node and nodeslo 50 s: fine
        assert state["over_seconds"] == 5
        assert state["detail"].startswith(
            "pods: last successful sync 65.0 s ago, 5.0 s over the bound of 60 s")
        assert "not connected" in state["detail"] and "node:" not in state["detail"]
        assert report["checks"]["collector"]["ok"]
        agent.store.health["pods"].last_sync = T0 + 59
        code, report = health(exporter)
        assert code == 200 and "not connected" in report["checks"]["state"]["detail"]
    finally:
        agent.close()


def test_idle_connections_do_not_fail_the_agents_liveness_probe(running: Any) -> None:
    """Four idle connections made every probe answer 503 (a thread per request, four at most);
    the agent's server now takes any number and answers the probe (more in test_exporter_server)."""
    agent, exporter, _ = running
    run(agent, "collect")
    host, port = exporter.server.address
    idle = [socket.create_connection((host, port), timeout=5) for _ in range(40)]
    try:
        for _ in range(3):
            code, _, body = get(exporter.url + "/healthz?probe=liveness")
            assert code == 200 and json.loads(body)["probe"] == "liveness"
        assert get(exporter.url + "/metrics")[0] == 200
    finally:
        for s in idle:
            s.close()


def test_a_taken_port_leaves_the_agent_running_without_metrics(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        agent, _ = fake_agent(tmp_path, metrics_addr=f"127.0.0.1:{port}")
        try:
            assert agent.exporter is not None and agent.exporter.start() is False
        finally:
            agent.close()


@pytest.mark.parametrize(("addr", "expected"), [
    ("127.0.0.1:9316", ("127.0.0.1", 9316)), (":9316", ("", 9316)), ("[::1]:0", ("::1", 0)),
    ("localhost:80", ("localhost", 80)),
])
def test_parse_addr(addr: str, expected: tuple[str, int]) -> None:
    assert parse_addr(addr) == expected


@pytest.mark.parametrize(("addr", "message"), [
    ("9316", "expected host:port"), ("host:http", "not a number"), ("::1:9316", "in brackets"),
    ("host:70000", "out of range"),
])
def test_bad_addr_is_refused_when_the_agent_is_built(tmp_path: Path, addr: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fake_agent(tmp_path, metrics_addr=addr)


def test_run_serves_and_close_stops(tmp_path: Path) -> None:
    """The wiring: ``run`` starts the server, ``close`` (at the end of ``run``) stops it."""
    host = FakeHost(str(tmp_path / "host"), version=1, n_cpus=2)
    agent = Agent(AgentConfig(roots=host.roots, metrics_addr="127.0.0.1:0", collect_interval=0.05))
    assert agent.exporter is not None
    th = threading.Thread(target=agent.run)
    th.start()
    try:
        deadline = time.monotonic() + 10
        while agent.exporter.server.address[1] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        url = agent.exporter.url
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # wait for a collector pass
            code, _, body = get(url + "/metrics")
            if 'job="collect"' in body.decode():
                break
            time.sleep(0.05)
        assert code == 200 and 'qosmanager_tick_duration_seconds_count{job="collect"}' in body.decode()
        assert get(url + "/healthz")[0] == 200
    finally:
        agent.stop()
        th.join(10)
    assert not th.is_alive()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/healthz", timeout=2)


def test_liveness_probe_ignores_a_lost_api_server() -> None:
    """An API-server outage fails /healthz (readiness, monitoring) but not the liveness probe."""
    from qosmanager.exporter.health import Health, HealthBounds

    class Metrics:
        def jobs(self) -> tuple[dict[str, float], dict[str, int]]:
            return {"collect": 1000.0}, {}

    class Store:
        health = {k: type("H", (), {"last_sync": 900.0, "last_error": ""})() for k in ("node", "pods", "nodeslo")}
        errors: dict[str, str] = {}

    h = Health(Metrics(), HealthBounds(collect_seconds=8, kube_sync_seconds=60), clock=lambda: 1001.0,
               store=Store(), kube_source=lambda: type("K", (), {"connected": False})())  # type: ignore[arg-type]
    ok, body = h.check()
    assert not ok and not body["checks"]["state"]["ok"]
    ok, body = h.check(liveness=True)
    assert ok and body["probe"] == "liveness" and not body["checks"]["state"]["ok"]


def test_a_run_without_a_node_is_degraded_saying_nothing_that_needs_the_node_runs(tmp_path: Path) -> None:
    """--pods-file alone started, said "ok" and did nothing."""
    agent, _ = fake_agent(tmp_path, node_file=None)
    assert agent.exporter is not None and agent.exporter.start()
    try:
        run(agent, "collect")
        code, report = health(agent.exporter)
        assert code == 200 and report["status"] == "degraded"
        detail = report["degraded"]["state/no-node"]["detail"]
        assert detail.startswith("no Node: standalone mode without --node-file") and "cpuSuppress" in detail
    finally:
        agent.close()


@pytest.mark.parametrize(("resource", "amount"), [("cpu", "1e18"), ("cpu", "17592187"), ("memory", "1e19")])
def test_a_node_capacity_beyond_what_the_kernel_can_enforce_is_refused_with_a_condition(
        tmp_path: Path, resource: str, amount: str) -> None:
    """cpu: "1e18" was accepted, and every BE quota write was then refused ("is not an integer")."""
    agent, _ = fake_agent(tmp_path)
    assert agent.exporter is not None and agent.exporter.start()
    try:
        run(agent, "collect")
        assert agent.store.node is not None and health(agent.exporter)[1]["status"] == "ok"
        node = json.loads((tmp_path / "node.json").read_text())
        node["status"]["capacity"][resource] = amount
        (tmp_path / "node.json").write_text(json.dumps(node) + "\n")
        good = agent.store.node
        run(agent, "collect")
        assert agent.store.node is good  # the last good Node stays in force
        code, report = health(agent.exporter)
        assert code == 200 and report["status"] == "degraded"
        detail = report["degraded"]["state/node"]["detail"]
        assert f"status.capacity.{resource}: '{amount}' is more than the kernel can enforce" in detail
    finally:
        agent.close()


def write_slo(tmp_path: Path, threshold: int) -> None:
    """The NodeSLO file with BE suppression at ``threshold`` %, its mtime moved on (a re-read is
    decided by the file's change, and two writes can fall in one mtime tick)."""
    path = tmp_path / "slo.json"
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(json.dumps(nodeslo_object({"resourceUsedThresholdWithBE": {
        "enable": True, "cpuSuppressPolicy": "cfsQuota", "cpuSuppressThresholdPercent": threshold}})))
    now = max(path.stat().st_mtime_ns, before + 10**9)
    os.utime(path, ns=(now, now))


@pytest.mark.parametrize("version", [1, 2])
def test_a_be_budget_below_koordlets_batch_quotas_holds_with_healthz_ok(tmp_path: Path, version: int) -> None:
    """The whole agent on a koordinator node: its BE pod's containers hold koordlet's batch quota (1 core
    each, the pod 2).  A budget of 0.4 core (4 CPUs x 10 %, the node idle): on v1 the pod and its
    containers are lowered to it first (v1 refuses a parent quota below a child's), so the BE dir holds
    it; v2 takes it as it is and leaves the children alone.  Nothing is refused: /healthz stays "ok"
    with nothing degraded and the BE-limit metric shows the budget.  When the budget rises (65 %) the
    children hold koordlet's quotas again."""
    agent, t = fake_agent(tmp_path, version=version)
    write_slo(tmp_path, 10)
    exporter = agent.exporter
    assert exporter is not None and exporter.start()
    layout = agent.layout
    be_dir = layout.qos_dir("BestEffort")
    [(pod_dir, containers)] = [(d, layout.dirs_at_depth("cpu", d, 1)) for d in layout.dirs_at_depth("cpu", be_dir, 1)]

    def quota(rel: str) -> int:
        if version == 1:
            return int(Path(layout.file("cpu", rel, "cpu.cfs_quota_us")).read_text())
        q = Path(layout.file("", rel, "cpu.max")).read_text().split()[0]
        return -1 if q == "max" else int(q)

    koordlet = {rel: quota(rel) for rel in (pod_dir, *containers)}
    assert len(containers) == 2 and koordlet == {pod_dir: 200_000, **dict.fromkeys(containers, 100_000)}
    assert quota(be_dir) == -1
    try:
        for k in range(3):
            t[0] = T0 + k
            run(agent, "collect")
            run(agent, "cpuSuppress")
        assert quota(be_dir) == 40_000
        children = {rel: quota(rel) for rel in koordlet}
        assert children == (dict.fromkeys(koordlet, 40_000) if version == 1 else koordlet)
        code, report = health(exporter)
        assert code == 200 and report["status"] == "ok" and "degraded" not in report, report
        fams = parse(get(exporter.url + "/metrics")[2].decode())
        assert fams["koordlet_be_suppress_cpu_cores"].series() == {(("node", "n1"), ("type", "cfsQuota")): 0.4}
        write_slo(tmp_path, 65)  # 4 CPUs x 65 % = 2.6 cores, reached in steps (koordlet's scale-up)
        seen = [quota(be_dir)]
        for k in range(3, 30):
            t[0] = T0 + k
            run(agent, "collect")
            run(agent, "cpuSuppress")
            seen.append(quota(be_dir))
            if seen[-1] == 260_000:
                break
        assert seen[-1] == 260_000 and seen == sorted(seen), seen
        assert {rel: quota(rel) for rel in koordlet} == koordlet, "koordlet's quotas given back"
        code, report = health(exporter)
        assert code == 200 and report["status"] == "ok" and "degraded" not in report, report
    finally:
        agent.close()
