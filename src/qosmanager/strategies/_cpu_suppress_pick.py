"""cpuSuppress's cpuset policy: which CPUs BE gets (koordlet's ``adjustByCPUSet`` and
``calculateBESuppressCPUSetPolicy``).

The BE budget, in whole CPUs, is taken out of the LSR pool and the rest in proportion to their sizes;
within a pool, CPUs are spread over NUMA node / socket buckets round-robin, whole hyper-thread pairs
first, then single CPUs.
"""

from __future__ import annotations

from collections.abc import Sequence

from qosmanager.host.sysfs import Processor


def pick_be_cpuset(n: int, lsr: Sequence[Processor], ls: Sequence[Processor]) -> list[int]:
    """``n`` BE CPUs out of the LSR pool and the rest, in proportion to the pools' sizes (koordlet's
    ``adjustByCPUSet``); the caller has checked that some pool is not empty."""
    n_lsr = n * len(lsr) // (len(lsr) + len(ls))
    be: list[int] = []
    if n_lsr > 0:
        be += pick_be_cpus(n_lsr, lsr)
    if n - n_lsr > 0:
        be += pick_be_cpus(n - n_lsr, ls)
    return be


def pick_be_cpus(cpus: int, procs: Sequence[Processor]) -> list[int]:
    """``calculateBESuppressCPUSetPolicy``: ``cpus`` CPUs out of ``procs``, spread over NUMA node /
    socket buckets round-robin, full hyper-thread pairs first, then single CPUs.

    Returns [] when ``procs`` has fewer than ``cpus`` CPUs.  The order is the picking order.
    """
    n = len(procs)
    if n < cpus:
        return []
    # koordlet fix: koordlet keys buckets by (NodeID + N) * (SocketID + 1), which puts two different
    # (node, socket) pairs in one bucket when the products collide (e.g. N=8: node 4 of socket 1 and
    # node 0 of socket 2 are both 24), so BE CPUs are no longer spread over them.  We key by the pair;
    # without a collision the buckets, and so the picks, are the same.
    groups: dict[tuple[int, int], list[Processor]] = {}
    for p in procs:
        groups.setdefault((p.node, p.socket), []).append(p)
    buckets = [sorted(g, key=lambda p: (p.core, p.cpu)) for g in groups.values()]
    buckets.sort(key=lambda b: (-len(b), b[0].cpu))
    need = cpus
    used: set[int] = set()
    result: list[int] = []
    nb = len(buckets)
    i = 0
    if nb:
        prev = -1
        while need > 1:  # pairs of hyper-threads of one core
            if i == 0:
                if prev == need:
                    break  # a whole round without a pair
                prev = need
            b = buckets[i]
            for j in range(len(b) - 1):
                if b[j].cpu in used:
                    continue
                if b[j].core == b[j + 1].core:
                    result += [b[j].cpu, b[j + 1].cpu]
                    used.update((b[j].cpu, b[j + 1].cpu))
                    need -= 2
                    break
            i = (i + 1) % nb
        start, prev = i, -1
        while need > 0:  # single CPUs, from the bucket where the pairs stopped
            if i == start:
                if prev == need:
                    break
                prev = need
            for p in buckets[i]:
                if p.cpu not in used:
                    result.append(p.cpu)
                    used.add(p.cpu)
                    need -= 1
                    break
            i = (i + 1) % nb
    return result
