"""The end-of-run report of ``qosmanager simulate``: the summary a person reads (:func:`summarize`), its
sparklines and timeline, and the run as plain data (:func:`result_json`, ``--json``).

Everything here reads a finished :class:`~qosmanager.sim.result.SimResult`; the run itself is
:mod:`~qosmanager.sim.simulate` (which re-exports these names).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from qosmanager.sim.load import StepRecord
from qosmanager.sim.result import Eviction, JobStats, SimConfig, SimResult

MIN_CFS_QUOTA_US = 2000  # koordlet's beMinQuota: the floor of cfsQuota suppression
MIN_BE_CPUS = 2  # koordlet's beMinCPUSetCores


def _status(rec: StepRecord, evictions: Sequence[Eviction], cfg: SimConfig) -> str:
    return (f"LS {rec.ls_used:5.1f} cores  BE {_num(rec.be_used):>5} cores "
            f"(limit {_limit(rec.be_limit, cfg, short=True)})  "
            f"memory {100.0 * rec.memory_used / rec.memory_total:4.1f} %  evicted {_pods(len(evictions))}")


# ----------------------------------------------------------------------------------------------
# the summary
# ----------------------------------------------------------------------------------------------
_BLOCKS = "▁▂▃▄▅▆▇█"
_ASCII = "_.-:=+*#"


def sparkline(values: Sequence[float], lo: float, hi: float, *, unicode: bool = True) -> str:
    """One character per value, scaled into [lo, hi] (NaN: a space)."""
    chars = _BLOCKS if unicode else _ASCII
    span = hi - lo
    out = []
    for v in values:
        if v != v:  # NaN
            out.append(" ")
            continue
        k = 0 if span <= 0 else int((min(max(v, lo), hi) - lo) / span * (len(chars) - 1) + 0.5)
        out.append(chars[k])
    return "".join(out)


def _buckets(records: Sequence[StepRecord], width: int) -> list[list[StepRecord]]:
    n = len(records)
    if n <= width:
        return [[r] for r in records]
    return [list(records[i * n // width:(i + 1) * n // width]) for i in range(width)]


def _mean(xs: Sequence[float]) -> float:
    finite = [x for x in xs if not math.isinf(x)]
    return sum(finite) / len(finite) if finite else math.inf


def _pods(n: int) -> str:
    return f"{n} pod{'' if n == 1 else 's'}"


def _num(v: float) -> str:
    """Cores with the precision that matters: 0.02, 0.45, 3.1, 12.5."""
    return f"{v:.2f}" if abs(v) < 1 else f"{v:.1f}"


def at_floor(limit: float, cfg: SimConfig) -> bool:
    """The BE limit is koordlet's minimum: a 2000 us quota (cfsQuota) or 2 CPUs (cpuset)."""
    if cfg.suppress_policy == "cfsQuota":
        return math.isclose(limit, MIN_CFS_QUOTA_US / 100_000, abs_tol=1e-9)
    return math.isclose(limit, MIN_BE_CPUS, abs_tol=1e-9)


def floor_text(cfg: SimConfig) -> str:
    if cfg.suppress_policy == "cfsQuota":
        return f"quota {MIN_CFS_QUOTA_US} us = {MIN_CFS_QUOTA_US / 100_000:.2f} cores"
    return f"{MIN_BE_CPUS} CPUs"


def _limit(v: float, cfg: SimConfig, *, short: bool = False) -> str:
    """A BE limit in words: ``unlimited``, ``at the floor (quota 2000 us = 0.02 cores)``, ``3.1 cores``."""
    if math.isinf(v):
        return "unlimited"
    if at_floor(v, cfg):
        return "at the floor" if short else f"at the floor ({floor_text(cfg)})"
    return f"{_num(v)} cores"


