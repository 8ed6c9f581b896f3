"""Replay's scenario format: its keys, its limits, and the parser that refuses what it cannot read.

:mod:`qosmanager.sim.replay` runs a scenario; this file reads one (format pinned by
docs/interfaces.md).  Import the names from :mod:`qosmanager.sim.replay`.

Map of the file: the keys and limits (``MAX_*``); :class:`ScenarioError`, :class:`MetricSeries`,
:class:`Scenario`; the small checkers (every one names the field it refuses: ``pods[2].metadata``);
the sections (CPUs, metric series and their samples, the NodeSLO, the config, strategies, gates);
:func:`parse_scenario`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from qosmanager.api.node import node_meta
from qosmanager.api.nodeslo import parse_nodeslo
from qosmanager.api.pod import PodMeta, pod_meta
from qosmanager.framework import plugins
from qosmanager.framework.manager import load_strategies
from qosmanager.framework.strategy import QoSConfig
from qosmanager.host.sysfs import Processor
from qosmanager.metrics.cache import METRIC_NAMES

TOP_KEYS = (
    "now", "cgroupVersion", "cgroupDriver", "node", "nodeSLO", "pods", "cpus", "kubeletCPUManagerPolicy",
    "featureGates", "strategies", "ticks", "metrics", "cgroups", "proc", "sys",
    # optional additions (not pinned): see Scenario
    "seed", "config", "kubeletCgroupRoot", "description", "reactMode", "memoryLoad",
)
CPU_KEYS = ("id", "core", "socket", "node", "l3")
METRIC_KEYS = ("name", "samples", "pod", "container", "app")
MEMORY_LOAD_KEYS = ("nonBE", "beAnon", "beCache", "nonBECache")  # memoryLoad's series: [[ts, bytes], ...]
# scenario ``config`` key -> QoSConfig field (koordlet's flag names, camel-cased)
CONFIG_KEYS = {
    "collectIntervalSeconds": "collect_interval",
    "reconcileIntervalSeconds": "reconcile_interval",
    "cpuSuppressIntervalSeconds": "cpu_suppress_interval",
    "cpuEvictIntervalSeconds": "cpu_evict_interval",
    "memoryEvictIntervalSeconds": "memory_evict_interval",
    "memoryEvictCoolTimeSeconds": "memory_evict_cool_time",
    "cpuEvictCoolTimeSeconds": "cpu_evict_cool_time",
    "forceUpdateSeconds": "force_update_seconds",
}
# the names docs/interfaces.md lists (the cache also takes koordlet's TSDB names as aliases)
PINNED_METRICS = (
    "node_cpu_usage", "node_memory_usage", "pod_cpu_usage", "pod_memory_usage", "container_cpu_usage",
    "container_memory_usage", "container_throttled_ratio", "hostapp_cpu_usage", "hostapp_memory_usage",
    "be_cpu_usage", "be_cpu_request", "be_cpu_real_limit",
)
MAX_TICKS = 100_000
DEFAULT_CPUS = 8
DEFAULT_MEMORY = 64 << 30
# The fake host is built in full (every CPU's sysfs files, every pod's cgroups, every series'
# columns): beyond these a scenario is refused before anything is allocated.  A 4,096-CPU host takes
# about ten seconds to lay out, 2,000 pods with 10,000 containers a few more.
MAX_CPUS = 4096
MAX_PODS = 2000
MAX_CONTAINERS = 10_000
MAX_SERIES = 20_000
MAX_APPS = 256  # host-application series keep 30 minutes of samples each
MAX_SAMPLES = 1_000_000
MAX_FILES = 100_000
MAX_PATH = 4096


class ScenarioError(ValueError):
    """A bad scenario; the message is one line and names the offending field."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


@dataclass
class MetricSeries:
    name: str
    samples: list[tuple[float, float]]
    pod: str | None = None
    container: str | None = None  # the container's *name*; resolved to its runtime id at replay
    app: str | None = None
    where: str = ""  # "metrics[3]", for error messages
    labels: dict[str, str] = field(default_factory=dict)  # the cache address: pod uid, container id, app


