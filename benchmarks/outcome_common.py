"""The outcome benchmark: what an LS pod feels beside BE, with and without the agent, on real cgroups.

A :class:`realnode.RealNode` holds an LS pod (container 0: the latency probe ``outcome/probe.c``, a
request every 10 ms, each a fixed piece of work -- 5,000 random reads over 64 MB, or arithmetic in the
compute variant; container 1: a burst of LS demand, one busy core) and a BE pod (a busy loop and a memory-bandwidth
streamer, ``outcome/stream.c``).  The node's ``/proc/stat`` (``--proc-root``) is the node's own: busy
exactly as much as kubepods uses (other sessions on a shared machine would otherwise move the BE budget).

One round runs one mode: ``none`` (no agent: BE at the kubelet's cpu.shares 2), ``tick`` (the agent at
koordlet's pace, ``--react-mode tick``), ``fast`` (the fast path) and, in the long sweep, ``fast-idle``
(the fast path with the ``BECPUIdle`` gate).  The modes alternate, round after round, so each sees the same
neighbours.  A round: the agent starts and settles with LS idle (BE's quota high), the probe runs, then LS
demand starts (the burst: one busy loop) and the round measures the **reaction**: the time until BE's quota
in the kernel is at the safe level, ``capacity x threshold - 0.9 x`` the LS pod's use in the burst's first
half second as the kernel measured it (the level that leaves LS what it took); the quota file is read every
millisecond by ``outcome/quotawatch.c``, a process of its own in SCHED_FIFO, so that the time is the kernel's,
not a busy machine's delay in looking.  The node's tree gets the weight of about eight busy tasks against
the rest of this shared machine (``TREE_SHARES``), so that its pods get CPU at all; a burst that still got
less than 0.4 cores has no reaction to time.  It reports per round the probe's p50/p99/p99.9, BE's CPU
seconds (its work) and a timeline (BE quota, LS and BE usage).

Nothing here judges LS latency: on this machine neighbours move LS p99 by 4x between runs of one case.
Medians of per-round percentiles with their spread are reported; bounds are on mechanisms only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from realnode import BUSY, CLK_TCK, PERIOD_US, ProcView, RealNode

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = os.path.join(HERE, "outcome")
THRESHOLD = 80  # cpuSuppressThresholdPercent
SAFE_MARGIN = 0.9  # BE is safe once its quota leaves LS this much of the burst's core
PROBE_PERIOD_US = 10000
PROBE_WORK = {"memory": (5000, 64), "compute": (5000, 0)}  # iterations, buffer MB: LS nearly idle between bursts
SETTLE = 0.5  # seconds with LS idle before the probe starts (BE's quota rises meanwhile)
LEAD = 0.8  # probe seconds before the burst
BURST = 3.0  # seconds of LS demand: a reaction later than that counts as the burst's length (tick mode)
USE_FROM, USE_TO = 0.1, 0.6  # seconds into the burst over which LS's use sets the safe level
MIN_BURST_CORES = 0.4  # a round whose burst got less (a starved machine) has no reaction to time
TAIL = 0.5  # probe seconds after the burst
TREE_SHARES = 8192  # the node's whole tree against the machine's other work (about eight busy tasks)
SAMPLE = 0.02  # timeline sampling interval
WATCH_US = 1000  # BE's quota read this often (µs) by outcome/quotawatch.c to time the reaction
MODE_FLAGS: dict[str, tuple[str, ...]] = {
    "tick": ("--react-mode", "tick"),
    "fast": ("--react-mode", "fast"),
    "fast-idle": ("--react-mode", "fast", "--feature-gates", "BECPUIdle=true"),
}


@dataclass
class Sample:
    t: float  # seconds since the probe started
    be_quota: int  # µs per period, -1 unlimited
    ls_used: float  # cores over the last sample
    be_used: float


@dataclass
class Round:
    mode: str
    index: int
    p50: float  # µs
    p99: float
    p999: float
    requests: int
    be_cpu_seconds: float  # BE's work over the probe's run
    probe_seconds: float
    reaction: float | None  # seconds (inf: none within the burst); None: no agent, or a starved burst
    burst_at: float  # seconds since the probe started
    burst_end: float
    safe_quota: int  # (capacity x threshold - 0.9 x LS's use in the burst) per period
    ls_burst_cores: float
    quota_changes: list[tuple[float, int]] = field(default_factory=list)  # (s since the burst, quota)
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (arrival s, latency µs)
    timeline: list[Sample] = field(default_factory=list)


def build(workdir: str) -> dict[str, str]:
    """The probe, the streamer and the quota watcher, compiled into ``workdir``; {} when there is no C
    compiler."""
    out = {}
    for name in ("probe", "stream", "quotawatch"):
        exe = os.path.join(workdir, name)
        try:
            subprocess.run(["cc", "-O2", "-o", exe, os.path.join(SOURCES, f"{name}.c")], check=True,
                           capture_output=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            return {}
        out[name] = exe
    return out


class KubepodsStat(ProcView):
    """``/proc/stat`` of a node whose only load is kubepods (``node``'s tree), rewritten every 10 ms."""

    def __init__(self, root: str, node: RealNode) -> None:
        self.node = node
        self.kubepods = node.layout.kubepods_dir()
        self._t0 = time.monotonic()
        self._u0 = node.usage_us(self.kubepods)
        super().__init__(root, cpus=node.cpus)

    def _write_stat(self) -> None:
        assert self.cpus is not None
        elapsed = (time.monotonic() - self._t0) * CLK_TCK
        busy = (self.node.usage_us(self.kubepods) - self._u0) / 1e6 * CLK_TCK
        idle = max(elapsed * self.cpus - busy, 0.0)
        zeros = " ".join(["000000000000"] * 6)

        def row(b: float, i: float) -> str:
            return f"{int(b):012d} 000000000000 000000000000 {int(i):012d} {zeros}"

        text = f"cpu  {row(busy, idle)}\n"
        text += "".join(f"cpu{i:<4d}{row(busy / self.cpus, idle / self.cpus)}\n" for i in range(self.cpus))
        self._put("stat", text)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self._write_stat()


def percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(int(len(sorted_values) * q), len(sorted_values) - 1)]


