"""The sysio interposer: the agent's own write path meets the fake kernels' rules.

:func:`register` routes the sysio calls (:mod:`qosmanager._native.sysio`) for paths below a live
fake kernel's roots to that kernel; :func:`install` puts the wrappers in front of the layer once.
Paths elsewhere (a real ``/sys/fs/cgroup``) reach the real functions untouched, and with no fake
kernel alive the wrappers cost one dictionary test per call.

Map of the file: the registry of live kernels and of descriptors opened in a fake tree; the
wrappers (``open_batch`` registers, ``pwrite_batch`` routes to :meth:`FakeKernel.write`,
``fstatfs_magic`` answers cgroupfs/cgroup2/resctrl, ``close_batch`` forgets, ``mkdir`` routes to
:meth:`FakeKernel.mkdir`, ``psi_trigger`` to the kernel's :class:`~qosmanager.sim.fakepsi.PressureRules`
and ``psi_poll`` reports its triggers' events as the kernel's poll does); :func:`install`, :func:`register`;
:func:`emulation_seconds`, the CPU the wrappers spend emulating the kernel (simulate leaves it out of the agent's).
"""

from __future__ import annotations

import functools
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

from qosmanager.sim.fakepsi import PressureRules, consume


class FakeKernel(Protocol):
    """What the interposer asks of a fake kernel (:class:`qosmanager.sim.fakekernel.FakeKernel`)."""

    version: int
    cgroup_root: str
    resctrl_root: str

    def owns(self, path: str) -> bool: ...

    def has_rule(self, path: str) -> bool: ...

    def write(self, path: str, data: bytes) -> int: ...

    def mkdir(self, path: str, mode: int = 0o777) -> None: ...

    @property
    def psi(self) -> PressureRules: ...


_KERNELS: weakref.WeakValueDictionary[str, FakeKernel] = weakref.WeakValueDictionary()
_FDS: dict[int, tuple[str, FakeKernel]] = {}  # descriptor -> (path, kernel) of files opened in a fake tree
_PSI_FDS: dict[int, int] = {}  # descriptor of a fake PSI trigger -> its inode (a reused number is not it)
_REAL: dict[str, Any] = {}
_INSTALL_LOCK = threading.Lock()
# CPU seconds of this process in the wrappers beyond the real calls they make: the fake kernel's rules in
# Python (a v1 quota write checks the hierarchy's bandwidth, as the kernel does in C), its descriptor
# bookkeeping.  A node's kernel does that work in C at a fraction of the cost, so simulate counts it apart.
_EMULATED = [0.0, 0.0]  # [in the wrappers, in the real calls they made]
F = TypeVar("F", bound=Callable[..., Any])


def emulation_seconds() -> float:
    """CPU seconds this process has spent emulating the kernel in the sysio wrappers (the real calls they
    made excluded).  Counted on every thread together: a figure for single-threaded use (simulate)."""
    return _EMULATED[0] - _EMULATED[1]


