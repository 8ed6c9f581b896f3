"""Kernel files that features read or write, on a real kernel: they exist where the agent expects
them and its parsers and validators agree with what the kernel prints and accepts.  The host runs
this on cgroup v1, ``test_guest.py`` in the cgroup v2 guest.
"""

from __future__ import annotations

import os
import time

import pytest

from qosmanager.host import resources
from qosmanager.host.procfs import parse_psi
from realnode import real_node

pytestmark = pytest.mark.kernel

PSI_RESOURCES = ("cpu", "memory", "io")


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def test_pressure_files_parse(tmp_path) -> None:
    """``/proc/pressure/*`` (and on v2 every cgroup's ``*.pressure``) parse; a CPU-throttled
    container's CPU pressure grows while it runs."""
    if not os.path.exists("/proc/pressure/cpu"):
        pytest.skip("this kernel has no pressure stall information (CONFIG_PSI off or psi=0)")
    for res in PSI_RESOURCES:
        psi = parse_psi(read(f"/proc/pressure/{res}"))
        assert psi.some.total >= 0 and 0 <= psi.some.avg10 <= 100
        assert psi.full_supported, f"/proc/pressure/{res}: kernels since 5.13 print a full line"
    with real_node(tmp_path) as node:
        if node.version == 1:
            return  # v1 cgroups have no pressure files (only /proc/pressure, checked above)
        pod = node.add_pod("ls", "LS", cpu_milli=100, cpu_limit=True)
        ctr = pod.containers[0]
        node.start(pod)  # a busy loop held to a tenth of a CPU: it waits most of every period
        files = {res: node.path(ctr, f"{res}.pressure") for res in PSI_RESOURCES}
        before = {res: parse_psi(read(f)) for res, f in files.items()}
        time.sleep(1.5)
        after = parse_psi(read(files["cpu"]))
        # the total is in µs and grows at once (the averages move only every 2 s)
        assert after.some.total - before["cpu"].some.total > 100_000, "over a second of CPU stall"


def test_cpu_idle_exists_and_the_registry_agrees(tmp_path) -> None:
    """``cpu.idle`` (SCHED_IDLE for a cgroup) is in every cgroup below the root; the kernel accepts
    exactly what the agent's registry lets through (0 and 1)."""
    with real_node(tmp_path) as node:
        be = node.add_pod("be", "BE")
        path = node.path(be.dir, "cpu.idle")
        if not os.path.exists(path):
            pytest.skip(f"this kernel ({os.uname().release}) has no cpu.idle (5.15 and later do)")
        assert read(path).strip() == "0"
        validate = resources.get("cpu.idle").validate
        for value in ("1", "0", "2", "-1"):
            try:
                with open(path, "w") as f:
                    f.write(value)
                kernel_ok = True
            except OSError:
                kernel_ok = False
            assert kernel_ok == (validate(value) is None), f"cpu.idle {value}: kernel {kernel_ok}"
            if kernel_ok:
                assert read(path).strip() == value
