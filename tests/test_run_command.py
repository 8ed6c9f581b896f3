"""``qosmanager run`` in standalone mode on a fake host: collects, stops on --duration and SIGTERM, refuses a
bad start with one line naming the flag, sums up its start at INFO (text or JSON lines)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from qosmanager.agent import Agent, AgentConfig
from qosmanager.cli import log_level, main
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object


def fake_node(tmp_path, version: int = 1):
    host = FakeHost(str(tmp_path / "host"), version=version, n_cpus=4)
    pods = FakeHost.make_pods(6, seed=3)
    host.add_pods(pods)
    files = {
        "pods": tmp_path / "pods.json",
        "node": tmp_path / "node.yaml",
        "slo": tmp_path / "nodeslo.json",
    }
    files["pods"].write_text(json.dumps(pod_list(pod_object(p) for p in pods)))
    files["node"].write_text(json.dumps(node_object(host)))
    files["slo"].write_text(json.dumps(nodeslo_object({})))
    return host, pods, files


def run_args(host: FakeHost, files: dict, *extra: str) -> list[str]:
    return [sys.executable, "-m", "qosmanager", "run", "--cgroup-root", host.roots.cgroup,
            "--proc-root", host.roots.proc, "--sys-root", host.roots.sys, "--pods-file", str(files["pods"]),
            "--node-file", str(files["node"]), "--node-slo-file", str(files["slo"]), "--metrics-addr", "",
            *extra]


def test_run_stops_after_duration(tmp_path) -> None:
    host, _, files = fake_node(tmp_path)
    t0 = time.monotonic()
    proc = subprocess.run(run_args(host, files, "--duration", "1.5s", "--collect-interval", "200ms"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - t0 < 30


def wait_started(proc: subprocess.Popen[str]) -> tuple[list[str], threading.Thread]:
    """The agent's stderr lines, read on a thread (to its end); returns once the agent logged its
    start-up summary (the signals are handled from there: on a loaded machine start-up takes seconds)."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while not any("starting:" in line for line in lines):
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
        time.sleep(0.05)
    return lines, reader


def test_run_stops_on_sigterm_within_an_interval(tmp_path) -> None:
    host, _, files = fake_node(tmp_path, version=2)
    # every interval 40 s: a stop that waited for the next tick would take up to 40 s; a prompt one
    # takes the process's exit (well under a second idle, a few seconds on a loaded machine)
    intervals = ("--collect-interval", "40s", "--reconcile-interval-seconds", "40", "--cpu-suppress-interval-seconds",
                 "40", "--cpu-evict-interval-seconds", "40", "--memory-evict-interval-seconds", "40")
    proc = subprocess.Popen(run_args(host, files, *intervals), stderr=subprocess.PIPE, text=True)
    try:
        wait_started(proc)
        time.sleep(1.0)  # past start-up and the first tick, into the wait for the next
        assert proc.poll() is None
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        assert rc == 0
        assert time.monotonic() - t0 < 20  # half an interval
    finally:
        if proc.poll() is None:
            proc.kill()


