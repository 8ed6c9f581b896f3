"""The agent's metrics: values after real strategy ticks and collector passes on a fake host.

Expected numbers are worked out by hand (cpuSuppress from the spec's budget formula, eviction
counts from the victim order of koordlet-qos §4.4) in the comments next to them.
"""

from __future__ import annotations

import json
import math
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from promtext import parse, parse_openmetrics
from qosmanager.agent import Agent, AgentConfig
from qosmanager.eviction.coordinator import ApiOutcome
from qosmanager.exporter import AgentMetrics, Exporter
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeContainer, FakeHost, FakePod
from qosmanager.sim.harness import Harness
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object

GiB = 1 << 30
T0 = 1000.0
BE_DIR = "kubepods/besteffort"


def metrics_for(h: Harness) -> AgentMetrics:
    return AgentMetrics(node_name="n1", clock=lambda: h.now, layout=h.layout, store=h.store, cache=h.cache,
                        executor=h.executor, coordinator=h.coordinator, manager=h.manager, process=False)


def scrape(m: AgentMetrics) -> dict[str, Any]:
    return parse(m.registry.render())


# ---------------------------------------------------------------------------------------------
# evictions


def uid(i: int) -> str:
    return f"{i:08d}-0000-4000-8000-0000000a11ce"


def be_pod(i: int) -> dict[str, Any]:
    fp = FakePod(uid(i), "default", f"be-{i}", KubeQoS.BESTEFFORT, [FakeContainer("c", f"containerd://{i:064x}")])
    return pod_object(fp, memory=GiB, priority=5500)


def memory_pressure(evict_mode: str = "none") -> Harness:
    """100 GiB node at 80 % with a 70 % BE threshold: BEMemoryEvict must release 12 GiB."""
    h = Harness(gates={"BEMemoryEvict": True}, strategies=["memoryEvict"], memory_bytes=100 * GiB, now=T0,
                evict_mode=evict_mode)
    h.set_node(node_object(h.host))
    h.set_pods([be_pod(i) for i in range(4)])
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"enable": True, "memoryEvictThresholdPercent": 70}})
    h.add_samples("node_memory_usage", [(T0, 80 * GiB)])
    for i, used in {0: 5 * GiB, 1: 8 * GiB, 3: 3 * GiB}.items():
        h.add_samples("pod_memory_usage", [(T0, used)], pod=uid(i))
    return h


def test_evictions_by_feature_and_result_through_the_eviction_api() -> None:
    h = memory_pressure()
    refused = {uid(1)}
    h.coordinator.mode = "api"
    h.coordinator.api = lambda pod, reason: ApiOutcome(ok=pod.uid not in refused, error="PDB says no")
    m = metrics_for(h)
    h.tick("memoryEvict", T0)
    fams = scrape(m)
    # victims by usage: be-1 (8 GiB) is refused; be-0 (5) and be-3 (3) give 8 GiB < 12; be-2 (no usage,
    # last) gives nothing more: three evicted, one failed
    ev = fams["qosmanager_evictions_total"]
    assert ev.value(strategy="memoryEvict", feature="BEMemoryEvict", result="evicted") == 3
    assert ev.value(strategy="memoryEvict", feature="BEMemoryEvict", result="failed") == 1
    assert fams["koordlet_pod_eviction"].series() == {(("node", "n1"), ("reason", "BEMemoryEvict")): 3}


def test_evictions_decided_in_none_mode_are_not_koordlet_evictions() -> None:
    h = memory_pressure("none")
    m = metrics_for(h)
    h.tick("memoryEvict", T0)
    fams = scrape(m)
    # be-1 (8) + be-0 (5) = 13 GiB >= 12: two decisions, audited only
    assert fams["qosmanager_evictions_total"].series() == {
        (("feature", "BEMemoryEvict"), ("result", "decided"), ("strategy", "memoryEvict")): 2}
    assert fams["koordlet_pod_eviction"].series() == {}


# ---------------------------------------------------------------------------------------------
# cpuSuppress and the executor


def cid(ch: str) -> str:
    return "containerd://" + ch * 64