@dataclass
class Scenario:
    """A validated scenario.  Beyond the pinned keys it accepts ``seed`` (randomness, default 0),
    ``config`` (the QoS manager's intervals and cool-downs, koordlet's flag names in camelCase, e.g.
    ``memoryEvictCoolTimeSeconds``), ``kubeletCgroupRoot``, a free-text ``description``, ``reactMode``
    (``fast``, the default as in ``run``, or ``tick``: see :func:`_fast_path`) and ``memoryLoad`` (the
    node's memory over time: :class:`~qosmanager.sim.fakememory.MemoryLoad`)."""

    now: float
    cgroup_version: int = 1
    cgroup_driver: str = "cgroupfs"
    node: dict[str, Any] | None = None
    nodeslo: dict[str, Any] | None = None
    pods: list[dict[str, Any]] = field(default_factory=list)
    cpus: list[Processor] | None = None
    cpu_manager_policy: str | None = None  # None: the Node's topology annotation, else none
    feature_gates: dict[str, bool] = field(default_factory=dict)
    strategies: list[str] | None = None
    ticks: int = 1
    metrics: list[MetricSeries] = field(default_factory=list)
    cgroups: dict[str, str] = field(default_factory=dict)
    proc: dict[str, str] = field(default_factory=dict)
    sys: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    config: QoSConfig = field(default_factory=QoSConfig)
    kubelet_cgroup_root: str = "/"
    react_mode: str = "fast"
    memory_load: dict[str, list[tuple[float, float]]] | None = None  # MEMORY_LOAD_KEYS -> samples, by time


# ----------------------------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------------------------
def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) and math.isfinite(value)


def _expect(ok: bool, path: str, wanted: str, value: Any) -> None:
    if not ok:
        raise ScenarioError(f"{path}: expected {wanted}, got {_type_name(value)}")


def _mapping(value: Any, path: str) -> dict[str, Any]:
    _expect(isinstance(value, dict), path, "an object", value)
    return value


def _list(value: Any, path: str) -> list[Any]:
    _expect(isinstance(value, list), path, "a list", value)
    return value