def _mib(n: int | float) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def _gib(n: int | float) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def summarize(res: SimResult, *, unicode: bool = True, width: int = 60) -> str:
    """The end-of-run report: what a person reads at a glance."""
    cfg = res.config
    recs = res.records
    lines: list[str] = []
    ticks = max(res.ticks, 1)
    lines.append(f"qosmanager simulate: {cfg.containers} containers in {res.pods} pods ({res.ls_pods} LS, "
                 f"{res.be_pods} BE) on {cfg.cpus} CPUs / {cfg.memory_gib} GiB, "
                 f"cgroup v{cfg.cgroup_version}, {cfg.duration:g} s simulated in {res.run_seconds:.1f} s "
                 f"(node built in {res.build_seconds:.1f} s, seed {cfg.seed})")
    lines.append(f"strategies: {', '.join(res.strategies) or 'none'}; "
                 f"cpuSuppressPolicy {cfg.suppress_policy}, CPU threshold {cfg.cpu_threshold_percent} %, "
                 f"memory eviction at {cfg.memory_threshold_percent} %")
    lines.append("")
    per_job = ", ".join(f"{name} {1000.0 * st.cpu_seconds / max(st.runs, 1):.1f}"
                        for name, st in res.jobs.items() if st.runs)
    median, mean, worst = res.tick_cpu_stats()
    lines.append(f"agent      CPU per tick {1000.0 * median:.1f} ms median, {1000.0 * mean:.1f} ms mean, "
                 f"{1000.0 * worst:.1f} ms max over {ticks} ticks (ms per run: {per_job})")
    if res.kernel_emulation_seconds > 0:
        lines.append(f"           not counted: {1000.0 * res.kernel_emulation_seconds / max(ticks, 1):.1f} ms per tick "
                     "of the fake kernel emulating the agent's writes in Python (its rules: a v1 quota write "
                     "checks the hierarchy's bandwidth), which a node's kernel does in C")
    lines.append(f"           peak RSS {_mib(res.peak_rss)} ({_mib(res.baseline_rss)} before the agent "
                 "started; one process with the simulator)")
    for name, err in res.strategy_errors.items():
        lines.append(f"           ERROR {name} raised {res.jobs.get(name, JobStats()).errors} time(s): {err}")
    if not recs:
        lines.append("no model steps ran")
        return "\n".join(lines) + "\n"
    cap = float(cfg.cpus)
    threshold = cap * cfg.cpu_threshold_percent / 100.0
    over = [r for r in recs if r.ls_used + r.system > threshold]
    step = cfg.step
    ls_used = [r.ls_used for r in recs]
    lines.append(f"LS CPU     used {min(ls_used):.1f} .. {max(ls_used):.1f} cores "
                 f"(mean {_mean(ls_used):.1f} cores); "
                 f"threshold {cfg.cpu_threshold_percent} % = {threshold:.1f} cores; "
                 f"LS + system above it for {len(over) * step:g} s")
    limits = [r.be_limit for r in recs]
    lines.append(f"BE CPU     used {_mean([r.be_used for r in recs]):.1f} cores on average (demand "
                 f"{_mean([r.be_demand for r in recs]):.1f} cores)")
    floored = sum(1 for v in limits if at_floor(v, cfg))
    lines.append(f"BE limit   {_limit(min(limits), cfg)} .. {_limit(max(limits), cfg)}"
                 + (f"; at the floor for {floored * step:g} s" if floored else
                    f"; never at the floor ({floor_text(cfg)})"))
    peak_mem = max(r.memory_used / r.memory_total for r in recs)
    by_feature: dict[str, int] = {}
    for e in res.evictions:
        by_feature[e.feature] = by_feature.get(e.feature, 0) + 1
    feats = ", ".join(f"{k} {v}" for k, v in sorted(by_feature.items())) or "none"
    lines.append(_fast_path_line(res))
    lines.append(f"evictions  {_pods(len(res.evictions))} ({feats}); memory peaked at "
                 f"{100 * peak_mem:.1f} % (threshold {cfg.memory_threshold_percent} %)")
    capped = [r for r in recs if r.be_memory_high >= 0]
    if capped:
        lines.append(f"BE memory  capped by memory.high for {len(capped) * step:g} s from {capped[0].t:g} s "
                     f"(at {_gib(min(r.be_memory_high for r in capped))} .. "
                     f"{_gib(max(r.be_memory_high for r in capped))}); the kernel held BE at it in "
                     f"{recs[-1].be_high_events} (sub-)step(s)")
    if "memoryHigh" in res.strategies:
        lines.extend(_memory_levels(res))
    lines.extend(_psi_lines(res))
    lines.append("")
    lines.extend(_timeline(res, unicode=unicode, width=width))
    if res.evictions:
        lines.append("")
        lines.append("evicted, lowest priority first:")
        shown = sorted(res.evictions, key=lambda e: (e.priority, e.t))
        for e in shown[:12]:
            lines.append(f"  priority {e.priority}  {e.pod:<24} {_gib(e.memory):>9}  at {e.t:5.1f} s  "
                         f"{e.feature}")
        if len(shown) > 12:
            lines.append(f"  ... and {len(shown) - 12} more")
    return "\n".join(lines) + "\n"


