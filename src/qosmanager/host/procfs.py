"""Plain parsers of procfs files, and a small reader bound to the proc root.

These are the readable statement of what the agent takes from ``/proc`` (infra §2.7,
§2.8) and the reference the native ``NodeReader`` is tested against: CPU busy ticks
from ``stat``, memory from ``meminfo``, pressure stall information, CPU vendor and
flags from ``cpuinfo``, and process group ids from ``<pid>/stat``.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

from qosmanager.host.roots import HostRoots

# /proc/stat fields counted as busy: user, nice, system, irq, softirq.  idle, iowait,
# steal, guest and guest_nice are not (guest time is already inside user).
_BUSY_FIELDS = (1, 2, 3, 6, 7)


def _ticks(token: str, line: str) -> int:
    if not token.isascii() or not token.isdigit():
        raise ValueError(f"/proc/stat: {token!r} is not a tick count in line {line!r}")
    return int(token)


def parse_proc_stat(text: str) -> tuple[int, dict[int, int]]:
    """``/proc/stat`` -> (node busy ticks, {cpu: busy ticks}).

    busy = user + nice + system + irq + softirq.  koordlet read the file twice per
    collection, once for the node and once per CPU (quirk); one pass gives both from
    the same instant.  The ``cpu`` lines come first in the kernel's output, so parsing
    stops at the first other line.  A missing or short (<= 7 fields) ``cpu`` line, or
    a garbled number, is a ValueError; an empty per-CPU dict means no ``cpuN`` lines.
    """
    total: int | None = None
    per_cpu: dict[int, int] = {}
    for line in text.split("\n"):
        if not line.startswith("cpu"):
            if line or total is not None or per_cpu:
                break
            continue
        fields = line.split()
        if len(fields) <= 7:
            raise ValueError(f"/proc/stat: cpu line has too few fields: {line!r}")
        busy = sum(_ticks(fields[i], line) for i in _BUSY_FIELDS)
        name = fields[0]
        if name == "cpu":
            total = busy
        else:
            cpu = name[3:]
            if not cpu.isascii() or not cpu.isdigit():
                raise ValueError(f"/proc/stat: bad cpu line name {name!r}")
            per_cpu[int(cpu)] = busy
    if total is None:
        raise ValueError("/proc/stat has no 'cpu ' total line")
    return total, per_cpu


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` -> KiB values keyed as in the file (``"Active(file)"``).

    Each line splits on its first ``:``; the value is the first whitespace field and a
    value that does not parse reads as 0 (koordlet's rule).  ``HugePages_*`` lines are
    page counts, not KiB: they are returned as printed.
    """
    out: dict[str, int] = {}
    for line in text.split("\n"):
        key, sep, rest = line.partition(":")
        if not sep:
            continue
        fields = rest.split()
        value = 0
        if fields:
            try:
                value = int(fields[0])
            except ValueError:
                value = 0
        out[key.strip()] = value
    return out


def memory_usage_bytes(meminfo: dict[str, int]) -> int:
    """Node memory usage without page cache: (MemTotal - MemAvailable) * 1024, floored at 0."""
    return max(0, meminfo.get("MemTotal", 0) - meminfo.get("MemAvailable", 0)) * 1024


def memory_usage_with_cache_bytes(meminfo: dict[str, int]) -> int:
    """Node memory usage with page cache: (MemTotal - MemFree) * 1024, floored at 0."""
    return max(0, meminfo.get("MemTotal", 0) - meminfo.get("MemFree", 0)) * 1024


def memory_total_bytes(meminfo: dict[str, int]) -> int:
    return meminfo.get("MemTotal", 0) * 1024


# ---------------------------------------------------------------------------
# pressure stall information
# ---------------------------------------------------------------------------
@dataclass
class PSILine:
    """One ``some``/``full`` line: running averages in percent, ``total`` stall time in µs."""

    avg10: float = 0.0
    avg60: float = 0.0
    avg300: float = 0.0
    total: int = 0


@dataclass
class PSI:
    some: PSILine
    full: PSILine
    full_supported: bool


def _psi_line(kind: str, rest: list[str], text: str) -> PSILine:
    values: dict[str, str] = {}
    for item in rest:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"PSI: {item!r} is not key=value in {text!r}")
        values[key] = value
    try:
        return PSILine(
            avg10=float(values["avg10"]), avg60=float(values["avg60"]),
            avg300=float(values["avg300"]), total=int(values["total"]),
        )
    except KeyError as exc:
        raise ValueError(f"PSI: {kind} line lacks {exc.args[0]!r} in {text!r}") from None
    except ValueError:
        raise ValueError(f"PSI: {kind} line has a value that is not a number in {text!r}") from None


def parse_psi(text: str) -> PSI:
    """``{cpu,memory,io}.pressure`` or ``/proc/pressure/*`` -> :class:`PSI` (infra §2.8).

    Lines start with ``some`` or ``full``; any other prefix is an error.  Old kernels
    print no ``full`` line for CPU: then ``full_supported`` is False and ``full`` is
    zero.  A file with no ``some`` line is an error.
    """
    some: PSILine | None = None
    full: PSILine | None = None
    for line in text.split("\n"):
        fields = line.split()
        if not fields:
            continue
        kind = fields[0]
        if kind == "some":
            some = _psi_line(kind, fields[1:], text)
        elif kind == "full":
            full = _psi_line(kind, fields[1:], text)
        else:
            raise ValueError(f"PSI: unexpected line prefix {kind!r} in {text!r}")
    if some is None:
        raise ValueError(f"PSI: no 'some' line in {text!r}")
    return PSI(some=some, full=full if full is not None else PSILine(), full_supported=full is not None)