def _no_unknown_keys(obj: Mapping[str, Any], known: Sequence[str], path: str) -> None:
    unknown = [str(k) for k in obj if k not in known]
    if unknown:
        where = f"{path}: " if path else ""
        raise ScenarioError(f"{where}unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                            f"(known: {', '.join(known)})")


def _int_in(value: Any, path: str, lo: int, hi: int) -> int:
    _expect(_is_int(value), path, "an integer", value)
    if not lo <= value <= hi:
        raise ScenarioError(f"{path}: must be within [{lo}, {hi}], got {value}")
    return int(value)


def _choice(value: Any, path: str, choices: Sequence[Any]) -> Any:
    if value not in choices or isinstance(value, bool):
        raise ScenarioError(f"{path}: must be one of {', '.join(map(str, choices))}, got {value!r}")
    return value


def _files(value: Any, path: str) -> dict[str, str]:
    """``{relative path: content}``; contents are strings (integers are accepted and printed)."""
    out: dict[str, str] = {}
    files = _mapping(value, path)
    _at_most(len(files), MAX_FILES, path, "files")
    for rel, content in files.items():
        where = f"{path}[{rel!r}]"
        _expect(isinstance(rel, str) and bool(rel), f"{path} key", "a non-empty string", rel)
        if len(rel) > MAX_PATH:
            raise ScenarioError(f"{path}: a path of {len(rel)} characters (at most {MAX_PATH})")
        parts = rel.split("/")
        if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ScenarioError(f"{where}: must be a relative path without '.', '..' or empty parts")
        _expect(isinstance(content, str) or _is_int(content), where, "a string", content)
        out[rel] = str(content)
    return out


def _at_most(count: int, limit: int, path: str, what: str) -> None:
    if count > limit:
        raise ScenarioError(f"{path}: {count} {what}, more than replay builds (at most {limit})")


def _cpus(value: Any) -> list[Processor]:
    procs: list[Processor] = []
    seen: set[int] = set()
    _at_most(len(_list(value, "cpus")), MAX_CPUS, "cpus", "CPUs")
    for i, entry in enumerate(_list(value, "cpus")):
        where = f"cpus[{i}]"
        entry = _mapping(entry, where)
        _no_unknown_keys(entry, CPU_KEYS, where)
        for k in ("id", "core", "socket", "node"):
            if k not in entry:
                raise ScenarioError(f"{where}: {k} is required")
        # ids size the fake host (every id below the highest gets its sysfs files)
        nums = {k: _int_in(entry[k], f"{where}.{k}", 0, MAX_CPUS - 1 if k == "id" else 1 << 20)
                for k in CPU_KEYS if k in entry}
        if nums["id"] in seen:
            raise ScenarioError(f"{where}.id: CPU {nums['id']} is listed twice")
        seen.add(nums["id"])
        procs.append(Processor(cpu=nums["id"], core=nums["core"], socket=nums["socket"], node=nums["node"],
                               l3=nums.get("l3", nums["socket"])))
    if not procs:
        raise ScenarioError("cpus: must list at least one CPU")
    return procs


def _samples(value: Any, path: str) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for j, pair in enumerate(_list(value, path)):
        where = f"{path}[{j}]"
        ok = isinstance(pair, list) and len(pair) == 2 and all(_is_number(x) for x in pair)
        if not ok:
            raise ScenarioError(f"{where}: expected [timestamp, value] (two finite numbers), got {pair!r}")
        out.append((float(pair[0]), float(pair[1])))
    return out


def _memory_load(value: Any, samples_before: int) -> dict[str, list[tuple[float, float]]]:
    """``memoryLoad``: ``nonBE`` (required), ``beAnon``, ``beCache``, ``nonBECache``: each ``[[ts, bytes], ...]``,
    bytes >= 0, at least one sample, timestamps distinct."""
    value = _mapping(value, "memoryLoad")
    _no_unknown_keys(value, MEMORY_LOAD_KEYS, "memoryLoad")
    if "nonBE" not in value:
        raise ScenarioError("memoryLoad: nonBE is required (the node's used memory outside BE, [[ts, bytes], ...])")
    out: dict[str, list[tuple[float, float]]] = {}
    total = samples_before
    for key in MEMORY_LOAD_KEYS:
        if key not in value:
            continue
        where = f"memoryLoad.{key}"
        series = _samples(value[key], where)
        total += len(series)
        _at_most(total, MAX_SAMPLES, where, "samples in all")
        if not series:
            raise ScenarioError(f"{where}: at least one [timestamp, bytes] sample")
        for j, (_, v) in enumerate(series):
            if v < 0:
                raise ScenarioError(f"{where}[{j}]: bytes must be >= 0, got {v:g}")
        if len({ts for ts, _ in series}) != len(series):
            raise ScenarioError(f"{where}: two samples at one timestamp")
        out[key] = sorted(series)
    return out


def _metrics(value: Any) -> list[MetricSeries]:
    out: list[MetricSeries] = []
    _at_most(len(_list(value, "metrics")), MAX_SERIES, "metrics", "series")
    samples = 0
    apps: set[str] = set()
    for i, entry in enumerate(_list(value, "metrics")):
        where = f"metrics[{i}]"
        entry = _mapping(entry, where)
        _no_unknown_keys(entry, METRIC_KEYS, where)
        name = entry.get("name")
        _expect(isinstance(name, str), f"{where}.name", "a string", name)
        if name not in METRIC_NAMES:
            raise ScenarioError(f"{where}.name: unknown metric {name!r} (known: {', '.join(PINNED_METRICS)}, "
                                "and koordlet's metric names)")
        kind = METRIC_NAMES[name][0]
        needed = {"node": (), "pod": ("pod",), "container": ("pod", "container"), "app": ("app",)}[kind]
        for k in ("pod", "container", "app"):
            if k in entry and k not in needed:
                raise ScenarioError(f"{where}: {name} takes no {k}: address")
            if k in needed:
                if k not in entry:
                    raise ScenarioError(f"{where}: {name} needs {k}: <{'uid' if k == 'pod' else 'name'}>")
                _expect(isinstance(entry[k], str) and bool(entry[k]), f"{where}.{k}", "a non-empty string",
                        entry[k])
        if "samples" not in entry:
            raise ScenarioError(f"{where}: samples is required")
        samples += len(_list(entry["samples"], f"{where}.samples"))
        _at_most(samples, MAX_SAMPLES, f"{where}.samples", "samples in all")
        if "app" in entry:
            apps.add(entry["app"])
            _at_most(len(apps), MAX_APPS, f"{where}.app", "host applications")
        out.append(MetricSeries(name, _samples(entry["samples"], f"{where}.samples"), entry.get("pod"),
                                entry.get("container"), entry.get("app"), where))
    return out


def _address(s: MetricSeries, pods: Mapping[str, PodMeta]) -> dict[str, str]:
    """Where the samples go in the cache.  Container series are addressed ``pod: <uid>, container:
    <name>`` in scenarios and keyed by runtime id in the cache (what the collector and strategies use)."""
    if s.app is not None:
        return {"app": s.app}
    if s.container is None:
        return {} if s.pod is None else {"pod": s.pod}
    meta = pods.get(s.pod or "")
    if meta is None:
        raise ScenarioError(f"{s.where}.pod: no pod with uid {s.pod} in pods")
    match = [c for c in (*meta.containers, *meta.init_containers) if c.name == s.container]
    if not match:
        raise ScenarioError(f"{s.where}.container: pod {meta.key} has no container {s.container!r}")
    if not match[0].container_id:
        raise ScenarioError(f"{s.where}.container: container {s.container!r} of pod {meta.key} has no "
                            "containerID in status.containerStatuses (strategies address it by id)")
    return {"container": match[0].container_id}


def _nodeslo(value: Any) -> dict[str, Any]:
    """A whole NodeSLO object, or just its spec; refused only when it is not a NodeSLO at all (the
    agent drops a bad field and keeps the rest, and so does the replay)."""
    obj = _mapping(value, "nodeSLO")
    if "spec" not in obj:
        obj = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "node"},
               "spec": dict(obj)}
    try:
        parse_nodeslo(obj)
    except ValueError as e:
        raise ScenarioError(f"nodeSLO: {e}") from None
    return obj