LEVEL_NAMES = {0: "none", 1: "BE capped", 2: "capped and reclaiming", 3: "evict"}
V1_LEVEL_NAMES = {**LEVEL_NAMES, 1: "BE soft limit set, holds nothing on v1"}


def _v1_soft_limit(res: SimResult) -> list[str]:
    """cgroup v1 has no memory.high: what memoryHigh's level 1 writes there, and that it holds nothing."""
    recs, step = res.records, res.config.step
    soft = [r for r in recs if r.be_soft_limit >= 0]
    where = (f" ({_gib(min(r.be_soft_limit for r in soft))} .. {_gib(max(r.be_soft_limit for r in soft))}, "
             f"set for {len(soft) * step:g} s)" if soft else "")
    return [f"BE memory  not capped: cgroup v1 has no memory.high; level 1 writes memory.soft_limit_in_bytes{where},",
            "           which holds nothing: BE's growth is neither throttled nor reclaimed until the whole node runs",
            "           short of memory; only level 3 (eviction) stops BE here"]


def _memory_levels(res: SimResult) -> list[str]:
    """The memory protection levels in force over the run and how soon each acted (memoryHigh runs)."""
    recs, step = res.records, res.config.step
    v1 = res.config.cgroup_version == 1
    names = V1_LEVEL_NAMES if v1 else LEVEL_NAMES
    spans = []
    for level in (0, 1, 2):
        n = sum(1 for r in recs if r.memory_level == level)
        if n:
            first = next(r.t for r in recs if r.memory_level == level)
            spans.append(f"{level} ({names[level]}) {n * step:g} s" + (f" from {first:g} s" if level else ""))
    first_ev = f"first eviction at {min(e.t for e in res.evictions):.1f} s" if res.evictions else "no eviction"
    out = [f"mem levels {'; '.join(spans)}; {first_ev}"]
    times = []
    for level in (1, 2, 3):
        r = sorted(s for lv, _, s in res.memory_reactions if lv == level)
        if r:
            times.append(f"level {level} {len(r)}x, {1000.0 * r[len(r) // 2]:.0f} ms (median), "
                         f"{1000.0 * r[-1]:.0f} ms (max)")
    trigger = ("memory trigger every 50 ms" if res.config.react_mode == "fast"
               else "no memory trigger (--react-mode tick)")
    out.append(f"           reaction from the node crossing a level's line to its action: "
               f"{'; '.join(times) or 'none'} ({trigger}; simulated time)")
    if v1:
        out.extend(_v1_soft_limit(res))
    return out


def _psi_lines(res: SimResult) -> list[str]:
    """The node's memory stalls (the model's pressure files) and what the agent's PSI triggers made of them."""
    recs = res.records
    ls_ms, be_ms = recs[-1].ls_stall_ms, recs[-1].be_stall_ms
    if not res.psi_triggers and not res.psi_cpu_triggers and not ls_ms and not be_ms and not recs[-1].ls_cpu_stall_ms:
        return []
    if not ls_ms and not be_ms:
        stall = "no memory stall on the node (MemAvailable covered the page cache in use, BE never held at a cap)"
    else:
        stall = f"LS stalled on memory {ls_ms / 1000:.2f} s in total"
        if ls_ms and res.ls_stall_first is not None:
            stall += f" (from {res.ls_stall_first:.2f} s; at most {100 * res.ls_stall_peak:.0f} % of the time)"
        stall += f", BE {be_ms / 1000:.2f} s (the pressure files' some; BE's own: at memory.high, or the node short)"
    out = [f"PSI        {stall}"]
    cpu_ms = recs[-1].ls_cpu_stall_ms
    if cpu_ms:
        out.append(f"           LS waited for a CPU {cpu_ms / 1000:.2f} s in total (cpu.pressure some: while LS's "
                   "demand, what BE's limit let it run and the system's share exceeded the CPUs)")
    out.extend(_psi_cpu_lines(res))
    if not res.psi_triggers:
        why = ("--react-mode tick" if res.config.react_mode != "fast" else
               "neither memoryHigh nor memoryEvict runs, or the kernel refused them")
        out.append(f"           no memory PSI trigger registered ({why})")
        return out
    lines, where = _trigger_lines_and_files(res.psi_triggers)
    ev = res.psi_events
    fired = "never fired"
    if ev:
        fired = f"fired {len(ev)} time(s) on {len({f for _, f, _ in ev})} file(s), first at {ev[0][0]:.2f} s"
        if res.ls_stall_first is not None and ev[0][0] >= res.ls_stall_first:
            fired += f" ({ev[0][0] - res.ls_stall_first:.2f} s after LS began to stall)"
        fired += f"; the memory levels woken {res.psi_wakes} time(s)"
    out.append(f"           {len(res.psi_triggers)} trigger(s) ({lines}; threshold and window in us) on {where}; "
               f"{fired}")
    for_stall = sorted(e.t for e in res.evictions if "LS stalled on memory" in e.reason)
    if for_stall:
        after = (f", {for_stall[0] - res.ls_stall_first:.2f} s after LS began to stall"
                 if res.ls_stall_first is not None else "")
        out.append(f"           level 3 evicted {_pods(len(for_stall))} for LS's stall (first at {for_stall[0]:.2f} s"
                   f"{after}), not waiting for the node to stay over the threshold")
    return out