def suppress_harness() -> Harness:
    h = Harness(strategies=["cpuSuppress"], n_cpus=8, now=T0)
    h.set_node(node_object(h.host))
    ls = FakePod("ls-1", "default", "ls", KubeQoS.BURSTABLE, [FakeContainer("c", cid("b"))])
    be = FakePod("be-1", "default", "be", KubeQoS.BESTEFFORT, [FakeContainer("c", cid("a"))],
                 sandbox_id=cid("e"))
    h.host.add_pod(be)
    h.set_pods([pod_object(ls), pod_object(be)])
    return h


def suppress_slo(h: Harness, policy: str, enable: bool = True) -> None:
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"enable": enable, "cpuSuppressThresholdPercent": 65,
                                                   "cpuSuppressPolicy": policy}})


def cpu_usage(h: Harness, t: float) -> None:
    # node 3.0 = LS 2.0 + BE 0.5 + system 0.5
    h.add_samples("node_cpu_usage", [(t, 3.0)])
    h.add_samples("pod_cpu_usage", [(t, 2.0)], pod="ls-1")
    h.add_samples("pod_cpu_usage", [(t, 0.5)], pod="be-1")


def test_be_suppression_gauges_follow_the_policy_in_use() -> None:
    h = suppress_harness()
    m = metrics_for(h)
    suppress_slo(h, "cfsQuota")
    cpu_usage(h, T0 - 1)
    h.add_samples("be_cpu_usage", [(T0 - 1, 500.0)])  # milli-cores, as the collector stores it
    h.tick("cpuSuppress", T0)
    fams = scrape(m)
    # budget: 8000 x 65 // 100 - 2000 (LS) - 500 (system) = 2700m -> quota 270000 -> 2.7 cores
    assert fams["koordlet_be_suppress_cpu_cores"].series() == {(("node", "n1"), ("type", "cfsQuota")): 2.7}
    assert fams["koordlet_be_suppress_ls_used_cpu_cores"].value(node="n1") == 2.0
    assert fams["koordlet_be_suppress_be_used_cpu_cores"].value(node="n1") == 0.5
    # one executed write (the quota; the cpuset recovery found every CPU already there)
    upd = fams["koordlet_resource_update_duration_milliseconds"]
    assert upd.series("_count") == {(("status", "success"), ("type", "cgroup")): 1}

    # the policy switches to cpuset: 2700m -> ceil = 3 CPUs; the quota goes back to unlimited
    suppress_slo(h, "cpuset")
    cpu_usage(h, T0)
    h.tick("cpuSuppress", T0 + 1)
    fams = scrape(m)
    assert fams["koordlet_be_suppress_cpu_cores"].series() == {(("node", "n1"), ("type", "cpuset")): 3}
    # 4 BE dirs (QoS, pod, container, sandbox) narrowed + the quota reset = 5 more executed writes
    upd = fams["koordlet_resource_update_duration_milliseconds"]
    assert upd.series("_count") == {(("status", "success"), ("type", "cgroup")): 6}

    # suppression switched off: both policies are recovered, no series left
    suppress_slo(h, "cpuset", enable=False)
    h.tick("cpuSuppress", T0 + 2)
    assert scrape(m)["koordlet_be_suppress_cpu_cores"].series() == {}


def test_failed_writes_by_kind_and_status() -> None:
    h = suppress_harness()
    m = metrics_for(h)
    suppress_slo(h, "cpuset")
    ctr = f"{h.host.pod_dir('be-1')}/{'a' * 64}"
    cpuset = Path(h.path(h.cgroup_file("cpuset", ctr, "cpuset.cpus")))
    cpuset.unlink()
    cpuset.mkdir()  # opening it for writing fails (EISDIR): a write the host refuses
    cpu_usage(h, T0 - 1)
    h.tick("cpuSuppress", T0)
    fams = scrape(m)
    # 3 CPUs (2700m) for the QoS dir, the pod and the sandbox; the container's write fails
    assert fams["qosmanager_failed_writes_total"].value() == 1
    assert fams["qosmanager_writes_total"].value(status="failed") == 1
    assert fams["qosmanager_writes_total"].value(status="written") == 3
    upd = fams["koordlet_resource_update_duration_milliseconds"]
    assert upd.series("_count") == {(("status", "failed"), ("type", "cgroup")): 1,
                                    (("status", "success"), ("type", "cgroup")): 3}
    assert fams["koordlet_be_suppress_cpu_cores"].series() == {(("node", "n1"), ("type", "cpuset")): 3}