# ---------------------------------------------------------------------------
# cpuinfo, pid stat, clock
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class CPUInfoSummary:
    """What the agent needs from ``/proc/cpuinfo``: the first processor's identity and flags."""

    vendor_id: str
    model_name: str
    flags: frozenset[str]
    processors: int = 0


def parse_cpuinfo(text: str) -> CPUInfoSummary:
    """Vendor, model name and flags of the first processor, and the processor count.

    Every x86 processor block repeats the same vendor and flags; the first one wins.
    Keys missing on other architectures read as empty.
    """
    vendor = model = ""
    flags: frozenset[str] | None = None
    processors = 0
    for line in text.split("\n"):
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "processor":
            processors += 1
        elif key == "vendor_id" and not vendor:
            vendor = value.strip()
        elif key == "model name" and not model:
            model = value.strip()
        elif key == "flags" and flags is None:
            flags = frozenset(value.split())
    return CPUInfoSummary(vendor_id=vendor, model_name=model, flags=flags or frozenset(),
                          processors=processors)


def parse_pid_stat(text: str) -> tuple[int, str, str, int, int]:
    """``/proc/<pid>/stat`` -> (pid, comm, state, ppid, pgrp).

    comm may contain spaces and ``)``; koordlet split on the first ``)`` and misparsed
    such names (quirk).  The kernel wraps comm in the first ``(`` and the last ``)``, so
    that is how we split.
    """
    head, open_paren, _ = text.partition("(")
    mid, close_paren, tail = text.rpartition(")")
    if not open_paren or not close_paren or len(mid) < len(head):
        raise ValueError(f"/proc/<pid>/stat: no '(comm)' in {text[:80]!r}")
    comm = mid[len(head) + 1:]
    fields = tail.split()
    try:
        pid = int(head.strip())
        state = fields[0]
        ppid = int(fields[1])
        pgrp = int(fields[2])
    except (IndexError, ValueError):
        raise ValueError(f"/proc/<pid>/stat: malformed line {text[:120]!r}") from None
    return pid, comm, state, ppid, pgrp


def clock_ticks() -> int:
    """USER_HZ, the unit of ``/proc/stat`` ticks (``getconf CLK_TCK``); 100 when unknown."""
    try:
        value = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return 100
    return value if value > 0 else 100


PRESSURE_RESOURCES = ("cpu", "memory", "io")


class ProcFS:
    """Reads files of the proc root given by a :class:`HostRoots`."""

    def __init__(self, roots: HostRoots) -> None:
        self.roots = roots

    def path(self, rel: str) -> str:
        return self.roots.proc_path(rel)

    def read(self, rel: str) -> str:
        """Whole file ``rel`` (``"stat"``, ``"sys/vm/min_free_kbytes"``); OSError as raised."""
        with open(self.roots.proc_path(rel), encoding="utf-8", errors="replace") as f:
            return f.read()

    def read_int(self, rel: str) -> int:
        """A one-number file such as a sysctl; ValueError naming the file when it is not one."""
        text = self.read(rel)
        try:
            return int(text.strip())
        except ValueError:
            raise ValueError(f"{self.path(rel)}: expected one integer, got {text[:80]!r}") from None

    def meminfo(self) -> dict[str, int]:
        return parse_meminfo(self.read("meminfo"))

    def stat(self) -> tuple[int, dict[int, int]]:
        return parse_proc_stat(self.read("stat"))

    def cpuinfo(self) -> CPUInfoSummary:
        return parse_cpuinfo(self.read("cpuinfo"))

    def pid_stat(self, pid: int) -> tuple[int, str, str, int, int]:
        return parse_pid_stat(self.read(f"{pid}/stat"))

    def pressure(self, resource: str) -> PSI | None:
        """Node-level ``pressure/<resource>``; None when the kernel has no PSI (file absent or
        disabled at boot, where reads fail with EOPNOTSUPP)."""
        if resource not in PRESSURE_RESOURCES:
            raise ValueError(f"PSI resource must be one of {list(PRESSURE_RESOURCES)}, got {resource!r}")
        try:
            text = self.read(f"pressure/{resource}")
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.ENOTSUP):
                return None
            raise
        return parse_psi(text)


CAP_SYS_NICE = 23  # capability(7)'s numbers
CAP_SYS_RESOURCE = 24


def has_capability(bit: int, status: str = "/proc/self/status") -> bool:
    """Whether this process holds capability ``bit`` in its effective set."""
    try:
        with open(status) as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> bit & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def cap_sys_resource(status: str = "/proc/self/status") -> bool:
    """Whether this process holds ``CAP_SYS_RESOURCE`` (the kernel's test for PSI trigger windows under 2 s)."""
    return has_capability(CAP_SYS_RESOURCE, status)


def cap_sys_nice(status: str = "/proc/self/status") -> bool:
    """Whether this process holds ``CAP_SYS_NICE`` (the kernel's test for a real-time scheduling class)."""
    return has_capability(CAP_SYS_NICE, status)
