"""The QoS manager: builds the enabled strategies and runs each on its own schedule.

For every strategy tick it builds a :class:`Context`, runs the strategy, hands the writes to the
executor and the results back to the strategy.  A strategy that raises is logged and audited
(``action: "error"``) and runs again at its next interval; the others never notice.

Strategies come from the package (:mod:`qosmanager.framework.builtins`) and from plugins
(:mod:`qosmanager.framework.plugins`), and run the same way.  A plugin strategy is held to more: one
that raises when it is built is failed and left out; one whose tick raises is named in the degraded
condition ``plugin/<gate>`` and, at :data:`~qosmanager.framework.plugins.MAX_FAILED_TICKS` failed ticks
in a row, stopped and its changes restored; its requests pass a :class:`~plugins.Guard` (refusals are
audited and named in the same condition); a write it loses to another strategy's file, or one another
strategy loses to it, raises ``plugin/<gate>/ownership`` (the executor's merge rule decided; nothing is
fought over quietly).  ``SystemExit`` from a plugin's code counts as raising (a plugin cannot end the
agent), and what its ``needs()`` returns is checked (:meth:`QoSManager.needs_of`) before the collector's
planner sees it.  A plugin's calls run on a thread of its own (:class:`~plugins.PluginThread`); one that
has not returned within :data:`~plugins.CALL_DEADLINE` is abandoned there and the plugin stopped at once.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from qosmanager.executor.executor import Request, Write, WriteResult
from qosmanager.framework import plugins
from qosmanager.framework.builtins import ORDER, builtin_strategies
from qosmanager.framework.context import Context, Shared
from qosmanager.framework.demand import Need
from qosmanager.framework.scheduler import Scheduler
from qosmanager.framework.strategy import Strategy

if TYPE_CHECKING:
    from qosmanager.restore import Original

log = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["ORDER", "QoSManager", "StrategyStats", "load_strategies"]


def load_strategies() -> dict[str, type[Strategy]]:
    """Every strategy class: the built-ins (in :data:`ORDER`), then the loaded plugins'."""
    return {**builtin_strategies(), **plugins.discovered().strategies()}


@dataclass
class StrategyStats:
    runs: int = 0
    errors: int = 0
    last_seconds: float = 0.0
    total_seconds: float = 0.0
    last_error: str = ""
    streak: int = 0  # ticks in a row that raised (plugin strategies)


