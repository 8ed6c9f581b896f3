"""Shared test fixtures.

Tests run on fake cgroup trees in temporary directories unless they are marked
``kernel`` and use the real cgroup fixtures (which skip, with the reason, where the
kernel's cgroups are not writable).  Both are koordinator nodes by default: ``Harness`` and
``tests/realnode.py`` lay pods out with what the kubelet and koordlet's batch-resource hook write
(``qosmanager.sim.koordnode``).
"""

from __future__ import annotations