def test_agent_collects_and_follows_pod_file_changes(tmp_path) -> None:
    host, pods, files = fake_node(tmp_path)
    t = [1000.0]
    agent = Agent(AgentConfig(roots=host.roots, pods_file=str(files["pods"]), node_file=str(files["node"]),
                              node_slo_file=str(files["slo"])), clock=lambda: t[0])
    try:
        agent.collect(t[0])
        assert agent.collector.stats.pods == 3 and agent.store.node is not None
        # the pods file changes: one pod less
        files["pods"].write_text(json.dumps(pod_list(pod_object(p) for p in pods[1:])))
        os.utime(files["pods"], ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
        t[0] += 1
        agent.collect(t[0])
        assert agent.collector.stats.pods == 2
        # a bad NodeSLO field costs that field only, and says why
        files["slo"].write_text(json.dumps({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                                            "spec": {"resourceUsedThresholdWithBE": {
                                                "enable": True, "cpuSuppressThresholdPercent": 150}}}))
        t[0] += 1
        agent.collect(t[0])
        thr = agent.store.nodeslo.resource_used_threshold_with_be
        assert (thr.enable, thr.cpu_suppress_threshold_percent) == (True, 65)
        condition = agent.store.conditions.get("nodeslo")
        assert condition is not None and "cpuSuppressThresholdPercent" in condition.message
        # a file that is not a NodeSLO at all keeps the last good one and says why
        files["slo"].write_text(json.dumps({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "Node"}))
        os.utime(files["slo"], ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
        gen = agent.store.nodeslo_generation
        t[0] += 1
        agent.collect(t[0])
        assert agent.store.nodeslo_generation == gen
        assert agent.store.nodeslo.resource_used_threshold_with_be.enable is True
        assert 'kind: must be "NodeSLO"' in agent.store.errors["nodeslo"]
    finally:
        agent.close()


@pytest.mark.parametrize("bad", ["{not json", '{"items": 3}'])
def test_bad_pods_file_keeps_last_pods(tmp_path, bad: str) -> None:
    host, _, files = fake_node(tmp_path)
    agent = Agent(AgentConfig(roots=host.roots, pods_file=str(files["pods"])))
    try:
        agent.collect(1000.0)
        files["pods"].write_text(bad)
        os.utime(files["pods"], ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
        agent.collect(1001.0)
        assert agent.collector.stats.pods == 3
    finally:
        agent.close()


# ---------------------------------------------------------------------------------------------
# a strict, loud start


@pytest.fixture
def restore_logging():
    """``cli.main`` in-process installs its handler and level on the root logger: put them back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    root.setLevel(level)


def host_flags(host: FakeHost) -> list[str]:
    return ["--cgroup-root", host.roots.cgroup, "--proc-root", host.roots.proc, "--sys-root", host.roots.sys,
            "--metrics-addr", ""]


def main_exit(argv: list[str]) -> int:
    """``cli.main``'s status, also when argparse exits."""
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)


NOT_A_NODESLO = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "data": {}})


@pytest.mark.parametrize(("case", "flag"), [
    ("no-source", "--pods-file"),
    ("pods-missing", "--pods-file"),
    ("pods-garbled", "--pods-file"),
    ("pods-not-a-list", "--pods-file"),
    ("node-missing", "--node-file"),
    ("node-garbled", "--node-file"),
    ("slo-missing", "--node-slo-file"),
    ("slo-yaml-garbled", "--node-slo-file"),
    ("slo-not-a-nodeslo", "--node-slo-file"),
    ("audit-log-under-a-file", "--audit-log"),
    ("audit-log-is-a-dir", "--audit-log"),
])
def test_a_bad_start_exits_2_with_one_line_naming_the_flag(tmp_path, capsys, monkeypatch, restore_logging,
                                                          case: str, flag: str) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # standalone: not in a cluster
    host, _, files = fake_node(tmp_path)
    bad = tmp_path / "bad"
    state = {"--pods-file": str(files["pods"]), "--node-file": str(files["node"]),
             "--node-slo-file": str(files["slo"])}
    extra: list[str] = []
    if case == "no-source":
        state = {}
    elif case.endswith("-missing"):
        state[flag] = str(tmp_path / "missing.json")
    elif case.endswith("garbled"):
        bad.write_text("kind: [Node\n  x: {" if "yaml" in case else '{"items": [')
        state[flag] = str(bad)
    elif case == "pods-not-a-list":
        bad.write_text('{"kind": "PodList", "items": {"a": 1}}')
        state[flag] = str(bad)
    elif case == "slo-not-a-nodeslo":
        bad.write_text(NOT_A_NODESLO)
        state[flag] = str(bad)
    elif case == "audit-log-under-a-file":
        extra = ["--audit-log", str(files["pods"] / "audit.log")]
    elif case == "audit-log-is-a-dir":
        extra = ["--audit-log", str(tmp_path)]
    argv = ["run", *host_flags(host), *(a for kv in state.items() for a in kv), *extra, "--duration", "1s"]
    assert main_exit(argv) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err  # printed once: not logged as well
    assert lines[0].startswith("qosmanager run: ") and flag in lines[0], lines[0]
    if case.endswith("-missing"):
        assert "missing.json" in lines[0] and "No such file" in lines[0]


