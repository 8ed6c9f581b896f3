"""``qosmanager replay SCENARIO``: what would the agent do here, and why.

A scenario (YAML or JSON, format pinned by docs/interfaces.md) describes one node at one moment:
the Node, the NodeSLO, the pods, the CPU topology, metric samples and the contents of any host
file that matters.  Replay lays out a fake host with a complete cgroup tree (kernel defaults),
applies the scenario's files on top, injects the samples straight into the metric cache and
runs the *real* strategies, executor and eviction coordinator for ``ticks`` ticks.  It prints
one JSON document: every write in the order it hit a file, every eviction decision, and the
final content of every file the scenario named or the agent wrote.

Two properties matter to the people who use it:

* **Nothing is silently guessed.**  A scenario with an unknown key, a value of the wrong type,
  an unknown strategy, metric or feature gate, or a container series that names no container
  is refused with exit status 2 and a one-line message naming the field (``pods[2].metadata``).
  The NodeSLO is the agent's input, read exactly as the agent reads it: a field the agent would
  drop (out of range, of the wrong type) is dropped here too, the scenario runs, and the output
  lists it under ``refused`` (``{"source": "nodeSLO", "field": <JSON path>, "reason": <why>}``,
  before the refused eviction decisions); only a ``nodeSLO`` that is not a NodeSLO at all is
  refused with exit status 2.
* **Deterministic.**  The same scenario gives byte-identical output: time is the scenario's,
  randomness is seeded from the scenario's ``seed`` (default 0), and the output names files
  relative to their roots, never the temporary directory.
* **Bounded.**  A scenario is refused (exit 2, one line) before anything is built when it is
  larger than the fake host can sensibly be: the file over 64 MiB or nested deeper than 100
  levels, more than :data:`MAX_CPUS` CPUs (listed, or from the Node's capacity), :data:`MAX_PODS`
  pods, :data:`MAX_CONTAINERS` containers, :data:`MAX_SERIES` metric series, :data:`MAX_SAMPLES`
  samples or :data:`MAX_FILES` files.  The temporary tree is removed on every way out: success,
  a bad scenario, an error, Ctrl-C or SIGTERM (the signals wait while it is created and removed).

Map of the file: the scenario's limit and :func:`load_scenario` (the format and its parser are
:mod:`qosmanager.sim.scenario`); running: the fake host, the ticks with the fast path between
them, the decisions and files reported; :func:`render`, :func:`replay_main`.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import math
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType
from typing import Any, TextIO

from qosmanager.api.decode import MIB, Limits, load_object
from qosmanager.api.node import node_meta
from qosmanager.eviction.types import EvictDecision
from qosmanager.sim.scenario import (  # noqa: F401  (re-exported: the scenario format)
    CONFIG_KEYS,
    CPU_KEYS,
    DEFAULT_CPUS,
    DEFAULT_MEMORY,
    MAX_APPS,
    MAX_CONTAINERS,
    MAX_CPUS,
    MAX_FILES,
    MAX_PATH,
    MAX_PODS,
    MAX_SAMPLES,
    MAX_SERIES,
    MAX_TICKS,
    METRIC_KEYS,
    PINNED_METRICS,
    TOP_KEYS,
    MetricSeries,
    Scenario,
    ScenarioError,
    parse_scenario,
)

SCENARIO_LIMITS = Limits(max_bytes=64 * MIB, max_depth=100, max_nodes=2_000_000)


def load_scenario(path: str) -> Scenario:
    """Read and validate a scenario file (``-`` reads standard input); at most 64 MiB are read."""
    limit = SCENARIO_LIMITS.max_bytes
    try:
        if path == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as f:
                data = f.read(limit + 1)
    except OSError as e:
        raise ScenarioError(f"{path}: {e.strerror}") from None
    if len(data) > limit:
        raise ScenarioError(f"{path}: larger than replay reads (at most {limit >> 20} MiB)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{path}: not UTF-8 text ({e.reason})") from None
    try:
        obj = load_object(text, path, SCENARIO_LIMITS)
    except ValueError as e:
        raise ScenarioError(str(e)) from None
    return parse_scenario(obj)


# ----------------------------------------------------------------------------------------------
# running
# ----------------------------------------------------------------------------------------------
def _fast_tmp() -> str | None:
    """/dev/shm when it is usable (tmpfs: a cgroup tree builds there in a blink), else the default."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def _host_size(sc: Scenario) -> tuple[int, int, int]:
    """(n_cpus, threads_per_core, memory bytes) of the fake host, from the topology and the Node."""
    meta = node_meta(sc.node) if sc.node is not None else None
    if sc.cpus:
        n_cpus = max(p.cpu for p in sc.cpus) + 1
    elif meta is not None and meta.cpu_capacity_cores > 0:
        n_cpus = meta.cpu_capacity_cores
    else:
        n_cpus = DEFAULT_CPUS
    memory = DEFAULT_MEMORY
    if meta is not None and meta.memory_capacity >= (1 << 20):
        memory = meta.memory_capacity
    return n_cpus, (2 if n_cpus % 2 == 0 else 1), memory


