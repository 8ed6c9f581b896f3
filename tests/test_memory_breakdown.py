"""benchmarks/memory_breakdown.py measures the agent with its pods in force.

A pods file of ``BACKGROUND_BYTES`` or more is decoded on a thread of its own (states/files.py), so
the first poll returns before the pods are known; the script waits for the decode to come into
force, as the agent's ticks do.  It measured a node of 0 pods before it did.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from qosmanager.states.files import BACKGROUND_BYTES

ROOT = Path(__file__).resolve().parents[1]


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("qosm_memory_breakdown", ROOT / "benchmarks" / "memory_breakdown.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def root() -> Iterator[str]:
    """On tmpfs where there is one, as the script's own default (3,000 cgroups' files on a disk are slow)."""
    d = tempfile.mkdtemp(prefix="qosm-mem-test-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow
def test_the_breakdown_counts_the_pods_of_a_pods_file_decoded_beside_the_ticks(
        root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    mb = load()
    mb.build(root, 1000, 2)
    assert os.path.getsize(os.path.join(root, "pods.json")) >= BACKGROUND_BYTES  # decoded on its own thread
    monkeypatch.setenv("QOSM_MEM_TICKS", "1")
    res = mb.run(root, traced=False)
    assert (res["pods"], res["containers"]) == (1000, 2000)
    assert [name for name, _, _ in res["rows"]][-1] == "1 more ticks"
