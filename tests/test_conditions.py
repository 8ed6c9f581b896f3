"""The degraded-conditions set: new or changed conditions are reported once, clearing works by key and prefix."""

from __future__ import annotations

from qosmanager.framework.conditions import Conditions


def test_set_reports_new_and_changed_only() -> None:
    t = [10.0]
    c = Conditions(clock=lambda: t[0])
    assert c.set("nodeslo", "1 field dropped") is True
    t[0] = 11.0
    assert c.set("nodeslo", "1 field dropped") is False  # standing: not news, keeps its start
    got = c.get("nodeslo")
    assert got is not None and got.since == 10.0
    assert c.set("nodeslo", "2 fields dropped") is True
    got = c.get("nodeslo")
    assert got is not None and got.since == 11.0 and got.message == "2 fields dropped"
    assert len(c) == 1 and bool(c)


def test_clear_by_key_and_prefix() -> None:
    c = Conditions()
    c.set("collector/qos-cgroups", "kubepods/besteffort missing")
    c.set("collector/other", "x")
    c.set("nodeslo", "y")
    assert c.clear("nodeslo") is True and c.clear("nodeslo") is False
    c.clear_prefix("collector/")
    assert c.snapshot() == {} and not c
