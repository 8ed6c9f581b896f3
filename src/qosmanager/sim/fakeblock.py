"""The fake kernel's block-device rules: v1 blkio throttle files, v2 ``io.max`` and ``io.weight``.

A room of :class:`~qosmanager.sim.fakekernel.FakeKernel`, which routes those files' writes here.

Map of the file (:class:`BlockRules`): the host's whole disks (``sys/block/<disk>/dev``) and a
device parsed from a write (EINVAL malformed, ENODEV not a whole disk); the per-device tables;
the rules: ``blkio.throttle.*`` (0 or U64_MAX removes a line), ``io.max`` (a zero value ERANGE,
all "max" removes a line), ``io.weight`` (default and per disk, within [1, 10000]).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re

from qosmanager.sim.kparse import U64_MAX, WEIGHT_MAX, WEIGHT_MIN, KernelError, _read_or


class BlockRules:
    """The block-device files' rules of one fake kernel; ``sys_root``: the fake host's sysfs."""

    def __init__(self, sys_root: str) -> None:
        self.sys_root = sys_root

    def disks(self) -> set[str]:
        """MAJ:MIN of the whole disks of the fake host (``sys/block/<disk>/dev``)."""
        out = set()
        base = os.path.join(self.sys_root, "block")
        with contextlib.suppress(OSError):
            for e in os.scandir(base):
                dev = _read_or(os.path.join(e.path, "dev"), "").strip()
                if dev:
                    out.add(dev)
        return out

    def device(self, text: str) -> tuple[str, str]:
        m = re.match(r"\s*(\d+):(\d+)", text)
        if m is None:
            raise KernelError(errno.EINVAL)
        dev = f"{int(m.group(1))}:{int(m.group(2))}"
        if dev not in self.disks():
            raise KernelError(errno.ENODEV)
        return dev, text[m.end():]

    @staticmethod
    def table(current: str) -> dict[str, str]:
        out = {}
        for ln in current.splitlines():
            if ln.strip():
                dev, _, rest = ln.strip().partition(" ")
                out[dev] = rest
        return out

    @staticmethod
    def dev_key(dev: str) -> tuple[int, int]:
        a, _, b = dev.partition(":")
        return int(a), int(b)

    def w_blkio_throttle(self, mount: str, d: str, name: str, text: str) -> str:
        dev, body = self.device(text)
        m = re.match(r"\s*(\d+)", body)
        if m is None:
            raise KernelError(errno.EINVAL)
        v = int(m.group(1))
        path = os.path.join(d, name)
        table = self.table(_read_or(path, ""))
        if v == 0 or v >= U64_MAX:
            table.pop(dev, None)
        else:
            table[dev] = str(v)
        return "".join(f"{k} {table[k]}\n" for k in sorted(table, key=self.dev_key))

    def w_io_max(self, mount: str, d: str, name: str, text: str) -> str:
        dev, body = self.device(text)
        keys = ("rbps", "wbps", "riops", "wiops")
        table = self.table(_read_or(os.path.join(d, name), ""))
        cur = dict(kv.split("=", 1) for kv in table.get(dev, "").split() if "=" in kv)
        vals = {k: cur.get(k, "max") for k in keys}
        for tok in body.split():
            name, eq, val = tok[:26].partition("=")
            if not eq:
                raise KernelError(errno.EINVAL)
            m = re.match(r"\+?\d+", val)
            if m is None and val != "max":
                raise KernelError(errno.EINVAL)
            num = "max" if m is None else str(int(m.group(0)))
            if num == "0":
                raise KernelError(errno.ERANGE)
            if name not in keys:
                raise KernelError(errno.EINVAL)
            vals[name] = "max" if m is not None and int(num) >= U64_MAX else num
        if all(v == "max" for v in vals.values()):
            table.pop(dev, None)
        else:
            table[dev] = " ".join(f"{k}={vals[k]}" for k in keys)
        return "".join(f"{k} {table[k]}\n" for k in sorted(table, key=self.dev_key))

    def w_io_weight(self, mount: str, d: str, name: str, text: str) -> str:
        """iocost's io.weight: "[default] N" sets the cgroup's weight, "MAJ:MIN N" one disk's,
        "MAJ:MIN default" drops it; weights within [1, 10000] (EINVAL otherwise)."""
        lines = _read_or(os.path.join(d, name), "default 100\n").splitlines()
        dflt = next((ln.split()[1] for ln in lines if ln.startswith("default ")), "100")
        table = self.table("\n".join(ln for ln in lines if not ln.startswith("default ")))
        body = text.strip()
        if ":" not in body:
            m = re.fullmatch(r"(?:default\s+)?(\d+)", body)
            if m is None:
                raise KernelError(errno.EINVAL)
            if not WEIGHT_MIN <= int(m.group(1)) <= WEIGHT_MAX:
                raise KernelError(errno.EINVAL)
            dflt = str(int(m.group(1)))
        else:
            dev, rest = self.device(body)
            rest = rest.strip()
            if rest.startswith("default"):
                table.pop(dev, None)
            else:
                m = re.match(r"\d+", rest)
                if m is None or not WEIGHT_MIN <= int(m.group(0)) <= WEIGHT_MAX:
                    raise KernelError(errno.EINVAL)
                table[dev] = str(int(m.group(0)))
        return f"default {dflt}\n" + "".join(f"{k} {table[k]}\n" for k in sorted(table, key=self.dev_key))