def test_write_kinds() -> None:
    m = AgentMetrics(process=False)
    assert m._kind("cpu.cfs_quota_us") == "cgroup"
    assert m._kind("resctrl.schemata") == "resctrl"
    assert m._kind("min_free_kbytes") == "system"
    assert m._kind("no.such.resource") == "system"


def test_a_broken_hook_never_reaches_the_agent(caplog: pytest.LogCaptureFixture) -> None:
    m = AgentMetrics(process=False)

    class Odd:
        name = "collect"
        errors = "not a number"  # the hook compares it with an int: TypeError inside the hook

    m.on_job_run(Odd(), 0.1)  # type: ignore[arg-type]
    m.on_job_run(Odd(), 0.1)  # type: ignore[arg-type]
    assert sum("metrics hook on_run failed" in r.message for r in caplog.records) == 1  # logged once


# ---------------------------------------------------------------------------------------------
# an agent on a fake host


def fake_agent(tmp_path: Path, n_containers: int = 6, **cfg: Any) -> tuple[Agent, FakeHost, list[float]]:
    host = FakeHost(str(tmp_path / "host"), version=1, n_cpus=4)
    pods = FakeHost.make_pods(n_containers, seed=3)
    host.add_pods(pods)
    (tmp_path / "pods.json").write_text(json.dumps(pod_list(pod_object(p) for p in pods)))
    (tmp_path / "node.json").write_text(json.dumps(node_object(host)))
    (tmp_path / "slo.json").write_text(json.dumps(nodeslo_object({})))
    t = [T0]
    agent = Agent(AgentConfig(roots=host.roots, node_name="n1", pods_file=str(tmp_path / "pods.json"),
                              node_file=str(tmp_path / "node.json"), node_slo_file=str(tmp_path / "slo.json"),
                              **cfg), clock=lambda: t[0], seed=1)
    return agent, host, t


def job(agent: Agent, name: str) -> Any:
    return next(j for j in agent.scheduler.jobs if j.name == name)


def test_agent_metrics_after_a_few_ticks(tmp_path: Path) -> None:
    agent, _, t = fake_agent(tmp_path)
    exporter = Exporter.for_agent(agent, "127.0.0.1:0")  # not started: the registry is read directly
    try:
        for _ in range(3):
            for j in agent.scheduler.jobs:
                agent.scheduler.run_job(j)
            t[0] += 1
        fams = parse(exporter.metrics.registry.render())
        # make_pods(6) with 2 containers per pod: 3 pods, 6 containers, every cgroup present
        assert fams["qosmanager_pods_tracked"].value() == 3
        assert fams["qosmanager_containers_tracked"].value() == 6
        assert fams["qosmanager_collector_pending_cgroups"].value() == 0
        assert fams["qosmanager_collector_partial_cgroups"].value() == 0
        assert fams["qosmanager_collector_read_errors_total"].value() == 0
        assert fams["qosmanager_audit_write_errors_total"].value() == agent.executor.audit.write_errors
        held = fams["qosmanager_descriptors"].value(kind="held")
        assert held == agent.collector.budget.held() and held >= 6  # a descriptor per container at least
        assert fams["qosmanager_descriptors"].value(kind="budget") == agent.collector.budget.total > held
        # read at scrape time from the live objects
        agent.collector.stats.partial, agent.collector.stats.read_errors = 2, 7
        agent.executor.audit.write_errors = 3
        agent.executor.stats.signals, agent.executor.stats.cgroup_kills = 4, 1
        again = parse(exporter.metrics.registry.render())
        assert again["qosmanager_collector_partial_cgroups"].value() == 2
        assert again["qosmanager_collector_read_errors_total"].value() == 7
        assert again["qosmanager_audit_write_errors_total"].value() == 3
        assert again["qosmanager_kill_signals_total"].series() == {(("how", "sigkill"),): 4,
                                                                   (("how", "cgroup_kill"),): 1}
        tick = fams["qosmanager_tick_duration_seconds"]
        assert {dict(lb)["job"]: n for lb, n in tick.series("_count").items()} == {
            j.name: 3 for j in agent.scheduler.jobs}
        assert fams["qosmanager_job_consecutive_failures"].value(job="collect") == 0
        assert fams["qosmanager_job_last_success_timestamp_seconds"].value(job="collect") == T0 + 2
        # every state file was read at the passes' times; the last pass ran at T0 + 2
        assert fams["qosmanager_last_sync_timestamp_seconds"].series() == {
            (("source", k),): T0 + 2 for k in ("node", "pods", "nodeslo")}
        assert fams["qosmanager_source_connected"].series() == {(("source", "files"),): 1}
        assert fams["qosmanager_metric_cache_bytes"].value() == agent.cache.nbytes()
        errors = fams["qosmanager_strategy_errors_total"].series()
        assert {dict(lb)["strategy"]: n for lb, n in errors.items()} == {n: 0 for n in agent.strategy_names}
        # the standard process families (prometheus_client's ProcessCollector) replace the agent's own
        assert fams["process_resident_memory_bytes"].value() > 0
        assert fams["process_open_fds"].value() > 0
        assert fams["process_max_fds"].value() >= fams["process_open_fds"].value()
        assert fams["process_cpu_seconds_total"].type == "counter"
        assert not math.isnan(fams["process_cpu_seconds_total"].value())
        assert fams["process_start_time_seconds"].value() > 0
        assert fams["python_info"].series()
        for old in ("qosmanager_process_resident_memory_bytes", "qosmanager_process_cpu_seconds_total",
                    "qosmanager_descriptors_open"):
            assert old not in fams
        st = agent.executor.stats
        assert fams["qosmanager_writes_total"].value(status="written") == st.written
        assert fams["qosmanager_write_cache_hits_total"].value() == st.cache_hits
    finally:
        agent.close()