def _config(value: Any) -> QoSConfig:
    obj = _mapping(value, "config")
    _no_unknown_keys(obj, list(CONFIG_KEYS), "config")
    cfg = QoSConfig()
    for key, attr in CONFIG_KEYS.items():
        if key in obj:
            v = obj[key]
            _expect(_is_number(v) and v >= 0, f"config.{key}", "a number of seconds >= 0", v)
            setattr(cfg, attr, float(v))
    if cfg.collect_interval <= 0:
        raise ScenarioError("config.collectIntervalSeconds: must be positive")
    return cfg


def _strategies(value: Any, known: Sequence[str]) -> list[str]:
    names: list[str] = []
    for i, name in enumerate(_list(value, "strategies")):
        _expect(isinstance(name, str), f"strategies[{i}]", "a strategy name", name)
        if name not in known:
            raise ScenarioError(f"strategies[{i}]: unknown strategy {name!r} "
                                f"(known: {', '.join(known) or 'none'})")
        if name in names:
            raise ScenarioError(f"strategies[{i}]: {name} is listed twice")
        names.append(name)
    return names


def _gates(value: Any) -> dict[str, bool]:
    gates: dict[str, bool] = {}
    for name, flag in _mapping(value, "featureGates").items():
        _expect(isinstance(flag, bool), f"featureGates.{name}", "true or false", flag)
        gates[str(name)] = flag
    try:
        plugins.feature_gates(gates)
    except ValueError as e:
        raise ScenarioError(f"featureGates: {e}") from None
    return gates


