"""The memory outcome benchmark (manual): tick mode against graduated mode on a real cgroup v2 kernel.

``QOSM_OUTCOME_MEMORY=1 pytest benchmarks/test_bench_outcome_memory.py`` -- the measurement is skipped
otherwise, so CI never runs it (the quick pass checks only the report's arithmetic, without a guest).
On a cgroup v1 host it boots the cgroup v2 test guest (``tests/kernelvm.py``: 1 GiB, 3 CPUs, a virtio
disk), runs itself there and brings the guest's JSON report back to
``benchmarks/outcome/memory_results.json`` (``QOSM_OUTCOME_MEMORY_OUT`` elsewhere); inside the guest
(a pure v2 kernel) it measures.  ``QOSM_OUTCOME_MEMORY_ROUNDS`` (default 1) rounds, the two modes
alternating in each case, their order swapped every round; ``QOSM_OUTCOME_MEMORY_CASES`` (comma-separated,
default all) picks the cases.  ``benchmarks/outcome/memory_report.py``
prints the table docs/benchmarks.md shows.

The node is a real cgroup tree with ``memory.max`` = :data:`CAPACITY` (the Node's capacity: the kernel
reclaims and OOM-kills inside it as on a node of that size); its ``/proc/meminfo`` is the tree's own
(in use: ``memory.current`` less page cache, as MemAvailable counts it).  NodeSLO: eviction at
:data:`THRESHOLD` %, lower :data:`LOWER` %.  An LS pod serves requests (each allocates and frees
:data:`LS_REQUEST`, beside :data:`LS_HOLD` it keeps); an idle BE pod holds a little; a BE pod runs
one load (``outcome/memload.py``):

* ``pagecache``: BE keeps some anonymous memory and reads a disk bigger than its budget, in a loop;
* ``spike``: BE allocates :data:`SPIKE` at once, holds it 1.5 s, frees it, pauses 1.5 s;
* ``growth-slow`` / ``growth-fast``: BE allocates steadily at two rates past what the node has.

Modes: ``tick`` (memoryEvict alone, koordlet's one step: kill) and ``graduated`` (memoryHigh and
memoryEvict with the ``BEMemoryHigh`` gate: the BE cap first, eviction as level 3).  Kill mode, the
agent at 0.5 s.  Measured per case over :data:`CASE_SECONDS`: the BE pods evicted (audit), BE's work
(its bytes processed: read or allocated, until it ended or the case did), LS's requests served, LS's
memory stall (its pod's ``memory.pressure`` some/full totals over the case), OOM kills
(``memory.events`` ``oom_kill`` of the LS pod and of the BE pods), and in graduated mode the highest
``memory.high`` seen on the BE QoS dir beside the highest budget memoryHigh audited.  Nothing is asserted: it is a
measurement, reported as it came out.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

import kernelvm
from qosmanager.host.cgroups import KubeQoS
from realnode import RealNode, kernel_version, kv_file, proc_view, real_node

pytestmark = pytest.mark.kernel

ENABLED = os.environ.get("QOSM_OUTCOME_MEMORY", "") not in ("", "0")
ROUNDS = int(os.environ.get("QOSM_OUTCOME_MEMORY_ROUNDS", "1"))
ONLY = [c for c in os.environ.get("QOSM_OUTCOME_MEMORY_CASES", "").split(",") if c]
HERE = Path(__file__).resolve().parent
LOAD = str(HERE / "outcome" / "memload.py")
RESULTS = os.environ.get("QOSM_OUTCOME_MEMORY_OUT", str(HERE / "outcome" / "memory_results.json"))

MiB = 1 << 20
CAPACITY = 448 * MiB  # the node: its tree's memory.max and the Node's capacity
THRESHOLD, LOWER = 70, 60  # memoryEvictThresholdPercent, memoryEvictLowerPercent
LS_HOLD, LS_REQUEST = 64, 16  # MiB
BE_IDLE = 16  # MiB the idle BE pod holds
SPIKE = 280  # MiB: LS + the spike = 80 % of the node, past the threshold
PAGECACHE_ANON = 180  # MiB: LS + this = 58 % (graduated mode engages at LOWER - 5 = 55 %)
GROWTH_TARGET = 400  # MiB: LS + this is past memory.max
CASES: dict[str, list[str]] = {
    "pagecache": ["pagecache", str(PAGECACHE_ANON)],  # the device is appended
    "spike": ["spike", str(SPIKE), "1.5", "1.5"],
    "growth-slow": ["growth", str(GROWTH_TARGET), "20"],
    "growth-fast": ["growth", str(GROWTH_TARGET), "80"],
}
MODES: dict[str, tuple[str, ...]] = {
    "tick": ("--strategies", "memoryEvict", "--feature-gates", "BEMemoryEvict=true"),
    "graduated": ("--strategies", "memoryHigh,memoryEvict", "--feature-gates", "BEMemoryHigh=true,BEMemoryEvict=true"),
}
CASE_SECONDS = 15.0
START_TIMEOUT = 120.0  # for a load's first progress (an interpreter's start in the emulated guest)
GUEST_TIMEOUT = float(os.environ.get("QOSM_GUEST_TIMEOUT", "1500"))
DISK_BYTES = 512 << 20  # the guest's disk: the page-cache load reads it (bigger than BE's budget)
BUDGET = re.compile(r"BE's budget at \d+%: (-?\d+)")  # in memoryHigh's audited reasons


def _progress(path: Path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def _pressure(path: str) -> dict[str, int]:
    """``memory.pressure``'s some/full totals (µs)."""
    out = {"some": 0, "full": 0}
    try:
        with open(path) as f:
            for line in f:
                kind, *fields = line.split()
                out[kind] = int(dict(f.split("=") for f in fields)["total"])
    except OSError:
        pass
    return out


