"""Where the host's pseudo-filesystems are mounted, as seen by this process.

In a DaemonSet the host's cgroup tree, procfs and sysfs are bind-mounted somewhere
else; in tests, replay and simulate they are plain directories under a temporary
root.  Every module that names a host file builds its path from a :class:`HostRoots`,
never from a hard-coded ``/sys`` or ``/proc``, so that all roots stay injectable.
"""

from __future__ import annotations

from dataclasses import dataclass


def _strip_trailing(path: str) -> str:
    """``/sys/fs/cgroup/`` -> ``/sys/fs/cgroup``; ``/`` stays ``/``."""
    stripped = path.rstrip("/")
    return stripped or ("/" if path.startswith("/") else path)


@dataclass(frozen=True)
class HostRoots:
    """Mount points of the host's cgroup tree, procfs and sysfs.

    ``kubelet_cgroup_root`` is the kubelet's ``--cgroup-root``: the directory, inside
    each cgroup hierarchy, that holds ``kubepods`` (``/`` on almost every host).
    Trailing slashes are dropped so that path joins never produce ``//``.
    """

    cgroup: str = "/sys/fs/cgroup"
    proc: str = "/proc"
    sys: str = "/sys"
    kubelet_cgroup_root: str = "/"

    def __post_init__(self) -> None:
        for name in ("cgroup", "proc", "sys"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"HostRoots.{name} must be a non-empty path, got {value!r}")
            object.__setattr__(self, name, _strip_trailing(value))
        kube = self.kubelet_cgroup_root
        if not isinstance(kube, str):
            raise ValueError(f"HostRoots.kubelet_cgroup_root must be a path, got {kube!r}")
        parts = [p for p in kube.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise ValueError(f"kubelet cgroup root {kube!r} must not contain '.' or '..' components")
        object.__setattr__(self, "kubelet_cgroup_root", "/" + "/".join(parts))

    @property
    def kubelet_rel(self) -> str:
        """The kubelet cgroup root as a relative dir: ``""`` for ``/``, ``kube.slice`` for ``/kube.slice``."""
        return self.kubelet_cgroup_root.strip("/")

    def proc_path(self, rel: str) -> str:
        """Absolute path of ``rel`` under the proc root (``"sys/vm/min_free_kbytes"``)."""
        return _join(self.proc, rel)

    def sys_path(self, rel: str) -> str:
        """Absolute path of ``rel`` under the sys root (``"devices/system/cpu/online"``)."""
        return _join(self.sys, rel)

    def cgroup_path(self, rel: str) -> str:
        """Absolute path of ``rel`` under the cgroup root (subsystem dir included on v1)."""
        return _join(self.cgroup, rel)


def _join(root: str, rel: str) -> str:
    rel = rel.strip("/")
    if not rel:
        return root
    return ("" if root == "/" else root) + "/" + rel