def _content(text: str) -> str:
    """Scenario file contents end with a newline, as the kernel prints them."""
    return text if not text or text.endswith("\n") else text + "\n"


def run_scenario(sc: Scenario, *, workdir: str | None = None) -> dict[str, Any]:
    """Replay ``sc`` and return the output document (see the module docstring)."""
    from qosmanager.sim.harness import Harness  # the fake host and the whole agent

    random.seed(sc.seed)  # any strategy randomness not seeded on its own is still reproducible
    root: str | None = None
    try:
        with _signals_deferred():  # a Ctrl-C cannot fall between creating the tree and owning it
            root = tempfile.mkdtemp(prefix="qosm-replay-", dir=workdir or _fast_tmp())
        n_cpus, threads, memory = _host_size(sc)
        try:
            h = Harness(version=sc.cgroup_version, driver=sc.cgroup_driver, root=root, n_cpus=n_cpus,
                        memory_bytes=memory, gates=sc.feature_gates, cfg=sc.config, strategies=sc.strategies,
                        processors=sc.cpus, now=sc.now, seed=sc.seed, threads_per_core=threads,
                        kubelet_cgroup_root=sc.kubelet_cgroup_root)
        except ValueError as e:
            raise ScenarioError(str(e)) from None
        try:
            return _replay(h, sc)
        finally:
            h.close()
    finally:
        if root is not None:
            with _signals_deferred():  # a second Ctrl-C waits until the tree is gone
                shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM wait (pending) until the block is done; then they act as usual."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _replay(h: Any, sc: Scenario) -> dict[str, Any]:
    audit: list[dict[str, Any]] = []
    evictions: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    h.audit.add_sink(audit.append)
    h.coordinator.on_decision.append(_decision_sink(h, evictions, refused))
    # state: the node, the NodeSLO, then the pods and their cgroup dirs (kernel defaults)
    if sc.node is not None:
        h.set_node(sc.node)
    try:
        h.set_nodeslo(sc.nodeslo)
    except ValueError as e:
        raise ScenarioError(f"nodeSLO: {e}") from None
    # the NodeSLO values the agent dropped (that field only; the rest of the NodeSLO applies)
    refused.extend({"source": "nodeSLO", "field": path, "reason": why}
                   for path, why in h.store.nodeslo.invalid_fields)
    try:
        h.set_pods(sc.pods)
    except ValueError as e:
        raise ScenarioError(f"pods: {e}") from None
    # the scenario's files on top of the defaults
    named: list[str] = []
    for prefix, contents in (("", sc.cgroups), ("proc/", sc.proc), ("sys/", sc.sys)):
        for rel, text in contents.items():
            try:
                h.write_file(prefix + rel, _content(text))
            except OSError as e:
                key = {"": "cgroups", "proc/": "proc", "sys/": "sys"}[prefix]
                raise ScenarioError(f"{key}[{rel!r}]: cannot be laid out: {e.strerror}") from None
            named.append(prefix + rel)
    _inject_metrics(h, sc)
    # the ticks, the fast path between them (and the memory protection level memoryHigh decided at each of
    # its ticks)
    levels: list[dict[str, Any]] = []

    def on_tick(name: str, _seconds: float) -> None:
        if name == "memoryHigh":
            p = h.shared.memory_protection
            levels.append({"ts": p.at, "level": p.level, "cap": p.cap, "budget": p.budget, "beUsage": p.be_usage,
                           "highEvents": p.high_events, "reclaim": p.reclaimed, "reason": p.reason})

    h.manager.on_tick.append(on_tick)
    memory, reactions = _memory_load(h, sc)
    steps = [f for f in (_fast_path(h, sc), memory.sample if memory is not None else None) if f is not None]
    try:
        h.run(sc.strategies, ticks=sc.ticks, start=sc.now,
              between=_between(h, steps, memory.sample if memory is not None else None))
    finally:
        if memory is not None:
            memory.close()
    writes = [{"strategy": r["strategy"], "file": r["target"], "value": r["value"], "old": r["old"],
               "reason": r["reason"], "ts": r["ts"]}
              for r in audit if r["action"] == "write" and r["executed"]]
    errors = [{"strategy": r["strategy"], "error": r.get("error"), "ts": r["ts"]}
              for r in audit if r["action"] == "error"]
    touched = sorted(set(named) | {w["file"] for w in writes})
    files = {rel: _final(h.read_file(rel)) for rel in touched}
    out = {"writes": writes, "evictions": evictions, "files": files, "refused": refused, "errors": errors}
    if levels:
        out["memoryProtection"] = levels
    if memory is not None:
        out["memoryReactions"] = reactions
        out["psi"] = memory.psi_report()
    out["audit"] = audit
    return out