def _psi_cpu_lines(res: SimResult) -> list[str]:
    """What the fast path's CPU triggers (LS's cpu.pressure) did: their events and the samples they took."""
    if not res.psi_cpu_triggers:
        return []
    lines, where = _trigger_lines_and_files(res.psi_cpu_triggers)
    ev = res.psi_cpu_events
    fired = "never fired"
    if ev:
        fired = (f"fired {len(ev)} time(s), first at {ev[0][0]:.2f} s; the fast path sampled at once "
                 f"{res.psi_cpu_samples} time(s), {res.psi_cpu_writes} of them lowering BE's limit")
    return [f"           {len(res.psi_cpu_triggers)} CPU trigger(s) ({lines}) on {where} (the fast path's); {fired}"]


def _trigger_lines_and_files(triggers: list[tuple[str, str]]) -> tuple[str, str]:
    """(pressure file, line) pairs as the summary names them: the distinct lines, and the first file and
    how many more."""
    files = [f for f, _ in triggers]
    where = files[0] if len(files) == 1 else f"{files[0]} and {len(files) - 1} more"
    return ", ".join(sorted({line for _, line in triggers})), where


def _fast_path_line(res: SimResult) -> str:
    """What the fast path did: its writes between ticks and how soon after the rise each one came."""
    if res.config.react_mode != "fast":
        return "fast path  off (--react-mode tick): BE's limit moves at cpuSuppress's ticks only"
    r = sorted(res.reactions)
    if not r:
        return "fast path  on; no rise in LS demand called for a lower BE limit between ticks"
    return (f"fast path  lowered BE's limit {len(r)} time(s) between ticks, {1000.0 * r[len(r) // 2]:.0f} ms "
            f"(median), {1000.0 * r[-1]:.0f} ms (max) after the rise began (simulated time)")


