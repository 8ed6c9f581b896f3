"""Nothing on the scheduler's thread blocks the fast path: the whole agent runs (``Agent.run``) on a fake
host whose counters a writer advances every 20 ms; once cpuSuppress has decided, the scheduler's thread
is held for seconds -- a pods-file decode, a slow job, or both with the audit log on a full disk -- and LS
demand rises meanwhile.  BE's quota must fall while the scheduler is still held."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from qosmanager.agent import Agent, AgentConfig
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object

CPUS = 8
BLOCK = 30.0  # seconds the scheduler's thread is held at most (released as soon as BE falls): long, so a
#               loaded machine's slowness cannot pass for the scheduler's thread having been free
SLO = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 65,
                                       "cpuSuppressPolicy": "cfsQuota"}}


class Load:
    """kubepods, the QoS dirs and /proc/stat advancing at ``ls`` + ``be`` cores, every 20 ms."""

    def __init__(self, host: FakeHost) -> None:
        self.host = host
        self.ls, self.be = 1.0, 1.0
        self.t0 = time.monotonic()
        self.used_ls = self.used_be = 0.0
        self._last = self.t0
        self._stop = threading.Event()
        self.write()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def write(self) -> None:
        now = time.monotonic()
        dt, self._last = now - self._last, now
        self.used_ls += self.ls * dt
        self.used_be += self.be * dt
        lay, h = self.host.layout, self.host
        h.set_cpu_usage(lay.kubepods_dir(), int((self.used_ls + self.used_be) * 1e9))
        h.set_cpu_usage(lay.qos_dir(KubeQoS.BESTEFFORT), int(self.used_be * 1e9))
        h.set_cpu_usage(lay.qos_dir(KubeQoS.BURSTABLE), int(self.used_ls * 1e9))
        busy = int((self.used_ls + self.used_be) * 100 / CPUS)
        h.set_proc_stat([busy] * CPUS, [int((now - self.t0 + 100) * 100) - busy] * CPUS)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.write()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


def be_quota(host: FakeHost) -> int:
    """The BE quota file (a read that lands between the writer's truncation and its write sees nothing:
    read again)."""
    path = host.layout.file("cpu", host.layout.qos_dir(KubeQoS.BESTEFFORT), "cpu.cfs_quota_us")
    while True:
        with open(path) as f:
            text = f.read().strip()
        if text:
            return int(text)
        time.sleep(0.001)


@pytest.mark.parametrize("blocker", ["pods-file decode", "slow job", "full disk under the audit log"])
def test_the_fast_path_lowers_be_while_the_scheduler_is_held(tmp_path: Path, blocker: str) -> None:
    host = FakeHost(str(tmp_path / "host"), version=1, n_cpus=CPUS)
    pods = FakeHost.make_pods(4, seed=3)
    host.add_pods(pods)
    (tmp_path / "pods.json").write_text(json.dumps(pod_list(pod_object(p) for p in pods)))
    (tmp_path / "node.json").write_text(json.dumps(node_object(host)))
    (tmp_path / "slo.json").write_text(json.dumps(nodeslo_object(SLO)))
    audit = "/dev/full" if "full disk" in blocker else str(tmp_path / "audit.jsonl")
    if "full disk" in blocker and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    load = Load(host)
    agent = Agent(AgentConfig(roots=host.roots, node_name="n1", pods_file=str(tmp_path / "pods.json"),
                              node_file=str(tmp_path / "node.json"), node_slo_file=str(tmp_path / "slo.json"),
                              strategies=["cpuSuppress"], collect_interval=0.2, audit_log=audit,
                              qos=_fast_qos()))
    held = threading.Event()
    release = threading.Event()

    def hold(*_: Any) -> None:
        if held.is_set() or release.is_set():
            return
        held.set()
        release.wait(BLOCK)

    if blocker == "pods-file decode":
        poll = agent.source.poll

        def slow_poll(now: float) -> Any:
            if armed.is_set():
                hold()
            return poll(now)

        agent.source.poll = slow_poll  # type: ignore[method-assign]
    else:
        agent.scheduler.add("slow", 0.05, lambda now: hold() if armed.is_set() else None, jitter=0.0)
    armed = threading.Event()
    runner = threading.Thread(target=agent.run, args=(60.0,), daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 120
        # cpuSuppress's decision at the steady load: 5200m - LS 1000m = 420000.  On a loaded machine the
        # writer thread lags, and its catch-up writes look like LS spikes that the fast path rightly
        # follows down: arm only once the tick has brought BE back near the steady level for 0.5 s
        while True:
            while be_quota(host) < 300_000:
                assert time.monotonic() < deadline and runner.is_alive(), f"BE quota {be_quota(host)} from the tick"
                time.sleep(0.05)
            time.sleep(0.5)
            before = be_quota(host)
            if before >= 300_000:
                break
        assert agent.fastpath is not None
        armed.set()
        assert held.wait(10), "the scheduler's thread was not held"
        t0 = time.monotonic()
        load.ls = 4.0  # LS demand rises by three cores: BE's budget falls to 5200m - 4000m = 1200m
        while be_quota(host) > 200_000:
            assert time.monotonic() - t0 < BLOCK - 1.0, (f"BE quota still {be_quota(host)} (was {before}) "
                                                         "while the scheduler was held")
            time.sleep(0.01)
        reacted = time.monotonic() - t0
        assert held.is_set() and not release.is_set() and reacted < BLOCK - 1.0
    finally:
        release.set()
        agent.stop()
        runner.join(30)
        load.close()


def _fast_qos() -> Any:
    from qosmanager.framework.strategy import QoSConfig

    cfg = QoSConfig()
    cfg.cpu_suppress_interval = 0.2
    return cfg
