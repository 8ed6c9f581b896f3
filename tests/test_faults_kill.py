"""The agent signalled in the middle of an executor batch, on a fake cgroup v1 tree.

cpuSuppress with the cpuset policy narrows every BE cgroup's ``cpuset.cpus`` in one leveled batch
(containers first, then pods, then the BE QoS dir).  A patched ``pwrite_batch`` (``faultinject``)
writes the first half of that batch, then signals the agent process:

* SIGTERM: the handler only asks the scheduler to stop, so the batch is finished, audited and the
  agent exits 0 at the end of the tick;
* SIGKILL: the node is left half-narrowed (children narrower than their parents, never the other
  way round); a restarted agent re-derives everything from the files, narrows the rest, does not
  widen what is already narrowed, and then leaves the files alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from faultinject import SIGNAL_MID_BATCH
from qosmanager.host.cpuset import parse_cpu_list
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object

SUPPRESS = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 30,
                                            "cpuSuppressPolicy": "cpuset"}}
FAST = ("--strategies", "cpuSuppress", "--collect-interval", "200ms", "--cpu-suppress-interval-seconds", "0.3")


class Node:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.host = FakeHost(str(tmp / "host"), version=1, n_cpus=8)
        pods = FakeHost.make_pods(12, seed=3)  # three BE pods with two containers each
        self.host.add_pods(pods)
        for name, obj in (("pods", pod_list(pod_object(p) for p in pods)), ("node", node_object(self.host)),
                          ("slo", nodeslo_object(SUPPRESS))):
            (tmp / f"{name}.json").write_text(json.dumps(obj))
        self.audit = tmp / "audit.log"
        cg = Path(self.host.roots.cgroup) / "cpuset" / "kubepods" / "besteffort"
        self.be_files = sorted(str(p) for p in cg.rglob("cpuset.cpus"))
        assert len(self.be_files) == 10  # the QoS dir, 3 pods, 6 containers

    def args(self, *extra: str) -> list[str]:
        r = self.host.roots
        t = self.tmp
        return ["run", "--cgroup-root", r.cgroup, "--proc-root", r.proc, "--sys-root", r.sys,
                "--pods-file", str(t / "pods.json"), "--node-file", str(t / "node.json"),
                "--node-slo-file", str(t / "slo.json"), "--metrics-addr", "", "--audit-log", str(self.audit),
                *FAST, *extra]

    def run(self, *extra: str, sig: int | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "QOSM_FAULT_MARK": str(self.tmp / "mark")}
        if sig is None:
            cmd = [sys.executable, "-m", "qosmanager", *self.args(*extra)]
        else:
            cmd = [sys.executable, "-c", SIGNAL_MID_BATCH, str(int(sig)), "8", *self.args(*extra)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)

    def cpusets(self) -> dict[str, set[int]]:
        return {f: set(parse_cpu_list(Path(f).read_text())) for f in self.be_files}

    def records(self) -> list[dict]:
        """Every audit line; each must be a whole JSON object."""
        return [json.loads(line) for line in self.audit.read_text().splitlines()]

    def mark(self) -> tuple[int, int]:
        half, total = (self.tmp / "mark").read_text().split()
        return int(half), int(total)


def nested(node: Node, sets: dict[str, set[int]]) -> None:
    """Each cgroup's cpuset lies within its parent's: the order a v1 kernel insists on."""
    for f, cpus in sets.items():
        parent = os.path.join(os.path.dirname(os.path.dirname(f)), "cpuset.cpus")
        if parent in sets:
            assert cpus <= sets[parent], (f, cpus, sets[parent])


def test_sigterm_mid_batch_finishes_the_batch_and_exits_cleanly(tmp_path: Path) -> None:
    node = Node(tmp_path)
    wide = node.cpusets()
    proc = node.run(sig=signal.SIGTERM)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "received SIGTERM, stopping" in proc.stderr
    half, total = node.mark()
    assert total == 10 and half == 5  # the signal came with half the batch written
    sets = node.cpusets()
    narrowed = {frozenset(s) for s in sets.values()}
    assert len(narrowed) == 1 and next(iter(narrowed)) < next(iter(wide.values())), sets  # the whole batch
    writes = [r for r in node.records() if r["action"] == "write"]
    assert len(writes) == 10 and all(r["executed"] for r in writes), writes  # and all of it audited
    assert node.audit.read_text().endswith("\n")


def test_sigkill_mid_batch_then_restart_finishes_without_undoing_or_oscillating(tmp_path: Path) -> None:
    node = Node(tmp_path)
    wide = node.cpusets()
    full = next(iter(wide.values()))
    proc = node.run(sig=signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    half, total = node.mark()
    assert (half, total) == (5, 10)
    left = node.cpusets()
    done = {f for f, s in left.items() if s != full}
    assert len(done) == 5, left  # half of the cgroups narrowed, children first ...
    nested(node, left)  # ... so every one still lies within its parent
    target = next(iter(left[f] for f in done))
    before = node.records()  # whole lines only (the killed batch was never flushed)
    # the restarted agent: no injection, a few suppression rounds
    proc = node.run("--duration", "3s")
    assert proc.returncode == 0, proc.stderr[-3000:]
    final = node.cpusets()
    assert all(s == target for s in final.values()), final
    after = node.records()[len(before):]
    writes = [r for r in after if r["action"] == "write"]
    assert all(r["executed"] for r in writes), writes
    by_file: dict[str, int] = {}
    for r in writes:
        by_file[r["target"]] = by_file.get(r["target"], 0) + 1
        # never widened: each write narrows from what it found (or keeps it)
        assert set(parse_cpu_list(r["value"])) <= set(parse_cpu_list(r["old"])), r
    assert all(n == 1 for n in by_file.values()), by_file  # no oscillation: one write per file at most
    touched = {os.path.join(node.host.roots.cgroup, t) for t in by_file}
    assert touched == set(node.be_files) - done  # what the killed batch wrote is left as it is


def test_an_audit_line_cut_by_a_killed_run_is_ended_before_the_next_runs_first_record(tmp_path: Path) -> None:
    """A run killed inside its audit write leaves a line without its end; the next run's records
    each start on a line of their own (they were glued to the cut one)."""
    from qosmanager.executor.audit import AuditLog

    path = tmp_path / "audit.log"
    whole = json.dumps({"ts": 1.0, "action": "write", "target": "a"})
    path.write_text(whole + "\n" + whole[:17])  # killed 17 bytes into the second record
    log = AuditLog(str(path))
    log.record(strategy="s", action="write", target="b", reason="r", executed=True, ts=2.0)
    log.flush()
    log.close()
    lines = path.read_text().splitlines()
    assert lines[:2] == [whole, whole[:17]]
    assert json.loads(lines[2])["target"] == "b" and len(lines) == 3