def _emulating(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not _KERNELS:  # nothing emulated: not even the clock's cost
            return fn(*args, **kwargs)
        t0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _EMULATED[0] += time.process_time() - t0
    return wrapper  # type: ignore[return-value]


def _real(name: str, *args: Any) -> Any:
    """A real sysio function, its CPU counted apart from the emulation around it."""
    if not _KERNELS:
        return _REAL[name](*args)
    t0 = time.process_time()
    try:
        return _REAL[name](*args)
    finally:
        _EMULATED[1] += time.process_time() - t0


def _owner(path: str) -> FakeKernel | None:
    for k in list(_KERNELS.values()):
        if k.owns(path):
            return k
    return None


@_emulating
def _open_batch(paths: Sequence[str], flags: int) -> np.ndarray:
    fds = _real("open_batch", paths, flags)
    kernels = list(_KERNELS.values())
    if kernels:
        prefixes = tuple(k.cgroup_root + "/" for k in kernels) + tuple(k.resctrl_root + "/" for k in kernels)
        for p, fd in zip(paths, fds.tolist()):
            if fd >= 0 and (p.startswith(prefixes) or not p.startswith("/")):
                k = _owner(os.path.abspath(p))
                if k is not None:
                    _FDS[fd] = (os.path.abspath(p), k)
                else:
                    _FDS.pop(fd, None)
    return fds


def _registered(fd: int) -> tuple[str, FakeKernel] | None:
    """The fake file behind a descriptor, when the descriptor still names it (a descriptor closed outside
    the batch functions and reused for another file is forgotten)."""
    hit = _FDS.get(fd)
    if hit is None:
        return None
    try:
        now = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        now = ""
    if now != hit[0]:
        _FDS.pop(fd, None)
        return None
    return hit


@_emulating
def _pwrite_batch(fds: np.ndarray, payloads: Sequence[bytes], truncate: np.ndarray) -> np.ndarray:
    if not _FDS:
        return _real("pwrite_batch", fds, payloads, truncate)
    fd_list = np.asarray(fds).tolist()
    hits = [_registered(fd) for fd in fd_list]
    if not any(hits):
        return _real("pwrite_batch", fds, payloads, truncate)
    err = np.zeros(len(payloads), dtype=np.int32)
    rest = [i for i, h in enumerate(hits) if h is None]
    if rest:
        idx = np.asarray(rest, dtype=np.int64)
        err[idx] = _real("pwrite_batch", np.asarray(fds)[idx], [payloads[i] for i in rest],
                         np.asarray(truncate)[idx])
    for i, h in enumerate(hits):
        if h is not None:
            path, k = h
            err[i] = k.write(path, payloads[i])
    return err


@_emulating
def _fstatfs_magic(fd: int) -> int | None:
    hit = _registered(fd) if _FDS else None
    if hit is not None and hit[1].has_rule(hit[0]):
        path, k = hit
        if path.startswith(k.resctrl_root):
            return 0x07655821
        return 0x27E0EB if k.version == 1 else 0x63677270
    return _real("fstatfs_magic", fd)


@_emulating
def _close_batch(fds: np.ndarray) -> None:
    if _FDS:
        for fd in np.asarray(fds).tolist():
            _FDS.pop(fd, None)
    _real("close_batch", fds)


@_emulating
def _mkdir(path: str, mode: int = 0o777) -> None:
    k = _owner(os.path.abspath(path)) if _KERNELS else None
    if k is None:
        _real("mkdir", path, mode)
    else:
        k.mkdir(os.path.abspath(path), mode)


def _psi_trigger(path: str, line: bytes) -> int:
    p = os.path.abspath(path)
    for k in list(_KERNELS.values()):
        if k.psi.owns(p):
            fd = k.psi.register(p, line + b"\0")  # the real function's NUL
            _PSI_FDS[fd] = os.fstat(fd).st_ino
            return fd
    return int(_REAL["psi_trigger"](path, line))


def _psi_poll(watch: Sequence[tuple[int, int]], timeout_ms: float) -> list[tuple[int, int]]:
    ready = _REAL["psi_poll"](watch, timeout_ms)
    if not _PSI_FDS:
        return list(ready)
    out = []
    for fd, revents in ready:
        ino = _PSI_FDS.get(fd)
        if ino is not None:
            try:
                same = os.fstat(fd).st_ino == ino
            except OSError:
                same = False
            if same:
                revents = consume(fd, revents)
            else:
                _PSI_FDS.pop(fd, None)
        out.append((fd, revents))
    return out


def install() -> None:
    """Put the fake kernels in front of the sysio layer (idempotent).  Paths of no live fake kernel go to
    the real functions."""
    from qosmanager._native import sysio

    with _INSTALL_LOCK:
        if _REAL:
            return
        for name, wrapper in (("open_batch", _open_batch), ("pwrite_batch", _pwrite_batch),
                              ("fstatfs_magic", _fstatfs_magic), ("close_batch", _close_batch),
                              ("mkdir", _mkdir), ("psi_trigger", _psi_trigger), ("psi_poll", _psi_poll)):
            _REAL[name] = getattr(sysio, name)
            setattr(sysio, name, wrapper)


def register(kernel: FakeKernel) -> None:
    """Route the sysio calls for paths below ``kernel``'s roots to it while it lives."""
    install()
    _KERNELS[kernel.cgroup_root] = kernel
