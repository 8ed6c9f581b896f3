"""cgroup version and driver detection, and the kubepods path layout.

Every cgroup directory the agent touches is named here, as a *relative dir*: no leading
or trailing ``/``, components joined by ``/`` (``kubepods/besteffort/pod<uid>/<hash>``).
The absolute path adds the cgroup root and, on cgroup v1 only, the subsystem's
hierarchy (``<root>/cpu/kubepods/...``); on v2 the unified tree has no subsystem dirs.

The layout (infra §2.3), with ``P/`` = the kubelet cgroup root's relative dir, if any:

* pods root: ``P/kubepods.slice`` (systemd) or ``P/kubepods`` (cgroupfs);
* QoS dir: Guaranteed = the pods root; ``<root>/kubepods-burstable.slice`` and
  ``<root>/kubepods-besteffort.slice`` (systemd), ``<root>/burstable`` and
  ``<root>/besteffort`` (cgroupfs);
* pod dir: ``<qos dir>/kubepods-burstable-pod<UID_>.slice``,
  ``.../kubepods-besteffort-pod<UID_>.slice``, Guaranteed ``<root>/kubepods-pod<UID_>.slice``
  (systemd); ``<qos dir>/pod<UID>`` (cgroupfs);
* container dir: ``<pod dir>/docker-<h>.scope``, ``cri-containerd-<h>.scope``,
  ``crio-<h>.scope`` or ``pouch-<h>.scope`` by runtime (systemd); ``<pod dir>/<h>`` (cgroupfs).

``UID_`` is the pod UID with ``-`` replaced by ``_`` (in a systemd slice name a dash
means one more nesting level).  A :class:`CgroupLayout` is built once per agent
and used on every pod change, so path building is pure string formatting: it never
touches the filesystem.  Only the detection functions and the directory walkers do.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from qosmanager.host.roots import HostRoots
from qosmanager.logfmt import shown

CGROUP_SUPER_MAGIC = 0x27E0EB
CGROUP2_SUPER_MAGIC = 0x63677270
TMPFS_MAGIC = 0x01021994

SYSTEMD = "systemd"
CGROUPFS = "cgroupfs"
DRIVERS = (SYSTEMD, CGROUPFS)

# Every cgroup v1 controller the kernel can mount; the agent uses the first seven.
V1_SUBSYSTEMS = frozenset({
    "cpu", "cpuacct", "cpuset", "memory", "blkio", "perf_event", "net_cls",
    "net_prio", "devices", "freezer", "hugetlb", "pids", "rdma", "misc", "systemd",
})

# Container runtimes of a ``<runtime>://<hash>`` container ID -> systemd scope prefix.
_SYSTEMD_SCOPE_PREFIX = {
    "docker": "docker-",
    "containerd": "cri-containerd-",
    "cri-o": "crio-",
    "pouch": "pouch-",
}
RUNTIMES = tuple(_SYSTEMD_SCOPE_PREFIX)

_HASH_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]*")
_UID_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]*")
_SYSTEMD_UID_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z_]*")


class KubeQoS(str, enum.Enum):
    """The kubelet's QoS class of a pod, which decides its cgroup parent."""

    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BESTEFFORT = "BestEffort"


def _as_qos(qos: KubeQoS | str) -> KubeQoS:
    if isinstance(qos, KubeQoS):
        return qos
    try:
        return KubeQoS(qos)
    except ValueError:
        raise ValueError(
            f"unknown kube QoS class {qos!r}; expected one of {[q.value for q in KubeQoS]}"
        ) from None


def kube_qos_of_dir(rel: str) -> KubeQoS:
    """The kube QoS class of a cgroup dir by koordlet's substring rule.

    ``besteffort`` anywhere in the path -> BestEffort, else ``burstable`` -> Burstable,
    else Guaranteed (whose pods sit directly under the pods root).
    """
    if "besteffort" in rel:
        return KubeQoS.BESTEFFORT
    if "burstable" in rel:
        return KubeQoS.BURSTABLE
    return KubeQoS.GUARANTEED


def split_container_id(container_id: str) -> tuple[str, str]:
    """``"containerd://abc"`` -> ``("containerd", "abc")``; ValueError on anything else."""
    if not container_id:
        raise ValueError("empty container ID: the container has not started yet")
    runtime, sep, digest = container_id.partition("://")
    if not sep:
        raise ValueError(f"container ID {container_id!r} is not of the form <runtime>://<id>")
    if runtime not in _SYSTEMD_SCOPE_PREFIX:
        raise ValueError(
            f"unknown container protocol {runtime!r} in {container_id!r}; expected one of {list(RUNTIMES)}"
        )
    if not _HASH_RE.fullmatch(digest):
        raise ValueError(f"container ID {container_id!r} has an empty or malformed id part")
    return runtime, digest


