"""Block devices from sysfs, and mounts from procfs: the disk numbers blkio throttling needs.

koordlet learns its node's storage from ``lsblk``/``findmnt`` (``NodeLocalStorageInfo``).  This module
reads the same facts straight from the kernel, without running anything:

* ``<sys>/block/<disk>/dev``                 ``MAJ:MIN`` of a whole disk (``sda``, ``nvme0n1``, ``vdb``);
* ``<sys>/block/<disk>/<part>/partition``    marks ``<part>`` as a partition of ``<disk>`` (its own
  ``dev`` holds its number);
* ``<sys>/block/dm-N/dm/name``, ``dm/uuid``  a device-mapper device; an LVM logical volume has a uuid
  starting ``LVM-`` and a name ``<vg>-<lv>`` (a ``-`` inside either name is doubled);
* ``<sys>/block/dm-N/slaves/*``              the devices under it (an LV's physical volumes);
* ``<proc>/1/mountinfo``                     mount points and the ``MAJ:MIN`` of what is mounted.

Devices are named as koordlet names them, ``/dev/<kernel name>``; LVs are also known as
``/dev/mapper/<dm name>``.  Throttling works on whole disks, so every device resolves to its disk:
a partition to its parent, an LV to the first disk of its volume group.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from qosmanager.host.roots import HostRoots

DEV = "/dev/"
KUBELET_ROOT_DIR = "/var/lib/kubelet"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _is_devno(text: str | None) -> bool:
    if not text:
        return False
    major, sep, minor = text.partition(":")
    return bool(sep) and major.isdigit() and minor.isdigit()


def device_path(name: str) -> str:
    """``sda`` -> ``/dev/sda``; a path already under ``/dev/`` is kept."""
    return name if name.startswith(DEV) else DEV + name


def split_lvm_name(dm_name: str) -> tuple[str, str] | None:
    """``vg--data-lv--0`` -> ``("vg-data", "lv-0")``: LVM joins VG and LV with ``-`` and doubles the
    dashes inside each name.  None when the name has no single ``-``."""
    i = 0
    while i < len(dm_name):
        if dm_name[i] == "-":
            if i + 1 < len(dm_name) and dm_name[i + 1] == "-":
                i += 2
                continue
            vg, lv = dm_name[:i], dm_name[i + 1:]
            if not vg or not lv:
                return None
            return vg.replace("--", "-"), lv.replace("--", "-")
        i += 1
    return None


@dataclass(frozen=True)
class StorageInfo:
    """The node's block devices (koordlet's ``NodeLocalStorageInfo`` maps, from sysfs)."""

    disk_numbers: Mapping[str, str] = field(default_factory=dict)  # "/dev/sda" -> "8:0" (whole disks)
    partition_disks: Mapping[str, str] = field(default_factory=dict)  # "/dev/sda1" -> "/dev/sda"
    vg_disks: Mapping[str, str] = field(default_factory=dict)  # "vg0" -> "/dev/sdb" (first disk of the VG)
    lv_vgs: Mapping[str, str] = field(default_factory=dict)  # "/dev/dm-0", "/dev/mapper/vg0-lv0" -> "vg0"
    devno_devices: Mapping[str, str] = field(default_factory=dict)  # "8:1" -> "/dev/sda1"

    def disk_of(self, device: str) -> str | None:
        """The whole disk a device lives on: itself, its parent (partition), or its VG's disk (LV)."""
        device = device_path(device)
        if device in self.disk_numbers:
            return device
        if device in self.partition_disks:
            return self.partition_disks[device]
        vg = self.lv_vgs.get(device)
        return self.vg_disks.get(vg) if vg is not None else None

    def disk_number(self, disk: str | None) -> str | None:
        return self.disk_numbers.get(device_path(disk)) if disk else None


