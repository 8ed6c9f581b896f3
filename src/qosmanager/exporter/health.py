"""``/healthz``: is the agent still doing its job?

Three checks, each answering with ``ok`` and a sentence that says what is wrong and by how much:

* **collector**: the last collector pass that did not fail is at most ``collect_seconds`` old
  (default 3 x the collect interval + 5 s).  Strategies act only on fresh samples, so a stalled
  collector silently stops all QoS work; this is the check that catches it.  Before the first
  pass the time since start counts, except while the Kubernetes source still waits for the pods
  and the Node (the collector has not started: the state check says why).
* **state**: with the Kubernetes source, each kind of state (node, pods, nodeslo) synced
  successfully within ``kube_sync_seconds``; in standalone mode every configured file can be read.
  A refused object (a bad NodeSLO keeps the last good one) or a file that can be read but not
  used (garbled, not the object it should hold) is named but does not fail the check: the agent
  works on with the last good state (the file source also raises a ``state/<kind>-file``
  degraded condition for it).  A refused Node with no good one before it fails the check, and so
  does a Node the API server does not have (``state/node-missing``: a wrong ``--node-name``):
  without the node's capacity nothing protects the node.
* **strategies**: no strategy failed ``strategy_failures`` times in a row.

Beside the checks, every active degraded condition (:mod:`qosmanager.framework.conditions`: a bad
NodeSLO field, a node counter that cannot be read, a kube QoS cgroup that never appeared, ...) is
listed under ``degraded`` and turns the status into ``degraded``.  A degraded agent still answers
200: it protects the node with what it has, and restarting it would not fix its input.  Informational
notes (:meth:`~qosmanager.framework.conditions.Conditions.note`: what the agent does differently on this
host, e.g. no PSI triggers) are listed under ``info`` and change nothing else.

Everything read here is a scalar or a snapshot taken under the metrics' lock, so a health request
never races the agent's loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qosmanager.exporter.agent_metrics import AgentMetrics
    from qosmanager.framework.manager import QoSManager
    from qosmanager.states.store import StateStore


@dataclass
class HealthBounds:
    collect_seconds: float = 8.0
    kube_sync_seconds: float = 60.0
    strategy_failures: int = 5

    @classmethod
    def for_interval(cls, collect_interval: float, **kw: Any) -> HealthBounds:
        """The default collector bound: three missed passes plus 5 s of slack."""
        return cls(collect_seconds=3 * collect_interval + 5.0, **kw)


class Health:
    def __init__(self, metrics: AgentMetrics, bounds: HealthBounds, *, clock: Callable[[], float] = time.time,
                 store: StateStore | None = None, manager: QoSManager | None = None,
                 files: Sequence[tuple[str, str]] = (), strategies: Iterable[str] = (),
                 kube_source: Callable[[], object] | None = None) -> None:
        """``files``: ``(kind, path)`` of the standalone files; ``strategies``: the scheduled ones."""
        self.metrics = metrics
        self.bounds = bounds
        self.clock = clock
        self.store = store
        self.manager = manager
        self.files = list(files)
        self.strategies = list(strategies)
        self.kube_source = kube_source or (lambda: None)

    def check(self, liveness: bool = False) -> tuple[bool, dict[str, Any]]:
        """``(healthy, body)``; the body is small JSON-ready data naming every check.

        With ``liveness`` the state check is reported but does not fail the answer: a liveness
        probe that restarted the agent during an API-server outage would leave the node with no
        agent at all, while this one keeps enforcing the last state it knows.
        """
        now = self.clock()
        checks = {"collector": self._collector(now), "state": self._state(now),
                  "strategies": self._strategies()}
        counted = [c for name, c in checks.items() if not (liveness and name == "state")]
        ok = all(c["ok"] for c in counted)
        degraded = self._degraded()
        status = "unhealthy" if not ok else "degraded" if degraded else "ok"
        body: dict[str, Any] = {"status": status, "checks": checks}
        if degraded:
            body["degraded"] = degraded
        info = self._info()
        if info:
            body["info"] = info
        if liveness:
            body["probe"] = "liveness"
        return ok, body

    # ------------------------------------------------------------------
    def _degraded(self) -> dict[str, dict[str, Any]]:
        conditions = getattr(self.store, "conditions", None)
        if conditions is None:
            return {}
        return {key: {"detail": c.message, "since": _r(c.since)}
                for key, c in sorted(conditions.snapshot().items())}

    def _info(self) -> dict[str, dict[str, Any]]:
        conditions = getattr(self.store, "conditions", None)
        notes = getattr(conditions, "notes", None)
        if notes is None:
            return {}
        return {key: {"detail": c.message, "since": _r(c.since)} for key, c in sorted(notes().items())}

    def _collector(self, now: float) -> dict[str, Any]:
        bound = self.bounds.collect_seconds
        last = self.metrics.jobs()[0].get("collect")
        since = last if last is not None else self.metrics.started_at
        age = max(0.0, now - since)
        what = "last collector pass" if last is not None else "no collector pass yet; started"
        src = self.kube_source()
        if last is None and src is not None and not _call(getattr(src, "synced", None), True):
            # the collector starts once the pods and the Node are known: the state check says why not
            return {"ok": True, "age_seconds": _r(age),
                    "detail": f"not started: waiting for the pods and the Node from the API server for "
                              f"{age:.1f} s (see the state check)"}
        if age <= bound:
            return {"ok": True, "age_seconds": _r(age),
                    "detail": f"{what} {age:.1f} s ago (bound {bound:g} s)"}
        return {"ok": False, "age_seconds": _r(age), "over_seconds": _r(age - bound),
                "detail": f"{what} {age:.1f} s ago: {age - bound:.1f} s over the bound of {bound:g} s"}

    def _state(self, now: float) -> dict[str, Any]:
        problems: list[str] = []
        notes: list[str] = []
        over = 0.0
        src = self.kube_source()
        if src is not None and self.store is not None:
            bound = self.bounds.kube_sync_seconds
            for kind, h in list(self.store.health.items()):
                since = h.last_sync if h.last_sync > 0 else self.metrics.started_at
                age = max(0.0, now - since)
                if age > bound:
                    never = "" if h.last_sync > 0 else " (never synced)"
                    problems.append(f"{kind}: last successful sync {age:.1f} s ago{never}, "
                                    f"{age - bound:.1f} s over the bound of {bound:g} s")
                    over = max(over, age - bound)
            if getattr(src, "connected", True) is False:
                notes.append("the Kubernetes source is not connected")
            conditions = getattr(self.store, "conditions", None)
            missing = conditions.get("state/node-missing") if conditions is not None else None
            if missing is not None and getattr(self.store, "node", None) is None:  # nothing runs until the Node exists
                problems.append(f"node: {missing.message}")
        watched = {getattr(w, "path", None): getattr(w, "error", "")
                   for w in getattr(getattr(self.metrics, "file_source", None), "files", None) or ()}
        for kind, path in self.files:
            try:
                with open(path, "rb"):
                    pass
            except OSError as e:
                problems.append(f"{kind} file {path} cannot be read: {e.strerror or e}")
                continue
            if watched.get(path):  # readable, but its content failed when it was last read
                notes.append(f"{kind} file: {watched[path]} (the last good state stays in force)")
        if self.store is not None:
            errors = dict(self.store.errors)
            if "node" in errors and getattr(self.store, "node", None) is None:
                # a refused Node and none in force: nothing that needs its capacity protects the node
                problems.append(f"node: {errors.pop('node')}")
            for kind, message in sorted(errors.items()):
                notes.append(f"{kind}: {message}")
        if src is None and not self.files:
            notes.append("no state source configured")
        out: dict[str, Any] = {"ok": not problems, "detail": "; ".join(problems + notes) or "fresh"}
        if over > 0:
            out["over_seconds"] = _r(over)
        return out

    def _strategies(self) -> dict[str, Any]:
        limit = self.bounds.strategy_failures
        all_streaks = self.metrics.jobs()[1]
        streaks = {n: all_streaks.get(n, 0) for n in self.strategies}
        failing = {n: k for n, k in streaks.items() if k >= limit}
        if not failing:
            return {"ok": True, "detail": f"no strategy failed {limit} times in a row"}
        parts = []
        for name, k in sorted(failing.items()):
            st = self.manager.stats.get(name) if self.manager is not None else None
            err = f" (last error: {st.last_error})" if st is not None and st.last_error else ""
            parts.append(f"{name} failed {k} times in a row, bound {limit}{err}")
        return {"ok": False, "detail": "; ".join(parts), "failing": failing}


def _call(fn: Any, default: bool) -> bool:
    """``fn()`` if it is callable (a source's ``synced``), else ``default``."""
    return bool(fn()) if callable(fn) else default


def _r(x: float) -> float:
    return round(x, 3)