class QoSManager:
    def __init__(self, shared: Shared, *, only: Iterable[str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.shared = shared
        self.clock = clock
        # this manager's view of the plugins (their status changes here: failed when built, stopped)
        self.plugins = [copy.copy(p) for p in plugins.discovered().plugins]
        self._plugin_of = {p.strategy: p for p in self.plugins if p.status == plugins.LOADED}
        classes = load_strategies()
        if only is not None:
            wanted = list(only)
            unknown = [n for n in wanted if n not in classes]
            if unknown:
                raise ValueError(f"unknown strategy {', '.join(unknown)}; known: {', '.join(classes)}")
            classes = {n: classes[n] for n in wanted}
        self.strategies: dict[str, Strategy] = {}
        self._guards: dict[str, plugins.Guard] = {}
        self._plugin_enabled: dict[str, bool] = {}
        self._contested: dict[str, float] = {}  # plugin strategy -> last lost write involving it
        self._needs_checked: dict[str, Sequence[Need]] = {}  # plugin strategy -> the needs last found sound
        self._threads: dict[str, plugins.PluginThread] = {}  # plugin strategy -> the thread its calls run on
        for n, cls in classes.items():
            info = self._plugin_of.get(n)
            if info is None:
                self.strategies[n] = cls(shared.cfg, shared.gates)
            else:
                self._build_plugin(info, cls)
        self.stats: dict[str, StrategyStats] = {n: StrategyStats() for n in self.strategies}
        self.on_tick: list[Callable[[str, float], None]] = []
        for p in self.plugins:
            if p.status == plugins.FAILED:
                self._plugin_condition(p, f"plugin {p.describe()} is not loaded: {p.error}; the built-in "
                                          "strategies run without it")

    # ------------------------------------------------------------------ plugins
    def _build_plugin(self, info: plugins.PluginInfo, cls: type[Strategy]) -> None:
        """Build a plugin strategy and decide, once, whether it runs; a plugin that raises here is failed."""
        try:
            s = cls(self.shared.cfg, self.shared.gates)
            on = bool(s.enabled())
            interval = float(s.interval)
            if on and not (math.isfinite(interval) and interval > 0):
                raise ValueError(f"interval {interval!r} is not a positive number of seconds")
        except (Exception, SystemExit) as e:
            info.fail(f"raised when built: {type(e).__name__}: {e}")
            del self._plugin_of[info.strategy]
            log.error("plugin %s is not loaded: %s", info.describe(), info.error)
            return
        self.strategies[info.strategy] = s
        self._plugin_enabled[info.strategy] = on
        self._guards[info.strategy] = plugins.Guard(info.strategy, interval)
        self._threads[info.strategy] = plugins.PluginThread(f"plugin-{info.gate}")

    def _plugin_condition(self, info: plugins.PluginInfo, message: str, suffix: str = "") -> None:
        if self.shared.store.conditions.set(info.condition + suffix, message):
            log.warning("%s", message)

    def is_plugin(self, name: str) -> bool:
        return name in self._plugin_of

    def plugin_state(self, p: plugins.PluginInfo) -> str:
        """``on`` (it runs), ``off`` (its gate is off), ``failed`` or ``stopped``."""
        if p.status != plugins.LOADED:
            return p.status
        return "on" if self._plugin_enabled.get(p.strategy) else "off"

    def _is_enabled(self, s: Strategy) -> bool:
        on = self._plugin_enabled.get(s.name)
        if on is None:
            return s.enabled()
        return on and self._plugin_of[s.name].status == plugins.LOADED

    def enabled(self) -> list[Strategy]:
        return [s for s in self.strategies.values() if self._is_enabled(s)]

    def context(self, now: float, strategy: str | None = None) -> Context:
        if strategy is not None and strategy in self._plugin_of:
            info = self._plugin_of[strategy]
            return plugins.PluginContext(self.shared, now, strategy, lambda: info.status == plugins.LOADED)
        return Context(self.shared, now)

    def _call(self, strategy: Strategy, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)``: on the plugin's thread, awaited at most :data:`plugins.CALL_DEADLINE`, for a plugin
        strategy; directly for a built-in."""
        thread = self._threads.get(strategy.name)
        return fn(*args) if thread is None else thread.call(plugins.CALL_DEADLINE, fn, *args)

    def _guarded(self, strategy: Strategy, writes: Sequence[Request], now: float) -> Sequence[Request]:
        guard = self._guards.get(strategy.name)
        return writes if guard is None else guard.requests(writes)

    def _refusals(self, strategy: Strategy, now: float) -> None:
        guard = self._guards.get(strategy.name)
        if guard is None or not guard.refused:
            return
        refused = guard.take_refused()
        audit = self.shared.executor.audit
        for r, why in refused:
            target = ""
            if isinstance(r, Write):
                try:
                    loc = self.shared.executor.resolve(r.resource, r.cgroup)
                    target = loc[1] if loc is not None else ""
                except (KeyError, ValueError):
                    target = r.resource
            audit.record(strategy=strategy.name, action="write", target=target, executed=False,
                         value=getattr(r, "value", None), reason=f"refused: {why}", ts=now)
        audit.flush()
        self._plugin_condition(self._plugin_of[strategy.name],
                               f"plugin {self._plugin_of[strategy.name].describe()}: {len(refused)} request(s) "
                               f"refused at its last tick ({refused[0][1]}); see the audit log")

    def _ownership(self, strategy: Strategy, results: Sequence[WriteResult], now: float) -> None:
        """Lost writes with a plugin on either side raise ``plugin/<gate>/ownership``."""
        ex = self.shared.executor
        for r in results:
            if r.status != "lost":
                continue
            w = r.write
            owner = ex.owner(w.resource, w.cgroup, w.entry) or "?"
            for name in (strategy.name, owner):
                info = self._plugin_of.get(name)
                if info is None:
                    continue
                self._contested[name] = now
                winner, loser = (owner, strategy.name)
                self._plugin_condition(info, f"plugin {info.describe()} competes for {r.target}: {winner} keeps "
                                             f"it, {loser}'s value {w.value} is not written (the file's merge "
                                             "rule decides; see the audit log)", "/ownership")
        info = self._plugin_of.get(strategy.name)
        last = self._contested.get(strategy.name)
        if info is not None and last is not None and now - last > plugins.CONTEST_QUIET:
            del self._contested[strategy.name]
            self.shared.store.conditions.clear(info.condition + "/ownership")

    def needs_of(self, strategy: Strategy, ctx: Context) -> Sequence[Need]:
        """``strategy.needs(ctx)``; a plugin's checked to be a list or tuple of :class:`Need` (each
        ``near`` a hashable callable) - the planner reads them as such, and one broken item would stop
        the collection for every strategy.  Raises (``SystemExit`` as RuntimeError) when it is not."""
        if strategy.name not in self._plugin_of:
            return strategy.needs(ctx)
        try:
            needs = self._call(strategy, strategy.needs, self.context(ctx.now, strategy.name))  # in its own name
        except SystemExit as e:
            raise RuntimeError(f"SystemExit({e.code!r})") from e
        except plugins.Hung as e:
            self._stop(strategy, f"needs() hung: {e}", ctx.now)
            return ()
        if needs is not None and needs is self._needs_checked.get(strategy.name):
            return needs  # kept_needs: the same object as last time, checked then
        if not isinstance(needs, list | tuple):
            raise TypeError(f"needs() returned {type(needs).__name__}, not a list of Need")
        for n in needs:
            if not isinstance(n, Need):
                raise TypeError(f"needs() returned a {type(n).__name__} among its needs, not a Need")
            if n.near is not None:
                if not callable(n.near):
                    raise TypeError(f"need {n.metric}: near is a {type(n.near).__name__}, not a callable")
                hash(n.near)  # the planner keys its estimates by it
        self._needs_checked[strategy.name] = needs
        return needs

    def plugin_needs_failed(self, strategy: Strategy, e: Exception) -> None:
        """A plugin's ``needs()`` raised: named in its condition (logged once), and nothing collected for
        it (a built-in's failure has everything collected instead; a plugin's would cost every tick)."""
        info = self._plugin_of[strategy.name]
        self._plugin_condition(info, f"plugin {info.describe()}: needs() raised ({type(e).__name__}: {e}); "
                                     "nothing is collected for it, so its metrics may be missing")

    def _plugin_tick_failed(self, strategy: Strategy, st: StrategyStats, now: float, hung: bool) -> None:
        info = self._plugin_of[strategy.name]
        st.streak += 1
        if hung:
            self._stop(strategy, f"its call hung ({st.last_error})", now)
        elif st.streak < plugins.MAX_FAILED_TICKS:
            self._plugin_condition(info, f"plugin {info.describe()} raised at its last tick ({st.last_error}), "
                                         f"{st.streak} in a row; it runs again at its next interval and is "
                                         f"stopped at {plugins.MAX_FAILED_TICKS}")
        else:
            self._stop(strategy, f"{st.streak} ticks in a row raised (last: {st.last_error})", now)

    def _stop(self, strategy: Strategy, why: str, now: float) -> None:
        """Stop a plugin strategy for good: it never runs again in this process, what it changed is restored."""
        info = self._plugin_of[strategy.name]
        info.fail(f"stopped: {why}", plugins.STOPPED)
        try:
            restored = self.shared.executor.restore(strategy.name, now)
        except Exception:
            log.exception("plugin %s: restoring what it changed failed", info.describe())
            restored = []
        self._plugin_condition(info, f"plugin {info.describe()} is stopped: {why}; {len(restored)} file(s) it "
                                     "changed were restored; the built-in strategies keep running")

    # ------------------------------------------------------------------ running
    def run_strategy(self, strategy: Strategy, now: float) -> list[WriteResult]:
        st = self.stats[strategy.name]
        t0 = time.perf_counter()
        results: list[WriteResult] = []
        plugin = self._plugin_of.get(strategy.name)
        if plugin is not None and plugin.status != plugins.LOADED:
            return results  # stopped: scheduled still, never run again
        try:
            ctx = self.context(now, strategy.name)
            # tick's batch, then later's: the work a strategy puts off gets a batch of its own
            for step in (strategy.tick, strategy.later):
                results += self._apply(strategy, plugin is not None, self._call(strategy, step, ctx), now)
            self._call(strategy, strategy.after_apply, ctx, results)
            if self._plugin_of:
                if plugin is not None:
                    self._refusals(strategy, now)
                self._ownership(strategy, results, now)
            if plugin is not None and st.streak:
                st.streak = 0
                self.shared.store.conditions.clear(plugin.condition)
        except (Exception, SystemExit) as e:  # one strategy's bug must not stop the agent
            if isinstance(e, SystemExit) and plugin is None:
                raise
            st.errors += 1
            st.last_error = f"{type(e).__name__}: {e}"
            log.exception("strategy %s failed", strategy.name)
            self.shared.executor.audit.record(strategy=strategy.name, action="error", target="", executed=False,
                                              reason="the strategy raised; it runs again at its next interval",
                                              error=st.last_error, ts=now)
            self.shared.executor.audit.flush()
            if plugin is not None:
                self._plugin_tick_failed(strategy, st, now, isinstance(e, plugins.Hung))
        finally:
            dt = time.perf_counter() - t0
            st.runs += 1
            st.last_seconds = dt
            st.total_seconds += dt
            for cb in self.on_tick:
                cb(strategy.name, dt)
        return results

    def _apply(self, strategy: Strategy, is_plugin: bool, writes: Sequence[Request] | None,
               now: float) -> list[WriteResult]:
        """One batch of a strategy's writes through the executor; a plugin's pass its guard first."""
        if not writes:
            return []
        if is_plugin:
            writes = self._guarded(strategy, writes, now)
        return self.shared.executor.apply(writes, now)

    def exit_writes(self, now: float) -> list[WriteResult]:
        """A clean stop: what each enabled built-in strategy puts back on its way out
        (:meth:`Strategy.on_exit`; memoryHigh lifts BE's memory cap), applied by the executor."""
        results: list[WriteResult] = []
        for s in self.enabled():
            if s.name in self._plugin_of:
                continue
            try:
                writes = s.on_exit(self.context(now, s.name))
                if writes:
                    results += self.shared.executor.apply(writes, now)
            except Exception:  # a failed exit step must not keep the agent from stopping
                log.exception("strategy %s failed on exit", s.name)
        return results

    def start_writes(self, now: float, owned: Sequence[Original]) -> list[WriteResult]:
        """At start: what each built-in strategy that does not run here undoes of an earlier agent's run
        (:meth:`Strategy.on_start_off`; memoryHigh lifts the BE memory cap a killed agent left), applied
        by the executor.  ``owned``: the originals file's records."""
        results: list[WriteResult] = []
        for name, cls in builtin_strategies().items():
            s = self.strategies.get(name)
            if s is not None and (name in self._plugin_of or self._is_enabled(s)):
                continue
            try:
                writes = cls.on_start_off(self.context(now), owned)
                if writes:
                    results += self.shared.executor.apply(writes, now)
            except Exception:  # a failed start step must not keep the agent from starting
                log.exception("strategy %s failed at start", name)
        return results

    def register(self, scheduler: Scheduler, *, first_delay: float = 0.0) -> list[str]:
        """Add every enabled strategy to ``scheduler`` at its interval; returns their names."""
        names = []
        for s in self.enabled():
            scheduler.add(s.name, s.interval, self._runner(s), jitter=0.05, first_delay=first_delay)
            names.append(s.name)
        return names

    def _runner(self, strategy: Strategy) -> Callable[[float], object]:
        def run(now: float) -> object:
            return self.run_strategy(strategy, now)

        return run
