"""PSI triggers of a fake host's kernel: registered as the kernel registers them, fired when told.

The kernel side of :func:`qosmanager._native.sysio.psi_trigger` and ``psi_poll`` for a fake host's pressure
files (``<proc>/pressure/{cpu,memory,io}``, and on cgroup v2 each cgroup's ``{cpu,memory,io}.pressure``):

* **registration** parses the line as ``psi_trigger_create`` does: the kernel copies at most 32 bytes and
  ends the string at the last byte it was given (a line written without a NUL or newline after it loses
  its last digit), then ``some <threshold µs> <window µs>`` or ``full ...``; a window of 0 or over 10 s
  (6.12 takes a 0.2 s window: no lower bound), a threshold of 0 or above the window, or, for a process
  without ``CAP_SYS_RESOURCE`` (this
  process: the fake asks the real credentials, as the kernel asks the opener's), a window that is not a
  multiple of 2 s, is EINVAL.  A file that does not exist is ENOENT; :attr:`PressureRules.refuse` makes a
  file refuse with an errno of the test's choosing (EOPNOTSUPP: PSI off).
* **the descriptor** is one end of a Unix socket pair, so ``poll`` can report ``POLLPRI`` on it: the
  kernel's event is a byte of out-of-band data.  :meth:`PressureRules.fire` is the kernel noticing a stall
  over the threshold (the test says when); :meth:`PressureRules.gone` is the cgroup removed (the
  agent's ``poll`` then sees ``POLLERR | POLLPRI``, as the kernel answers for a trigger whose file is gone).
  The interposed ``psi_poll`` consumes the event as the kernel's poll does (one ``POLLPRI`` per event).
* **the stall**, where a model gives it (:mod:`~qosmanager.sim.fakestall`: ``simulate``'s and ``replay``'s
  nodes): :meth:`PressureRules.update` is the kernel's ``update_triggers`` on the file's cumulative
  ``some`` and ``full`` totals (µs).  Each trigger keeps a window (``window_update``: the growth since
  the window began, plus the previous window's growth pro rata for the part of the window before it);
  a growth of at least the threshold makes an event pending, and a pending event is sent at most once
  per window (``last_event_time + window``).  A privileged trigger is updated every tenth of its window
  (the kernel's polling rate), an unprivileged one every 2 s (the averaging worker).  The window starts
  at the trigger's first update (the kernel starts it at the registration; updates come every 50 ms).

Not modelled: the files' averages (they are what the model writes).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import select
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

from qosmanager.host.procfs import cap_sys_resource
from qosmanager.host.roots import HostRoots

WINDOW_MAX_US = 10_000_000
UNPRIVILEGED_WINDOW_US = 2_000_000
_LINE = re.compile(rb"(some|full) ([0-9]+) ([0-9]+)")
_RESOURCES = ("cpu", "memory", "io")
UPDATES_PER_WINDOW = 10  # a privileged trigger's polling period: a tenth of its window
PSI_FREQ_US = 2_000_000  # the averaging worker's period (unprivileged triggers)


def parse_trigger(data: bytes, privileged: bool) -> tuple[str, int, int]:
    """``(state, threshold µs, window µs)`` of a trigger write, or KernelError-like OSError(EINVAL)."""
    buf = data[:32]
    if not buf:
        raise OSError(errno.EINVAL, "empty trigger")
    text = buf[:-1].split(b"\0", 1)[0]  # buf[buf_size - 1] = '\0'
    m = _LINE.match(text)
    if m is None:
        raise OSError(errno.EINVAL, f"not a trigger: {text!r}")
    threshold, window = int(m.group(2)), int(m.group(3))
    if threshold > 0xFFFFFFFF or window > 0xFFFFFFFF:
        raise OSError(errno.EINVAL, "out of range")
    if window == 0 or window > WINDOW_MAX_US:
        raise OSError(errno.EINVAL, f"window {window} us outside (0, {WINDOW_MAX_US}]")
    if not privileged and window % UNPRIVILEGED_WINDOW_US:
        raise OSError(errno.EINVAL, f"window {window} us: without CAP_SYS_RESOURCE a multiple of 2 s")
    if threshold == 0 or threshold > window:
        raise OSError(errno.EINVAL, f"threshold {threshold} us outside (0, window]")
    return m.group(1).decode(), threshold, window


@dataclass(eq=False)
class _Trigger:
    """One registered trigger and its window (``struct psi_trigger``)."""

    peer: socket.socket
    line: tuple[str, int, int]  # (state, threshold µs, window µs)
    period: int  # µs between its updates
    start_time: int = -1  # the window's start (µs; -1: not yet updated)
    start_value: int = 0
    prev_growth: int = 0
    last_event: int = -(1 << 62)
    next_update: int = -1
    last_total: int = -1  # the total at its last update (no new stall: no update, as the kernel)
    pending: bool = False

    def window_growth(self, now: int, value: int) -> int:
        """``window_update``: the stall within the window ending now."""
        window = self.line[2]
        elapsed, growth = now - self.start_time, value - self.start_value
        if elapsed > window:
            self.start_time, self.start_value, self.prev_growth = now, value, growth
        else:
            growth += self.prev_growth * (window - elapsed) // window
        return growth


class PressureRules:
    """The triggers on one fake host's pressure files (see the module docstring)."""

    def __init__(self, roots: HostRoots, version: int) -> None:
        self.proc_pressure = os.path.normpath(roots.proc_path("pressure"))
        self.cgroup_root = os.path.normpath(roots.cgroup)
        self.version = version
        self.refuse: dict[str, int] = {}  # pressure file -> errno its registration fails with
        self._lock = threading.Lock()
        self._triggers: dict[str, list[_Trigger]] = {}  # pressure file -> its triggers
        # called with (file, line, growth µs) at each event :meth:`update` sends
        self.on_event: list[Callable[[str, tuple[str, int, int], int], None]] = []

    def owns(self, path: str) -> bool:
        d, name = os.path.split(path)
        if d == self.proc_pressure:
            return name in _RESOURCES
        return (self.version == 2 and path.startswith(self.cgroup_root + "/")
                and name in tuple(f"{r}.pressure" for r in _RESOURCES))

    def register(self, path: str, data: bytes) -> int:
        """The descriptor holding a new trigger (its caller's to poll and close); OSError as the kernel."""
        if not os.path.isfile(path):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        err = self.refuse.get(path)
        if err:
            raise OSError(err, os.strerror(err), path)
        privileged = cap_sys_resource()
        line = parse_trigger(data, privileged)
        mine, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        period = max(1, line[2] // UPDATES_PER_WINDOW) if privileged else PSI_FREQ_US
        with self._lock:
            self._triggers.setdefault(path, []).append(_Trigger(peer, line, period))
        return mine.detach()

    def triggers(self, path: str) -> list[tuple[str, int, int]]:
        """The lines registered on ``path`` whose descriptor is still open."""
        self._prune(path)
        with self._lock:
            return [t.line for t in self._triggers.get(path, [])]

    def fire(self, path: str) -> int:
        """The tasks behind ``path`` stalled past every trigger's threshold: an event on each; how many."""
        self._prune(path)
        n = 0
        with self._lock:
            for t in self._triggers.get(path, []):
                with contextlib.suppress(OSError):
                    t.peer.send(b"!", socket.MSG_OOB)
                    n += 1
        return n

    def watched(self) -> list[str]:
        """The files holding a trigger now (the model updates only those)."""
        with self._lock:
            return list(self._triggers)

    def update(self, path: str, now_us: int, some_us: int, full_us: int) -> int:
        """The kernel's ``update_triggers`` for ``path`` at ``now_us`` with its cumulative stall totals
        (see the module docstring); the events sent."""
        if path not in self._triggers:
            return 0
        self._prune(path)
        sent: list[tuple[tuple[str, int, int], int]] = []
        with self._lock:
            for t in self._triggers.get(path, []):
                total = some_us if t.line[0] == "some" else full_us
                if t.start_time < 0:  # the window begins
                    t.start_time, t.start_value, t.last_total = now_us, total, total
                    t.next_update = now_us + t.period
                    continue
                if now_us < t.next_update:
                    continue
                t.next_update = now_us + t.period
                new_stall, t.last_total = total != t.last_total, total
                if not new_stall and not t.pending:
                    continue
                growth = t.window_growth(now_us, total) if new_stall else 0
                if not t.pending:
                    if growth < t.line[1]:
                        continue
                    t.pending = True
                if now_us < t.last_event + t.line[2]:  # at most one event per window
                    continue
                with contextlib.suppress(OSError):
                    t.peer.send(b"!", socket.MSG_OOB)
                t.last_event, t.pending = now_us, False
                sent.append((t.line, growth))
        for line, growth in sent:
            for cb in self.on_event:
                cb(path, line, growth)
        return len(sent)

    def gone(self, path: str) -> None:
        """The cgroup of ``path`` was removed: its triggers end (``POLLERR`` on their descriptors)."""
        with self._lock:
            for t in self._triggers.pop(path, []):
                t.peer.close()

    def _prune(self, path: str) -> None:
        """Forget the triggers whose descriptor the agent closed (the kernel frees them on close)."""
        with self._lock:
            live = []
            for t in self._triggers.get(path, []):
                p = select.poll()
                p.register(t.peer.fileno(), select.POLLIN)
                if any(ev & (select.POLLHUP | select.POLLERR) for _, ev in p.poll(0)):
                    t.peer.close()
                else:
                    live.append(t)
            if live:
                self._triggers[path] = live
            else:
                self._triggers.pop(path, None)

    def close(self) -> None:
        with self._lock:
            for triggers in self._triggers.values():
                for t in triggers:
                    t.peer.close()
            self._triggers.clear()


def consume(fd: int, revents: int) -> int:
    """What the kernel's poll reports for a fake trigger's descriptor: the event consumed (one ``POLLPRI``
    per event), ``POLLERR | POLLPRI`` when its cgroup is gone (the peer closed)."""
    if revents & (select.POLLHUP | select.POLLERR):
        return select.POLLERR | select.POLLPRI
    if revents & select.POLLPRI:
        s = socket.socket(fileno=os.dup(fd))
        try:
            with contextlib.suppress(OSError):
                s.recv(1, socket.MSG_OOB | socket.MSG_DONTWAIT)
            with contextlib.suppress(OSError):
                while s.recv(64, socket.MSG_DONTWAIT):  # events that came before it (inline by now)
                    pass
        finally:
            s.close()
    return revents


__all__ = ["PressureRules", "consume", "parse_trigger"]
