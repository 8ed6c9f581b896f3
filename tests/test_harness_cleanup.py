"""The harness's own temporary directory goes with it: tests make thousands of harnesses, each a fake
host of hundreds of files (left behind, they filled a disk's inodes)."""

from __future__ import annotations

import gc
import os
from pathlib import Path

from qosmanager.sim.harness import Harness


def test_a_harness_removes_the_directory_it_made() -> None:
    h = Harness()
    root = h.root
    assert os.path.isdir(os.path.join(root, "host"))
    del h
    gc.collect()
    assert not os.path.exists(root)


def test_a_harness_leaves_a_directory_it_was_given(tmp_path: Path) -> None:
    h = Harness(root=str(tmp_path / "given"))
    root = h.root
    del h
    gc.collect()
    assert os.path.isdir(os.path.join(root, "host"))