def parse_scenario(obj: Any, known_strategies: Sequence[str] | None = None) -> Scenario:
    """Validate a parsed scenario document; :class:`ScenarioError` names the first bad field."""
    obj = _mapping(obj, "scenario")
    _no_unknown_keys(obj, TOP_KEYS, "")
    known = list(load_strategies()) if known_strategies is None else list(known_strategies)
    if "now" not in obj:
        raise ScenarioError("now: required (the evaluation time, unix seconds)")
    now = obj["now"]
    _expect(_is_number(now), "now", "a finite number (unix seconds)", now)
    sc = Scenario(now=float(now))
    if "cgroupVersion" in obj:
        sc.cgroup_version = _choice(obj["cgroupVersion"], "cgroupVersion", (1, 2))
    if "cgroupDriver" in obj:
        sc.cgroup_driver = _choice(obj["cgroupDriver"], "cgroupDriver", ("cgroupfs", "systemd"))
    if obj.get("node") is not None:
        sc.node = _mapping(obj["node"], "node")
        try:
            node = node_meta(sc.node)
        except ValueError as e:
            raise ScenarioError(f"node: {e}") from None
        if node.cpu_capacity_cores > MAX_CPUS:
            raise ScenarioError(f"node: status.capacity.cpu: {node.cpu_capacity_cores} cores, more than "
                                f"replay builds (at most {MAX_CPUS})")
    if obj.get("nodeSLO") is not None:
        sc.nodeslo = _nodeslo(obj["nodeSLO"])
    metas: dict[str, PodMeta] = {}
    if "pods" in obj:
        uids: dict[str, int] = {}
        _at_most(len(_list(obj["pods"], "pods")), MAX_PODS, "pods", "pods")
        containers = 0
        for i, pod in enumerate(_list(obj["pods"], "pods")):
            _mapping(pod, f"pods[{i}]")
            try:
                meta = pod_meta(pod)
            except ValueError as e:
                raise ScenarioError(f"pods[{i}]: {e}") from None
            if meta.uid in uids:
                raise ScenarioError(f"pods[{i}]: uid {meta.uid} is also the uid of pods[{uids[meta.uid]}]")
            names = [c.name for c in (*meta.init_containers, *meta.containers)]
            if len(set(names)) != len(names):  # the API server's rule: one name per container of a pod
                dup = sorted({n for n in names if names.count(n) > 1})
                raise ScenarioError(f"pods[{i}]: container name {dup[0]!r} is used twice (initContainers "
                                    "and containers share one name space)")
            containers += len(meta.containers) + len(meta.init_containers)
            _at_most(containers, MAX_CONTAINERS, f"pods[{i}]", "containers in all")
            uids[meta.uid] = i
            metas[meta.uid] = meta
            sc.pods.append(pod)
    if "cpus" in obj:
        sc.cpus = _cpus(obj["cpus"])
    if "kubeletCPUManagerPolicy" in obj:
        sc.cpu_manager_policy = _choice(obj["kubeletCPUManagerPolicy"], "kubeletCPUManagerPolicy",
                                        ("none", "static"))
    if "featureGates" in obj:
        sc.feature_gates = _gates(obj["featureGates"])
    if "strategies" in obj and obj["strategies"] is not None:
        sc.strategies = _strategies(obj["strategies"], known)
    if "ticks" in obj:
        sc.ticks = _int_in(obj["ticks"], "ticks", 1, MAX_TICKS)
    if "metrics" in obj:
        sc.metrics = _metrics(obj["metrics"])
        for series in sc.metrics:
            series.labels = _address(series, metas)
    for key in ("cgroups", "proc", "sys"):
        if obj.get(key) is not None:
            setattr(sc, key, _files(obj[key], key))
    if "seed" in obj:
        sc.seed = _int_in(obj["seed"], "seed", 0, 2**63 - 1)
    if "config" in obj:
        sc.config = _config(obj["config"])
    sc.config.cpu_manager_policy = sc.cpu_manager_policy
    if "kubeletCgroupRoot" in obj:
        root = obj["kubeletCgroupRoot"]
        _expect(isinstance(root, str) and root.startswith("/"), "kubeletCgroupRoot", "an absolute path", root)
        sc.kubelet_cgroup_root = root
    if "description" in obj:
        _expect(isinstance(obj["description"], str), "description", "a string", obj["description"])
    if "reactMode" in obj:
        sc.react_mode = _choice(obj["reactMode"], "reactMode", ("fast", "tick"))
    if obj.get("memoryLoad") is not None:
        sc.memory_load = _memory_load(obj["memoryLoad"], sum(len(m.samples) for m in sc.metrics))
        clash = next((m.where for m in sc.metrics if m.name == "node_memory_usage"), None)
        if clash is not None:
            raise ScenarioError(f"{clash}: node_memory_usage comes from memoryLoad in this scenario (drop one)")
    _check_enabled(sc, known)
    return sc


def _check_enabled(sc: Scenario, known: Sequence[str]) -> None:
    """A strategy named in ``strategies`` must be enabled by the gates: koordlet would not run it."""
    if not sc.strategies:
        return
    gates = plugins.feature_gates(sc.feature_gates)
    classes = load_strategies()
    for name in sc.strategies:
        cls = classes[name]
        if not any(gates.enabled(g) for g in cls.gates):
            raise ScenarioError(f"strategies: {name} is not enabled by the feature gates "
                                f"(it needs one of {', '.join(cls.gates)} set to true in featureGates)")
        if sc.config.interval(cls.interval_key) <= 0:
            raise ScenarioError(f"strategies: {name} is disabled by a zero interval in config")