def _between(h: Any, steps: Sequence[Callable[[], object]],
             before_tick: Callable[[], object] | None) -> Callable[[float, float], None] | None:
    """Between two ticks: ``steps`` every 50 ms of scenario time (the fast path's and the memory trigger's
    samples), then ``before_tick`` at the next tick's time (the memory trigger's sample there: its cadence
    runs through the ticks)."""
    from qosmanager.framework.fastpath import INTERVAL as interval

    if not steps and before_tick is None:
        return None

    def between(start: float, end: float) -> None:
        k = 1
        while steps and start + k * interval < end - 1e-9:
            h.now = start + k * interval
            for step in steps:
                step()
            k += 1
        if before_tick is not None:
            h.now = end
            before_tick()

    return between


def _memory_load(h: Any, sc: Scenario) -> tuple[MemoryModel | None, list[dict[str, Any]]]:
    """The scenario's ``memoryLoad`` (:class:`~qosmanager.sim.fakememory.MemoryLoad`) and the memory
    protection reactions it gives (``memoryReactions``), or (None, [])."""
    if sc.memory_load is None:
        return None, []
    reactions: list[dict[str, Any]] = []
    model = MemoryModel(h, sc, reactions)
    model.update(sc.now)
    return model, reactions


class MemoryModel:
    """``memoryLoad`` in replay: the node's memory moved at every tick and every 50 ms between them (each
    update stored as the ``node_memory_usage`` sample of its moment), the memory trigger sampling it there
    (``reactMode: fast`` with memoryHigh among the strategies run; the strategies it wakes run at once, extra
    runs beside their scheduled ticks), and the levels' reactions timed as ``/metrics`` times them (an
    eviction decided counts: replay decides, it does not evict).  The node's memory stalls move with it
    (:mod:`~qosmanager.sim.fakestall`: the pressure files, the fake kernel's PSI triggers judging them), and
    with ``reactMode: fast`` and memoryHigh or memoryEvict run, the agent's PSI watch
    (:class:`~qosmanager.framework.psi.PressureWatch`) registers its triggers and is polled at the same
    samples: a trigger that fires wakes memoryHigh and memoryEvict at once (``psi`` in the output)."""

    def __init__(self, h: Any, sc: Scenario, reactions: list[dict[str, Any]]) -> None:
        from qosmanager.framework.memreaction import MemoryReactions
        from qosmanager.framework.memtrigger import HIGH, MemoryTrigger
        from qosmanager.sim.fakememory import MemoryLoad

        self.h = h
        assert sc.memory_load is not None
        self.load = MemoryLoad(h.host, sc.memory_load)
        self.woken: list[str] = []
        chosen = sc.strategies if sc.strategies is not None else [s.name for s in h.manager.enabled()]
        self.chosen = [n for n in chosen if n in h.manager.strategies]
        self.tracker = MemoryReactions(h.store, h.shared.memory_protection, lambda: h.now,
                                       lambda level, s: reactions.append({"level": level, "ts": h.now,
                                                                          "seconds": round(s, 6)}))
        self.tracker.count_decided = True
        h.executor.on_batch.append(self.tracker.on_batch)
        h.coordinator.on_decision.append(self.tracker.on_decision)
        h.manager.on_tick.append(self.tracker.on_tick)
        self.trigger: MemoryTrigger | None = None
        if sc.react_mode == "fast" and HIGH in self.chosen:
            self.trigger = MemoryTrigger(h.layout, h.store, lambda *names: self.woken.extend(names),
                                         evict="memoryEvict" in self.chosen)
            self.trigger.on_sample.append(lambda used: self.tracker.sample(used, "trigger"))
        # the node's memory stalls, and the agent's PSI watch on them
        from qosmanager.api.pod import KUBE_QOS_GUARANTEED
        from qosmanager.framework.psi import PressureWatch
        from qosmanager.sim.fakestall import NodePressure

        rules = h.host.kernel.psi if h.host.kernel is not None else None
        guaranteed = [h.layout.pod_dir(p.kube_qos, p.uid) for p in h.store.pods.values()
                      if p.kube_qos == KUBE_QOS_GUARANTEED] if h.layout.version == 2 else []
        self.pressure = NodePressure(h.layout, rules, guaranteed, sc.now)
        self.psi_events: list[dict[str, Any]] = []
        self.watch: PressureWatch | None = None
        if rules is not None and sc.react_mode == "fast" and {HIGH, "memoryEvict"} & set(self.chosen):
            rules.on_event.append(lambda path, line, growth: self.psi_events.append(
                {"ts": h.now, "file": self.display(path), "line": " ".join(map(str, line)), "stallUs": growth}))
            self.watch = PressureWatch(h, h.executor, lambda *names: self.woken.extend(names))
            self.watch.sync()
        self.rules = rules
        self.report: dict[str, Any] | None = None

    def display(self, path: str) -> str:
        """A pressure file as replay names files: relative to the cgroup root, ``proc/...``."""
        roots = self.h.layout.roots
        for root, prefix in ((roots.cgroup, ""), (roots.proc, "proc/")):
            root = os.path.normpath(root)
            if path.startswith(root + "/"):
                return prefix + path[len(root) + 1:]
        return path

    def update(self, t: float) -> None:
        """The node's memory at ``t``, its ``node_memory_usage`` sample stored; its stalls up to ``t``."""
        self.h.add_samples("node_memory_usage", [(t, self.load.update(t))])
        self.pressure.advance(t, self.load.stall)

    def sample(self) -> None:
        """One 50 ms sample: the memory moved, the trigger's look and the PSI watch's poll, the strategies
        they woke run."""
        self.update(self.h.now)
        if self.trigger is not None:
            self.trigger.check()
        if self.watch is not None:
            self.watch.wait(0.0)
        woken, self.woken[:] = list(self.woken), []
        for name in dict.fromkeys(woken):
            if name in self.chosen:
                self.h.tick(name, self.h.now)


    def psi_report(self) -> dict[str, Any]:
        """The output's ``psi``: the triggers the watch holds (at the close), the events they sent, the stalls."""
        if self.report is not None:
            return self.report
        rules = self.rules
        triggers = [] if rules is None else [
            {"file": self.display(p), "line": " ".join(map(str, line))}
            for p in sorted(rules.watched()) for line in rules.triggers(p)]
        return {"triggers": triggers, "events": self.psi_events,
                "lsStallMs": round(self.pressure.ls_stall_us / 1000.0, 3),
                "beStallMs": round(self.pressure.be_stall_us / 1000.0, 3)}

    def close(self) -> None:
        """The report kept, the watch's triggers closed."""
        self.report = self.psi_report()
        if self.watch is not None:
            self.watch.stop()