@pytest.mark.parametrize("flag", ["--collect-interval", "--duration", "--reconcile-interval-seconds",
                                  "--cpu-suppress-interval-seconds", "--cpu-evict-interval-seconds",
                                  "--memory-evict-interval-seconds", "--memory-evict-cool-time-seconds",
                                  "--cpu-evict-cool-time-seconds", "--force-update-seconds"])
@pytest.mark.parametrize("value", ["-1", "nan"])
def test_negative_or_nonsense_intervals_are_refused(tmp_path, capsys, restore_logging, flag: str,
                                                    value: str) -> None:
    host, _, files = fake_node(tmp_path)
    argv = ["run", *host_flags(host), "--pods-file", str(files["pods"]), "--duration", "1s",
            f"{flag}={value}"]
    if flag == "--duration":
        argv.remove("1s")
        argv.remove("--duration")
    assert main_exit(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and flag in lines[0], lines


def test_a_zero_collect_interval_is_refused_and_zero_cool_downs_are_not(tmp_path, capsys,
                                                                        restore_logging) -> None:
    host, _, files = fake_node(tmp_path)
    base = ["run", *host_flags(host), "--pods-file", str(files["pods"]), "--duration", "0.3s"]
    assert main_exit([*base, "--collect-interval", "0"]) == 2
    assert "--collect-interval" in capsys.readouterr().err
    # 0 = no cool-down (koordlet's flags accept it); the run goes on
    assert main_exit([*base, "--collect-interval", "100ms", "--cpu-evict-cool-time-seconds", "0",
                      "--memory-evict-cool-time-seconds", "0"]) == 0


@pytest.mark.parametrize(("strategies", "gates", "message"), [
    ("cpuEvict", "", "--strategies cpuEvict: its gates BECPUEvict, CPUEvict, CPUAllocatableEvict are all "
                     "off; enable one with --feature-gates"),
    ("cpuSuppress,cgroupReconcile", "", "--strategies cgroupReconcile: its gate CgroupReconcile is off; "
                                        "enable it with --feature-gates CgroupReconcile=true"),
    ("cpuSuppress", "BECPUSuppress=false", "--strategies cpuSuppress: its gate BECPUSuppress is off"),
    ("cpuSupress", "", "--strategies cpuSupress: unknown strategy (did you mean cpuSuppress?); known: cpuSuppress, "),
])
def test_strategies_that_cannot_run_are_refused_naming_the_gate(tmp_path, capsys, restore_logging,
                                                                strategies: str, gates: str,
                                                                message: str) -> None:
    host, _, files = fake_node(tmp_path)
    argv = ["run", *host_flags(host), "--pods-file", str(files["pods"]), "--duration", "1s",
            "--strategies", strategies, "--feature-gates", gates]
    assert main_exit(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"qosmanager run: {message}"] or (len(lines) == 1 and message in lines[0]), lines


def test_a_strategy_whose_interval_is_0_is_refused_and_a_gate_turned_on_runs_it(tmp_path, capsys,
                                                                                 restore_logging) -> None:
    host, _, files = fake_node(tmp_path)
    base = ["run", *host_flags(host), "--pods-file", str(files["pods"]), "--duration", "0.3s",
            "--collect-interval", "100ms"]
    assert main_exit([*base, "--strategies", "cpuSuppress", "--cpu-suppress-interval-seconds", "0"]) == 2
    assert "--cpu-suppress-interval-seconds is 0" in capsys.readouterr().err
    assert main_exit([*base, "--strategies", "cpuEvict", "--feature-gates", "BECPUEvict=true"]) == 0
    err = capsys.readouterr().err
    assert "strategies cpuEvict (BECPUEvict)" in err


def test_the_start_is_summed_up_at_info_by_default(tmp_path) -> None:
    host, _, files = fake_node(tmp_path, version=2)
    proc = subprocess.run([*run_args(host, files, "--duration", "0.5s", "--collect-interval", "100ms",
                                     "--dry-run", "--feature-gates", "CgroupReconcile=true")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if "starting:" in ln]
    assert " INFO qosmanager.agent: starting: standalone mode" in line
    for fragment in (f"--pods-file {files['pods']}", f"--node-file {files['node']}",
                     f"--node-slo-file {files['slo']}", "cgroup v2 cgroupfs driver",
                     f"kubepods at {host.roots.cgroup}/kubepods;",
                     "strategies cpuSuppress (BECPUSuppress), cpuBurst (CPUBurst), "
                     "cgroupReconcile (CgroupReconcile)",
                     "cpuEvict (gates BECPUEvict, CPUEvict, CPUAllocatableEvict off)",
                     "evict mode none", "dry-run ON", "metrics off", "collect every 0.1 s", "audit log off"):
        assert fragment in line, (fragment, line)
    assert "Traceback" not in proc.stderr


def test_log_format_json_is_one_object_per_line_with_the_summary_as_fields(tmp_path) -> None:
    host, _, files = fake_node(tmp_path, version=1)
    audit = tmp_path / "audit.log"
    args = run_args(host, files, "--duration", "0.5s", "--collect-interval", "100ms", "--log-format", "json",
                    "--audit-log", str(audit))
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    recs = [json.loads(ln) for ln in proc.stderr.splitlines()]  # every line is JSON
    assert recs and all({"ts", "level", "logger", "msg"} <= r.keys() for r in recs)
    (start,) = [r for r in recs if r["msg"].startswith("starting:")]
    assert start["level"] == "INFO" and start["logger"] == "qosmanager.agent"
    assert start["mode"] == "standalone"
    assert start["cgroup_version"] == 1 and start["cgroup_driver"] == "cgroupfs"
    assert start["state_sources"] == {"pods": str(files["pods"]), "node": str(files["node"]),
                                      "nodeslo": str(files["slo"])}
    assert start["strategies"]["cpuSuppress"] == ["BECPUSuppress"]
    assert start["strategies_off"]["cpuEvict"] == "gates BECPUEvict, CPUEvict, CPUAllocatableEvict off"
    assert start["evict_mode"] == "none" and start["dry_run"] is False and start["metrics_addr"] == "off"
    assert start["collect_interval"] == 0.1 and start["audit_log"] == str(audit)
    assert start["kubepods"] == os.path.join(host.roots.cgroup, "cpu", "kubepods")


def test_log_levels() -> None:
    assert log_level("run", 0) == logging.INFO and log_level("run", 1) == logging.DEBUG
    assert log_level("simulate", 0) == logging.WARNING and log_level("replay", 0) == logging.WARNING
    assert log_level("simulate", 1) == logging.INFO and log_level("replay", 2) == logging.DEBUG


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_sigterm_with_an_audit_log_on_a_full_disk_exits_0_without_a_traceback(tmp_path) -> None:
    host, _, files = fake_node(tmp_path, version=2)
    proc = subprocess.Popen(run_args(host, files, "--collect-interval", "100ms", "--audit-log", "/dev/full"),
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while not any("cannot write audit log /dev/full" in ln for ln in lines):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        time.sleep(0.5)  # a few more ticks, more failed flushes
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=10)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(lines)
    assert rc == 0, err
    assert "Traceback" not in err
    assert sum("cannot write audit log /dev/full: ENOSPC" in ln for ln in lines) == 1, err
    assert "record(s) could not be written" in err


def test_the_summary_in_kubernetes_mode_names_the_api_server_and_the_node(tmp_path) -> None:
    from fakeapi import FakeAPIServer, FakeCluster

    host = FakeHost(str(tmp_path / "host"), version=2, n_cpus=2)
    cluster = FakeCluster()
    cluster.put(node_object(host, "kube-node"))
    with FakeAPIServer(cluster) as api:
        kc = api.kubeconfig(str(tmp_path / "kc"))
        proc = subprocess.run([sys.executable, "-m", "qosmanager", "run", *host_flags(host),
                               "--kubeconfig", kc, "--node-name", "kube-node", "--duration", "1s",
                               "--collect-interval", "200ms", "--log-format", "json"],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (start,) = [r for r in map(json.loads, proc.stderr.splitlines()) if r["msg"].startswith("starting:")]
    assert start["mode"] == "kubernetes" and start["node_name"] == "kube-node"
    assert start["evict_mode"] == "api"
    assert start["state_sources"] == {"api_server": api.url, "credentials": kc}
    assert f"kubernetes mode, node kube-node, state from Kubernetes API {api.url} ({kc})" in start["msg"]


@pytest.mark.parametrize(("collect", "reconcile"), [(1.0, 1.0), (0.5, 1.0), (1.0, 3.0), (2.0, 0.5)])
def test_the_metric_cache_keeps_what_the_strategies_read_and_no_more(tmp_path, collect: float,
                                                                     reconcile: float) -> None:
    """The pod ring holds every sample of cpuBurst's node-state window (the longest pod query) and the
    container ring those of a ``last`` query, far below the 120 and 60 rows of the defaults (read
    everything each tick, so every row of the window holds a sample)."""
    from qosmanager.framework.context import Context
    from qosmanager.framework.strategy import QoSConfig
    from qosmanager.strategies.cpu_burst import NODE_STATE_MAX_WINDOW, NODE_STATE_WINDOW_INTERVALS

    host, pods, files = fake_node(tmp_path)
    t = [1000.0]
    agent = Agent(AgentConfig(roots=host.roots, pods_file=str(files["pods"]), node_file=str(files["node"]),
                              node_slo_file=str(files["slo"]), collect_interval=collect,
                              collect_mode="all", qos=QoSConfig(reconcile_interval=reconcile)),
                  clock=lambda: t[0])
    try:
        assert agent.cache.pods.rows <= 24 and agent.cache.containers.rows <= 6
        burst = min(NODE_STATE_WINDOW_INTERVALS * reconcile, NODE_STATE_MAX_WINDOW)
        for i in range(int(4 * max(burst, 2 * collect) / collect) + 4):  # wrap both rings
            for p in pods:
                for c in p.containers:
                    host.set_cpu_usage(host.container_dir(p.uid, c.name), (i + 1) * 10**8)
            t[0] += collect
            agent.collect(t[0])
        ctx = Context(agent.shared, now=t[0])
        in_window = int(burst // collect) + 1  # a closed window of samples every `collect` seconds
        counts = ctx.pod_metrics("pod_cpu_usage", "count", burst)
        assert counts and set(counts.values()) == {float(in_window)}
        last = ctx.container_metrics("container_cpu_usage", "count")
        assert last and set(last.values()) == {float(int(2 * collect // collect) + 1)}
    finally:
        agent.close()


def test_the_running_agent_has_one_thread_for_the_numeric_libraries(tmp_path) -> None:
    """Without the operator saying otherwise, OpenBLAS (numpy's BLAS) starts no thread pool: the agent
    with metrics off runs on its main thread and the fast path's sampler alone, however many CPUs the
    machine has."""
    import psutil

    host, _, files = fake_node(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                            "MKL_NUM_THREADS")}
    proc = subprocess.Popen(run_args(host, files, "--duration", "30"), env=env, stderr=subprocess.PIPE, text=True)
    try:
        p = psutil.Process(proc.pid)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            if "numpy" in " ".join(m.path for m in p.memory_maps()):
                break
            time.sleep(0.1)
        time.sleep(1.0)  # numpy and its BLAS are loaded and the agent runs
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        deadline = time.monotonic() + 20  # the fast path starts with the first tick, after start-up
        while p.num_threads() < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        time.sleep(0.5)
        assert p.num_threads() == 2  # the main thread, the fast path (qosmanager.framework.fastpath)
        with open(f"/proc/{proc.pid}/environ", "rb") as f:
            assert b"OPENBLAS_NUM_THREADS" not in f.read()  # the process set it itself
    finally:
        proc.terminate()
        proc.wait(10)


def test_an_operators_thread_setting_wins() -> None:
    code = ("import os; import qosmanager.cli; import numpy; "
            "print(os.environ['OPENBLAS_NUM_THREADS'], os.environ['OMP_NUM_THREADS'])")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="3")
    env.pop("OMP_NUM_THREADS", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["3", "1"]


def test_the_agent_keeps_a_short_audit_tail_and_loads_no_yaml_for_json_state(tmp_path) -> None:
    """Memory only for what is used: the audit's in-memory tail is short (the file is the record),
    and PyYAML is imported only when a document is YAML."""
    host, _, files = fake_node(tmp_path)
    code = ("import sys, json; from qosmanager.agent import Agent, AgentConfig, AUDIT_TAIL; "
            "from qosmanager.host.roots import HostRoots; "
            f"a = Agent(AgentConfig(roots=HostRoots(cgroup={host.roots.cgroup!r}, proc={host.roots.proc!r}, "
            f"sys={host.roots.sys!r}), pods_file={str(files['pods'])!r}, node_file={str(files['node'])!r}, "
            f"node_slo_file={str(files['slo'])!r})); a.collect(1000.0); "
            "print(json.dumps([a.audit.recent.maxlen, AUDIT_TAIL, 'yaml' in sys.modules])); a.close()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == [256, 256, False]
    # a YAML state file still reads (and only then is PyYAML loaded)
    files["node"].write_text(yaml_dump(json.loads(files["node"].read_text())))
    code = code.replace("'yaml' in sys.modules", "'yaml' in sys.modules and a.store.node is not None")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == [256, 256, True]


def yaml_dump(obj: object) -> str:
    import yaml

    return yaml.safe_dump(obj)


def test_malloc_tuning_applies_the_glibc_options_the_environment_does_not_set(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from qosmanager import cli

    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", str(1 << 20))  # the operator's: left alone
    assert cli.tune_malloc() == ["MALLOC_ARENA_MAX"]


@pytest.mark.parametrize("command", ["run", "simulate"])
def test_run_and_simulate_tune_the_allocator_first(monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    from qosmanager import agent, cli
    from qosmanager.sim import simulate

    calls: list[str] = []
    monkeypatch.setattr(cli, "tune_malloc", lambda: calls.append("tune") or [])
    monkeypatch.setattr(agent, "run_from_args", lambda args: calls.append("run") or 0)
    monkeypatch.setattr(simulate, "simulate_from_args", lambda args: calls.append("simulate") or 0)
    assert cli.main([command]) == 0
    assert calls == ["tune", command]


def test_sighup_is_logged_reads_the_state_files_again_and_reopens_the_audit_log(tmp_path) -> None:
    """SIGHUP killed the agent without a word; now it is logged, the state files are read again, even
    one whose size and modification time did not change, and the audit log logrotate moved away is
    opened afresh at its path."""
    host, _, files = fake_node(tmp_path)
    audit = tmp_path / "audit.log"
    proc = subprocess.Popen(run_args(host, files, "--collect-interval", "200ms", "--audit-log", str(audit)),
                            stderr=subprocess.PIPE, text=True)
    try:
        path = files["pods"]
        st = os.stat(path)
        lines, reader = wait_started(proc)
        with open(path, "r+") as f:  # the same size, inode and modification time: no change to stat
            f.write("{" + " " * (st.st_size - 1))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.rename(audit, tmp_path / "audit.log.1")  # logrotate, without copytruncate
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 60
        while not audit.exists():
            assert proc.poll() is None, "SIGHUP stopped the agent"
            assert time.monotonic() < deadline, "the audit log was not opened afresh"
            time.sleep(0.05)
        assert proc.poll() is None, "SIGHUP stopped the agent"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        reader.join(timeout=20)  # stderr read to its end
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = "".join(lines)
    hup = [line for line in lines if "received SIGHUP: reading the state files again now" in line]
    assert len(hup) == 1 and str(path) in hup[0] and f"audit log {audit} reopened" in hup[0], err
    assert f"cannot parse pods file {path}" in err  # read again, and its new content refused


@pytest.mark.parametrize("off", ["down", "up"])
def test_a_cgroup_root_one_level_off_is_named_with_what_was_expected_there(
        tmp_path, capsys, monkeypatch, restore_logging, off: str) -> None:
    """One level off, the collector failed with "at least one file is needed" (an internal error)."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    host, _, files = fake_node(tmp_path)
    root = host.roots.cgroup
    wrong = os.path.join(root, "cpu") if off == "down" else os.path.dirname(root)
    argv = ["run", *host_flags(host), "--pods-file", str(files["pods"]), "--duration", "1s"]
    argv[argv.index("--cgroup-root") + 1] = wrong
    assert main_exit(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"qosmanager run: --cgroup-root {wrong}: no cgroup hierarchy there: expected "
                               "the cgroup v2 mount (cgroup.controllers at its top) or the cgroup v1 "
                               f"hierarchies, one directory per controller ({wrong}/cpu, {wrong}/cpuacct missing)")
    if off == "down":
        assert lines[0].endswith(f"; {root} holds one: is that the cgroup root?")


def test_a_stop_leaves_be_suppressed_and_restore_gives_koordlets_children_their_quota_back(tmp_path) -> None:
    """``qosmanager run`` on a koordinator v1 node whose BE pods' cgroups hold koordlet's batch quota (1
    core a container): a BE budget of 0.4 core (4 CPUs x 10 %, the node idle) lowers the pods and
    containers first; a stop (a rolling update's) leaves all of it in force; ``qosmanager restore`` then
    gives the BE dir the kubelet's -1 back and each child koordlet's own quota (not the budget)."""
    host, pods, files = fake_node(tmp_path)
    files["slo"].write_text(json.dumps(nodeslo_object({"resourceUsedThresholdWithBE": {
        "enable": True, "cpuSuppressPolicy": "cfsQuota", "cpuSuppressThresholdPercent": 10}})))
    layout = host.layout
    be_dir = layout.qos_dir(KubeQoS.BESTEFFORT)
    children = [host.pod_dir(p.uid) for p in pods if p.qos is KubeQoS.BESTEFFORT]
    children += [host.container_dir(p.uid, c.name) for p in pods if p.qos is KubeQoS.BESTEFFORT
                 for c in p.containers]

    def quota(rel: str) -> int:
        return int(host.read(f"cgroup/cpu/{rel}/cpu.cfs_quota_us"))

    koordlet = {rel: quota(rel) for rel in children}
    assert len(children) == 6 and set(koordlet.values()) == {100_000, 200_000}  # 2 BE pods of 2 containers
    originals = tmp_path / "originals.jsonl"
    proc = subprocess.Popen(run_args(host, files, "--strategies", "cpuSuppress", "--collect-interval", "200ms",
                                     "--cpu-suppress-interval-seconds", "0.2", "--originals-file", str(originals)),
                            stderr=subprocess.PIPE, text=True)
    try:
        lines, reader = wait_started(proc)
        deadline = time.monotonic() + 60
        while quota(be_dir) != 40_000:
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, "".join(lines)
        reader.join(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (quota(be_dir), {quota(rel) for rel in children}) == (40_000, {40_000}), "a stop leaves BE suppressed"
    refused = [line for line in lines if ("WARNING" in line or "ERROR" in line) and "received SIGTERM" not in line]
    assert not refused, "".join(lines)  # nothing refused by the (fake) kernel, no conflict
    roots = host.roots
    done = subprocess.run([sys.executable, "-m", "qosmanager", "restore", "--cgroup-root", roots.cgroup,
                           "--proc-root", roots.proc, "--sys-root", roots.sys, "--cgroup-version", "1",
                           "--cgroup-driver", "cgroupfs", "--originals-file", str(originals)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert quota(be_dir) == -1
    assert {rel: quota(rel) for rel in children} == koordlet, "each child holds koordlet's quota again"
