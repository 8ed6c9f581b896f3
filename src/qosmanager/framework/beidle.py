"""Gate ``BECPUIdle`` (off by default): BestEffort pods scheduled as SCHED_IDLE.

With the gate on, the agent keeps ``cpu.idle`` at 1 on the BestEffort QoS dir (cgroup v2, and cgroup
v1's cpu controller on kernels that have the file, 5.15 and later): the kernel then runs BE only when
nothing else wants the CPU, and an LS task that wakes preempts it at once -- koordinator's open proposal
for BE in place of ``cpu.shares`` 2.  The write goes through the executor (audited, honouring
``--dry-run``) at the reconcile interval, so a reset by someone else is undone within it; a kernel
without the file is skipped without error.  Turning the gate off leaves the file as it is (the agent
leaves every file as it is when it stops, too): ``echo 0 > cpu.idle`` gives the BE dir back its weight.

Whether it helps is measured, not assumed: the outcome benchmark's ``fast-idle`` mode
(``benchmarks/test_bench_outcome.py``); the README says what it found.
"""

from __future__ import annotations

from qosmanager.api.pod import KUBE_QOS_BESTEFFORT
from qosmanager.executor.executor import Executor, Write, WriteResult
from qosmanager.host.cgroups import CgroupLayout

GATE = "BECPUIdle"
NAME = "beCPUIdle"
RESOURCE = "cpu.idle"


class BEIdle:
    """The job that keeps the BE QoS dir's ``cpu.idle`` at 1."""

    name = NAME

    def __init__(self, layout: CgroupLayout, executor: Executor) -> None:
        self.executor = executor
        self.be_dir = layout.qos_dir(KUBE_QOS_BESTEFFORT)

    def tick(self, now: float) -> list[WriteResult]:
        w = Write(NAME, RESOURCE, "1", self.be_dir, reason=f"{GATE}: BestEffort pods run as SCHED_IDLE")
        return self.executor.apply([w], now)


__all__ = ["GATE", "NAME", "BEIdle"]
