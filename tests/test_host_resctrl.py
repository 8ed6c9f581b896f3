"""resctrl formulas (infra §2.9, QoS §4.6) worked by hand, schemata format and paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from qosmanager.host.procfs import CPUInfoSummary
from qosmanager.host.resctrl import (
    cat_l3_mask,
    cbm_mask_path,
    format_l3,
    format_mb,
    group_dir,
    mba_value,
    mon_data_dirs,
    parse_schemata,
    parse_tasks,
    read_cbm_mask,
    resctrl_root,
    schemata_path,
    supports_resctrl,
    supports_resctrl_monitoring,
    tasks_path,
)
from qosmanager.host.roots import HostRoots


@pytest.mark.parametrize(
    ("cbm", "start", "end", "expected"),
    [
        (0x7FF, 0, 100, 0x7FF),  # 11 ways, all of them
        (0x7FF, 0, 30, 0xF),  # ceil(3.3) = 4 ways from way 0
        (0x7FF, 30, 100, 0x7F0),  # ways 4..10
        (0x7FF, 50, 60, 0x40),  # ceil(5.5) = 6 .. ceil(6.6) = 7: way 6 only
        (0xFFFFF, 10, 55, 0x7FC),  # 20 ways: ceil(2.0) = 2 .. ceil(11.0) = 11
        (0xFFFFF, 0, 1, 0x1),  # ceil(0.2) = 1
        (0x1, 0, 100, 0x1),  # a single way
    ],
)
def test_cat_l3_mask(cbm: int, start: int, end: int, expected: int) -> None:
    assert cat_l3_mask(cbm, start, end) == expected


@pytest.mark.parametrize(
    ("cbm", "start", "end", "match"),
    [
        (0x7FE, 0, 100, "illegal cbm"),
        (0x0, 0, 100, "illegal cbm"),
        (0x5, 0, 100, "illegal cbm"),
        (0x7FF, -1, 100, "percent"),
        (0x7FF, 0, 101, "percent"),
        (0x7FF, 50, 50, "percent"),
        (0x7FF, 60, 50, "percent"),
    ],
)
def test_cat_l3_mask_errors(cbm: int, start: int, end: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cat_l3_mask(cbm, start, end)


@pytest.mark.parametrize(
    ("percent", "vendor", "expected"),
    [
        (100, "GenuineIntel", 100),
        (90, "GenuineIntel", 90),
        (91, "GenuineIntel", 100),
        (55, "GenuineIntel", 60),
        (1, "GenuineIntel", 10),
        (10, "GenuineIntel", 10),
        (100, "AuthenticAMD", 2048),
        (50, "AuthenticAMD", 80),  # 160 * 0.5
        (33, "AuthenticAMD", 52),  # int(52.8)
        (1, "AuthenticAMD", 1),  # int(1.6)
        (99, "AuthenticAMD", 158),  # int(158.4)
    ],
)
def test_mba_value(percent: int, vendor: str, expected: int) -> None:
    assert mba_value(percent, vendor) == expected


@pytest.mark.parametrize("percent", [0, 101, -5])
def test_mba_value_range(percent: int) -> None:
    with pytest.raises(ValueError, match="MBA percent"):
        mba_value(percent, "GenuineIntel")


def test_parse_schemata_kernel_padding() -> None:
    s = parse_schemata("    L3:0=7ff;1=3ff\n    MB:0=100;1= 50\n")
    assert s == {"L3": {0: 0x7FF, 1: 0x3FF}, "MB": {0: 100, 1: 50}}


def test_parse_schemata_other_resources_ignored() -> None:
    text = "L3CODE:0=fff;1=fff\nL3DATA:0=fff;1=fff\nL2:0=ff\nMB:0=2048;1=2048\nSMBA:0=2048\n"
    assert parse_schemata(text) == {"L3": {}, "MB": {0: 2048, 1: 2048}}
    assert parse_schemata("") == {"L3": {}, "MB": {}}


@pytest.mark.parametrize("text", ["L3:0=xyz\n", "L3:0\n", "MB:a=100\n", "MB:0=1e2\n"])
def test_parse_schemata_bad(text: str) -> None:
    with pytest.raises(ValueError, match="resctrl schemata"):
        parse_schemata(text)


def test_format_lines() -> None:
    assert format_l3({1: 0x7F0, 0: 0xF}) == "L3:0=f;1=7f0;\n"
    assert format_mb({1: 50, 0: 100}) == "MB:0=100;1=50;\n"
    masks = {0: 0x7FF, 1: 0xABC, 3: 0x1}
    values = {0: 100, 1: 20, 3: 2048}
    assert parse_schemata(format_l3(masks) + format_mb(values)) == {"L3": masks, "MB": values}


def test_tasks() -> None:
    assert parse_tasks("12\n7\n\n100\n") == [12, 7, 100]
    assert parse_tasks("") == []


def test_support_flags() -> None:
    def info(*flags: str) -> CPUInfoSummary:
        return CPUInfoSummary("GenuineIntel", "x", frozenset(flags))

    assert supports_resctrl(info("cat_l3", "mba", "fpu"))
    assert not supports_resctrl(info("cat_l3"))
    assert not supports_resctrl(info("mba"))
    assert supports_resctrl_monitoring(info("cqm_llc", "cqm_occup_llc", "cqm_mbm_total", "cqm_mbm_local"))
    assert not supports_resctrl_monitoring(info("cqm_llc", "cqm_occup_llc", "cqm_mbm_total"))


def test_paths(tmp_path: Path) -> None:
    roots = HostRoots(sys=str(tmp_path))
    root = f"{tmp_path}/fs/resctrl"
    assert resctrl_root(roots) == root
    assert group_dir(roots) == root
    assert schemata_path(roots) == f"{root}/schemata"
    assert schemata_path(roots, "BE") == f"{root}/BE/schemata"
    assert tasks_path(roots, "LSR") == f"{root}/LSR/tasks"
    assert cbm_mask_path(roots) == f"{root}/info/L3/cbm_mask"
    with pytest.raises(ValueError):
        group_dir(roots, "../x")
    assert read_cbm_mask(roots) is None
    Path(cbm_mask_path(roots)).parent.mkdir(parents=True)
    Path(cbm_mask_path(roots)).write_text("7ff\n")
    assert read_cbm_mask(roots) == 0x7FF
    Path(cbm_mask_path(roots)).write_text("zz\n")
    assert read_cbm_mask(roots) is None
    assert mon_data_dirs(roots, "BE") == {}
    for name in ("mon_L3_01", "mon_L3_00", "mon_MB_00"):
        (tmp_path / "fs/resctrl/BE/mon_data" / name).mkdir(parents=True)
    mon = f"{root}/BE/mon_data"
    assert mon_data_dirs(roots, "BE") == {0: f"{mon}/mon_L3_00", 1: f"{mon}/mon_L3_01"}
