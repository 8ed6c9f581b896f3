"""host.blockdev: block devices from a fake sysfs, mountinfo parsing, LVM names."""

from __future__ import annotations

import os

import pytest

from qosmanager.host.blockdev import (
    StorageInfo,
    csi_volume_mount_path,
    parse_mountinfo,
    read_mount_devices,
    read_storage_info,
    split_lvm_name,
)
from qosmanager.host.roots import HostRoots


def put(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def fake_sysfs(tmp_path) -> HostRoots:
    """A host like a real one: /sys/block/<dev> are symlinks into /sys/devices; sda with two partitions,
    nvme0n1 whole, vdb1 + vdc as LVM PVs of VG "data-vg" (LV "lv-0" on dm-0), a dm-crypt device on sda2,
    an LV "lv1" of VG "vgc" on top of the crypt device, a loop device."""
    roots = HostRoots(cgroup=str(tmp_path / "cgroup"), proc=str(tmp_path / "proc"), sys=str(tmp_path / "sys"))
    dev = tmp_path / "sys" / "devices"
    block = tmp_path / "sys" / "block"
    block.mkdir(parents=True)

    def disk(name: str, devno: str, parts: dict[str, str] | None = None, where: str = "pci0000:00") -> str:
        d = dev / where / "block" / name
        put(str(d / "dev"), devno + "\n")
        for part, pdevno in (parts or {}).items():
            put(str(d / part / "dev"), pdevno + "\n")
            put(str(d / part / "partition"), part[-1] + "\n")
        os.symlink(os.path.relpath(d, block), block / name)
        return str(d)

    disk("sda", "8:0", {"sda1": "8:1", "sda2": "8:2"})
    disk("nvme0n1", "259:0")
    vdb = disk("vdb", "252:16", {"vdb1": "252:17"})
    vdc = disk("vdc", "252:32")
    disk("loop0", "7:0", where="virtual")

    def dm(name: str, devno: str, dm_name: str, uuid: str, slaves: list[str]) -> None:
        d = dev / "virtual" / "block" / name
        put(str(d / "dev"), devno + "\n")
        put(str(d / "dm" / "name"), dm_name + "\n")
        put(str(d / "dm" / "uuid"), uuid + "\n")
        (d / "slaves").mkdir(parents=True)
        for s in slaves:
            os.symlink("../../" + s, d / "slaves" / s)
        os.symlink(os.path.relpath(d, block), block / name)

    dm("dm-0", "253:0", "data--vg-lv--0", "LVM-abc", ["vdb1", "vdc"])
    dm("dm-1", "253:1", "cryptsda2", "CRYPT-LUKS2-xyz", ["sda2"])
    dm("dm-2", "253:2", "vgc-lv1", "LVM-def", ["dm-1"])
    assert vdb and vdc
    return roots


def test_storage_info_from_sysfs(tmp_path) -> None:
    info = read_storage_info(fake_sysfs(tmp_path))
    assert info is not None
    assert dict(info.disk_numbers) == {"/dev/sda": "8:0", "/dev/nvme0n1": "259:0", "/dev/vdb": "252:16",
                                       "/dev/vdc": "252:32", "/dev/loop0": "7:0"}
    assert dict(info.partition_disks) == {"/dev/sda1": "/dev/sda", "/dev/sda2": "/dev/sda", "/dev/vdb1": "/dev/vdb"}
    # data-vg's first PV (slaves in name order) is vdb1 -> disk vdb; vgc sits on a crypt device on sda2
    assert dict(info.vg_disks) == {"data-vg": "/dev/vdb", "vgc": "/dev/sda"}
    assert info.lv_vgs["/dev/dm-0"] == "data-vg" and info.lv_vgs["/dev/mapper/data--vg-lv--0"] == "data-vg"
    assert "/dev/dm-1" not in info.lv_vgs  # not LVM
    assert info.devno_devices["253:0"] == "/dev/dm-0" and info.devno_devices["8:2"] == "/dev/sda2"


@pytest.mark.parametrize(("device", "disk", "number"), [
    ("/dev/sda", "/dev/sda", "8:0"),
    ("sda1", "/dev/sda", "8:0"),            # a partition throttles its whole disk
    ("/dev/dm-0", "/dev/vdb", "252:16"),    # an LV resolves through its VG
    ("/dev/mapper/vgc-lv1", "/dev/sda", "8:0"),
    ("/dev/dm-1", None, None),              # a crypt mapping is not an LV
    ("/dev/sdz", None, None),
])
def test_disk_of_and_number(tmp_path, device: str, disk: str | None, number: str | None) -> None:
    info = read_storage_info(fake_sysfs(tmp_path))
    assert info is not None
    assert info.disk_of(device) == disk
    assert info.disk_number(info.disk_of(device)) == number


def test_no_sysfs_block_dir_means_no_info(tmp_path) -> None:
    assert read_storage_info(HostRoots(sys=str(tmp_path / "nothing"))) is None
    assert StorageInfo().disk_of("/dev/sda") is None


@pytest.mark.parametrize(("name", "want"), [
    ("vg0-lv0", ("vg0", "lv0")),
    ("data--vg-lv--0", ("data-vg", "lv-0")),
    ("a---b", ("a-", "b")),     # "a-" escaped as "a--", then the separator
    ("nodash", None),
    ("-lv", None),
])
def test_split_lvm_name(name: str, want: tuple[str, str] | None) -> None:
    assert split_lvm_name(name) == want


def test_mountinfo(tmp_path) -> None:
    text = (
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "40 22 253:0 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/data/mount rw - xfs /dev/dm-0 rw\n"
        "41 22 0:45 / /run/with\\040space rw - tmpfs tmpfs rw\n"
        "garbage line\n"
        "42 22 8:2 / / rw - ext4 /dev/sda2 rw\n"  # mounted over /: hides the first
    )
    mounts = parse_mountinfo(text)
    assert mounts["/"] == "8:2"
    assert mounts[csi_volume_mount_path("u1", "data")] == "253:0"
    assert mounts["/run/with space"] == "0:45"
    roots = HostRoots(proc=str(tmp_path / "proc"))
    assert read_mount_devices(roots) == {}
    put(str(tmp_path / "proc" / "self" / "mountinfo"), text)
    assert read_mount_devices(roots)["/"] == "8:2"
    with pytest.raises(ValueError):
        csi_volume_mount_path("u1", "../x")
