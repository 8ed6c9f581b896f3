"""The kubelet's CPU manager, read from the node: which policy it runs and which CPUs it gave away.

koordlet learns the policy from its NodeResourceTopology object; this agent reads what the kubelet
itself keeps on the node, so a static-policy node is recognised without any flag:

* ``<kubelet root>/cpu_manager_state`` -- the CPU manager's checkpoint, rewritten by the kubelet
  whenever an assignment changes.  Format v2 (Kubernetes >= 1.18)::

      {"policyName":"static","defaultCpuSet":"0,5-7",
       "entries":{"<pod UID>":{"<container name>":"1-4"}},"checksum":1552716370}

  and the older v1, whose ``entries`` map a container ID straight to its CPUs.  With the ``none``
  policy it is ``{"policyName":"none","defaultCpuSet":"","checksum":...}``.  The checksum is the
  kubelet's hash of its Go structure and is not recomputed here; every other field is checked.
* the kubelet's configuration file (``--kubelet-config``, a ``KubeletConfiguration`` of
  ``kubelet.config.k8s.io/v1beta1``, YAML or JSON): ``cpuManagerPolicy`` (absent: ``none``) and
  ``reservedSystemCPUs`` (a CPU list).

The policy is decided by the first of: the ``--kubelet-cpu-manager-policy`` flag when given (an
override), the checkpoint (what the kubelet actually runs: it refuses to start when the checkpoint's
policy and its configuration disagree), the configuration file; with none of them the strategies
fall back to the topology annotation and then ``none``.  The exclusive CPUs of the checkpoint and
the ``reservedSystemCPUs`` of the configuration are used whatever decided the policy.

Both files are stat()ed on every look and re-read when their identity, size or mtime changes.  A
missing file is said once in the log; a garbled one raises the ``kubelet/<file>`` degraded
condition and the last good reading of it stays in force.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from qosmanager.api.decode import Limits, decode_json, read_document_file
from qosmanager.framework.conditions import Conditions
from qosmanager.host.cpuset import parse_cpu_list

log = logging.getLogger(__name__)

DEFAULT_KUBELET_ROOT = "/var/lib/kubelet"
STATE_FILE = "cpu_manager_state"
COND_STATE = "kubelet/cpu_manager_state"
COND_CONFIG = "kubelet/config"
# a checkpoint holds one short line per exclusive container; a kubelet config is a page
STATE_LIMITS = Limits(max_bytes=4 * 1024 * 1024, max_depth=8, max_nodes=1_000_000)
CONFIG_LIMITS = Limits(max_bytes=1024 * 1024, max_depth=32, max_nodes=100_000)

SOURCE_FLAG = "flag --kubelet-cpu-manager-policy"
SOURCE_NONE = "nothing on the node"


@dataclass(frozen=True)
class CPUManagerState:
    """What the checkpoint says."""

    policy: str
    default_cpuset: frozenset[int]
    # pod UID -> container name -> CPUs (v2); a v1 checkpoint's entries are under the pod UID ""
    # keyed by container ID
    entries: Mapping[str, Mapping[str, frozenset[int]]]

    @cached_property
    def exclusive_cpus(self) -> frozenset[int]:
        return frozenset(c for per_pod in self.entries.values() for cpus in per_pod.values() for c in cpus)


@dataclass(frozen=True)
class KubeletConfig:
    """The parts of a KubeletConfiguration the agent uses."""

    policy: str
    reserved_cpus: frozenset[int]


@dataclass(frozen=True)
class KubeletCPU:
    """The node's CPU manager as the strategies see it.

    ``policy`` is None when nothing decided it (the strategies then look at the topology
    annotation, else ``none``); ``source`` says what decided it.
    """

    policy: str | None = None
    source: str = SOURCE_NONE
    exclusive: Mapping[str, Mapping[str, frozenset[int]]] = field(default_factory=dict)
    reserved_cpus: frozenset[int] = frozenset()
    # the static policy's shared pool (the checkpoint's defaultCpuSet, its reserved CPUs among them), which
    # the kubelet gives every container without exclusive CPUs; empty when not known
    shared_cpus: frozenset[int] = frozenset()

    @cached_property
    def exclusive_cpus(self) -> frozenset[int]:
        """Every CPU the checkpoint gives a container exclusively."""
        return frozenset(c for per_pod in self.exclusive.values() for cpus in per_pod.values() for c in cpus)


def _cpus(value: Any, what: str) -> frozenset[int]:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a CPU list string, got {type(value).__name__}")
    try:
        return frozenset(parse_cpu_list(value))
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None


def _policy(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty string")
    return value.strip().lower()


def parse_cpu_manager_state(obj: Any) -> CPUManagerState:
    """A decoded ``cpu_manager_state``; ``ValueError`` saying what is wrong."""
    if not isinstance(obj, Mapping):
        raise ValueError("not a JSON object")
    policy = _policy(obj.get("policyName"), "policyName")
    default = _cpus(obj.get("defaultCpuSet", ""), "defaultCpuSet")
    checksum = obj.get("checksum")
    if checksum is not None and (not isinstance(checksum, int) or isinstance(checksum, bool)):
        raise ValueError("checksum must be an integer")
    raw = obj.get("entries") or {}
    if not isinstance(raw, Mapping):
        raise ValueError("entries must be an object")
    entries: dict[str, dict[str, frozenset[int]]] = {}
    for key, value in raw.items():
        if isinstance(value, str):  # v1: container ID -> CPUs
            entries.setdefault("", {})[key] = _cpus(value, f"entries[{key!r}]")
        elif isinstance(value, Mapping):  # v2: pod UID -> container name -> CPUs
            entries[key] = {name: _cpus(cpus, f"entries[{key!r}][{name!r}]") for name, cpus in value.items()}
        else:
            raise ValueError(f"entries[{key!r}] must be an object or a CPU list")
    return CPUManagerState(policy, default, entries)


def parse_kubelet_config(obj: Any) -> KubeletConfig:
    """A decoded KubeletConfiguration; ``ValueError`` saying what is wrong."""
    if not isinstance(obj, Mapping):
        raise ValueError("not an object")
    kind = obj.get("kind")
    if kind is not None and kind != "KubeletConfiguration":
        raise ValueError(f"kind is {kind!r}, not KubeletConfiguration")
    policy = _policy(obj.get("cpuManagerPolicy") or "none", "cpuManagerPolicy")
    reserved = _cpus(obj.get("reservedSystemCPUs") or "", "reservedSystemCPUs")
    return KubeletConfig(policy, reserved)


def _read_json(path: str, limits: Limits) -> Any:
    """The checkpoint is JSON only (the kubelet writes it with encoding/json)."""
    with open(path, "rb") as f:
        data = f.read(limits.max_bytes + 1)
    return decode_json(data, limits, path)


class _File:
    """One watched file: re-read when its stat changes; the last good reading survives a bad one."""

    def __init__(self, path: str, cond: str, limits: Limits, load: Any, parse: Any,
                 conditions: Conditions) -> None:
        self.path, self.cond, self.limits, self.load, self.parse = path, cond, limits, load, parse
        self.conditions = conditions
        self.stat_key: tuple[int, ...] | None = None
        self.missing_said = False
        self.good: Any = None  # the last good reading
        self.present = False  # the file exists and its last reading was good

    def refresh(self) -> None:
        try:
            st = os.stat(self.path)
        except OSError as e:
            if self.stat_key != ():
                self.stat_key = ()
                self.good, self.present = None, False
                self.conditions.clear(self.cond)
                if not self.missing_said:
                    self.missing_said = True
                    log.info("kubelet CPU manager: %s not readable (%s); not used", self.path,
                             e.strerror or e)
            return
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if key == self.stat_key:
            return
        self.stat_key = key
        self.missing_said = False
        try:
            reading = self.parse(self.load(self.path, self.limits))
        except (OSError, ValueError) as e:
            self.present = False
            keep = "the last good reading stays in force" if self.good is not None else "not used"
            error = " ".join(str(e).split()).removeprefix(f"{self.path}: ")
            message = f"{self.path} cannot be read: {error}; {keep}"
            if self.conditions.set(self.cond, message):
                log.warning("kubelet CPU manager: %s", message)
            return
        self.good, self.present = reading, True
        if self.conditions.clear(self.cond):
            log.info("kubelet CPU manager: %s is readable again", self.path)


class KubeletCPUSource:
    """Resolves :class:`KubeletCPU` from the flag and the kubelet's files (see the module docstring)."""

    def __init__(self, conditions: Conditions, root_dir: str | None = DEFAULT_KUBELET_ROOT,
                 config_file: str | None = None, flag: str | None = None) -> None:
        self.flag = flag
        self._state = (_File(os.path.join(root_dir, STATE_FILE), COND_STATE, STATE_LIMITS,
                             _read_json, parse_cpu_manager_state, conditions) if root_dir else None)
        self._config = (_File(config_file, COND_CONFIG, CONFIG_LIMITS, read_document_file,
                              parse_kubelet_config, conditions) if config_file else None)
        self._said: tuple[str | None, str] | None = None
        self._current = KubeletCPU()

    def current(self) -> KubeletCPU:
        for f in (self._state, self._config):
            if f is not None:
                f.refresh()
        state: CPUManagerState | None = self._state.good if self._state is not None else None
        config: KubeletConfig | None = self._config.good if self._config is not None else None
        policy: str | None = None
        source = SOURCE_NONE
        if self.flag is not None:
            policy, source = self.flag, SOURCE_FLAG
        elif state is not None and self._state is not None:
            policy = state.policy
            source = self._state.path + ("" if self._state.present else " (last good reading)")
        elif config is not None and self._config is not None:
            policy = config.policy
            source = self._config.path + ("" if self._config.present else " (last good reading)")
        said = (policy, source.removesuffix(" (last good reading)"))
        if said != self._said:
            self._said = said
            if policy is None:
                log.info("kubelet CPU manager policy: not known from the flag or the kubelet's files; "
                         "the topology annotation decides, else none")
            else:
                log.info("kubelet CPU manager policy: %s (from %s)", policy, source)
        exclusive = state.entries if state is not None else {}
        reserved = config.reserved_cpus if config is not None else frozenset()
        shared = state.default_cpuset if state is not None and state.policy == "static" else frozenset()
        cur = self._current
        if (cur.policy, cur.source, cur.exclusive, cur.reserved_cpus, cur.shared_cpus) != (
                policy, source, exclusive, reserved, shared):
            self._current = KubeletCPU(policy, source, exclusive, reserved, shared)
        return self._current


__all__ = [
    "COND_CONFIG",
    "COND_STATE",
    "DEFAULT_KUBELET_ROOT",
    "CPUManagerState",
    "KubeletCPU",
    "KubeletCPUSource",
    "KubeletConfig",
    "parse_cpu_manager_state",
    "parse_kubelet_config",
]
