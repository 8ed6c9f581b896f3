"""The registry of files the agent writes: cgroup knobs, sysctls and resctrl.

Strategies speak one language whatever the host runs: the cgroup v1 file name is the
canonical resource name (``cpu.cfs_quota_us``) and values are v1-style (``-1`` for
unlimited quota, shares for CPU weight).  The registry maps each resource to the file
of the host's cgroup version, validates values, renders them into what that file
expects, and says when two contents mean the same thing:

==========================  ==========================  =================================
resource (canonical)        cgroup v1 file              cgroup v2 file (rendered value)
==========================  ==========================  =================================
cpu.cfs_quota_us            cpu/cpu.cfs_quota_us        cpu.max ("<quota|max> <period>")
cpu.cfs_period_us           cpu/cpu.cfs_period_us       cpu.max ("<quota> <period>")
cpu.cfs_burst_us            cpu/cpu.cfs_burst_us        cpu.max.burst
cpu.shares                  cpu/cpu.shares              cpu.weight (kubelet conversion)
cpu.idle                    cpu/cpu.idle                cpu.idle
cpuset.cpus                 cpuset/cpuset.cpus          cpuset.cpus
memory.limit_in_bytes       memory/memory.limit_in_bytes memory.max (-1 -> "max")
memory.min/.low/.high       memory/memory.{min,low,high} (Anolis)  native
memory.soft_limit_in_bytes  memory/memory.soft_limit_in_bytes  --
memory.reclaim              --                          memory.reclaim (write-only trigger)
memory.wmark_* etc.         memory/... (Anolis)         same names where the file exists
blkio.throttle.*, cost.*    blkio/...                   (v1 only; v2 uses io.max / io.weight)
io.max, io.weight           --                          io.max, io.weight (v2 only)
tasks                       cpu/tasks                   cgroup.threads
==========================  ==========================  =================================

Each resource also declares how a *leveled* update orders writes across the
hierarchy (``order``): ``larger`` resources (CFS quota, memory.min/low/high) are raised
parents-first and lowered children-first, so a parent never holds less than a child;
``looser`` resources (cpuset) are widened to the union parents-first, then narrowed to
the exact value children-first.  And how two strategies' wishes for the same file are
merged (``merge``), e.g. the lower CFS quota wins.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from qosmanager.host.cpuset import parse_cpu_list

INT64_MAX = 2**63 - 1
CFS_PERIOD_US = 100_000
MIN_CFS_QUOTA_US = 1000
SHARES_MIN, SHARES_MAX = 2, 262_144
WEIGHT_MIN, WEIGHT_MAX = 1, 10_000
V1_MEMORY_UNLIMITED = 0x7FFFFFFFFFFFF000

UNLIMITED_TOKENS = ("max", "-1", str(INT64_MAX))

Validator = Callable[[str], "str | None"]


# ---------------------------------------------------------------------------
# conversions (infra §2.4)
# ---------------------------------------------------------------------------
def shares_to_weight(shares: int) -> int:
    """The kubelet's cgroup v1 shares -> v2 weight conversion, clamped to [1, 10000]."""
    w = 1 + ((shares - 2) * 9999) // 262142
    return max(WEIGHT_MIN, min(WEIGHT_MAX, w))


def weight_to_shares(weight: int) -> int:
    s = (weight - 1) * 262142 // 9999 + 2
    return max(SHARES_MIN, min(SHARES_MAX, s))


