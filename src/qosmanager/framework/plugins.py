"""Strategies from other Python packages: found through the entry-point group ``qosmanager.strategies``.

A plugin package declares, in its ``pyproject.toml``::

    [project.entry-points."qosmanager.strategies"]
    BEBurstCap = "be_burst_cap:BEBurstCap"

The entry point's *name* is the strategy's feature gate (one gate per plugin strategy, off unless the
operator names it in ``--feature-gates``); its value is the :class:`~qosmanager.plugin.Strategy`
subclass.  :func:`discovered` finds and imports them once per process and checks each:

* the gate is a new name (not a built-in gate, not another plugin's), the class is a concrete
  :class:`Strategy` whose ``gates`` is exactly ``(gate,)``, its ``name`` is new, and its ``api``
  (when it sets one) is one this agent offers (:data:`qosmanager.plugin.API_VERSION`: same major,
  minor not above ours);
* one that fails to import or fails a check is *failed*: logged with its package and version, kept in
  the list (the ``plugin/<gate>`` condition, the ``qosmanager_plugin_info`` metric), its gate still
  known (so ``--feature-gates`` naming it does not stop the agent), and nothing of it runs.

The :class:`~qosmanager.framework.manager.QoSManager` builds the loaded ones like the built-ins, and
isolates a plugin strategy that raises when built (failed) or at :data:`MAX_FAILED_TICKS` ticks in a row
(stopped: what it changed is restored).  Its requests pass through a :class:`Guard`: in its own name
only, no raw or restore content (those bypass validation), a bounded ownership lease, directories
below their root (no absolute path, no ``..``); its context (:class:`PluginContext`) evicts, creates
directories and audits in its own name only.  What it writes then meets the executor's rules exactly as
a built-in's does.
"""

from __future__ import annotations

import inspect
import logging
import os
import queue
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from qosmanager.eviction.types import EvictResult, EvictTask
from qosmanager.executor.executor import MakeDir, Plan, PlanGroup, Request, Restore, Write
from qosmanager.framework.builtins import builtin_strategies
from qosmanager.framework.context import Context, Shared
from qosmanager.framework.gates import KNOWN, FeatureGates
from qosmanager.framework.strategy import QoSConfig, Strategy

if TYPE_CHECKING:
    from importlib import metadata

log = logging.getLogger(__name__)

GROUP = "qosmanager.strategies"
API_VERSION = "1.0"
"""The strategy API this agent offers (:mod:`qosmanager.plugin`); a plugin's ``api`` must have the same
major version and a minor version not above this one."""

GATE_RE = re.compile(r"[A-Z][A-Za-z0-9]{1,63}")
NAME_RE = re.compile(r"[a-z][A-Za-z0-9]{1,63}")
MAX_FAILED_TICKS = 5
"""A plugin strategy whose tick raises this many times in a row is stopped and its changes restored."""
CONTEST_QUIET = 30.0
"""Seconds without a lost write involving a plugin before its ``plugin/<gate>/ownership`` condition clears."""
CALL_DEADLINE = 5.0
"""Seconds a plugin's ``tick``, ``needs`` or ``after_apply`` may take; one that has not returned by then is
abandoned on its thread and the plugin stopped (what it changed restored)."""
IDLE_EXIT = 60.0
"""Seconds a plugin's thread waits for its next call before it ends (started again by the next call)."""

LOADED, FAILED, STOPPED = "loaded", "failed", "stopped"


@dataclass
class PluginInfo:
    """One entry point of the group, and what became of it."""

    gate: str
    entry: str  # "module:attr"
    package: str
    version: str
    strategy: str = ""  # the strategy's name once its class loaded
    status: str = LOADED  # loaded | failed | stopped
    error: str = ""
    cls: type[Strategy] | None = field(default=None, repr=False, compare=False)

    @property
    def condition(self) -> str:
        return f"plugin/{self.gate}"

    def describe(self) -> str:
        what = f"{self.strategy} " if self.strategy else ""
        return f"{what}(gate {self.gate}, {self.package} {self.version})"

    def fail(self, error: str, status: str = FAILED) -> None:
        self.status, self.error = status, error


@dataclass
class Discovery:
    plugins: list[PluginInfo]

    def strategies(self) -> dict[str, type[Strategy]]:
        """The loaded plugin strategies, name -> class, in gate order."""
        return {p.strategy: p.cls for p in self.plugins if p.status == LOADED and p.cls is not None}

    def gates(self) -> dict[str, bool]:
        """Every plugin's gate (failed ones too), off by default."""
        return dict.fromkeys((p.gate for p in self.plugins), False)


