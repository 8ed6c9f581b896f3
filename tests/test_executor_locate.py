"""The executor's locate room: which file a (resource, dir) is on this host, remembered once."""

from __future__ import annotations

import pytest

from qosmanager.executor.locate import Locator
from qosmanager.host import resources as res
from qosmanager.host.cgroups import CgroupLayout
from qosmanager.host.roots import HostRoots


def locator(tmp_path, version: int) -> Locator:
    roots = HostRoots(cgroup=str(tmp_path / "cg"), proc=str(tmp_path / "proc"), sys=str(tmp_path / "sys"))
    return Locator(CgroupLayout(roots, version, "cgroupfs"))


@pytest.mark.parametrize(("version", "target"), [(1, "cpu/kubepods/besteffort/cpu.cfs_quota_us"),
                                                 (2, "kubepods/besteffort/cpu.max")])
def test_a_quota_is_the_file_of_this_cgroup_version(tmp_path, version: int, target: str) -> None:
    loc = locator(tmp_path, version)
    got = loc.get(res.get("cpu.cfs_quota_us"), "kubepods/besteffort")
    assert got is not None
    r, kept, display, depth, key = got
    assert (r.name, display, depth, key) == ("cpu.cfs_quota_us", target, 2, (target, "cpu.cfs_quota_us", ""))
    assert kept is None  # the absolute path is the cgroup root joined with the display path: not kept
    assert loc.path(got) == str(tmp_path / "cg" / target)
    assert loc.get(res.get("cpu.cfs_quota_us"), "kubepods/besteffort") is got  # remembered


def test_non_cgroup_files_carry_their_root_and_a_missing_knob_is_none(tmp_path) -> None:
    loc = locator(tmp_path, 2)
    path, display = loc.resolve("min_free_kbytes") or ("", "")
    assert (display, path) == ("proc/sys/vm/min_free_kbytes", str(tmp_path / "proc" / "sys/vm/min_free_kbytes"))
    assert loc.get(res.get("cpu.cfs_burst_us"), "") is not None
    v1_only = [n for n in res.REGISTRY if res.get(n).root == "cgroup" and res.get(n).file_name(2) is None]
    assert v1_only and loc.get(res.get(v1_only[0]), "kubepods") is None


def test_forget_drops_what_is_under_a_pods_dirs_only(tmp_path) -> None:
    loc = locator(tmp_path, 1)
    quota = res.get("cpu.cfs_quota_us")
    for cg in ("kubepods/pod1", "kubepods/pod1/c1", "kubepods/pod12", "kubepods"):
        loc.get(quota, cg)
    assert {"cpu/kubepods/pod1/", "memory/kubepods/pod1/", "cpuset/kubepods/pod1/"} <= set(
        loc.prefixes(["kubepods/pod1"]))  # every v1 hierarchy's copy of the dir
    loc.forget(["kubepods/pod1"])
    assert sorted(cg for _, cg in loc.where) == ["kubepods", "kubepods/pod12"]
