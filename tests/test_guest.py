"""The real-kernel tests again, in guest kernels: each guest configuration boots once per session.

The host's kernel tests (``kernel`` marker) see cgroup v1 here.  This module boots a pure cgroup v2
kernel (and a cgroup v1 one with more CPUs than the host has) under QEMU (``kernelvm.py``; their
assets come from ``.ci/setup-guest``) once per test session
and configuration of :data:`GUESTS`, runs that configuration's tests inside it with this very
interpreter and source tree (the host's ``/`` is the guest's, read-only), collects their JUnit report
through the shared directory and turns each test function's result into one test here, failing with
the guest's message.  Without QEMU or a guest's kernel that guest's tests skip, saying why.

``QOSM_GUEST_DIR`` points at the guest's assets (default ``~/.cache/qosmanager/guest``),
``QOSM_GUEST_TIMEOUT`` bounds each guest run (seconds, default 1800: a guest run takes 2-4 minutes on an
idle 2-core host, 11 at load 10 with the level-2 memory test, more beside other QEMUs; the bound only
stops a hung guest), ``QOSM_GUEST_KEEP=1`` keeps the
shared directories (each guest's output, JUnit report and timing) and prints where they are.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import shutil
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import kernelvm

pytestmark = [pytest.mark.kernel, pytest.mark.guest]

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Guest:
    """One guest configuration and what runs in it: files (every test function in them) or
    ``file::function``."""

    name: str
    cpus: int
    tests: tuple[str, ...]
    cgroup: int = 2  # the guest's cgroup version (kernelvm.run's ``cgroup``)


GUESTS = (
    # Three CPUs: cpuset suppression leaves BE two at least, so a shrink needs a third.  What is the
    # same on both versions and proven on the host's v1 stays out, to keep the guest to about three
    # minutes: the agent's kill-mode run (the memory eviction here kills on v2), the static CPU
    # manager's exclusive CPUs, the restart after SIGKILL.  Kill mode's own v2 path (the pod dir's
    # cgroup.kill: a nested subtree, a fork loop) runs here, a few seconds without an agent.
    Guest("v2", 3, (
        "tests/test_kernel_cpu.py",
        "tests/test_kernel_koordnode.py",
        "tests/test_kernel_strategies.py",  # every strategy at once on a koordinator node: one agent run
        "tests/test_kernel_cpuset.py::test_cpuset_suppression_and_recovery",
        "tests/test_kernel_memory.py",
        "tests/test_kernel_memory_high.py",  # memory.high holds a BE allocator: no eviction, no OOM kill
        "tests/test_kernel_memtrigger.py",  # the usage trigger and a memory.pressure PSI trigger wake memoryHigh
        "tests/test_kernel_psicpu.py",  # a cpu.pressure PSI trigger samples the fast path (about 40 s)
        "tests/test_kernel_files.py",
        "tests/test_kernel_evict.py::test_memory_eviction_under_real_pressure",
        "tests/test_kernel_evict.py::test_be_cpu_eviction_kills_a_starved_be_pod",
        "tests/test_kernel_evict.py::test_be_cpu_eviction_stops_when_one_pod_is_enough",
        "tests/test_kernel_io.py",
        "tests/test_collector.py::test_real_kernel_busy_process",
        "tests/test_eviction_coordinator.py::test_real_kernel_kill_mode_ends_exactly_the_victims_processes",
        "tests/test_eviction_coordinator.py::test_real_kernel_cgroup_kill_ends_a_fork_loop",
        # the fake kernel against this one, operation by operation (about a minute and a half)
        "tests/test_fake_vs_kernel.py::test_fake_kernel_answers_as_the_kernel",
        "tests/test_fake_vs_kernel.py::test_memory_high_and_reclaim_take_page_cache_as_the_fake_does",
    )),
    # cgroup v1 with three CPUs: the host's two cannot show a cpuset shrink (BE keeps two at least).
    Guest("v1", 3, ("tests/test_kernel_cpuset.py::test_cpuset_suppression_and_recovery",
                    "tests/test_kernel_cpuset.py::test_v1_static_cpu_manager_pod_dirs_keep_the_kubelets_shared_pool"),
          cgroup=1),
)
GUEST_TIMEOUT = float(os.environ.get("QOSM_GUEST_TIMEOUT", "1800"))
ENV_PASSED = ("QOSMANAGER_PURE",)
GUEST_DISK = "/dev/vda"  # a sparse virtio disk of DISK_BYTES (zeros) for tests that need a block device
DISK_BYTES = 256 << 20


def guest_test_ids() -> list[str]:
    """``guest:file::function`` of every test function the guests run (found without importing)."""
    ids = []
    for guest in GUESTS:
        for spec in guest.tests:
            path, _, only = spec.partition("::")
            tree = ast.parse((ROOT / path).read_text())
            for node in tree.body:
                if (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
                        and (not only or node.name == only)):
                    ids.append(f"{guest.name}:{path}::{node.name}")
    return ids


@dataclass
class Outcome:
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # "id: message"
    skipped: list[str] = field(default_factory=list)  # "id: reason"
    xfailed: list[str] = field(default_factory=list)  # "id: reason" (known bugs, strict xfail)


@dataclass
class GuestReport:
    outcomes: dict[str, Outcome]  # file::function -> its results (one per parametrization)
    run: kernelvm.GuestRun
    error: str = ""  # why there are no results at all


def guest_script(guest: Guest, share: Path) -> str:
    """The shell script the guest runs: pytest on the guest's tests, its report in ``share``."""
    env = {"PYTHONDONTWRITEBYTECODE": "1", "QOSM_GUEST_DISK": GUEST_DISK}
    pythonpath = os.environ.get("PYTHONPATH")
    if pythonpath:  # relative entries (PYTHONPATH=src) mean the host's working directory
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in pythonpath.split(os.pathsep) if p)
    env.update({k: os.environ[k] for k in ENV_PASSED if k in os.environ})
    # hypothesis's plugin alone costs half a minute of start-up in the guest; no guest test uses it
    pytest_cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                  "-q", "-m", "kernel",
                  "--basetemp=/tmp/qosm-guest-pytest", f"--junitxml={share}/junit.xml",
                  "-o", "junit_family=xunit1", "-o", "junit_logging=no", *guest.tests]
    inner_timeout = max(GUEST_TIMEOUT - 30, 30)
    lines = [
        "set -u",
        f"cd {shlex.quote(str(ROOT))}",
        *(f"export {k}={shlex.quote(v)}" for k, v in env.items()),
        "uname -r; nproc; ls /sys/fs/cgroup",
        f"timeout -k 10 {inner_timeout:.0f} {shlex.join(pytest_cmd)} --durations=0",
    ]
    return "\n".join(lines) + "\n"