def _timeline(res: SimResult, *, unicode: bool, width: int) -> list[str]:
    cfg = res.config
    cap = float(cfg.cpus)
    buckets = _buckets(res.records, width)
    span = f"0 .. {res.records[-1].t:g} s"
    ls = [_mean([r.ls_used for r in b]) for b in buckets]
    be = [_mean([r.be_used for r in b]) for b in buckets]
    lim = [min(_mean([min(r.be_limit, cap) for r in b]), cap) for b in buckets]
    mem = [_mean([100.0 * r.memory_used / r.memory_total for r in b]) for b in buckets]
    ev_marks = []
    starts = [b[0].t for b in buckets]
    for i, t0 in enumerate(starts):
        t_end = starts[i + 1] if i + 1 < len(starts) else math.inf
        n = sum(1 for e in res.evictions if t0 <= e.t < t_end)
        ev_marks.append("·" if n == 0 and unicode else "." if n == 0 else (str(n) if n < 10 else "+"))
    threshold = cap * cfg.cpu_threshold_percent / 100.0
    limits = [r.be_limit for r in res.records]
    out = [f"timeline ({span}, {len(buckets)} columns; CPU rows scaled 0 .. {cap:g} cores)"]
    rows: tuple[tuple[str, list[float], float, float, str], ...] = (("LS used", ls, 0.0, cap,
             f"{min(ls):.1f} .. {max(ls):.1f} cores (threshold {threshold:.1f} cores)"),
            ("BE limit", lim, 0.0, cap,
             f"{_limit(min(limits), cfg, short=True)} .. {_limit(max(limits), cfg)}"),
            ("BE used", be, 0.0, cap, f"{_num(min(be))} .. {_num(max(be))} cores"),
            ("memory", mem, 50.0, 100.0, f"{min(mem):.1f} .. {max(mem):.1f} % used (scaled 50 .. 100 %)"))
    if "memoryHigh" in res.strategies:
        lv = [max(r.memory_level for r in b) for b in buckets]
        one = "1 BE soft limit (holds nothing on v1)" if cfg.cgroup_version == 1 else "1 BE capped"
        rows += (("mem level", [float(v) for v in lv], 0.0, 3.0,
                  f"{min(lv)} .. {max(lv)} (memory protection level in force: 0 none, {one}, 2 reclaiming)"),)
    for label, attr in (("LS stall", "ls_stall_ms"), ("BE stall", "be_stall_ms")):
        if getattr(res.records[-1], attr):
            st = _bucket_shares(res.records, buckets, attr)
            rows += ((label, st, 0.0, 100.0, f"{min(st):.1f} .. {max(st):.1f} % of the time stalled on memory"),)
    for label, vals, lo, hi, note in rows:
        out.append(f"  {label:<9} {sparkline(vals, lo, hi, unicode=unicode)}  {note}")
    out.append(f"  {'evictions':<9} {''.join(ev_marks)}  {_pods(len(res.evictions))} in total")
    out.append("")
    out.append("     t   LS used   BE used   BE limit   BE quota    memory  evicted")
    out.append("   (s)   (cores)   (cores)    (cores)       (us)  (% used)   (pods)")
    n = len(res.records)
    picks = sorted({round(i * (n - 1) / 10) for i in range(11)}) if n > 1 else [0]
    for i in picks:
        r = res.records[i]
        quota = "unlimited" if r.be_quota_us < 0 else str(r.be_quota_us)
        if math.isinf(r.be_limit):
            limit = "unlimited"
        else:
            limit = "floor" if at_floor(r.be_limit, cfg) else _num(r.be_limit)
        out.append(f"  {r.t:4.0f}  {_num(r.ls_used):>8}  {_num(r.be_used):>8}  {limit:>9}  "
                   f"{quota:>9}  {100.0 * r.memory_used / r.memory_total:6.1f} %  {r.evicted_total:7d}")
    out.append(f"  floor: koordlet's minimum BE limit, {floor_text(cfg)}")
    return out


def _bucket_shares(records: Sequence[StepRecord], buckets: list[list[StepRecord]], attr: str) -> list[float]:
    """The largest share of time (%) stalled in one step of each bucket, from a cumulative stall (ms)."""
    share = {id(records[0]): 0.0}
    for a, b in itertools.pairwise(records):
        share[id(b)] = (getattr(b, attr) - getattr(a, attr)) / 10.0 / max(b.t - a.t, 1e-9)
    return [max(share[id(r)] for r in b) for b in buckets]


def result_json(res: SimResult) -> dict[str, Any]:
    """The run as plain data (``--json``)."""
    def clean(v: Any) -> Any:
        return None if isinstance(v, float) and math.isinf(v) else v

    return {
        "config": {k: v for k, v in asdict(res.config).items() if k != "shape"},
        "shape": asdict(res.config.shape),
        "pods": res.pods, "ls_pods": res.ls_pods, "be_pods": res.be_pods, "strategies": res.strategies,
        "agent": {"ticks": res.ticks, "cpu_seconds": res.agent_cpu_seconds, "peak_rss": res.peak_rss,
                  "baseline_rss": res.baseline_rss, "kernel_emulation_seconds": res.kernel_emulation_seconds,
                  "jobs": {n: asdict(s) for n, s in res.jobs.items()}, "errors": res.strategy_errors},
        "timeline": [{k: clean(v) for k, v in asdict(r).items()} for r in res.records],
        "evictions": [asdict(e) for e in res.evictions],
        "fast_path": {"react_mode": res.config.react_mode, "reactions": res.reactions},
        "memory_reactions": [{"level": lv, "t": t, "seconds": sec} for lv, t, sec in res.memory_reactions],
        "psi": {**_psi_json(res.psi_triggers, res.psi_events),
                "wakes": res.psi_wakes, "ls_stall_first": res.ls_stall_first, "ls_stall_peak": res.ls_stall_peak,
                "cpu": {**_psi_json(res.psi_cpu_triggers, res.psi_cpu_events),
                        "fast_path_samples": res.psi_cpu_samples, "fast_path_writes": res.psi_cpu_writes}},
    }


def _psi_json(triggers: list[tuple[str, str]], events: list[tuple[float, str, int]]) -> dict[str, Any]:
    """``--json``'s triggers (``{file, line}``) and events (``{t, file, stall_us}``) of one resource."""
    return {"triggers": [{"file": f, "line": line} for f, line in triggers],
            "events": [{"t": t, "file": f, "stall_us": g} for t, f, g in events]}