class Outcome:
    """One node, the modes' rounds on it."""

    def __init__(self, node: RealNode, exes: dict[str, str], variant: str = "memory") -> None:
        self.node = node
        self.exes = exes
        self.variant = variant
        self.ls = node.add_pod("ls", "LS", containers=2, cpu_milli=1000)
        self.be = node.add_pod("be", "BE", containers=2)
        self.be_dir = node.layout.qos_dir("BestEffort")
        node.write_nodeslo({"resourceUsedThresholdWithBE": {
            "enable": True, "cpuSuppressThresholdPercent": THRESHOLD, "cpuSuppressPolicy": "cfsQuota"}})
        with open(os.path.join(node.tree.bases["cpu"], "cpu.shares"), "w") as f:
            f.write(str(TREE_SHARES))  # our own tree's weight (the test created it)
        node.start(self.be, BUSY, 0)
        node.start(self.be, [exes["stream"]], 1)
        self.view = KubepodsStat(os.path.join(node.workdir, "proc"), node)

    def close(self) -> None:
        self.view.close()

    def run(self, modes: Sequence[str], rounds: int) -> list[Round]:
        out = []
        for i in range(rounds):
            order = list(modes) if i % 2 == 0 else list(reversed(modes))  # neither mode always first
            for mode in order:
                out.append(self.round(mode, i))
        return out

    @contextlib.contextmanager
    def _agent(self, mode: str) -> Iterator[None]:
        if mode == "none":
            yield
            return
        flags = ("--strategies", "cpuSuppress", "--proc-root", self.view.root, *MODE_FLAGS[mode])
        with self.node.agent(*flags) as agent:
            agent.wait_for("the agent's first BE quota", lambda: self.node.quota(self.be_dir) != -1, 60)
            if mode.endswith("-idle"):
                agent.wait_for("cpu.idle on the BE dir", lambda: self.node.read(self.be_dir, "cpu.idle") == "1", 30)
            yield

    def _reset(self) -> None:
        """The kubelet's BE dir again: no quota (and SCHED_NORMAL where cpu.idle exists)."""
        self.node.set_quota(self.be_dir, -1)
        idle = self.node.path(self.be_dir, "cpu.idle")
        if os.path.exists(idle) and self.node.read(self.be_dir, "cpu.idle") != "0":
            self.node.write(self.be_dir, "cpu.idle", "0")

    def round(self, mode: str, index: int) -> Round:
        """The probe starts first (its 64 MB first touch is LS demand of its own, over before the agent
        starts); the figures count from the agent's first decision (the round's start with no agent)."""
        node = self.node
        self._reset()
        work, mb = PROBE_WORK[self.variant]
        probe = node.start(self.ls, [self.exes["probe"], str(PROBE_PERIOD_US), str(work), str(mb), "600"], 0,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        started = time.monotonic()
        output: list[bytes] = []
        reader = threading.Thread(target=lambda: output.append(probe.communicate()[0]), daemon=True)
        reader.start()
        try:
            time.sleep(SETTLE)
            with self._agent(mode):
                time.sleep(SETTLE)
                t0 = time.monotonic()
                be0 = node.usage_us(self.be_dir)
                timeline: list[Sample] = []
                stop = threading.Event()
                sampler = threading.Thread(target=self._sample, args=(t0, timeline, stop), daemon=True)
                sampler.start()
                time.sleep(LEAD)
                watch = self._watch_start()
                burst = node.start(self.ls, BUSY, 1)
                burst_at = time.monotonic()
                changes, ls_used = self._watch_quota(watch, burst_at)  # (seconds since the burst, quota)
                burst.kill()
                burst.wait()
                self.ls.procs.remove(burst)
                burst_end = time.monotonic()
                time.sleep(TAIL)
                probe_seconds = time.monotonic() - t0
                be_seconds = (node.usage_us(self.be_dir) - be0) / 1e6
                stop.set()
                sampler.join(5)
        finally:
            probe.send_signal(signal.SIGTERM)
            reader.join(30)
            self.ls.procs.remove(probe)
        skip = t0 - started  # the probe's arrivals count from its own start
        lat = [(t - skip, v) for t, v in _parse(output[0] if output else b"") if t >= skip]
        values = sorted(v for _, v in lat)
        safe = int((self.node.cpus * THRESHOLD / 100 - SAFE_MARGIN * ls_used) * PERIOD_US)
        reaction = None
        if mode != "none" and ls_used >= MIN_BURST_CORES:
            reaction = next((t for t, q in changes if 0 <= q <= safe), float("inf"))
        return Round(mode, index, percentile(values, 0.5), percentile(values, 0.99), percentile(values, 0.999),
                     len(values), be_seconds, probe_seconds, reaction, burst_at - t0, burst_end - t0,
                     safe, ls_used, changes, lat, timeline)

    def _watch_start(self) -> tuple[subprocess.Popen[bytes], bytes]:
        """BE's quota file watched by ``outcome/quotawatch.c`` (every ms, in SCHED_FIFO: the test runs as
        root), from its first read on.  A watcher in this process's Python thread waited for a CPU and the
        GIL behind the very load it timed: on a loaded machine it saw the quota up to 200 ms after the
        kernel had it (the agent's write traced at 103 ms, the quota seen at 304 ms).  Returns the watcher
        and its first line (the quota before the burst: the watcher is reading)."""
        path = self.node.path(self.be_dir, "cpu.cfs_quota_us" if self.node.version == 1 else "cpu.max")
        watch = subprocess.Popen([self.exes["quotawatch"], path, str(WATCH_US), str(BURST + 5)],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert watch.stdout is not None
        watch.stdout.readline()  # "# fifo" (or "# other <errno>")
        return watch, watch.stdout.readline()

    def _quota(self, text: str) -> int:
        """A quota file's contents in µs per period, -1 unlimited (v2's ``cpu.max``: "max 100000")."""
        q = text.split()[0]
        return -1 if q == "max" else int(q)

    def _watch_quota(self, watch: tuple[subprocess.Popen[bytes], bytes],
                     burst_at: float) -> tuple[list[tuple[float, int]], float]:
        """BE's quota in the kernel (the watcher's lines) from the burst for :data:`BURST` seconds: its
        changes, timed from ``burst_at`` (the first: the quota at the burst's start, at 0); and the LS
        pod's use from 0.1 to 0.6 s into the burst, in cores: LS's demand as the kernel served it at its
        start (on a shared machine one busy loop may get less than a core; later, with BE throttled, it
        gets more, which would move the bar after the fact)."""
        ls: list[tuple[float, int]] = []
        for at in (USE_FROM, USE_TO):
            time.sleep(max(0.0, burst_at + at - time.monotonic()))
            ls.append((time.monotonic(), self.node.usage_us(self.ls.dir)))
        time.sleep(max(0.0, burst_at + BURST - time.monotonic()))
        watch[0].terminate()
        out = watch[1] + watch[0].communicate(timeout=30)[0]
        changes: list[tuple[float, int]] = []
        for line in out.decode().splitlines():
            stamp, _, text = line.partition(" ")
            if line.startswith("#") or not text:
                continue
            t, q = max(int(stamp) / 1e9 - burst_at, 0.0), self._quota(text)
            if changes and changes[-1][0] == 0.0 and t == 0.0:
                changes[-1] = (0.0, q)  # before the burst: the latest value is the one in force at its start
            elif not changes or q != changes[-1][1]:
                changes.append((t, q))
        assert changes, f"{self.exes['quotawatch']} read no quota"
        return changes, (ls[1][1] - ls[0][1]) / 1e6 / (ls[1][0] - ls[0][0])

    def _sample(self, t0: float, out: list[Sample], stop: threading.Event) -> None:
        node = self.node
        prev = (time.monotonic(), node.usage_us(self.ls.dir), node.usage_us(self.be_dir))
        while not stop.wait(SAMPLE):
            now = (time.monotonic(), node.usage_us(self.ls.dir), node.usage_us(self.be_dir))
            dt = now[0] - prev[0]
            with contextlib.suppress(OSError, ValueError):
                out.append(Sample(now[0] - t0, node.quota(self.be_dir), (now[1] - prev[1]) / 1e6 / dt,
                                  (now[2] - prev[2]) / 1e6 / dt))
            prev = now


def _parse(raw: bytes) -> list[tuple[float, float]]:
    """The probe's lines (it stops early on SIGTERM and prints what it has)."""
    out = []
    for line in raw.decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 2:
            with contextlib.suppress(ValueError):
                out.append((float(parts[0]), float(parts[1])))
    return out


# ---------------------------------------------------------------------------------------------
# the report


def summary(rounds: Sequence[Round]) -> dict[str, dict[str, Any]]:
    """Per mode: medians of the per-round figures with their spread (min, max), and every reaction."""
    out: dict[str, dict[str, Any]] = {}
    for mode in dict.fromkeys(r.mode for r in rounds):
        rs = [r for r in rounds if r.mode == mode]
        row: dict[str, Any] = {"rounds": len(rs)}
        for key in ("p50", "p99", "p999", "be_cpu_seconds"):
            vals = [getattr(r, key) for r in rs]
            row[key] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
        reactions = [r.reaction for r in rs]
        row["reactions"] = reactions
        row["ls_burst_cores"] = [round(r.ls_burst_cores, 2) for r in rs]
        # a round without a reaction within the burst counts as the burst's length: a lower bound
        got = [min(x, BURST) for x in reactions if x is not None]
        row["reaction"] = ({"median": statistics.median(got), "min": min(got), "max": max(got)} if got else None)
        row["reactions"] = [None if x is None else (x if x < BURST else f">{BURST:g}") for x in reactions]
        out[mode] = row
    return out


def save(rounds: Sequence[Round], path: str, **meta: Any) -> dict[str, Any]:
    """The run as JSON (``outcome/report.py`` makes the README's table and plot from it)."""
    data = {"meta": meta, "summary": summary(rounds), "rounds": [asdict(r) for r in rounds]}
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)
    return data


def reaction_bounds(summ: dict[str, dict[str, Any]]) -> list[str]:
    """The fast path's bounds against tick mode in the same run: p50 <= 0.15 x tick's, max <= 250 ms
    (a fast round without a reaction within the burst counts as the burst's length).  Returns the failures."""
    fails = []
    tick, fast = summ.get("tick"), summ.get("fast")
    if tick is None or fast is None:
        return fails
    if tick["reaction"] is None or fast["reaction"] is None:
        fails.append(f"no round had an LS burst of {MIN_BURST_CORES} cores or more (a starved machine): tick "
                     f"{tick['ls_burst_cores']}, fast {fast['ls_burst_cores']}")
    else:
        if fast["reaction"]["median"] > 0.15 * tick["reaction"]["median"]:
            fails.append(f"fast reaction median {fast['reaction']['median'] * 1e3:.0f} ms > 0.15 x tick's "
                         f"{tick['reaction']['median'] * 1e3:.0f} ms")
        if fast["reaction"]["max"] > 0.25:
            fails.append(f"fast reaction max {fast['reaction']['max'] * 1e3:.0f} ms > 250 ms")
    return fails