def parse_junit(path: Path) -> dict[str, Outcome]:
    outcomes: dict[str, Outcome] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        file = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
        name = case.get("name", "")
        test_id = f"{file}::{name}"
        out = outcomes.setdefault(f"{file}::{name.split('[')[0]}", Outcome())
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            out.failed.append(f"{test_id}: {failure.get('message', '')}\n{failure.text or ''}")
        elif skipped is not None and skipped.get("type") == "pytest.xfail":
            out.xfailed.append(f"{test_id}: {skipped.get('message', '')}")
        elif skipped is not None:
            out.skipped.append(f"{test_id}: {skipped.get('message', '')}")
        else:
            out.passed.append(test_id)
    return outcomes


class Guests:
    """Boots each guest configuration at most once per session, when its first test asks for it."""

    def __init__(self) -> None:
        self.reports: dict[str, GuestReport] = {}
        self.tmp = Path(tempfile.mkdtemp(prefix="qosm-guest-"))  # not under pytest's numbered temp dirs:
        # another session's pytest may prune those meanwhile

    def report(self, guest: Guest) -> GuestReport:
        if guest.name not in self.reports:
            self.reports[guest.name] = self._run(guest)
        return self.reports[guest.name]

    def _run(self, guest: Guest) -> GuestReport:
        """Boot the guest and run its tests.  A guest that wrote no report at all (QEMU without KVM
        sometimes panics at boot or dies mid-run) is booted once more, unless it ran out of time;
        what our tests break in the kernel breaks it twice, and both failures are reported."""
        first = self._boot(guest, "")
        if not first.error or first.run.timed_out:  # a run that was only slow would be slow again
            return first
        print(f"\nguest {guest.name}: {first.error.splitlines()[0]}; booting it once more")
        second = self._boot(guest, "-retry")
        if second.error:
            second.error = f"{second.error}\n(the first boot too: {first.error})"
        return second

    def _boot(self, guest: Guest, suffix: str) -> GuestReport:
        share = self.tmp / (guest.name + suffix)
        share.mkdir()
        disk = self.tmp / f"{guest.name}{suffix}.img"
        with open(disk, "wb") as f:
            f.truncate(DISK_BYTES)
        try:
            run = kernelvm.run(guest_script(guest, share), str(share), timeout=GUEST_TIMEOUT, cpus=guest.cpus,
                               drives=(str(disk),), cgroup=guest.cgroup)
        finally:
            disk.unlink()
        (share / "timing.json").write_text(json.dumps({"guest_seconds": round(run.seconds, 1), "rc": run.rc}))
        junit = share / "junit.xml"
        if not junit.exists():
            return GuestReport({}, run, error=f"the guest wrote no test report ({run.explain()})")
        return GuestReport(parse_junit(junit), run)

    def close(self) -> None:
        if os.environ.get("QOSM_GUEST_KEEP") == "1":
            print(f"\nguest shares kept: {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def guests() -> Iterator[Guests]:
    g = Guests()
    try:
        yield g
    finally:
        g.close()


@pytest.mark.parametrize("test_id", guest_test_ids())
def test_in_guest(test_id: str, guests: Guests) -> None:
    """One test function as it went in its guest (a cgroup v2 kernel, or v1 for the ``v1`` guest)."""
    name, _, inner = test_id.partition(":")
    guest = next(g for g in GUESTS if g.name == name)
    reason = kernelvm.unavailable(cgroup=guest.cgroup)
    if reason:
        pytest.skip(f"no cgroup v{guest.cgroup} guest: {reason}")
    report = guests.report(guest)
    where = f"in the cgroup v{guest.cgroup} guest ({guest.cpus} CPUs, {report.run.seconds:.0f} s)"
    if report.error:
        pytest.fail(report.error, pytrace=False)
    out = report.outcomes.get(inner)
    if out is None:
        pytest.fail(f"{inner} did not run {where}:\n{report.run.explain()}", pytrace=False)
    if out.failed:
        pytest.fail(f"{where}:\n" + "\n".join(out.failed), pytrace=False)
    if out.xfailed and not out.passed:
        pytest.xfail(f"{where}: " + "; ".join(out.xfailed))
    if not out.passed:
        pytest.skip(f"{where}: " + "; ".join(out.skipped))
