"""A healthy start says nothing alarming: ``qosmanager run`` on a node whose counters move (simulate's
node, its load model stepping on the wall clock beside the agent) logs no WARNING or ERROR in its first
seconds.  The first tick has no node CPU rate yet (a rate needs two samples of /proc/stat): that is the
start, not a fault (it used to log "node CPU usage cannot be read" at every start)."""

from __future__ import annotations

import shlex
import subprocess
import sys
import threading
import time

import pytest

from qosmanager.sim.load import LoadModel
from qosmanager.sim.result import SimConfig
from qosmanager.sim.simulate import build_node, kept_node_command

DURATION = 5.0  # seconds of the agent: its start window (2 s) and a few ticks past it


@pytest.mark.parametrize("version", [1, 2])
def test_a_healthy_start_logs_no_warning(tmp_path, version: int) -> None:
    # LS light and memory low against the thresholds: nothing to evict, nothing to say
    cfg = SimConfig(containers=40, duration=3600.0, cgroup_version=version, cpus=8, memory_gib=64, seed=1,
                    cpu_threshold_percent=90, memory_threshold_percent=95)
    node = build_node(cfg, str(tmp_path))
    model = LoadModel(node.host, node.pods, node.priorities, duration=cfg.duration, shape=cfg.shape, seed=1)
    model.step(0.0)
    stop = threading.Event()

    def load() -> None:  # the node lives: its counters move every 100 ms of wall time
        t0 = time.monotonic()
        while not stop.wait(0.1):
            model.step(time.monotonic() - t0)

    argv = shlex.split(kept_node_command(cfg, str(tmp_path)))[1:]
    argv[argv.index("--duration") + 1] = f"{DURATION:g}s"
    ticker = threading.Thread(target=load, daemon=True)
    ticker.start()
    try:
        proc = subprocess.run([sys.executable, "-m", "qosmanager", *argv], capture_output=True, text=True,
                              timeout=180)
    finally:
        stop.set()
        ticker.join()
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert any(" INFO qosmanager.agent: starting:" in line for line in lines), proc.stderr
    alarms = [line for line in lines if " WARNING " in line or " ERROR " in line or " CRITICAL " in line]
    assert alarms == []
