"""The QoS manager: builds the enabled strategies and runs each on its own schedule.

For every strategy tick it builds a :class:`Context`, runs the strategy, hands the writes to the
executor and the results back to the strategy.  A strategy that raises is logged and audited
(``action: "error"``) and runs again at its next interval; the others never notice.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from qosmanager.executor.executor import WriteResult
from qosmanager.framework.context import Context, Shared
from qosmanager.framework.scheduler import Scheduler
from qosmanager.framework.strategy import REGISTRY, Strategy

log = logging.getLogger(__name__)

# the order strategies are listed and, at equal due times, run
ORDER = ("cpuSuppress", "cpuBurst", "cpuEvict", "memoryEvict", "cgroupReconcile", "resctrlReconcile",
         "systemConfigReconcile", "blkioReconcile")


def load_strategies() -> dict[str, type[Strategy]]:
    """Import every module of ``qosmanager.strategies`` (each registers its strategy)."""
    import qosmanager.strategies as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{pkg.__name__}.{mod.name}")
    known = [n for n in ORDER if n in REGISTRY] + sorted(n for n in REGISTRY if n not in ORDER)
    return {n: REGISTRY[n] for n in known}


@dataclass
class StrategyStats:
    runs: int = 0
    errors: int = 0
    last_seconds: float = 0.0
    total_seconds: float = 0.0
    last_error: str = ""


class QoSManager:
    def __init__(self, shared: Shared, *, only: Iterable[str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.shared = shared
        self.clock = clock
        classes = load_strategies()
        if only is not None:
            wanted = list(only)
            unknown = [n for n in wanted if n not in classes]
            if unknown:
                raise ValueError(f"unknown strategy {', '.join(unknown)}; known: {', '.join(classes)}")
            classes = {n: classes[n] for n in wanted}
        self.strategies: dict[str, Strategy] = {n: cls(shared.cfg, shared.gates) for n, cls in classes.items()}
        self.stats: dict[str, StrategyStats] = {n: StrategyStats() for n in self.strategies}
        self.on_tick: list[Callable[[str, float], None]] = []

    def enabled(self) -> list[Strategy]:
        return [s for s in self.strategies.values() if s.enabled()]

    def context(self, now: float) -> Context:
        return Context(self.shared, now)

    def run_strategy(self, strategy: Strategy, now: float) -> list[WriteResult]:
        st = self.stats[strategy.name]
        t0 = time.perf_counter()
        results: list[WriteResult] = []
        try:
            ctx = self.context(now)
            writes = strategy.tick(ctx)
            if writes:
                results = self.shared.executor.apply(writes, now)
            strategy.after_apply(ctx, results)
        except Exception as e:  # one strategy's bug must not stop the agent
            st.errors += 1
            st.last_error = f"{type(e).__name__}: {e}"
            log.exception("strategy %s failed", strategy.name)
            self.shared.executor.audit.record(strategy=strategy.name, action="error", target="", executed=False,
                                              reason="the strategy raised; it runs again at its next interval",
                                              error=st.last_error, ts=now)
            self.shared.executor.audit.flush()
        finally:
            dt = time.perf_counter() - t0
            st.runs += 1
            st.last_seconds = dt
            st.total_seconds += dt
            for cb in self.on_tick:
                cb(strategy.name, dt)
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