# ---------------------------------------------------------------------------
# detection
# ---------------------------------------------------------------------------
def detect_version(cgroup_root: str, statfs: Callable[[str], int | None] | None = None) -> int:
    """1 or 2: which cgroup version is mounted at ``cgroup_root``.

    The filesystem magic decides when it is known: a cgroup2 mount is v2.  Anything
    else (a tmpfs with per-subsystem mounts, a hybrid host whose ``unified/`` is a
    cgroup2 mount below a tmpfs root, or a plain directory of a fake tree) is v2 only if
    ``cgroup.controllers`` sits at the root, which no v1 layout has.  A root that does
    not exist is an error rather than koordlet's panic or a silent guess.
    """
    if statfs is None:
        from qosmanager._native import sysio  # lazy: keeps this module importable without the extension

        statfs = sysio.statfs_magic
    root = cgroup_root.rstrip("/") or "/"
    magic = statfs(root)
    if magic == CGROUP2_SUPER_MAGIC:
        return 2
    if magic is None and not os.path.isdir(root):
        raise FileNotFoundError(f"cgroup root {root!r} does not exist or is not a directory")
    if magic == CGROUP_SUPER_MAGIC:
        return 1
    return 2 if os.path.exists(os.path.join(root, "cgroup.controllers")) else 1


def detect_driver(roots: HostRoots, version: int) -> str:
    """``"systemd"`` or ``"cgroupfs"``, from which pods root exists.

    Looks under the kubelet cgroup root of the cpu hierarchy.  koordlet's first guess
    ran before the version was known and so always looked under ``cpu/`` -- on v2 it
    never found anything; using the detected version fixes that.  With neither dir,
    systemd (koordlet's default).
    """
    _check_version(version)
    base = roots.cgroup + ("/cpu" if version == 1 else "")
    if roots.kubelet_rel:
        base += "/" + roots.kubelet_rel
    if os.path.isdir(base + "/kubepods.slice"):
        return SYSTEMD
    if os.path.isdir(base + "/kubepods"):
        return CGROUPFS
    return SYSTEMD


def _check_version(version: int) -> None:
    if version not in (1, 2):
        raise ValueError(f"cgroup version must be 1 or 2, got {version!r}")


# ---------------------------------------------------------------------------
# layout
# ---------------------------------------------------------------------------
def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


_HOST_APP_BASES = ("CgroupRoot", "Kubepods", "KubepodsBurstable", "KubepodsBesteffort")
_LS_CLASSES = frozenset({"LSE", "LSR", "LS"})