EntryPoints = Callable[[], Iterable["metadata.EntryPoint"]]


def _entry_points() -> Iterable[metadata.EntryPoint]:
    if not _may_declare_plugins():
        return ()
    from importlib import metadata

    return metadata.entry_points(group=GROUP)


_SECTION = re.compile(rf"^\s*\[\s*{re.escape(GROUP)}\s*\]\s*$", re.M)


def _may_declare_plugins() -> bool:
    """Whether a distribution on ``sys.path`` may declare an entry point of :data:`GROUP`, decided
    without importing ``importlib.metadata``: that module brings ``email``, ``zipfile``, ``csv``,
    ``bz2``, ``lzma``, ``pathlib``, ``tempfile`` and more, 3.6 MiB of every agent's resident memory
    (the difference between meeting the 60 MiB bound at 1,000 pods in Kubernetes mode and missing it),
    for the usual node that has no plugin.  It looks where ``importlib.metadata`` looks: the
    ``entry_points.txt`` of each ``*.dist-info`` and ``*.egg-info`` directory in a ``sys.path`` entry
    (and an ``.egg`` entry's ``EGG-INFO``), for the group's section header; anything it cannot judge
    this way (a zip file on the path, a finder of distributions other than the standard path finder)
    counts as a maybe, and the full listing decides."""
    import importlib.machinery as machinery  # loaded already by the import system itself

    standard = (machinery.BuiltinImporter, machinery.FrozenImporter, machinery.PathFinder)
    for finder in sys.meta_path:
        if hasattr(finder, "find_distributions") and finder not in standard and not isinstance(finder, standard):
            return True
    for entry in sys.path:
        path = entry or "."
        if os.path.isfile(path):
            return True  # a zip archive on the path
        try:
            names = os.listdir(path)
        except OSError:
            continue
        infos = [n for n in names if n.lower().endswith((".dist-info", ".egg-info"))]
        if path.lower().endswith(".egg") and "EGG-INFO" in names:
            infos.append("EGG-INFO")
        for info in infos:
            try:
                with open(os.path.join(path, info, "entry_points.txt"), encoding="utf-8", errors="replace") as f:
                    if _SECTION.search(f.read()):
                        return True
            except OSError:
                continue
    return False