def milli_cpu_to_shares(milli: int) -> int:
    if milli <= 0:
        return SHARES_MIN
    return max(SHARES_MIN, min(SHARES_MAX, milli * 1024 // 1000))


def milli_cpu_to_quota(milli: int) -> int:
    """CFS quota (µs per 100 ms period) for a CPU amount in milli-cores; -1 when unlimited."""
    if milli <= 0:
        return -1
    return max(MIN_CFS_QUOTA_US, milli * CFS_PERIOD_US // 1000)


def int_or_unlimited(text: str) -> int:
    """Parse an integer knob where ``max``/``-1``/int64-max mean unlimited (returned as INT64_MAX)."""
    t = text.strip()
    if t in UNLIMITED_TOKENS:
        return INT64_MAX
    return int(t)


# ---------------------------------------------------------------------------
# validators: return None when the value is valid, else a sentence saying why not
# ---------------------------------------------------------------------------
def _int(text: str) -> int | None:
    t = text.strip()
    digits = t[1:] if t[:1] == "-" else t
    if not (0 < len(digits) <= 19 and digits.isascii() and digits.isdigit()):
        return None
    v = int(t)
    return v if -(2**63) <= v <= INT64_MAX else None


def range_validator(lo: int, hi: int, *, allow_max: bool = False) -> Validator:
    def check(value: str) -> str | None:
        if allow_max and value.strip() == "max":
            return None
        v = _int(value)
        if v is None:
            return f"{value!r} is not an integer"
        if not lo <= v <= hi:
            return f"{v} is outside [{lo}, {hi}]"
        return None

    return check


def quota_validator(value: str) -> str | None:
    v = _int(value)
    if v is None:
        return f"{value!r} is not an integer"
    if v == -1 or MIN_CFS_QUOTA_US <= v <= INT64_MAX // 1000:
        return None
    return f"quota {v} must be -1 (unlimited) or >= {MIN_CFS_QUOTA_US}"


def period_validator(value: str) -> str | None:
    v = _int(value)
    if v is None or not 1000 <= v <= 1_000_000:
        return f"period {value!r} must be an integer in [1000, 1000000]"
    return None


@functools.lru_cache(maxsize=1024)  # a few CPU lists, sent for every BE dir and re-checked once a minute
def cpuset_validator(value: str) -> str | None:
    try:
        parse_cpu_list(value)
    except ValueError as e:
        return f"invalid CPU list {value!r}: {e}"
    return None


def memory_limit_validator(value: str) -> str | None:
    v = _int(value)
    if v is None:
        return f"{value!r} is not an integer"
    if v == -1 or 0 < v <= INT64_MAX:
        return None
    return f"memory limit {v} must be -1 (unlimited) or positive"


def soft_limit_validator(value: str) -> str | None:
    """memory.soft_limit_in_bytes (v1) takes 0 too: global reclaim then takes from the cgroup first (memoryHigh's
    cap when LS alone is past its line); a hard limit of 0 stays refused."""
    v = _int(value)
    if v is None:
        return f"{value!r} is not an integer"
    if v == -1 or 0 <= v <= INT64_MAX:
        return None
    return f"soft limit {v} must be -1 (unlimited) or 0 or more"


def memory_reclaim_validator(value: str) -> str | None:
    """memory.reclaim takes whole bytes here (the kernel also takes K/M/G suffixes and swappiness=)."""
    v = _int(value)
    if v is None:
        return f"{value!r} is not an integer"
    if not 0 < v <= INT64_MAX:
        return f"reclaim amount {v} must be positive"
    return None


_DEV = r"\d+:\d+"


def blkio_validator(lo: int, hi: int) -> Validator:
    def check(value: str) -> str | None:
        m = re.fullmatch(rf"({_DEV}) (\d{{1,19}})", value.strip())
        if not m:
            return f"{value!r} is not 'MAJ:MIN N'"
        v = int(m.group(2))
        if not lo <= v <= hi:
            return f"{v} is outside [{lo}, {hi}]"
        return None

    return check


def _device_settings(value: str) -> tuple[str | None, list[tuple[str, str]]]:
    """'MAJ:MIN k=v k=v' -> (error, [(k, v), ...]); the shape blkio.cost.{qos,model} share."""
    parts = value.split()
    if len(parts) < 2 or not re.fullmatch(_DEV, parts[0]):
        return f"{value!r} is not 'MAJ:MIN key=value ...'", []
    pairs = []
    for p in parts[1:]:
        k, sep, v = p.partition("=")
        if not sep:
            return f"{p!r} is not key=value", []
        pairs.append((k, v))
    return None, pairs


def blkio_cost_qos_validator(value: str) -> str | None:
    problem, pairs = _device_settings(value)
    for k, v in pairs:
        if k in ("rpct", "wpct", "rlat", "wlat", "min", "max"):
            try:
                if float(v) < 0:
                    return f"{k} must be >= 0"
            except ValueError:
                return f"{k}={v!r} is not a number"
    return problem


def blkio_cost_model_validator(value: str) -> str | None:
    problem, pairs = _device_settings(value)
    for k, v in pairs:
        if k in ("rbps", "rseqiops", "rrandiops", "wbps", "wseqiops", "wrandiops") and (
                not v.isdigit() or int(v) < 1):
            return f"{k} must be an integer >= 1"
    return problem


def io_max_validator(value: str) -> str | None:
    parts = value.split()
    if not parts or not re.fullmatch(_DEV, parts[0]):
        return f"{value!r} is not 'MAJ:MIN key=value ...'"
    for p in parts[1:]:
        k, sep, v = p.partition("=")
        if k not in ("rbps", "wbps", "riops", "wiops") or not sep or not (v == "max" or v.isdigit()):
            return f"{p!r} is not one of rbps|wbps|riops|wiops=<n|max>"
    return None


def io_weight_validator(value: str) -> str | None:
    parts = value.split()
    if len(parts) != 2 or not (parts[0] == "default" or re.fullmatch(_DEV, parts[0])):
        return f"{value!r} is not 'default N' or 'MAJ:MIN N'"
    if parts[1] == "default" and parts[0] != "default":
        return None  # "MAJ:MIN default" drops the device's own weight (the cgroup's default applies)
    if not parts[1].isdigit() or not 1 <= int(parts[1]) <= 10000:
        return f"weight {parts[1]!r} must be in [1, 10000]"
    return None


def no_validation(value: str) -> str | None:
    return None


# ---------------------------------------------------------------------------
# content rules: render (value -> file content) and same (are two contents equal?)
# ---------------------------------------------------------------------------
def _plain_render(value: str, current: str | None) -> str:
    return value


def _plain_same(current: str, rendered: str) -> bool:
    c, r = current.strip(), rendered.strip()
    if c == r:
        return True
    # "max" and int64-max are the same unlimited (koordlet's only equivalence)
    return {c, r} == {"max", str(INT64_MAX)}


def _quota_same(current: str, rendered: str) -> bool:
    c, r = current.strip(), rendered.strip()
    return c == r or (c in UNLIMITED_TOKENS and r in UNLIMITED_TOKENS)


@functools.lru_cache(maxsize=1024)  # (what a file holds, what is sent): a few pairs over every BE dir
def _cpuset_same(current: str, rendered: str) -> bool:
    if current.strip() == rendered.strip():
        return True  # the same text (a recovery's read-compare of 100,000 BE cpusets: no parse)
    try:
        return parse_cpu_list(current) == parse_cpu_list(rendered)
    except ValueError:
        return False


def _split_cpu_max(current: str | None) -> tuple[str, str]:
    fields = (current or "").split()
    quota = fields[0] if fields else "max"
    period = fields[1] if len(fields) > 1 and fields[1].isdigit() else str(CFS_PERIOD_US)
    return quota, period


def _render_v2_quota(value: str, current: str | None) -> str:
    _, period = _split_cpu_max(current)
    q = value.strip()
    return f"{'max' if q in UNLIMITED_TOKENS else q} {period}"


def _render_v2_period(value: str, current: str | None) -> str:
    quota, _ = _split_cpu_max(current)
    return f"{quota} {value.strip()}"


def _cpu_max_same(current: str, rendered: str) -> bool:
    cq, cp = _split_cpu_max(current)
    rq, rp = _split_cpu_max(rendered)
    return cp == rp and _quota_same(cq, rq)


def _render_v2_weight(value: str, current: str | None) -> str:
    return str(shares_to_weight(int(value)))


def _render_v2_unlimited(value: str, current: str | None) -> str:
    return "max" if value.strip() in UNLIMITED_TOKENS else value.strip()


def _render_v1_memory_limit(value: str, current: str | None) -> str:
    return "-1" if value.strip() in UNLIMITED_TOKENS else value.strip()


PAGE_SIZE = 4096


def _memory_limit_same(current: str, rendered: str) -> bool:
    """Byte counts compare in whole pages: the kernel rounds a memory value down to a page, so
    1000000 written reads back as 999424 and is the value asked for (not a change to undo or redo)."""
    def norm(t: str) -> int:
        t = t.strip()
        if t in UNLIMITED_TOKENS:
            return INT64_MAX
        v = int(t)
        return INT64_MAX if v >= V1_MEMORY_UNLIMITED else v // PAGE_SIZE

    try:
        return norm(current) == norm(rendered)
    except ValueError:
        return False


def _blkio_same(current: str, rendered: str) -> bool:
    """One device entry of a multi-line blkio file (infra §1.3's write-if-needed rule)."""
    lines = [ln.strip() for ln in current.splitlines() if ln.strip()]
    dev, _, val = rendered.strip().partition(" ")
    if val == "0":  # a delete request: done when no line names the device
        return not any(ln.startswith(dev + " ") for ln in lines)
    return rendered.strip() in lines


def _lines_same(current: str, rendered: str) -> bool:
    """Multi-line files where one written line must appear verbatim (blkio.cost.*, io.*)."""
    want = rendered.strip()
    return any(ln.strip() == want for ln in current.splitlines())


def _io_weight_same(current: str, rendered: str) -> bool:
    """io.weight lists the cgroup's default and the devices with a weight of their own: a written line must
    appear verbatim, and "MAJ:MIN default" is done when the device is not listed at all."""
    dev, _, val = rendered.strip().partition(" ")
    if val == "default" and dev != "default":
        return not any(ln.split()[:1] == [dev] for ln in current.splitlines())
    return _lines_same(current, rendered)


def _io_max_same(current: str, rendered: str) -> bool:
    """io.max lists every throttled device with all four keys; compare one device's settings."""
    dev, *kvs = rendered.split()
    want = dict(kv.split("=", 1) for kv in kvs)
    for ln in current.splitlines():
        parts = ln.split()
        if parts and parts[0] == dev:
            have = dict(kv.split("=", 1) for kv in parts[1:] if "=" in kv)
            return all(have.get(k, "max") == v for k, v in want.items())
    return all(v == "max" for v in want.values())


def _render_resctrl_schemata(value: str, current: str | None) -> str:
    """Replace the L3 or MB line(s) of the current schemata, keep the rest.

    Writing only the changed line is enough for the kernel, but rendering the whole
    content keeps fake trees (plain files) faithful and is accepted by the kernel too.
    """
    new = {ln.split(":", 1)[0].strip(): ln.strip() for ln in value.splitlines() if ":" in ln}
    out = []
    seen = set()
    for ln in (current or "").splitlines():
        name = ln.split(":", 1)[0].strip()
        if name in new:
            out.append(new[name])
            seen.add(name)
        elif ln.strip():
            out.append(ln.strip())
    out.extend(v for k, v in new.items() if k not in seen)
    return "\n".join(out) + "\n"


def _schemata_same(current: str, rendered: str) -> bool:
    def parse(text: str) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for ln in text.splitlines():
            name, sep, rest = ln.partition(":")
            if not sep:
                continue
            base = 16 if name.strip() == "L3" else 10
            entries: dict[str, int] = {}
            for item in rest.strip().strip(";").split(";"):
                k, eq, v = item.partition("=")
                if eq:
                    try:
                        entries[k.strip()] = int(v.strip(), base)
                    except ValueError:
                        entries[k.strip()] = -1
            out[name.strip()] = entries
        return out

    have, want = parse(current), parse(rendered)
    return all(have.get(k) == v for k, v in want.items())


# ---------------------------------------------------------------------------
# entry tables: what a multi-entry file holds after one entry is written
# ---------------------------------------------------------------------------
# The kernel keeps one line per device (blkio, io.*), one token per feature
# (sched_features), one line per resource (schemata), one id per line (tasks), and a
# write changes one entry.  These functions compute the file's content after a write,
# which lets one batch change several entries of a file consistently, and lets a plain
# file of a fake tree hold what the kernel would show.
def _lines(current: str | None) -> list[str]:
    return [ln.strip() for ln in (current or "").splitlines() if ln.strip()]


def _device_table_merge(current: str | None, entry: str) -> str:
    dev, _, val = entry.strip().partition(" ")
    keep = [ln for ln in _lines(current) if ln.split(" ", 1)[0] != dev]
    if val.strip() not in ("0", "default", ""):
        keep.append(entry.strip())
    return "\n".join(keep) + ("\n" if keep else "")


def _io_max_merge(current: str | None, entry: str) -> str:
    dev, *kvs = entry.split()
    want = dict(kv.split("=", 1) for kv in kvs)
    out, found = [], False
    for ln in _lines(current):
        parts = ln.split()
        if parts[0] != dev:
            out.append(ln)
            continue
        found = True
        have = dict(kv.split("=", 1) for kv in parts[1:] if "=" in kv)
        have.update(want)
        if any(v != "max" for v in have.values()):
            out.append(dev + " " + " ".join(f"{k}={have.get(k, 'max')}" for k in ("rbps", "wbps", "riops", "wiops")))
    if not found and any(v != "max" for v in want.values()):
        out.append(dev + " " + " ".join(f"{k}={want.get(k, 'max')}" for k in ("rbps", "wbps", "riops", "wiops")))
    return "\n".join(out) + ("\n" if out else "")


def _token_merge(current: str | None, entry: str) -> str:
    """sched_features: writing FOO sets the feature, NO_FOO clears it."""
    want = entry.strip()
    name = want[3:] if want.startswith("NO_") else want
    tokens = [t for t in (current or "").split() if t not in (name, "NO_" + name)]
    tokens.append(want)
    return " ".join(tokens) + "\n"


def _token_entry(content: str, name: str) -> str | None:
    """sched_features: the token that says feature ``name``'s state in ``content`` (None: not listed)."""
    for t in content.split():
        if t in (name, "NO_" + name):
            return t
    return None


def _append_merge(current: str | None, entry: str) -> str:
    ids = _lines(current)
    if entry.strip() not in ids:
        ids.append(entry.strip())
    return "\n".join(ids) + "\n"


# ---------------------------------------------------------------------------
# ordering and merge rules
# ---------------------------------------------------------------------------
def larger(a: str, b: str) -> bool:
    """True when ``b`` is a larger limit than ``a`` (unlimited is the largest)."""
    return int_or_unlimited(b) > int_or_unlimited(a)


def merge_lower_wins(a: str, b: str) -> str:
    """Two strategies want different limits on one file: the tighter one wins."""
    return a if int_or_unlimited(a) <= int_or_unlimited(b) else b


def merge_first_owner(a: str, b: str) -> str:
    return a


@dataclass(frozen=True)
class Resource:
    """A file the agent may write, and everything needed to write it safely."""

    name: str
    subsystem: str = ""  # v1 subsystem dir ("" for non-cgroup files)
    v1_file: str | None = None
    v2_file: str | None = None
    validate: Validator = no_validation
    render_v1: Callable[[str, str | None], str] = _plain_render
    render_v2: Callable[[str, str | None], str] = _plain_render
    same: Callable[[str, str], bool] = _plain_same
    same_v2: Callable[[str, str], bool] | None = None
    order: str = "none"  # "none" | "larger" | "looser" (leveled update rule)
    merge: Callable[[str, str], str] = merge_first_owner  # (current owner's, challenger's) -> winner
    merge_rule: str = "the current owner keeps the file"
    multi_entry: bool = False  # several independent entries (devices) share the file
    # the file's content after writing one entry (multi-entry files); None = the entry replaces it
    merge_entry: Callable[[str | None, str], str] | None = None
    # the value that, written as one entry, puts back that entry's state in a content (restores of one
    # entry); None: a restore writes the whole content back
    entry_value: Callable[[str, str], str | None] | None = None
    root: str = "cgroup"  # "cgroup" | "proc" | "sys"
    rel: str = ""  # non-cgroup files: path relative to the root, "{group}" substituted
    if_exists: bool = False  # a missing file means "unsupported here", not an error
    tags: frozenset[str] = field(default_factory=frozenset)

    def file_name(self, version: int) -> str | None:
        return self.v1_file if version == 1 else self.v2_file

    def render(self, value: str, current: str | None, version: int) -> str:
        return (self.render_v1 if version == 1 else self.render_v2)(value, current)

    def equal(self, current: str, rendered: str, version: int) -> bool:
        fn = self.same_v2 if (version == 2 and self.same_v2 is not None) else self.same
        try:
            return fn(current, rendered)
        except (ValueError, IndexError):
            return False


def _cg(name: str, subsystem: str, v1: str | None, v2: str | None, **kw: object) -> Resource:
    return Resource(name=name, subsystem=subsystem, v1_file=v1, v2_file=v2, **kw)  # type: ignore[arg-type]


_RESOURCES: list[Resource] = [
    _cg("cpu.cfs_quota_us", "cpu", "cpu.cfs_quota_us", "cpu.max", validate=quota_validator,
        render_v2=_render_v2_quota, same=_quota_same, same_v2=_cpu_max_same, order="larger",
        merge=merge_lower_wins, merge_rule="the lower CFS quota wins"),
    _cg("cpu.cfs_period_us", "cpu", "cpu.cfs_period_us", "cpu.max", validate=period_validator,
        render_v2=_render_v2_period, same_v2=_cpu_max_same),
    _cg("cpu.cfs_burst_us", "cpu", "cpu.cfs_burst_us", "cpu.max.burst",
        validate=range_validator(0, 100_000_000), if_exists=True,
        merge=merge_lower_wins, merge_rule="the lower burst wins"),
    _cg("cpu.shares", "cpu", "cpu.shares", "cpu.weight", validate=range_validator(SHARES_MIN, SHARES_MAX),
        render_v2=_render_v2_weight),
    _cg("cpu.idle", "cpu", "cpu.idle", "cpu.idle", validate=range_validator(0, 1), if_exists=True),
    _cg("cpu.bvt_warp_ns", "cpu", "cpu.bvt_warp_ns", "cpu.bvt_warp_ns", validate=range_validator(-1, 2),
        if_exists=True),
    _cg("cpuset.cpus", "cpuset", "cpuset.cpus", "cpuset.cpus", validate=cpuset_validator,
        same=_cpuset_same, order="looser", merge=merge_first_owner),
    _cg("memory.limit_in_bytes", "memory", "memory.limit_in_bytes", "memory.max",
        validate=memory_limit_validator, render_v1=_render_v1_memory_limit,
        render_v2=_render_v2_unlimited, same=_memory_limit_same, merge=merge_lower_wins,
        merge_rule="the lower memory limit wins"),
    *[
        _cg(f"memory.{k}", "memory", f"memory.{k}", f"memory.{k}",
            validate=range_validator(0, INT64_MAX, allow_max=True), render_v2=_render_v2_unlimited,
            same=_memory_limit_same, order="larger", if_exists=True)
        for k in ("min", "low", "high")
    ],
    # memoryHigh's v1 cap (memory.high's nearest safe equivalent) and its v2 proactive reclaim: a
    # write-only trigger, never compared, cached or kept as an original (qosmanager.strategies.memory_high)
    _cg("memory.soft_limit_in_bytes", "memory", "memory.soft_limit_in_bytes", None,
        validate=soft_limit_validator, render_v1=_render_v1_memory_limit, same=_memory_limit_same,
        if_exists=True),
    _cg("memory.reclaim", "memory", None, "memory.reclaim", validate=memory_reclaim_validator, if_exists=True),
    *[
        _cg(f"memory.{k}", "memory", f"memory.{k}", f"memory.{k}", validate=range_validator(lo, hi),
            if_exists=True)
        for k, lo, hi in (("wmark_ratio", 0, 100), ("wmark_scale_factor", 1, 1000),
                          ("wmark_min_adj", -25, 50), ("priority", 0, 12), ("use_priority_oom", 0, 1),
                          ("oom.group", 0, 1))
    ],
    *[
        _cg(f"memory.pagecache_limit.{k}", "memory", None, f"memory.pagecache_limit.{k}",
            validate=v, if_exists=True)
        for k, v in (("enable", range_validator(0, 1)), ("size", range_validator(0, INT64_MAX)),
                     ("sync", range_validator(0, 1)))
    ],
    *[
        _cg(f"blkio.throttle.{k}", "blkio", f"blkio.throttle.{k}", None,
            validate=blkio_validator(0, INT64_MAX), same=_blkio_same, multi_entry=True, if_exists=True,
            merge_entry=_device_table_merge)
        for k in ("read_bps_device", "write_bps_device", "read_iops_device", "write_iops_device")
    ],
    _cg("blkio.cost.weight", "blkio", "blkio.cost.weight", None, validate=blkio_validator(1, 100),
        same=_blkio_same, multi_entry=True, if_exists=True, merge_entry=_device_table_merge),
    _cg("blkio.cost.qos", "blkio", "blkio.cost.qos", None, validate=blkio_cost_qos_validator,
        same=_lines_same, multi_entry=True, if_exists=True, merge_entry=_device_table_merge),
    _cg("blkio.cost.model", "blkio", "blkio.cost.model", None, validate=blkio_cost_model_validator,
        same=_lines_same, multi_entry=True, if_exists=True, merge_entry=_device_table_merge),
    _cg("io.max", "blkio", None, "io.max", validate=io_max_validator, same=_io_max_same,
        multi_entry=True, if_exists=True, merge_entry=_io_max_merge),
    _cg("io.weight", "blkio", None, "io.weight", validate=io_weight_validator, same=_io_weight_same,
        multi_entry=True, if_exists=True, merge_entry=_device_table_merge),
    _cg("tasks", "cpu", "tasks", "cgroup.threads", validate=range_validator(1, 2**31 - 1)),
    _cg("cgroup.procs", "cpu", "cgroup.procs", "cgroup.procs", validate=range_validator(1, 2**31 - 1)),
    # --- system files (infra §2.7) ---
    Resource("min_free_kbytes", root="proc", rel="sys/vm/min_free_kbytes",
             validate=range_validator(10_240, 10_485_760)),
    Resource("watermark_scale_factor", root="proc", rel="sys/vm/watermark_scale_factor",
             validate=range_validator(10, 400)),
    Resource("sched_group_identity_enabled", root="proc", rel="sys/kernel/sched_group_identity_enabled",
             validate=range_validator(0, 1), if_exists=True),
    Resource("sched_idle_saver_wmark", root="proc", rel="sys/kernel/sched_idle_saver_wmark",
             validate=range_validator(-(2**63), INT64_MAX), if_exists=True),
    Resource("memcg_reap_background", root="sys", rel="kernel/mm/memcg_reaper/reap_background",
             validate=range_validator(0, 1), if_exists=True),
    Resource("pagecache_limit_enabled", root="sys", rel="kernel/mm/pagecache_limit/enabled",
             validate=range_validator(0, 1), if_exists=True),
    Resource("sched_features", root="sys", rel="kernel/debug/sched_features",
             validate=lambda v: None if re.fullmatch(r"(NO_)?[A-Z0-9_]+", v.strip()) else
             f"{v!r} is not a scheduler feature name", if_exists=True, multi_entry=True,
             same=lambda cur, want: want.strip() in cur.split(), merge_entry=_token_merge,
             entry_value=_token_entry),
    # --- resctrl (infra §2.9); "{group}" is the resctrl group ("" = root) ---
    Resource("resctrl.schemata", root="sys", rel="fs/resctrl/{group}/schemata",
             render_v1=_render_resctrl_schemata, render_v2=_render_resctrl_schemata,
             same=_schemata_same, multi_entry=True),
    Resource("resctrl.tasks", root="sys", rel="fs/resctrl/{group}/tasks",
             validate=range_validator(1, 2**31 - 1), same=lambda cur, want: want.strip() in cur.split(),
             multi_entry=True, merge_entry=_append_merge),
]

REGISTRY: dict[str, Resource] = {r.name: r for r in _RESOURCES}


def get(name: str) -> Resource:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"resource type {name} not registered") from None


def supported(name: str, version: int) -> bool:
    """Whether the resource has a file on this cgroup version (non-cgroup files always do)."""
    r = get(name)
    return r.root != "cgroup" or r.file_name(version) is not None


__all__ = [
    "CFS_PERIOD_US",
    "INT64_MAX",
    "REGISTRY",
    "Resource",
    "get",
    "int_or_unlimited",
    "larger",
    "milli_cpu_to_quota",
    "milli_cpu_to_shares",
    "shares_to_weight",
    "supported",
    "weight_to_shares",
]
