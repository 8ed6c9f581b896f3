"""Shared test fixtures.

Tests run on fake cgroup trees in temporary directories unless they are marked
``kernel`` and use the real cgroup fixtures (which skip, with the reason, where the
kernel's cgroups are not writable).
"""

from __future__ import annotations

import pytest

from qosmanager.sim.harness import Harness


@pytest.fixture(autouse=True)
def koordinator_node(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Strategy tests run on a koordinator node: BE pods carry the quotas, shares and memory limits
    koordlet's batch-resource hook writes, other pods the kubelet's (``qosmanager.sim.koordnode``)."""
    if request.path.name.startswith("test_strategy_"):
        monkeypatch.setattr(Harness, "koordinator_default", True)