def _dist(ep: metadata.EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "?", "?"
    try:
        return str(dist.metadata["Name"] or dist.name), str(dist.version)
    except Exception:  # a distribution with broken metadata still gets named
        return str(getattr(dist, "name", "?")), "?"


def _api_problem(api: object) -> str | None:
    if api is None or api == "":
        return None
    m = re.fullmatch(r"(\d+)\.(\d+)", str(api))
    if m is None:
        return f"api {api!r} is not a MAJOR.MINOR version"
    major, minor = (int(x) for x in API_VERSION.split("."))
    if int(m.group(1)) != major or int(m.group(2)) > minor:
        return f"it needs strategy API {api}; this agent offers {API_VERSION}"
    return None


def check_class(obj: object, gate: str, taken: Mapping[str, str]) -> str | None:
    """Why ``obj`` (an entry point's value) cannot be the strategy of ``gate``; None when it can.
    ``taken``: strategy names already in use -> who uses them."""
    if not (isinstance(obj, type) and issubclass(obj, Strategy)):
        return f"{obj!r} is not a subclass of qosmanager.plugin.Strategy"
    if inspect.isabstract(obj):
        return f"{obj.__name__} does not implement tick()"
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or NAME_RE.fullmatch(name) is None:
        return f"{obj.__name__}.name {name!r} is not a strategy name (lowerCamelCase, letters and digits)"
    if name in taken:
        return f"strategy name {name} is already taken by {taken[name]}"
    gates = getattr(obj, "gates", None)
    if tuple(gates or ()) != (gate,):
        return f"{obj.__name__}.gates is {gates!r}; a plugin strategy has exactly its own gate: ({gate!r},)"
    key = getattr(obj, "interval_key", None)
    if not isinstance(key, str) or not hasattr(QoSConfig, f"{key}_interval"):
        return f"{obj.__name__}.interval_key {key!r} names no interval of the agent's configuration"
    return _api_problem(getattr(obj, "api", None))


def discover(entry_points: EntryPoints = _entry_points) -> Discovery:
    """Import and check every entry point of :data:`GROUP` (see the module docstring)."""
    builtins = builtin_strategies()
    taken = {n: "a built-in strategy" for n in builtins}
    gates_taken: dict[str, str] = {g: "a built-in gate" for g in KNOWN}
    found: list[PluginInfo] = []
    try:
        eps = sorted(entry_points(), key=lambda e: (e.name, e.value))
    except Exception as e:  # broken metadata somewhere on the path: no plugins, the agent runs
        log.error("cannot list the plugins of %s: %s", GROUP, e)
        return Discovery([])
    for ep in eps:
        package, version = _dist(ep)
        info = PluginInfo(ep.name, ep.value, package, version)
        found.append(info)
        if GATE_RE.fullmatch(ep.name) is None:
            info.fail(f"entry point name {ep.name!r} is not a feature gate name (UpperCamelCase)")
        elif ep.name in gates_taken:
            info.fail(f"gate {ep.name} is already {gates_taken[ep.name]}")
        else:
            gates_taken[ep.name] = f"the gate of {package}"
            try:
                obj = ep.load()
            except (Exception, SystemExit) as e:
                info.fail(f"import failed: {type(e).__name__}: {e}")
            else:
                problem = check_class(obj, ep.name, taken)
                if problem is not None:
                    info.fail(problem)
                else:
                    assert isinstance(obj, type) and issubclass(obj, Strategy)
                    info.cls, info.strategy = obj, obj.name
                    taken[obj.name] = f"{package} (gate {ep.name})"
        if info.status == FAILED:
            log.error("plugin %s from %s %s is not loaded: %s", ep.name, package, version, info.error)
    return Discovery(found)


_discovered: Discovery | None = None


def discovered() -> Discovery:
    """:func:`discover` once per process (entry points do not change while the agent runs)."""
    global _discovered
    if _discovered is None:
        _discovered = discover()
    return _discovered


def rediscover(entry_points: EntryPoints = _entry_points) -> Discovery:
    """Discover again (after packages were installed into the running interpreter)."""
    global _discovered
    _discovered = discover(entry_points)
    return _discovered


def feature_gates(overrides: Mapping[str, bool] | None = None) -> FeatureGates:
    """The feature gates with every plugin's gate known (see :mod:`qosmanager.framework.gates`)."""
    return FeatureGates.from_overrides(overrides, extra=discovered().gates())


def lines(d: Discovery, gates: FeatureGates | None = None) -> Iterator[str]:
    """One line per plugin: gate, strategy, package, version, and whether it runs."""
    for p in d.plugins:
        state = p.status
        if p.status == LOADED and gates is not None:
            state = "on" if gates.values.get(p.gate) else "off"
        yield (f"{p.gate}: {p.strategy or '-'} from {p.package} {p.version} ({p.entry}): {state}"
               + (f": {p.error}" if p.error else ""))


# --------------------------------------------------------------------------------------------------
# what a plugin may hand over
# --------------------------------------------------------------------------------------------------
T = TypeVar("T")


class Hung(Exception):
    """A plugin's call did not return within its deadline."""


class _Call:
    __slots__ = ("args", "done", "error", "fn", "value")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class PluginThread:
    """One plugin's calls, run on a daemon thread of its own and awaited for at most a deadline: a call that
    never returns (a loop, a blocking read) is abandoned there, and the agent's loop goes on.  Calls are
    made one at a time, from the agent's scheduler thread."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._calls: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def call(self, deadline: float, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the plugin's thread; what it raises is raised here (SystemExit too); Hung when it
        has not returned within ``deadline`` seconds."""
        c = _Call(fn, args)
        with self._lock:
            self._calls.put(c)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()
        if not c.done.wait(deadline):
            raise Hung(f"{getattr(fn, '__name__', 'its call')}() did not return within {deadline:g} s")
        if c.error is not None:
            raise c.error
        value: T = c.value
        return value

    def _serve(self) -> None:
        while True:
            try:
                c = self._calls.get(timeout=IDLE_EXIT)
            except queue.Empty:
                with self._lock:
                    if self._calls.empty():
                        self._thread = None
                        return
                continue
            try:
                c.value = c.fn(*c.args)
            except BaseException as e:  # handed to the caller, which decides (SystemExit included)
                c.error = e
            c.done.set()


class PluginContext(Context):
    """The context a plugin strategy gets: evictions, directories and skip records in its own name."""

    def __init__(self, shared: Shared, now: float, owner: str, live: Callable[[], bool] = lambda: True) -> None:
        super().__init__(shared, now)
        self._owner = owner
        self._live = live  # False once the plugin is stopped: an abandoned call acts no more

    def _own(self, strategy: str, what: str) -> None:
        if not self._live():
            raise PermissionError(f"{self._owner} is stopped; it may {what} no more")
        if strategy != self._owner:
            raise PermissionError(f"{self._owner} may {what} only in its own name, not as {strategy!r}")

    def evict(self, strategy: str, tasks: Sequence[EvictTask]) -> EvictResult:
        self._own(strategy, "evict")
        return super().evict(strategy, tasks)

    def audit_skip(self, strategy: str, target: str, reason: str, *, uid: str | None = None) -> None:
        self._own(strategy, "audit")
        super().audit_skip(strategy, target, reason, uid=uid)

    def mkdir(self, d: MakeDir) -> str:
        self._own(d.strategy, "create directories")
        return super().mkdir(d)


def dir_problem(cgroup: object) -> str | None:
    """Why a request's directory (relative to its root: the cgroup tree, a resctrl group) would name a file
    outside that root; None when it does not.  The executor joins it to the root as it is."""
    if not isinstance(cgroup, str):
        return f"a directory of type {type(cgroup).__name__}"
    if cgroup.startswith("/") or ".." in cgroup.split("/"):
        return f"the directory {cgroup!r} is not below the root (absolute, or with '..')"
    return None


class Guard:
    """Checks what one plugin strategy hands the executor (see the module docstring); what it refuses
    is collected in :attr:`refused` (the request or write, and why) for the manager to audit."""

    def __init__(self, strategy: str, interval: float) -> None:
        self.strategy = strategy
        self.max_lease = max(5.0, 2.0 * interval)
        self.refused: list[tuple[Write | Restore | Plan | PlanGroup | object, str]] = []
        self._groups: dict[str, Sequence[Plan]] = {}

    def write_problem(self, w: object) -> str | None:
        if not isinstance(w, Write):
            return f"a plan built {type(w).__name__}, not a Write"
        if w.strategy != self.strategy:
            return f"a write in the name of {w.strategy!r}"
        if w.raw or w.restore:
            return "raw or restore content (only the executor writes originals back)"
        if not w.lease <= self.max_lease:
            return f"an ownership lease of {w.lease} s (at most {self.max_lease:g} s)"
        return dir_problem(w.cgroup)

    def problem(self, r: object) -> str | None:
        if isinstance(r, Write):
            return self.write_problem(r)
        if isinstance(r, Restore | Plan | PlanGroup):
            if r.strategy != self.strategy:
                return f"a {type(r).__name__} in the name of {r.strategy!r}"
            if isinstance(r, Restore) and (why := dir_problem(r.cgroup)) is not None:
                return why
            if isinstance(r, PlanGroup) and r.plans is not self._groups.get(r.key):
                for p in r.plans:
                    if not isinstance(p, Plan) or p.strategy != self.strategy:
                        return f"plan group {r.key} holds a plan not of {self.strategy}"
            return None
        return f"{type(r).__name__} is not a Write, Plan, PlanGroup or Restore"

    def requests(self, reqs: Iterable[object]) -> list[Request]:
        """The requests that pass; plans get a build that drops writes that do not."""
        out: list[Request] = []
        for r in reqs:
            why = self.problem(r)
            if why is not None:
                self.refused.append((r, why))
                continue
            if isinstance(r, Plan):
                self._wrap(r)
            elif isinstance(r, PlanGroup) and r.plans is not self._groups.get(r.key):
                for p in r.plans:
                    self._wrap(p)
                self._groups[r.key] = r.plans
            out.append(r)  # type: ignore[arg-type]  # checked above
        return out

    def _wrap(self, p: Plan) -> None:
        inner = p.build
        if getattr(inner, "_guard", None) is self:
            return

        def build() -> list[Write]:
            kept = []
            for w in inner():
                why = self.write_problem(w)
                if why is None:
                    kept.append(w)
                else:
                    self.refused.append((w, why))
            return kept

        build._guard = self  # type: ignore[attr-defined]
        p.build = build

    def take_refused(self) -> list[tuple[object, str]]:
        out, self.refused = list(self.refused), []
        return out
