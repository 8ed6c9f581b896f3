"""The calling thread's CPU scheduling class: real-time for a thread that must run the moment it wakes.

The fast path's sampler (:mod:`qosmanager.framework.fastpath`) wakes every 50-100 ms for about 30 µs and
is timed from the moment LS demand rises: the moment the node's CPUs are busiest.  As an ordinary (CFS)
thread its wake-ups waited for a CPU behind that very load and the machine's neighbours: on the 2-CPU v1
host at load 7-13, beside two busy loops, samples due every 100 ms came up to 245-389 ms apart (the thread
runnable, not running, for 40-80 ms after its timer fired), and a reaction takes two samples, the one that
sees the rise in part and the one that sees it whole.  In ``SCHED_FIFO``, at the lowest priority
(:data:`REALTIME_PRIORITY`), it runs before every ordinary task as soon as it wakes.  Its own cost is
unchanged (a few preads per wake-up), and the kernel's real-time throttling
(``/proc/sys/kernel/sched_rt_runtime_us``, 95 % of a CPU by default) bounds it should it ever spin.
``SCHED_RESET_ON_FORK``: a process it starts runs as an ordinary one.

The kernel refuses it without ``CAP_SYS_NICE`` (or an ``RLIMIT_RTPRIO``), and in a cgroup with no
real-time budget (``CONFIG_RT_GROUP_SCHED``: ``cpu.rt_runtime_us`` 0, every cgroup but the root unless
given one); the thread then stays as it was, and :func:`realtime` says why.
"""

from __future__ import annotations

import os

REALTIME_PRIORITY = 1  # the lowest SCHED_FIFO priority: before every ordinary task, after every other RT one


def realtime(priority: int = REALTIME_PRIORITY) -> str:
    """Put the calling thread in ``SCHED_FIFO`` at ``priority`` (reset to ordinary in a child it forks).
    Returns "" when it is, else why not (the thread is left as it was)."""
    policy = getattr(os, "SCHED_FIFO", None)
    if policy is None or not hasattr(os, "sched_setscheduler"):
        return "no SCHED_FIFO on this platform"
    try:
        os.sched_setscheduler(0, policy | getattr(os, "SCHED_RESET_ON_FORK", 0), os.sched_param(priority))
    except OSError as e:
        return f"{e.strerror or e} (needs CAP_SYS_NICE, and a real-time budget in the thread's cgroup)"
    return ""


def is_realtime(tid: int = 0) -> bool:
    """Whether thread ``tid`` (0: the calling one) runs in a real-time class."""
    try:
        policy = os.sched_getscheduler(tid) & ~getattr(os, "SCHED_RESET_ON_FORK", 0)
    except (OSError, AttributeError):
        return False
    return policy in (getattr(os, "SCHED_FIFO", -1), getattr(os, "SCHED_RR", -1))


__all__ = ["REALTIME_PRIORITY", "is_realtime", "realtime"]