def _oom_kills(node: RealNode, rel: str) -> int:
    try:
        return kv_file(node.path(rel, "memory.events", "memory")).get("oom_kill", 0)
    except OSError:
        return 0


def run_case(workdir: Path, case: str, mode: str, device: str) -> dict[str, Any]:
    """One case in one mode on a node of its own; what it measured."""
    with real_node(workdir, version=2, controllers=("cpu", "memory")) as node:
        node.write("", "memory.max", str(CAPACITY), "memory")

        def used() -> int:
            stat = kv_file(node.path("", "memory.stat", "memory"))
            return int(node.read("", "memory.current", "memory")) - stat.get("file", 0)

        node.write_node(memory=CAPACITY)
        ls = node.add_pod("ls", "LS")
        idle = node.add_pod("be-idle", "BE")
        be = node.add_pod("be-load", "BE")
        node.write_nodeslo({"resourceUsedThresholdWithBE": {
            "enable": True, "memoryEvictThresholdPercent": THRESHOLD, "memoryEvictLowerPercent": LOWER}})
        ls_file, be_file = workdir / "ls.progress", workdir / "be.progress"
        py = sys.executable
        ls_proc = node.start(ls, [py, LOAD, str(ls_file), "ls", str(LS_HOLD), str(LS_REQUEST)])
        node.start(idle, [py, "-c", f"import time\nb = bytearray({BE_IDLE * MiB})\nb[::4096] = b'x' * "
                                    f"{BE_IDLE * MiB // 4096}\ntime.sleep(3600)\n"])
        be_dir = node.layout.qos_dir(KubeQoS.BESTEFFORT)
        peak = {"used": 0, "cap": 0}
        with proc_view(node, memory=(CAPACITY, used)) as view, \
                node.agent(*MODES[mode], "--evict-mode", "kill", "--collect-interval", "500ms",
                           "--memory-evict-interval-seconds", "0.5", "--proc-root", view.root) as agent:
            agent.wait_for("LS's first request", lambda: _progress(ls_file) > 0, START_TIMEOUT)
            ls_at, stall_at = _progress(ls_file), _pressure(node.path(ls.dir, "memory.pressure", "memory"))
            argv = CASES[case] + ([device] if case == "pagecache" else [])
            be_proc = node.start(be, [py, LOAD, str(be_file), *argv])
            agent.wait_for("the BE load's start", lambda: be_file.exists() or be_proc.poll() is not None,
                           START_TIMEOUT)
            stop = time.monotonic() + CASE_SECONDS
            while time.monotonic() < stop:
                peak["used"] = max(peak["used"], used())
                cap = node.read(be_dir, "memory.high", "memory")
                if cap != "max":
                    peak["cap"] = max(peak["cap"], int(cap))
                time.sleep(0.25)
            be_work, ls_served = _progress(be_file), _progress(ls_file) - ls_at
            stall = _pressure(node.path(ls.dir, "memory.pressure", "memory"))
            audit = agent.audit()
            evictions = sorted({str(r["target"]).split("/")[-1] for r in audit if r["action"] == "evict"})
            budgets = [int(m.group(1)) for r in audit if r["strategy"] == "memoryHigh"
                       for m in [BUDGET.search(str(r.get("reason") or ""))] if m is not None]
            be_events = kv_file(node.path(be_dir, "memory.events", "memory"))
        return {
            "case": case, "mode": mode,
            "be_evicted": evictions, "be_work_mib": round(be_work / MiB, 1),
            "be_alive": be_proc.poll() is None, "ls_alive": ls_proc.poll() is None,
            "ls_requests": ls_served,
            "ls_stall_some_ms": round((stall["some"] - stall_at["some"]) / 1e3, 1),
            "ls_stall_full_ms": round((stall["full"] - stall_at["full"]) / 1e3, 1),
            "oom_kill_ls": _oom_kills(node, ls.dir), "oom_kill_be": _oom_kills(node, be_dir),
            "be_high_events": be_events.get("high", 0),
            "peak_used_pct": round(100 * peak["used"] / CAPACITY, 1),
            "peak_cap_mib": round(peak["cap"] / MiB, 1) if peak["cap"] else None,
            "top_budget_mib": round(max(budgets) / MiB, 1) if budgets else None,
        }


