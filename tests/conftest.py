"""Shared test fixtures.

Tests run on fake cgroup trees in temporary directories unless they are marked
``kernel`` and use the real cgroup fixtures (which skip, with the reason, where the
kernel's cgroups are not writable).
"""