KOORDLET_NAMES = {  # koordlet's pkg/koordlet/metrics names, kept for its dashboards
    "koordlet_be_suppress_cpu_cores": "gauge", "koordlet_be_suppress_ls_used_cpu_cores": "gauge",
    "koordlet_be_suppress_be_used_cpu_cores": "gauge", "koordlet_pod_eviction": "untyped",
    "koordlet_resource_update_duration_milliseconds": "histogram",
}


def test_the_page_in_both_formats_carries_koordlets_and_the_standard_names(tmp_path: Path) -> None:
    """The same page as text 0.0.4 and as OpenMetrics, read by prometheus_client's parsers: the same
    families with the same samples (values read at two instants aside), koordlet's names as koordlet
    names them, and the standard process families."""
    agent, _, _ = fake_agent(tmp_path)
    exporter = Exporter.for_agent(agent, "127.0.0.1:0")
    m = exporter.metrics
    try:
        for j in agent.scheduler.jobs:
            agent.scheduler.run_job(j)
        m.koord_evictions.labels("n1", "BEMemoryEvict").inc()
        m.be_suppress_cores.labels("n1", "cfsQuota").set(2.5)
        m.update_duration.labels("cgroup", "success").observe(0.02)
        text = parse(m.registry.render())
        page, ctype = m.registry.expose("application/openmetrics-text; version=1.0.0")
        assert ctype.startswith("application/openmetrics-text; version=1.0.0")
        om = parse_openmetrics(page.decode())
    finally:
        agent.close()
    assert set(text) == set(om)
    for name, kind in KOORDLET_NAMES.items():
        assert text[name].type == kind and om[name].type == kind, name
    assert om["koordlet_pod_eviction"].value(node="n1", reason="BEMemoryEvict") == 1
    assert om["koordlet_be_suppress_cpu_cores"].value(node="n1", type="cfsQuota") == 2.5
    for name in ("process_resident_memory_bytes", "process_virtual_memory_bytes", "process_cpu_seconds_total",
                 "process_open_fds", "process_max_fds", "process_start_time_seconds"):
        assert name in text and name in om, name
    moving = {"process_resident_memory_bytes", "process_virtual_memory_bytes", "process_cpu_seconds_total",
              "process_open_fds"} | {n for n in text if n.startswith("python_gc_")}
    for name in set(text) - moving:
        assert text[name].samples == om[name].samples, name


