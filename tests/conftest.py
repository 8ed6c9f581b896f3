"""Shared test fixtures.

Tests run on fake cgroup trees in temporary directories unless they are marked
``kernel`` and use the real cgroup fixtures (which skip, with the reason, where the
kernel's cgroups are not writable).  Both are koordinator nodes by default: ``Harness`` and
``tests/realnode.py`` lay pods out with what the kubelet and koordlet's batch-resource hook write
(``qosmanager.sim.koordnode``).  A session starts by removing what killed runs left behind (their
empty cgroups under this process's own, their symlink roots: ``tests/leftovers.py``).
"""

from __future__ import annotations

import pytest


def pytest_sessionstart(session: pytest.Session) -> None:
    """Remove what killed runs left: dead runs' empty test cgroups and their symlink roots (tests/leftovers.py)."""
    import leftovers

    leftovers.at_session_start(session)
