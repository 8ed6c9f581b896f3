"""The real-kernel tests again, on cgroup v2: one guest boot per session runs them all.

The host's kernel tests (``kernel`` marker) see cgroup v1 here.  This module boots a pure cgroup v2
kernel under QEMU (``kernelvm.py``; its assets come from ``.ci/setup-guest``) once per test session,
runs :data:`GUEST_TESTS` inside it with this very interpreter and source tree (the host's ``/`` is
the guest's, read-only), collects their JUnit report through the shared directory and turns each
test function's result into one test here, failing with the guest's message.  Without QEMU or the
guest kernel every test here skips, saying why.

``QOSM_GUEST_DIR`` points at the guest's assets (default ``~/.cache/qosmanager/guest``),
``QOSM_GUEST_TIMEOUT`` bounds the whole guest run (seconds, default 480), ``QOSM_GUEST_KEEP=1`` keeps
the shared directory (the guest's output, its JUnit report and timings) and prints where it is.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import kernelvm

pytestmark = [pytest.mark.kernel, pytest.mark.guest]

ROOT = Path(__file__).resolve().parent.parent
# What runs in the guest: files (every test function in them) or file::function.
GUEST_TESTS = (
    "tests/test_kernel_cpu.py",
    "tests/test_collector.py::test_real_kernel_busy_process",
)
GUEST_TIMEOUT = float(os.environ.get("QOSM_GUEST_TIMEOUT", "480"))
ENV_PASSED = ("QOSMANAGER_PURE",)


def guest_test_ids() -> list[str]:
    """``file::function`` of every test function :data:`GUEST_TESTS` names (found without importing)."""
    ids = []
    for spec in GUEST_TESTS:
        path, _, only = spec.partition("::")
        tree = ast.parse((ROOT / path).read_text())
        for node in tree.body:
            if (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
                    and (not only or node.name == only)):
                ids.append(f"{path}::{node.name}")
    return ids


@dataclass
class Outcome:
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # "id: message"
    skipped: list[str] = field(default_factory=list)  # "id: reason"


@dataclass
class GuestReport:
    outcomes: dict[str, Outcome]  # file::function -> its results (one per parametrization)
    run: kernelvm.GuestRun
    error: str = ""  # why there are no results at all


def guest_script(share: Path) -> str:
    """The shell script the guest runs: pytest on :data:`GUEST_TESTS`, its report in ``share``."""
    env = {"PYTHONDONTWRITEBYTECODE": "1"}
    pythonpath = os.environ.get("PYTHONPATH")
    if pythonpath:  # relative entries (PYTHONPATH=src) mean the host's working directory
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in pythonpath.split(os.pathsep) if p)
    env.update({k: os.environ[k] for k in ENV_PASSED if k in os.environ})
    # hypothesis's plugin alone costs half a minute of start-up in the guest; no guest test uses it
    pytest_cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                  "-q", "-m", "kernel",
                  "--basetemp=/tmp/qosm-guest-pytest", f"--junitxml={share}/junit.xml",
                  "-o", "junit_family=xunit1", "-o", "junit_logging=no", *GUEST_TESTS]
    inner_timeout = max(GUEST_TIMEOUT - 30, 30)
    lines = [
        "set -u",
        f"cd {shlex.quote(str(ROOT))}",
        *(f"export {k}={shlex.quote(v)}" for k, v in env.items()),
        "uname -r; nproc; cat /sys/fs/cgroup/cgroup.subtree_control",
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
        elif skipped is not None:
            out.skipped.append(f"{test_id}: {skipped.get('message', '')}")
        else:
            out.passed.append(test_id)
    return outcomes


@pytest.fixture(scope="session")
def guest_report() -> Iterator[GuestReport]:
    reason = kernelvm.unavailable()
    if reason:
        pytest.skip(f"no cgroup v2 guest: {reason}")
    # not under pytest's numbered temp dirs: another session's pytest may prune those meanwhile
    share = Path(tempfile.mkdtemp(prefix="qosm-guest-"))
    try:
        t0 = time.monotonic()
        run = kernelvm.run(guest_script(share), str(share), timeout=GUEST_TIMEOUT)
        timing = {"guest_seconds": round(run.seconds, 1), "host_seconds": round(time.monotonic() - t0, 1),
                  "rc": run.rc}
        (share / "timing.json").write_text(json.dumps(timing))
        junit = share / "junit.xml"
        if not junit.exists():
            yield GuestReport({}, run, error=f"the guest wrote no test report ({run.explain()})")
        else:
            yield GuestReport(parse_junit(junit), run)
    finally:
        if os.environ.get("QOSM_GUEST_KEEP") == "1":
            print(f"\nguest share kept: {share}")
        else:
            shutil.rmtree(share, ignore_errors=True)


@pytest.mark.parametrize("test_id", guest_test_ids())
def test_in_cgroup_v2_guest(test_id: str, guest_report: GuestReport) -> None:
    """One test function of :data:`GUEST_TESTS`, as it went on the guest's cgroup v2 kernel."""
    if guest_report.error:
        pytest.fail(guest_report.error, pytrace=False)
    out = guest_report.outcomes.get(test_id)
    if out is None:
        pytest.fail(f"{test_id} did not run in the guest:\n{guest_report.run.explain()}", pytrace=False)
    if out.failed:
        pytest.fail("in the cgroup v2 guest:\n" + "\n".join(out.failed), pytrace=False)
    if not out.passed:
        pytest.skip("in the cgroup v2 guest: " + "; ".join(out.skipped))
