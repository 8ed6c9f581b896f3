"""``replay`` refuses absurd scenarios with one line before building anything, and removes its
temporary tree on every way out (success, a bad scenario, an error, Ctrl-C, SIGTERM)."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import qosmanager.sim.replay as replay
from qosmanager.api.decode import Limits
from qosmanager.sim.replay import ScenarioError, load_scenario, replay_main, run_scenario

SCENARIOS = Path(__file__).parent / "scenarios"


def base() -> dict[str, Any]:
    return {"now": 1000.0, "strategies": ["cpuSuppress"],
            "node": {"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "8", "memory": "32Gi"}}}}


def pod(i: int, containers: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": f"p{i}", "uid": f"u{i}"},
            "spec": {"containers": [{"name": f"c{j}"} for j in range(containers)]}}


def refused(tmp_path: Path, doc: dict[str, Any] | str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the command on the scenario; nothing may be built: run_scenario must not even start."""
    def no_build(*args: Any, **kw: Any) -> Any:
        raise AssertionError("the scenario was accepted and the fake host built")

    monkeypatch.setattr(replay, "run_scenario", no_build)
    path = tmp_path / "scenario.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    out, err = io.StringIO(), io.StringIO()
    assert replay_main(str(path), out, err) == 2
    assert out.getvalue() == ""
    lines = err.getvalue().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def with_(**changes: Any) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        doc = base()
        for key, value in changes.items():
            if key == "cpu":
                doc["node"]["status"]["capacity"]["cpu"] = value
            else:
                doc[key] = value() if callable(value) else value
        return doc
    return build


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (with_(cpu="1e18"), r"node: status.capacity.cpu: '1e18' is more than the kernel can enforce as a CFS "
                            r"quota \(17592186 cores at most\)"),
        (with_(cpu="4097"), r"at most 4096\)"),
        (with_(cpus=[{"id": 100_000, "core": 0, "socket": 0, "node": 0}]),
         r"cpus\[0\].id: must be within \[0, 4095\], got 100000"),
        (with_(cpus=lambda: [{"id": i, "core": i, "socket": 0, "node": 0} for i in range(5000)]),
         r"cpus: 5000 CPUs, more than replay builds \(at most 4096\)"),
        (with_(pods=lambda: [pod(i) for i in range(2001)]), "pods: 2001 pods, more than replay builds"),
        (with_(pods=lambda: [pod(i, 101) for i in range(100)]),
         r"pods\[99\]: 10100 containers in all, more than replay builds \(at most 10000\)"),
        (with_(metrics=lambda: [{"name": "node_cpu_usage", "samples": []}] * 20_001),
         "metrics: 20001 series, more than replay builds"),
        (with_(metrics=lambda: [{"name": "hostapp_cpu_usage", "app": f"a{i}", "samples": []}
                                for i in range(257)]),
         r"metrics\[256\].app: 257 host applications, more than replay builds \(at most 256\)"),
        (with_(metrics=lambda: [{"name": "node_cpu_usage", "samples": [[1.0, 1.0]] * 600_000}] * 2),
         r"metrics\[1\].samples: 1200000 samples in all, more than replay builds"),
        (with_(cgroups={"a" * 5000: "1"}), "cgroups: a path of 5000 characters"),
    ],
)
def test_absurd_sizes_are_refused_in_one_line_before_anything_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, build: Callable[[], dict[str, Any]], message: str
) -> None:
    line = refused(tmp_path, build(), monkeypatch)
    assert line.startswith("qosmanager replay: ")
    assert re.search(message, line), line


def test_deep_and_oversized_scenario_files_are_refused(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    deep = json.dumps(base())[:-1] + ', "description": ' + "[" * 1000 + "]" * 1000 + "}"
    assert refused(tmp_path, deep, monkeypatch).endswith("scenario.json: nested deeper than 100 levels")
    yaml_deep = "now: 1000\ndescription:\n" + "".join("  " * i + "- \n" for i in range(1, 200))
    assert "nested deeper than 100 levels" in refused(tmp_path, yaml_deep, monkeypatch)
    monkeypatch.setattr(replay, "SCENARIO_LIMITS", Limits(1024, 100, 1000))
    big = json.dumps({**base(), "description": "x" * 2000})
    assert "scenario.json: larger than replay reads" in refused(tmp_path, big, monkeypatch)


def tree_left(workdir: Path) -> list[str]:
    return [p.name for p in workdir.iterdir()]


def test_the_temporary_tree_goes_on_success_errors_and_ctrl_c(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    sc = load_scenario(str(SCENARIOS / "cfs-quota-v1.yaml"))
    assert run_scenario(sc, workdir=str(work))["writes"]
    assert tree_left(work) == []
    # a file the fake host cannot lay out (a path component longer than the kernel takes)
    bad = load_scenario(str(SCENARIOS / "cfs-quota-v1.yaml"))
    bad.cgroups = {"x" * 300 + "/f": "1"}
    with pytest.raises(ScenarioError, match=r"cannot be laid out: File name too long"):
        run_scenario(bad, workdir=str(work))
    assert tree_left(work) == []
    for exc in (RuntimeError("a bug"), KeyboardInterrupt()):
        def boom(h: Any, sc: Any, exc: BaseException = exc) -> Any:
            assert tree_left(work) != []  # the tree is there while replaying
            raise exc

        monkeypatch.setattr(replay, "_replay", boom)
        with pytest.raises(type(exc)):
            run_scenario(sc, workdir=str(work))
        assert tree_left(work) == []
    monkeypatch.setattr(replay, "_fast_tmp", lambda: str(work))
    err = io.StringIO()
    assert replay_main(str(SCENARIOS / "cfs-quota-v1.yaml"), io.StringIO(), err) == 130
    assert err.getvalue() == "qosmanager replay: interrupted\n"


SLOW_REPLAY = """
import sys, time
import qosmanager.sim.replay as replay
replay._fast_tmp = lambda: sys.argv[1]
def slow(h, sc):
    open(sys.argv[2], "w").close()
    time.sleep(600)
replay._replay = slow
sys.exit(replay.replay_main(sys.argv[3]))
"""


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 130)])
def test_the_temporary_tree_goes_on_sigterm_and_sigint(tmp_path: Path, sig: int, code: int) -> None:
    work, marker = tmp_path / "work", tmp_path / "replaying"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    # SIGINT at its default disposition, as a terminal's foreground job has it: a shell starts
    # background jobs (a CI runner's, too) with SIGINT ignored, the ignore survives exec, and Python
    # then installs no KeyboardInterrupt handler -- Ctrl-C cannot reach such a process at all
    proc = subprocess.Popen([sys.executable, "-c", SLOW_REPLAY, str(work), str(marker),
                             str(SCENARIOS / "cfs-quota-v1.yaml")],
                            env=env, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "replay did not start"
            time.sleep(0.05)
        assert tree_left(work) != []
        proc.send_signal(sig)
        # the replay sleeps 600 s: only the signal ends it; the wait is long because a loaded machine
        # (CI beside a QEMU guest) has taken over 30 s to run the interpreter's unwinding and rmtree
        assert proc.wait(timeout=180) == code
        assert tree_left(work) == []
    finally:
        if proc.poll() is None:
            proc.kill()
