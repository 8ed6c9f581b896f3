"""The cgroup v2 guest's machinery without booting it: initramfs archive, module order, assets,
the guest's script and the mapping of its JUnit report to host results."""

from __future__ import annotations

import gzip
import json
import os
import sys

import pytest

import kernelvm
import test_guest


def read_newc(data: bytes) -> list[tuple[str, int, bytes]]:
    """(name, mode, content) of every entry of a "newc" cpio archive, checking its alignment."""
    out = []
    pos = 0
    while True:
        assert data[pos:pos + 6] == b"070701", f"no header at {pos}"
        fields = [int(data[pos + 6 + 8 * i: pos + 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = fields[1], fields[6], fields[11]
        name_at = pos + 110
        name = data[name_at:name_at + namesize - 1].decode()
        assert data[name_at + namesize - 1] == 0
        data_at = name_at + namesize + (-(name_at + namesize) % 4)
        if name == "TRAILER!!!":
            return out
        out.append((name, mode, data[data_at:data_at + size]))
        pos = data_at + size + (-(data_at + size) % 4)


def test_newc_entries_are_aligned_and_round_trip() -> None:
    entries = [("bin", 0o40755, b""), ("init", 0o100755, b"#!/bin/sh\n"), ("a/b.ko", 0o100644, b"x" * 5)]
    archive = b"".join(kernelvm._newc_entry(n, m, d, i + 1) for i, (n, m, d) in enumerate(entries))
    archive += kernelvm._newc_entry("TRAILER!!!", 0, b"", 0)
    assert len(archive) % 4 == 0
    assert read_newc(archive) == entries


def test_module_order_puts_dependencies_first_and_skips_built_ins(tmp_path) -> None:
    (tmp_path / "modules.dep").write_text(
        "kernel/fs/9p/9p.ko.xz: kernel/net/9p/9pnet.ko.xz kernel/fs/netfs/netfs.ko.xz\n"
        "kernel/net/9p/9pnet_virtio.ko.xz: kernel/net/9p/9pnet.ko.xz\n"
        "kernel/net/9p/9pnet.ko.xz:\n"
        "kernel/fs/netfs/netfs.ko.xz:\n"
        "kernel/fs/overlayfs/overlay.ko.xz:\n")
    (tmp_path / "modules.builtin").write_text("kernel/drivers/virtio/virtio_pci.ko\n")
    order = kernelvm._module_order(str(tmp_path), ("virtio_pci", "9pnet_virtio", "9p", "overlay"))
    names = [kernelvm._module_name(p) for p in order]
    assert names == ["9pnet", "9pnet_virtio", "netfs", "9p", "overlay"]
    with pytest.raises(RuntimeError, match="virtio_blk"):
        kernelvm._module_order(str(tmp_path), ("virtio_blk",))


def test_assets_of_another_init_are_rebuilt_and_missing_ones_are_explained(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("QOSM_GUEST_DIR", str(tmp_path))
    assert kernelvm.guest_dir() == str(tmp_path)
    assert kernelvm.Assets.load(str(tmp_path)) is None
    (tmp_path / "vmlinuz").write_bytes(b"k")
    (tmp_path / "initrd.gz").write_bytes(gzip.compress(b""))
    meta = {"kernel": "vmlinuz", "initrd": "initrd.gz", "version": "6.12", "modules": ["9p"],
            "init": kernelvm._init_digest()}
    (tmp_path / "assets.json").write_text(json.dumps(meta))
    assets = kernelvm.Assets.load(str(tmp_path))
    assert assets is not None and assets.kernel == str(tmp_path / "vmlinuz") and assets.modules == ("9p",)
    (tmp_path / "assets.json").write_text(json.dumps(dict(meta, init="older")))
    assert kernelvm.Assets.load(str(tmp_path)) is None  # another version of the init: rebuild
    reason = kernelvm.unavailable(str(tmp_path))
    assert reason is not None and ("setup-guest" in reason or "x86_64" in reason)


def test_qemu_command_shares_root_read_only_and_the_share_writable(tmp_path) -> None:
    assets = kernelvm.Assets(str(tmp_path), "/k", "/i", "6.12", ("9pnet", "9p"))
    cmd = kernelvm.qemu_command(assets, "/tmp/share", cpus=4, drives=("/tmp/d.img",))
    joined = " ".join(cmd)
    assert "accel=tcg" in joined and cmd[cmd.index("-smp") + 1] == "4"
    assert "path=/,mount_tag=hostroot,security_model=none,readonly=on" in joined
    assert "path=/tmp/share,mount_tag=share" in joined and "readonly" not in joined.split("mount_tag=share")[1]
    append = cmd[cmd.index("-append") + 1]
    assert "cgroup_no_v1=all" in append and "qosm.share=/tmp/share" in append and "qosm.modules=9pnet,9p" in append
    assert "file=/tmp/d.img,format=raw,if=virtio" in joined


def test_the_v1_guest_has_its_own_assets_and_keeps_the_v1_controllers(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("QOSM_GUEST_DIR", str(tmp_path / "g"))
    assert kernelvm.guest_dir() == str(tmp_path / "g")
    assert kernelvm.guest_dir(1) == str(tmp_path / "g") + "-v1"
    assets = kernelvm.Assets(str(tmp_path), "/k", "/i", "6.1", ("9p",))
    append = (cmd := kernelvm.qemu_command(assets, "/tmp/share", cgroup=1))[cmd.index("-append") + 1]
    assert "cgroup_no_v1" not in append and "qosm.share=/tmp/share" in append
    assert "for c in cpu cpuacct cpuset memory blkio; do" in kernelvm.V1_MOUNTS  # the host's hierarchies
    v1 = [g for g in test_guest.GUESTS if g.cgroup == 1]
    assert v1 and all(g.cpus >= 3 for g in v1)


def test_guest_script_runs_the_guests_tests_with_this_interpreter(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "src")
    guest = test_guest.GUESTS[0]
    script = test_guest.guest_script(guest, tmp_path)
    assert f"PYTHONPATH={os.path.abspath('src')}" in script
    assert "QOSM_GUEST_DISK=/dev/vda" in script
    last = script.strip().splitlines()[-1]
    assert last.startswith("timeout ") and os.path.realpath(last.split()[4]) == os.path.realpath(sys.executable)
    assert "no:hypothesispytest" in last and f"--junitxml={tmp_path}/junit.xml" in last
    assert all(t in last for t in guest.tests)


def test_every_guest_test_id_names_an_existing_test_function() -> None:
    ids = test_guest.guest_test_ids()
    assert len(ids) == len(set(ids))
    for name in ("test_cfs_quota_suppression", "test_memory_qos_values_and_memory_high_throttles",
                 "test_cpuset_suppression_and_recovery", "test_real_kernel_busy_process"):
        assert any(i.endswith("::" + name) for i in ids), name


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_collector" name="test_busy[1]" file="tests/test_collector.py">
  <skipped type="pytest.skip" message="real cgroups v1 unavailable">...</skipped></testcase>
<testcase classname="tests.test_collector" name="test_busy[2]" file="tests/test_collector.py"/>
<testcase classname="tests.test_kernel_cpu" name="test_cfs" file="tests/test_kernel_cpu.py">
  <failure message="assert 1 == 2">long text</failure></testcase>
<testcase classname="tests.test_kernel_memory" name="test_mem" file="tests/test_kernel_memory.py">
  <skipped message="needs a disk"/></testcase>
<testcase classname="tests.test_kernel_io" name="test_weight" file="tests/test_kernel_io.py">
  <skipped type="pytest.xfail" message="known bug: ENOTSUP"/></testcase>
</testsuite></testsuites>"""


def test_junit_results_group_by_test_function(tmp_path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    out = test_guest.parse_junit(path)
    busy = out["tests/test_collector.py::test_busy"]
    assert busy.passed == ["tests/test_collector.py::test_busy[2]"] and len(busy.skipped) == 1
    cfs = out["tests/test_kernel_cpu.py::test_cfs"]
    assert not cfs.passed and "assert 1 == 2" in cfs.failed[0] and "long text" in cfs.failed[0]
    mem = out["tests/test_kernel_memory.py::test_mem"]
    assert mem.skipped == ["tests/test_kernel_memory.py::test_mem: needs a disk"] and not mem.passed
    weight = out["tests/test_kernel_io.py::test_weight"]
    assert weight.xfailed == ["tests/test_kernel_io.py::test_weight: known bug: ENOTSUP"] and not weight.skipped