def measure(tmp_path: Path) -> dict[str, Any]:
    device = os.environ.get("QOSM_GUEST_DISK", "")
    assert set(ONLY) <= set(CASES), f"QOSM_OUTCOME_MEMORY_CASES: unknown {sorted(set(ONLY) - set(CASES))}"
    runs = []
    for r in range(ROUNDS):
        for case in CASES:
            if (case == "pagecache" and not device) or (ONLY and case not in ONLY):
                continue
            order = list(MODES) if r % 2 == 0 else list(reversed(MODES))
            for mode in order:
                workdir = tmp_path / f"{case}-{mode}-{r}"
                result = run_case(workdir, case, mode, device)
                result["round"] = r
                print(json.dumps(result), flush=True)
                runs.append(result)
    return {"rounds": ROUNDS, "case_seconds": CASE_SECONDS, "capacity_mib": CAPACITY // MiB,
            "threshold": THRESHOLD, "lower": LOWER, "ls_hold_mib": LS_HOLD, "ls_request_mib": LS_REQUEST,
            "kernel": os.uname().release, "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                         time.gmtime()),
            "runs": runs}


def guest_script(share: Path) -> str:
    env = {"PYTHONDONTWRITEBYTECODE": "1", "QOSM_GUEST_DISK": "/dev/vda", "QOSM_OUTCOME_MEMORY": "1",
           "QOSM_OUTCOME_MEMORY_ROUNDS": str(ROUNDS), "QOSM_OUTCOME_MEMORY_OUT": str(share / "memory.json"),
           "QOSM_OUTCOME_MEMORY_CASES": ",".join(ONLY)}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in os.environ["PYTHONPATH"].split(os.pathsep))
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-q", "-s",
           "--basetemp=/tmp/qosm-outcome-memory", "-p", "no:randomly", str(Path(__file__))]
    return "\n".join(["set -u", f"cd {shlex.quote(str(HERE.parent))}",
                      *(f"export {k}={shlex.quote(v)}" for k, v in env.items()),
                      shlex.join(cmd)]) + "\n"


def in_guest(tmp_path: Path) -> dict[str, Any]:
    reason = kernelvm.unavailable()
    if reason:
        pytest.skip(f"no cgroup v2 guest: {reason}")
    share = Path(tempfile.mkdtemp(prefix="qosm-outcome-memory-"))
    disk = share / "disk.img"
    with open(disk, "wb") as f:
        f.truncate(DISK_BYTES)
    try:
        run = kernelvm.run(guest_script(share), str(share), timeout=GUEST_TIMEOUT, cpus=3, drives=(str(disk),))
        report = share / "memory.json"
        print(run.output[-4000:])
        assert report.exists(), f"the guest wrote no report ({run.explain()})"
        return json.loads(report.read_text())
    finally:
        shutil.rmtree(share, ignore_errors=True)


@pytest.mark.skipif(not ENABLED, reason="manual: QOSM_OUTCOME_MEMORY=1 runs it (boots the cgroup v2 guest)")
def test_outcome_memory(tmp_path: Path) -> None:
    data = measure(tmp_path) if kernel_version() == 2 else in_guest(tmp_path)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump(data, f, indent=1)
    sys.path.insert(0, str(HERE / "outcome"))
    import memory_report

    print("\n" + memory_report.table(data))


def test_report_table_counts_evictions_and_work_lost_with_the_pod() -> None:
    """The quick pass checks the report's arithmetic (no guest): evictions and OOM kills summed over the
    rounds, medians with their spread, and a killed load's work not kept."""
    sys.path.insert(0, str(HERE / "outcome"))
    import memory_report

    def run(mode: str, r: int, work: float, alive: bool, evicted: list[str]) -> dict[str, Any]:
        return {"case": "spike", "mode": mode, "round": r, "be_evicted": evicted, "be_work_mib": work,
                "be_alive": alive, "ls_alive": True, "ls_requests": 100 + r, "ls_stall_some_ms": 2.0 * r,
                "ls_stall_full_ms": 0.0, "oom_kill_ls": 0, "oom_kill_be": r, "peak_used_pct": 80.0,
                "peak_cap_mib": 180.0 + r if mode == "graduated" else None,
                "top_budget_mib": 178.5 if mode == "graduated" else None}

    data = {"rounds": 2, "case_seconds": 15.0, "capacity_mib": 448, "threshold": 70, "lower": 60,
            "kernel": "k", "cpus": 3, "date": "d",
            "runs": [run("graduated", 0, 100.0, True, []), run("tick", 0, 200.0, False, ["be-load"]),
                     run("tick", 1, 220.0, False, ["be-load"]), run("graduated", 1, 120.0, True, [])]}
    lines = memory_report.table(data).splitlines()
    assert lines[2] == "| spike | tick | 2 | 210 (200-220) | 0 | 100 (100-101) | 1 (0-2) / 0 | 0 / 1 | 80 | — |"
    assert lines[3] == ("| spike | graduated | 0 | 110 (100-120) | 110 (100-120) | 100 (100-101) | 1 (0-2) / 0 "
                        "| 0 / 1 | 80 | 181 / 178 |")
