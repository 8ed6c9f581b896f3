"""The strategy interface.

A strategy is a small object: its name, the feature gates that enable it, which interval it
runs at, and a :meth:`Strategy.tick` that reads the :class:`~qosmanager.framework.context.Context`
and returns the files it wants written (:class:`~qosmanager.executor.executor.Write`; many writes
that rarely change as a :class:`~qosmanager.executor.executor.Plan` the executor skips while it is
unchanged; a :class:`~qosmanager.executor.executor.Restore` to put back what a file held).  It never
touches a file itself.  Evictions go through ``ctx.evict`` (the shared coordinator), which
answers synchronously so a strategy can keep its cool-down.

Strategies keep only small state of their own (step limits, limiters, cool-downs); everything
else comes from the context, which is what makes ``replay`` run the same code as ``run``.

Semantics follow koordlet: a strategy is *enabled* when one of its gates is on and its
interval is positive (static, decided at start); NodeSLO switches (``enable: false`` and
friends) are read inside :meth:`tick` every time, so NodeSLO changes reach a strategy on its
next tick, and a strategy that is switched off there restores what it changed.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar

from qosmanager.executor.executor import Request, Write, WriteResult
from qosmanager.framework.config import QoSConfig
from qosmanager.framework.gates import FeatureGates

if TYPE_CHECKING:
    from qosmanager.framework.context import Context
    from qosmanager.framework.demand import Need
    from qosmanager.restore import Original


class Strategy(abc.ABC):
    """Base class of the QoS strategies (see the module docstring)."""

    name: ClassVar[str]
    gates: ClassVar[tuple[str, ...]]
    interval_key: ClassVar[str] = "reconcile"  # QoSConfig.<key>_interval
    api: ClassVar[str] = ""  # a plugin's: the strategy API version it is written for (qosmanager.plugin)

    def __init__(self, cfg: QoSConfig, gates: FeatureGates) -> None:
        self.cfg = cfg
        self.feature_gates = gates

    @property
    def interval(self) -> float:
        return self.cfg.interval(self.interval_key)

    def enabled(self) -> bool:
        """koordlet's ``Enabled()``: one of the gates is on and the interval is positive."""
        return self.interval > 0 and any(self.feature_gates.enabled(g) for g in self.gates)

    def gate(self, name: str) -> bool:
        return self.feature_gates.enabled(name)

    def needs(self, ctx: Context) -> Sequence[Need]:
        """What this strategy reads from the metric cache (:mod:`qosmanager.framework.demand`): the
        collector reads only what some enabled strategy or exported metric needs.  Asked before
        every collector tick; keep it cheap (see :meth:`kept_needs`)."""
        return ()

    def kept_needs(self, ctx: Context, build: Callable[[], Sequence[Need]]) -> Sequence[Need]:
        """``build()``'s needs, built again only when the pods or the NodeSLO changed (the same
        object otherwise, which lets the planner keep its plan)."""
        key = (ctx.pods_generation, id(ctx.nodeslo), ctx.nodeslo_present)
        kept = getattr(self, "_kept_needs", None)
        if kept is None or kept[0] != key or kept[2] is not ctx.nodeslo:
            kept = (key, build(), ctx.nodeslo)
            self._kept_needs = kept
        return kept[1]

    @abc.abstractmethod
    def tick(self, ctx: Context) -> Sequence[Request]:
        """One run of the algorithm: the writes (plans, restores) this strategy wants now."""

    def on_exit(self, ctx: Context) -> Sequence[Request]:
        """A clean agent stop (SIGTERM, ``--duration``): the writes that undo what must not outlive the
        agent.  Built-ins only (memoryHigh lifts BE's memory cap); every other file stays as it is."""
        return ()

    @classmethod
    def on_start_off(cls, ctx: Context, owned: Sequence[Original]) -> Sequence[Request]:
        """The start of an agent that does not run this strategy (its gate off, or not in
        ``--strategies``): the writes that undo what an earlier agent's run of it left and must not
        outlive it (an agent killed with SIGKILL exits without :meth:`on_exit`).  ``owned``: the records
        of ``--originals-file`` (what agents changed, and what the file held before; empty without it),
        how the agent knows a value was its own.  Built-ins only (memoryHigh lifts BE's memory cap)."""
        return ()

    def later(self, ctx: Context) -> Sequence[Request]:
        """Asked once the writes :meth:`tick` returned are applied: more writes of the same run, applied
        as a batch of their own, so that a long read-compare (a recovery over every BE cgroup) never
        holds the tick's protective writes back."""
        return ()

    def after_apply(self, ctx: Context, results: Sequence[WriteResult]) -> None:  # noqa: B027 - optional hook
        """Called with the executor's results of the writes returned by :meth:`tick` (and :meth:`later`)."""

    def write(self, resource: str, cgroup: str, value: object, reason: str, **kw: object) -> Write:
        """Shorthand for a :class:`Write` from this strategy."""
        return Write(self.name, resource, str(value), cgroup, reason=reason, **kw)  # type: ignore[arg-type]


REGISTRY: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator: make a strategy known to the manager (names are pinned by docs/interfaces.md)."""
    if cls.name in REGISTRY and REGISTRY[cls.name] is not cls:
        raise ValueError(f"strategy {cls.name} registered twice")
    REGISTRY[cls.name] = cls
    return cls