def test_kubernetes_source_is_read_defensively(tmp_path: Path) -> None:
    agent, _, _ = fake_agent(tmp_path)
    exporter = Exporter.for_agent(agent, "127.0.0.1:0")
    try:
        class Kube:
            connected = True
            watch_restarts: Any = {"pods": 2, "nodes": 1, "junk": "x"}

        agent.kube_source = Kube()  # type: ignore[attr-defined]
        fams = parse(exporter.metrics.registry.render())
        assert fams["qosmanager_watch_restarts_total"].series() == {
            (("resource", "pods"),): 2, (("resource", "nodes"),): 1}
        assert fams["qosmanager_source_connected"].value(source="kubernetes") == 1
        Kube.connected = "yes"  # type: ignore[assignment]  # not a bool: not connected
        Kube.watch_restarts = 5
        fams = parse(exporter.metrics.registry.render())
        assert fams["qosmanager_source_connected"].value(source="kubernetes") == 0
        assert fams["qosmanager_watch_restarts_total"].series() == {(("resource", "all"),): 5}
        agent.kube_source = object()  # type: ignore[attr-defined]  # neither attribute
        fams = parse(exporter.metrics.registry.render())
        assert fams["qosmanager_watch_restarts_total"].series() == {}
        assert fams["qosmanager_source_connected"].value(source="kubernetes") == 0
    finally:
        agent.close()


def test_scraping_while_the_agent_ticks(tmp_path: Path) -> None:
    agent, _, t = fake_agent(tmp_path)
    exporter = Exporter.for_agent(agent, "127.0.0.1:0")
    stop = threading.Event()
    errors: list[BaseException] = []
    pages = [0]

    def scraper() -> None:
        try:
            while not stop.is_set():
                parse(exporter.metrics.registry.render())
                pages[0] += 1
        except BaseException as e:
            errors.append(e)

    th = threading.Thread(target=scraper)
    th.start()
    try:
        for _ in range(40):
            for j in agent.scheduler.jobs:
                agent.scheduler.run_job(j)
            t[0] += 1
    finally:
        stop.set()
        th.join()
        agent.close()
    assert errors == [] and pages[0] > 0


def test_the_names_docs_interfaces_pins_are_on_the_page(tmp_path: Path) -> None:
    """Every family docs/interfaces.md names under ``/metrics`` is exported under that name, with the
    labels it lists (a series appears once its first value does: a few are fed here)."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "interfaces.md").read_text(encoding="utf-8")
    section = doc.split("## `/metrics`", 1)[1].split("\n## ", 1)[0]
    named = dict(re.findall(r"`([a-z][a-z0-9_]+)(?:\{([a-z,]+)\})?`", section))
    agent, _, _ = fake_agent(tmp_path)
    m = Exporter.for_agent(agent, "127.0.0.1:0").metrics
    try:
        for j in agent.scheduler.jobs:
            agent.scheduler.run_job(j)
        m.koord_evictions.labels("n1", "BEMemoryEvict").inc()
        m.be_suppress_cores.labels("n1", "cfsQuota").set(2.5)
        m.update_duration.labels("cgroup", "success").observe(0.02)
        fams = parse(m.registry.render())
    finally:
        agent.close()
    assert len(named) >= 12, named
    for name, labels in named.items():
        assert name in fams, name
        for (_, series), _ in fams[name].samples.items():
            if labels:  # the labels the doc lists, exactly
                assert {k for k, _ in series} - {"le"} == set(labels.split(",")), (name, series)
    assert named["koordlet_pod_eviction"] == "node,reason" and fams["koordlet_pod_eviction"].samples


def test_memory_protection_level_follows_memory_high() -> None:
    """0 with nothing in force, 1 with BE capped (node at 64 % of 100 GiB, BE 10 GiB: memoryHigh engages at
    63 %), none at all where memoryHigh does not run."""
    h = Harness(version=2, gates={"BEMemoryHigh": True}, strategies=["memoryHigh"], memory_bytes=100 * GiB,
                now=T0)
    h.set_node(node_object(h.host))
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"enable": True, "memoryEvictThresholdPercent": 70}})
    m = metrics_for(h)
    assert scrape(m)["qosmanager_memory_protection_level"].samples == {("qosmanager_memory_protection_level", ()): 0}
    h.host.set_memory(BE_DIR, 0, 10 * GiB, 0, 0, 0)
    h.add_samples("node_memory_usage", [(T0, 64 * GiB)])
    h.tick("memoryHigh", T0)
    assert scrape(m)["qosmanager_memory_protection_level"].samples == {("qosmanager_memory_protection_level", ()): 1}
    off = memory_pressure()
    fams = scrape(metrics_for(off))
    assert not ("qosmanager_memory_protection_level" in fams and fams["qosmanager_memory_protection_level"].samples)
