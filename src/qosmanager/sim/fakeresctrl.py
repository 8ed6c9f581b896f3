"""The fake kernel's resctrl rules: groups, ``tasks`` and ``schemata``.

A room of :class:`~qosmanager.sim.fakekernel.FakeKernel`, which routes mkdir below the resctrl
root and the writes of its ``tasks`` and ``schemata`` here.

Map of the file (:class:`ResctrlRules`): mkdir of a group (top level only, ENOSPC beyond
``info/L3/num_closids``) and the files it gets; ``tasks`` (a pid moves out of its previous
group; ESRCH stops at the first unknown pid, the ones before it moved); ``schemata``: the info
files' limits, reading and printing (every resource, every cache id), and the write rules (an
unknown resource or domain, a mask empty, too wide or not contiguous, a bandwidth outside
[min_bandwidth, mb_max], no final newline: EINVAL, and nothing of a refused write applies).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable

from qosmanager.sim.kparse import KernelError, _put, _read_or, kstrtoint


class ResctrlRules:
    """The resctrl rules of one fake kernel.  ``root``: the resctrl mount; ``pids``: the processes
    that exist (the kernel's set, shared); ``move(mount, dir, pid, names)``: take a pid out of the
    other groups; ``mb_max``: resctrl's MB value for "unlimited"."""

    def __init__(self, root: str, n_cpus: int, mb_max: int, pids: set[int],
                 move: Callable[[str, str, int, tuple[str, ...]], None]) -> None:
        self.root = root
        self.n_cpus = n_cpus
        self.mb_max = mb_max
        self.pids = pids
        self.move = move

    def groups(self) -> list[str]:
        return [e.name for e in os.scandir(self.root)
                if e.is_dir() and e.name not in ("info", "mon_groups", "mon_data")]

    def mkdir_check(self, path: str) -> None:
        if not os.path.isdir(os.path.dirname(path)):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        if os.path.dirname(path) != self.root:
            raise OSError(errno.EPERM, os.strerror(errno.EPERM), path)  # groups live at the top level
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path)
        closids = int(_read_or(os.path.join(self.root, "info/L3/num_closids"), "16").strip() or 16)
        if len(self.groups()) + 1 >= closids:  # the root group holds CLOSID 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    def populate(self, path: str) -> None:
        root_schemata = self.schemata_read(self.root)
        words = -(-self.n_cpus // 32)
        files = {"schemata": self.schemata_format(root_schemata), "tasks": "",
                 "cpus": ",".join(["00000000"] * words) + "\n", "cpus_list": "\n",
                 "mode": "shareable\n", "size": ""}
        for name, body in files.items():
            _put(os.path.join(path, name), body)

    def w_tasks(self, mount: str, d: str, name: str, text: str) -> str:
        body = _read_or(os.path.join(d, name), "")
        for tok in text.strip().split(","):
            tok = tok.strip()
            pid = kstrtoint(tok) if tok else 0
            if pid < 0 or not tok:
                raise KernelError(errno.EINVAL)
            if pid not in self.pids:
                _put(os.path.join(d, name), body)  # the ids before it were moved
                raise KernelError(errno.ESRCH)
            self.move(mount, d, pid, ("tasks",))
            if str(pid) not in body.split():
                body += f"{pid}\n"
        return body

    # ---- resctrl schemata
    def info(self) -> tuple[int, int, int, int]:
        info = os.path.join(self.root, "info")
        cbm = int(_read_or(os.path.join(info, "L3/cbm_mask"), "7ff").strip() or "7ff", 16)
        min_bits = int(_read_or(os.path.join(info, "L3/min_cbm_bits"), "1").strip() or 1)
        min_bw = int(_read_or(os.path.join(info, "MB/min_bandwidth"), "10").strip() or 10)
        gran = int(_read_or(os.path.join(info, "MB/bandwidth_gran"), "10").strip() or 10)
        return cbm, min_bits, min_bw, gran

    def resources(self) -> list[str]:
        info = os.path.join(self.root, "info")
        return [r for r in ("L3", "MB") if os.path.isdir(os.path.join(info, r))]

    def schemata_read(self, d: str) -> dict[str, dict[int, int]]:
        out: dict[str, dict[int, int]] = {}
        for ln in _read_or(os.path.join(d, "schemata"), "").splitlines():
            name, sep, body = ln.partition(":")
            if not sep:
                continue
            items: dict[int, int] = {}
            for it in body.strip().split(";"):
                k, eq, v = it.partition("=")
                if eq:
                    items[int(k)] = int(v.strip(), 16 if name.strip() == "L3" else 10)
            out[name.strip()] = items
        return out

    def schemata_format(self, s: dict[str, dict[int, int]]) -> str:
        names = [n for n in self.resources() if n in s] or list(s)
        width = max((len(n) for n in names), default=0)
        lines = []
        for n in names:
            fmt = "{}={:x}" if n == "L3" else "{}={}"
            lines.append(f"{n:>{width}}:" + ";".join(fmt.format(i, v) for i, v in sorted(s[n].items())))
        return "\n".join(lines) + ("\n" if lines else "")

    def w_schemata(self, mount: str, d: str, name: str, text: str) -> str:
        if not text.endswith("\n"):
            raise KernelError(errno.EINVAL, "a schemata write ends with a newline")
        cbm_mask, min_bits, min_bw, gran = self.info()
        staged = self.schemata_read(d)
        known = self.resources()
        for line in text[:-1].split("\n"):
            name, sep, dom = line.partition(":")
            name = name.strip()
            if not sep:
                raise KernelError(errno.EINVAL, "missing ':'")
            if not dom.strip():
                raise KernelError(errno.EINVAL, f"missing '{name}' value")
            if name not in known or name not in staged:
                raise KernelError(errno.EINVAL, f"unknown resource {name}")
            rest = dom.strip()
            while rest:
                item, _, rest = rest.partition(";")
                k, eq, v = item.partition("=")
                if not eq or not k.strip().isdigit():
                    raise KernelError(errno.EINVAL, "missing '=' or non-numeric domain")
                dom_id = int(k.strip())
                if dom_id not in staged[name]:
                    raise KernelError(errno.EINVAL, f"unknown domain {dom_id}")
                v = v.strip()
                if name == "L3":
                    if not v or not re.fullmatch(r"[0-9a-fA-F]+", v):
                        raise KernelError(errno.EINVAL)
                    mask = int(v, 16)
                    if (min_bits > 0 and mask == 0) or mask > cbm_mask:
                        raise KernelError(errno.EINVAL, "mask out of range")
                    bits = f"{mask:b}".strip("0")
                    if "0" in bits:
                        raise KernelError(errno.EINVAL, "non-consecutive 1-bits")
                    if len(bits) < min_bits:
                        raise KernelError(errno.EINVAL)
                    staged[name][dom_id] = mask
                else:
                    if not v.isdigit():
                        raise KernelError(errno.EINVAL)
                    bw = int(v)
                    if bw < min_bw or bw > self.mb_max:
                        raise KernelError(errno.EINVAL, "MB value out of range")
                    staged[name][dom_id] = -(-bw // gran) * gran
        return self.schemata_format(staged)