class CgroupLayout:
    """Relative and absolute cgroup paths of pods, containers and host applications."""

    def __init__(self, roots: HostRoots, version: int, driver: str) -> None:
        _check_version(version)
        if driver not in DRIVERS:
            raise ValueError(f"cgroup driver must be one of {list(DRIVERS)}, got {driver!r}")
        self.roots = roots
        self.version = version
        self.driver = driver
        systemd = driver == SYSTEMD
        self._kubepods = _join(roots.kubelet_rel, "kubepods.slice" if systemd else "kubepods")
        if systemd:
            self._qos_dirs = {
                KubeQoS.GUARANTEED: self._kubepods,
                KubeQoS.BURSTABLE: self._kubepods + "/kubepods-burstable.slice",
                KubeQoS.BESTEFFORT: self._kubepods + "/kubepods-besteffort.slice",
            }
            self._pod_prefix = {
                KubeQoS.GUARANTEED: self._kubepods + "/kubepods-pod",
                KubeQoS.BURSTABLE: self._qos_dirs[KubeQoS.BURSTABLE] + "/kubepods-burstable-pod",
                KubeQoS.BESTEFFORT: self._qos_dirs[KubeQoS.BESTEFFORT] + "/kubepods-besteffort-pod",
            }
            self._pod_suffix = ".slice"
        else:
            self._qos_dirs = {
                KubeQoS.GUARANTEED: self._kubepods,
                KubeQoS.BURSTABLE: self._kubepods + "/burstable",
                KubeQoS.BESTEFFORT: self._kubepods + "/besteffort",
            }
            self._pod_prefix = {q: d + "/pod" for q, d in self._qos_dirs.items()}
            self._pod_suffix = ""
        # Per-subsystem prefixes of absolute paths, so abs_dir() is one concatenation.
        if version == 1:
            self._abs_prefix = {s: roots.cgroup_path(s) + "/" for s in V1_SUBSYSTEMS}
        self._v2_prefix = ("" if roots.cgroup == "/" else roots.cgroup) + "/"

    def __repr__(self) -> str:
        return (f"CgroupLayout(cgroup={self.roots.cgroup!r}, version={self.version}, "
                f"driver={self.driver!r}, kubepods={self._kubepods!r})")

    # -- relative dirs ------------------------------------------------------
    def kubepods_dir(self) -> str:
        """The pods root (``kubepods`` / ``kubepods.slice``), under the kubelet cgroup root."""
        return self._kubepods

    def qos_dir(self, qos: KubeQoS | str) -> str:
        """The QoS class dir; Guaranteed pods live directly under the pods root."""
        return self._qos_dirs[_as_qos(qos)]

    def pod_dir(self, qos: KubeQoS | str, uid: str) -> str:
        """A pod's dir from its kube QoS class and UID (dashes kept; systemd turns them into ``_``)."""
        if not _UID_RE.fullmatch(uid):
            raise ValueError(f"pod UID {uid!r} is empty or holds characters a cgroup name cannot")
        if self._pod_suffix:
            return self._pod_prefix[_as_qos(qos)] + uid.replace("-", "_") + self._pod_suffix
        return self._pod_prefix[_as_qos(qos)] + uid

    def container_dir(self, pod_dir: str, container_id: str) -> str:
        """A container's dir from its pod dir and ``<runtime>://<hash>`` container ID."""
        runtime, digest = split_container_id(container_id)
        if self.driver == SYSTEMD:
            return pod_dir + "/" + _SYSTEMD_SCOPE_PREFIX[runtime] + digest + ".scope"
        return pod_dir + "/" + digest

    def host_app_dir(self, app: Mapping[str, Any]) -> str:
        """The relative dir of a NodeSLO ``hostApplications[]`` entry (infra §2.3).

        Without ``cgroupPath``: ``host-latency-sensitive/<name>`` for LSE/LSR/LS,
        ``host-best-effort/<name>`` for BE, ``<name>`` otherwise.  With it:
        ``<base>/<parentDir>/<relativePath>`` where base is the cgroup root (the
        default), the pods root, or the Burstable / BestEffort QoS dir.  Paths that
        climb out with ``..`` or land on the root itself are refused: the agent must
        never aim a knob at a cgroup it was not told about.
        """
        name = app.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"host application {shown(app)} has no name")
        cgroup_path = app.get("cgroupPath")
        if not cgroup_path:
            qos = app.get("qos")
            if qos in _LS_CLASSES:
                rel = "host-latency-sensitive/" + name
            elif qos == "BE":
                rel = "host-best-effort/" + name
            else:
                rel = name
        else:
            if not isinstance(cgroup_path, Mapping):
                raise ValueError(
                    f"host application '{shown(name)}': cgroupPath must be an object, got {shown(cgroup_path)}"
                )
            base = cgroup_path.get("base") or "CgroupRoot"
            if base == "CgroupRoot":
                base_dir = ""
            elif base == "Kubepods":
                base_dir = self._kubepods
            elif base == "KubepodsBurstable":
                base_dir = self._qos_dirs[KubeQoS.BURSTABLE]
            elif base == "KubepodsBesteffort":
                base_dir = self._qos_dirs[KubeQoS.BESTEFFORT]
            else:
                raise ValueError(
                    f"host application '{shown(name)}': unknown cgroupPath.base '{shown(base)}'; "
                    f"expected one of {list(_HOST_APP_BASES)}"
                )
            parent_dir = str(cgroup_path.get("parentDir") or "")
            relative = str(cgroup_path.get("relativePath") or "")
            rel = "/".join((base_dir, parent_dir, relative))
        components = [c for c in rel.split("/") if c and c != "."]
        if ".." in components:
            raise ValueError(f"host application '{shown(name)}': cgroup path '{shown(rel)}' must not contain '..'")
        if not components:
            raise ValueError(f"host application '{shown(name)}': cgroup path resolves to the cgroup root")
        return "/".join(components)

    # -- absolute paths -----------------------------------------------------
    def abs_dir(self, subsystem: str, rel: str) -> str:
        """``<root>/<subsystem>/<rel>`` on v1, ``<root>/<rel>`` on v2 (subsystem ignored)."""
        if self.version == 2:
            return self._v2_prefix + rel if rel else self.roots.cgroup
        try:
            prefix = self._abs_prefix[subsystem]
        except KeyError:
            raise ValueError(f"unknown cgroup v1 subsystem {subsystem!r}") from None
        return prefix + rel if rel else prefix[:-1]

    def file(self, subsystem: str, rel: str, name: str) -> str:
        """Absolute path of cgroup file ``name`` in dir ``rel`` of ``subsystem``'s hierarchy."""
        return self.abs_dir(subsystem, rel) + "/" + name

    # -- parsing names back -----------------------------------------------
    def parse_pod_dir(self, name: str) -> tuple[KubeQoS, str] | None:
        """A pod dir's basename (or relative dir) -> (kube QoS, UID with dashes); None if not a pod dir.

        systemd names carry the QoS class; cgroupfs names (``pod<uid>``) do not, so with
        that driver the QoS comes from the parent components of a relative dir and a
        bare basename reads as Guaranteed.
        """
        parent, _, base = name.rstrip("/").rpartition("/")
        if self.driver == SYSTEMD:
            if not base.endswith(".slice"):
                return None
            stem = base[: -len(".slice")]
            for prefix, qos in (("kubepods-besteffort-pod", KubeQoS.BESTEFFORT),
                                ("kubepods-burstable-pod", KubeQoS.BURSTABLE),
                                ("kubepods-pod", KubeQoS.GUARANTEED)):
                if stem.startswith(prefix):
                    uid = stem[len(prefix):]
                    if not _SYSTEMD_UID_RE.fullmatch(uid):
                        return None
                    return qos, uid.replace("_", "-")
            return None
        if not base.startswith("pod"):
            return None
        uid = base[3:]
        if not _UID_RE.fullmatch(uid):
            return None
        return kube_qos_of_dir(parent), uid

    def parse_container_dir(self, name: str) -> str | None:
        """A container dir's basename -> the container hash; None if it is not a container dir."""
        base = name.rstrip("/").rpartition("/")[2]
        if self.driver == CGROUPFS:
            return base if _HASH_RE.fullmatch(base) else None
        if base.endswith(".scope"):
            stem = base[: -len(".scope")]
        elif base.startswith("crio-"):
            stem = base  # cri-o may leave a bare ``crio-<id>`` dir without the scope suffix
        else:
            return None
        # cri-o's ``crio-conmon-<id>.scope`` holds the monitor process, not a container: koordlet
        # parsed it as container "conmon-<id>"; we skip it.
        if stem.startswith("crio-conmon-"):
            return None
        # koordlet does not parse ``pouch-`` scopes although it creates them (quirk); we do.
        for prefix in ("cri-containerd-", "docker-", "crio-", "pouch-"):
            if stem.startswith(prefix):
                digest = stem[len(prefix):]
                return digest if _HASH_RE.fullmatch(digest) else None
        return None

    # -- walking the tree ---------------------------------------------------
    def dirs_at_depth(self, subsystem: str, parent: str, depth: int) -> list[str]:
        """Relative dirs exactly ``depth`` levels below ``parent`` (1 = pods under a QoS dir,
        2 = their containers), sorted; missing dirs yield nothing."""
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        return [d for d, level in self._walk(subsystem, parent, depth)[0] if level == depth]

    def dirs_up_to_depth(self, subsystem: str, parent: str, max_depth: int) -> list[str]:
        """``parent`` and every dir at most ``max_depth`` below it, parents before children,
        siblings in lexical order (koordlet's ``GetBECPUSetPathsByMaxDepth`` walk order)."""
        if max_depth < 0:
            raise ValueError(f"max_depth must be >= 0, got {max_depth}")
        if not os.path.isdir(self.abs_dir(subsystem, parent)):
            return []
        return [parent] + [d for d, _ in self._walk(subsystem, parent, max_depth)[0]]

    def subtree(self, subsystem: str, parent: str, limit: int) -> tuple[list[str], bool]:
        """``parent`` and every dir below it at any depth (symlinks not followed), in the order of
        :meth:`dirs_up_to_depth`, at most ``limit`` dirs in all; and whether there were more.  A
        missing ``parent`` yields nothing."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        if not os.path.isdir(self.abs_dir(subsystem, parent)):
            return [], False
        below, more = self._walk(subsystem, parent, None, limit - 1)
        return [parent] + [d for d, _ in below], more

    def _walk(self, subsystem: str, parent: str, max_depth: int | None,
              limit: int | None = None) -> tuple[list[tuple[str, int]], bool]:
        """The dirs below ``parent`` with their level, pre-order (parents before children, siblings
        in lexical order), down to ``max_depth`` (None: any depth), at most ``limit`` of them; and
        whether there were more.  Iterative: a nesting as deep as a container makes it is no
        recursion limit."""

        def children(rel: str, level: int) -> list[tuple[str, int]]:
            try:
                with os.scandir(self.abs_dir(subsystem, rel)) as it:
                    names = sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
            except (FileNotFoundError, NotADirectoryError):
                return []
            return [(_join(rel, n), level) for n in reversed(names)]

        out: list[tuple[str, int]] = []
        todo = children(parent, 1)  # a stack: the next dir to visit last
        while todo:
            if limit is not None and len(out) >= limit:
                return out, True
            rel, level = todo.pop()
            out.append((rel, level))
            if max_depth is None or level < max_depth:
                todo.extend(children(rel, level + 1))
        return out, False