def read_storage_info(roots: HostRoots) -> StorageInfo | None:
    """Scan ``<sys>/block``; None when there is no such directory (no sysfs to read)."""
    base = roots.sys_path("block")
    if not os.path.isdir(base):
        return None
    disks: dict[str, str] = {}
    partitions: dict[str, str] = {}
    devnos: dict[str, str] = {}
    dm: dict[str, tuple[str, str, list[str]]] = {}  # kernel name -> (dm name, uuid, slaves)
    for name in _listdir(base):
        path = f"{base}/{name}"
        devno = _read(f"{path}/dev")
        if not _is_devno(devno):
            continue
        assert devno is not None
        devnos[devno] = device_path(name)
        dm_name = _read(f"{path}/dm/name")
        if dm_name is not None:
            dm[name] = (dm_name, _read(f"{path}/dm/uuid") or "", _listdir(f"{path}/slaves"))
            continue
        disks[device_path(name)] = devno
        for sub in _listdir(path):
            if os.path.exists(f"{path}/{sub}/partition"):
                part_devno = _read(f"{path}/{sub}/dev")
                partitions[device_path(sub)] = device_path(name)
                if _is_devno(part_devno):
                    assert part_devno is not None
                    devnos[part_devno] = device_path(sub)
    vg_disks: dict[str, str] = {}
    lv_vgs: dict[str, str] = {}

    def disk_below(kernel_name: str, seen: frozenset[str] = frozenset()) -> str | None:
        dev = device_path(kernel_name)
        if dev in disks:
            return dev
        if dev in partitions:
            return partitions[dev]
        if kernel_name in dm and kernel_name not in seen:  # an LV on another mapping (crypt, raid)
            for slave in dm[kernel_name][2]:
                found = disk_below(slave, seen | {kernel_name})
                if found is not None:
                    return found
        return None

    for kernel_name, (dm_name, uuid, slaves) in sorted(dm.items()):
        if uuid and not uuid.startswith("LVM-"):
            continue
        parts = split_lvm_name(dm_name)
        if parts is None:
            continue
        vg = parts[0]
        lv_vgs[device_path(kernel_name)] = vg
        lv_vgs[f"{DEV}mapper/{dm_name}"] = vg
        if vg not in vg_disks:
            for slave in slaves:
                disk = disk_below(slave)
                if disk is not None:
                    vg_disks[vg] = disk
                    break
    return StorageInfo(disk_numbers=MappingProxyType(disks), partition_disks=MappingProxyType(partitions),
                       vg_disks=MappingProxyType(vg_disks), lv_vgs=MappingProxyType(lv_vgs),
                       devno_devices=MappingProxyType(devnos))


# ---------------------------------------------------------------------------------------------
# mounts
# ---------------------------------------------------------------------------------------------
def _unescape(field_text: str) -> str:
    r"""mountinfo escapes space, tab, newline and backslash as ``\040`` style octal."""
    if "\\" not in field_text:
        return field_text
    out, i = [], 0
    while i < len(field_text):
        ch = field_text[i]
        if ch == "\\" and i + 3 < len(field_text) and field_text[i + 1:i + 4].isdigit():
            out.append(chr(int(field_text[i + 1:i + 4], 8)))
            i += 4
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> dict[str, str]:
    """``/proc/<pid>/mountinfo`` -> ``{mount point: "MAJ:MIN"}`` (the last mount of a point wins, as it
    hides the earlier ones).  Malformed lines are skipped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 5 or not _is_devno(fields[2]):
            continue
        out[_unescape(fields[4])] = fields[2]
    return out


def read_mount_devices(roots: HostRoots) -> dict[str, str]:
    """Mount points of the host's mount namespace (init's view), or of this process when that is not
    readable; empty when neither is."""
    for rel in ("1/mountinfo", "self/mountinfo"):
        text = _read(roots.proc_path(rel))
        if text is not None:
            return parse_mountinfo(text)
    return {}


def csi_volume_mount_path(pod_uid: str, volume: str, kubelet_root: str = KUBELET_ROOT_DIR) -> str:
    """Where the kubelet mounts a pod's CSI volume (``<kubelet root>/pods/<uid>/volumes/kubernetes.io~csi/
    <name>/mount``); ``name`` is the volume's name for an inline (ephemeral) CSI volume, the
    PersistentVolume's name for a claim."""
    if "/" in pod_uid or "/" in volume or volume in ("", ".", ".."):
        raise ValueError(f"bad pod uid or volume name: {pod_uid!r}, {volume!r}")
    return f"{kubelet_root.rstrip('/')}/pods/{pod_uid}/volumes/kubernetes.io~csi/{volume}/mount"


__all__ = [
    "KUBELET_ROOT_DIR",
    "StorageInfo",
    "csi_volume_mount_path",
    "device_path",
    "parse_mountinfo",
    "read_mount_devices",
    "read_storage_info",
    "split_lvm_name",
]