def _fast_path(h: Any, sc: Scenario) -> Callable[[], object] | None:
    """The fast path between the ticks (``reactMode: fast``, with cpuSuppress among the strategies run):
    every 50 ms of scenario time it samples counters integrated from the scenario's ``node_cpu_usage``,
    ``kubepods_cpu_usage`` and ``besteffort_cpu_usage`` series (each sample's rate held over the time up to
    it, the last one's after it; all three must be given) and writes what ``run``'s would.  Its writes are
    in ``writes`` with their time, their reason saying ``(fast path)``."""
    from qosmanager.framework.fastpath import FastPath
    from qosmanager.strategies.cpu_suppress import CPUSuppress

    names = ("node_cpu_usage", "kubepods_cpu_usage", "besteffort_cpu_usage")
    series = {s.name: s.samples for s in sc.metrics if s.name in names and s.samples}
    strategy = h.manager.strategies.get("cpuSuppress")
    chosen = sc.strategies if sc.strategies is not None else [s.name for s in h.manager.enabled()]
    if sc.react_mode != "fast" or len(series) < len(names) or not isinstance(strategy, CPUSuppress) \
            or strategy.name not in chosen:
        return None
    counters = [_Integral(series[n]) for n in names]
    fp = FastPath(h.layout, h.store, h.executor, strategy, monotonic=lambda: h.now, clock=lambda: h.now,
                  counters=lambda: (counters[0](h.now), counters[1](h.now), counters[2](h.now)))
    return fp.step


