"""Runs the stat parser's coverage-guided fuzz target (``fuzz/stat_reader_fuzz.py``) in a subprocess.

The test suite runs it for a bounded number of inputs; ``benchmarks/test_bench_fuzz.py`` runs it
for longer when asked.  The seed corpus is copied so that the inputs a run adds stay out of the tree.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TARGET = os.path.join(ROOT, "fuzz", "stat_reader_fuzz.py")
CORPUS = os.path.join(ROOT, "fuzz", "corpus", "stat_reader")
DICT = os.path.join(ROOT, "fuzz", "stat_reader.dict")


@dataclass
class FuzzRun:
    returncode: int
    output: str
    runs: int  # inputs executed, as libFuzzer reports them
    coverage: int  # coverage points reached (libFuzzer's "cov")
    seconds: int

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.output.splitlines()[-lines:])


def run(workdir: str, *, runs: int = -1, seconds: int = 0, timeout: float = 300) -> FuzzRun:
    """Fuzz for ``runs`` inputs or ``seconds`` (whichever ends first); artifacts go to ``workdir``."""
    corpus = os.path.join(workdir, "corpus")
    shutil.copytree(CORPUS, corpus, dirs_exist_ok=True)
    cmd = [sys.executable, TARGET, f"-runs={runs}", f"-dict={DICT}", f"-artifact_prefix={workdir}/",
           "-print_final_stats=1"]
    if seconds:
        cmd.append(f"-max_total_time={seconds}")
    cmd.append(corpus)
    env = dict(os.environ)
    import qosmanager  # the run imports the very package the tests import

    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(qosmanager.__file__)), env.get("PYTHONPATH", "")])
    p = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    out = p.stdout + p.stderr
    done = re.search(r"Done (\d+) runs in (\d+) second", out)
    cov = re.findall(r"cov: (\d+)", out)
    return FuzzRun(p.returncode, out, int(done.group(1)) if done else 0, int(cov[-1]) if cov else 0,
                   int(done.group(2)) if done else 0)