class _Integral:
    """CPU seconds up to ``t`` of a series of rates (cores): each sample's rate holds over the time since
    the one before it (the window it measured), the first's before it, the last's after it."""

    def __init__(self, samples: Sequence[tuple[float, float]]) -> None:
        self.points = sorted(samples)
        self.cum = [0.0]
        for (t0, _), (t1, v1) in zip(self.points, self.points[1:]):
            self.cum.append(self.cum[-1] + v1 * (t1 - t0))

    def __call__(self, t: float) -> float:
        pts = self.points
        if t <= pts[0][0]:
            return pts[0][1] * (t - pts[0][0])
        i = bisect.bisect_left(pts, (t, -math.inf))
        if i == len(pts):
            return self.cum[-1] + pts[-1][1] * (t - pts[-1][0])
        return self.cum[i - 1] + pts[i][1] * (t - pts[i - 1][0])


def _final(text: str | None) -> str | None:
    return None if text is None else text.rstrip("\n")


def _decision_sink(h: Any, evictions: list[dict[str, Any]],
                   refused: list[dict[str, Any]]) -> Callable[[EvictDecision, str], None]:
    def sink(d: EvictDecision, strategy: str) -> None:
        rec = {"strategy": strategy, "pod": d.pod.key, "uid": d.pod.uid, "reason": d.reason,
               "feature": d.feature, "executed": d.executed, "ts": h.now}
        if d.error:
            rec["error"] = d.error
        (evictions if d.action == "evicted" else refused).append(rec)

    return sink


def _inject_metrics(h: Any, sc: Scenario) -> None:
    for series in sc.metrics:
        try:
            h.add_samples(series.name, series.samples, **series.labels)
        except (KeyError, ValueError) as e:
            raise ScenarioError(f"{series.where}: {e}") from None


@contextlib.contextmanager
def _sigterm_exits() -> Iterator[None]:
    """SIGTERM raises SystemExit(143), so every ``finally`` (the temporary tree's) runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def render(doc: Mapping[str, Any]) -> str:
    """The output document as text: stable key order, two-space indent, a final newline."""
    return json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def replay_main(path: str, out: TextIO | None = None, err: TextIO | None = None, *,
                compact: bool = False) -> int:
    """The ``replay`` command: 0 and the JSON document on success, 2 and one line on a bad scenario."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        with _sigterm_exits():
            sc = load_scenario(path)
            doc = run_scenario(sc)
    except ScenarioError as e:
        err.write(f"qosmanager replay: {e}\n")
        return 2
    except KeyboardInterrupt:
        err.write("qosmanager replay: interrupted\n")
        return 130
    if compact:
        doc = {k: doc[k] for k in ("writes", "evictions", "files")}
    out.write(render(doc))
    return 0
