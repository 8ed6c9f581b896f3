"""The memory levels' triggers on a real kernel (the host's cgroup v1; ``test_guest.py`` runs this in the v2
guest): the memory trigger (``/proc/meminfo`` every 50 ms) and the PSI watch (a trigger on a real pressure
file) each wake memoryHigh long before its next tick, which is an hour away.

The agent runs in this process, on a tree of real cgroups beneath this process's own
(``realnode.real_node``), so the test sees its scheduler, its trigger's samples and its wakes.  The node's
memory in use is the test's own (``realnode.ProcView``: ``/proc/meminfo`` from the test's cgroups' counters,
every other ``/proc`` entry a link to the real one, ``pressure/memory`` included): the shared machine's other
work cannot cross a line.  Bounds are on mechanism, never on time: the memory trigger wakes at the first
sample that can see the crossing; PSI wakes before any tick.  The times are printed."""

from __future__ import annotations

import errno
import os
import select
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from qosmanager.agent import Agent
from qosmanager.framework.memtrigger import parse_used
from qosmanager.framework.psi import PressureWatch, cap_sys_resource
from qosmanager.framework.strategy import QoSConfig
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakepsi import parse_trigger
from realnode import RealNode, in_process_agent, kv_file, proc_view, real_node, wait_until

pytestmark = pytest.mark.kernel

MiB = 1 << 20
CAPACITY = 1024 * MiB
HOUR = 3600.0


def used_by(node: RealNode) -> Callable[[], int]:
    """What the kernel counts in the test's cgroups, page cache that can go excluded (as node usage counts it)."""
    if node.version == 1:
        def used() -> int:
            stat = kv_file(node.path("", "memory.stat", "memory"))
            return int(node.read("", "memory.usage_in_bytes", "memory")) - stat.get("total_cache", 0)
    else:
        def used() -> int:
            stat = kv_file(node.path("", "memory.stat", "memory"))
            return int(node.read("", "memory.current", "memory")) - stat.get("file", 0)
    return used


def be_uncapped(node: RealNode) -> bool:
    be = node.layout.qos_dir(KubeQoS.BESTEFFORT)
    if node.version == 1:
        return int(node.read(be, "memory.soft_limit_in_bytes", "memory")) >= 1 << 62
    return node.read(be, "memory.high", "memory") == "max"


def running_agent(node: RealNode, proc_root: str, strategies: str, gates: dict[str, bool]) -> Any:
    """The agent in this process on the node's cgroups, its memory jobs an hour apart; stopped after."""
    qos = QoSConfig()
    qos.memory_evict_interval = HOUR
    return in_process_agent(node, proc_root, strategies.split(","), gates=gates, qos=qos)


def node_memory_stall_us() -> int | None:
    """The node's ``/proc/pressure/memory`` ``some`` total (µs), None without PSI."""
    try:
        with open("/proc/pressure/memory") as f:
            return int(f.readline().rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


def job(agent: Agent, name: str) -> Any:
    return next(j for j in agent.scheduler.jobs if j.name == name)


ALLOC, SYSTEM = 192 * MiB, 330 * MiB
ALLOCATOR = (f"import sys, time\nheld = []\nwhile len(held) * 16 < {ALLOC // MiB}:\n"
             f"    b = bytearray({16 * MiB})\n    b[::4096] = b'x' * {16 * MiB // 4096}\n    held.append(b)\n"
             "open(sys.argv[1], 'w').close()\ntime.sleep(600)\n")


def test_the_memory_trigger_wakes_memory_high_at_the_first_sample_over_the_line(tmp_path) -> None:
    """LS allocates 192 MiB: the node (1 GiB, 330 MiB in use besides the test's cgroups) goes from about 33 %
    to 51 %, over memoryHigh's engage line at 50 % (NodeSLO: eviction at 60 %, lower 55 %; BE's budget
    stays above zero).  memoryHigh caps BE at the first trigger sample that read the crossing (the
    ProcView's write), long before its next tick."""
    with real_node(tmp_path, controllers=("cpu", "memory")) as node:
        node.write_node(memory=CAPACITY)
        node.add_pod("be", "BE")
        ls = node.add_pod("ls", "LS")
        node.write_nodeslo({"resourceUsedThresholdWithBE": {
            "enable": True, "memoryEvictThresholdPercent": 60, "memoryEvictLowerPercent": 55}})
        used = used_by(node)
        line = CAPACITY * 50 // 100
        seen: dict[str, float] = {}
        agent_box: list[Agent] = []

        def node_used() -> int:
            return SYSTEM + used()

        with proc_view(node, memory=(CAPACITY, node_used)) as view:
            put = view._put

            def put_and_note(name: str, text: str) -> None:  # the moment the file shows the crossing
                put(name, text)
                shown = parse_used(text.encode()) if name == "meminfo" else None  # what was written
                if shown is not None and shown >= line and "crossed" not in seen and agent_box:
                    trigger = agent_box[0].memtrigger
                    assert trigger is not None
                    seen["crossed"], seen["samples_then"] = time.monotonic(), trigger.samples

            view._put = put_and_note  # type: ignore[method-assign]
            with running_agent(node, view.root, "memoryHigh", {"BEMemoryHigh": True}) as agent:
                trigger = agent.memtrigger
                assert trigger is not None
                wake = trigger.wake

                def noted_wake(*names: str) -> None:
                    seen.setdefault("woken", time.monotonic())
                    seen.setdefault("samples_at_wake", trigger.samples)
                    wake(*names)

                trigger.wake = noted_wake
                high = job(agent, "memoryHigh")
                wait_until("memoryHigh's first tick", lambda: high.runs >= 1, 120)
                first_tick = time.monotonic()
                assert be_uncapped(node) and node_used() < line, "below the line: nothing to cap"
                agent_box.append(agent)
                stall0 = node_memory_stall_us()
                done = tmp_path / "allocated"
                proc = node.start(ls, [sys.executable, "-c", ALLOCATOR, str(done)], memory=True)
                wait_until("BE's cap", lambda: not be_uncapped(node), 120)
                capped = time.monotonic()
                wait_until("the end of the run that capped BE", lambda: high.runs >= 2, 60)  # counted when it ends
                assert proc.poll() is None
                assert high.runs >= 2 and capped - first_tick < HOUR * (1 - high.jitter), \
                    "the cap came from a woken run: no tick was due for about an hour"
                assert trigger.wakes >= 1 and agent.scheduler.wakes >= 1
                assert "crossed" in seen and "woken" in seen, seen
                # the first sample that began after the file showed the crossing woke it (one more may
                # have been reading the file as it was written)
                assert seen["samples_at_wake"] <= seen["samples_then"] + 1, seen
                # why the usage poll stays beside PSI: the allocation that crossed the line stalled (next to)
                # nobody, so no PSI trigger could have told
                stall = node_memory_stall_us() - stall0 if stall0 is not None else None
                print(f"\nmemory trigger: crossing -> wake {1e3 * (seen['woken'] - seen['crossed']):.0f} ms, "
                      f"-> BE capped {1e3 * (capped - seen['crossed']):.0f} ms; {trigger.samples} samples "
                      f"(every {trigger.interval * 1e3:.0f} ms); meanwhile the node's memory stall "
                      f"{'-' if stall is None else f'{stall / 1e3:.1f} ms'}, PSI events "
                      f"{agent.psi.events if agent.psi else '-'}; load {os.getloadavg()[0]:.1f}")


READER = ("import os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\nwhile True:\n"
          "    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n"
          "    while os.read(fd, 1 << 20):\n        pass\n    os.lseek(fd, 0, 0)\n")
LS_LIMIT, DATA = 32 * MiB, 192 * MiB


def stall_source(tmp_path) -> tuple[str, Callable[[], None]]:
    """A file to read through page cache, and its removal: the guest's disk when it has one, else a
    192 MiB file of the test's (written, synced and dropped from the page cache, so the reader's cgroup is
    charged for every page it reads)."""
    disk = os.environ.get("QOSM_GUEST_DISK")
    if disk and os.path.exists(disk):
        return disk, lambda: None
    path = str(tmp_path / "data")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        chunk = os.urandom(MiB)
        for _ in range(DATA // MiB):
            os.write(fd, chunk)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return path, lambda: os.unlink(path)


def test_a_psi_trigger_wakes_the_memory_levels_when_ls_stalls(tmp_path) -> None:
    """An LS container limited to 32 MiB reads a file of 192 MiB (or the guest's disk) again and again: the
    kernel reclaims its page cache at every read, and its tasks stall on memory.  The PSI trigger (v2: on
    the Burstable QoS dir's ``memory.pressure``; v1: the node's ``/proc/pressure/memory``) fires and wakes
    memoryHigh and memoryEvict long before their next tick, while the node's usage (page cache excluded)
    stays far below every line, so the memory trigger stays quiet."""
    with real_node(tmp_path, controllers=("cpu", "memory")) as node:
        if node.version == 1 and not os.path.exists("/proc/pressure/memory"):
            pytest.skip("this kernel has no PSI (/proc/pressure/memory): booted without psi=1")
        node.write_node(memory=CAPACITY)
        node.add_pod("be", "BE")
        ls = node.add_pod("ls", "LS")
        node.write_nodeslo({"resourceUsedThresholdWithBE": {
            "enable": True, "memoryEvictThresholdPercent": 90, "memoryEvictLowerPercent": 85}})
        node.set_memory_limit(ls.containers[0], LS_LIMIT)
        source, remove = stall_source(tmp_path)
        used = used_by(node)
        try:
            with proc_view(node, memory=(CAPACITY, lambda: 128 * MiB + used())) as view, \
                    running_agent(node, view.root, "memoryHigh,memoryEvict",
                                  {"BEMemoryHigh": True, "BEMemoryEvict": True}) as agent:
                watch = agent.psi
                assert isinstance(watch, PressureWatch)
                high, evict = job(agent, "memoryHigh"), job(agent, "memoryEvict")
                wait_until("the first ticks and the triggers",
                           lambda: evict.runs >= 1 and high.runs >= 1 and watch.fds, 120)
                first_ticks = time.monotonic()
                note = agent.store.conditions.notes().get("psi/memory")
                if node.version == 2 and not any(p.endswith("memory.pressure") for p in watch.fds):
                    pytest.skip(f"no cgroup PSI on this kernel: {note.message if note else watch.fds}")
                print(f"\nPSI triggers: {watch.line} on {sorted(watch.fds)}; {note.message if note else ''}")
                runs, events = evict.runs, watch.events
                started = time.monotonic()
                reader = node.start(ls, [sys.executable, "-c", READER, source], memory=True)
                wait_until("a PSI event", lambda: watch.events > events, 120)
                fired = time.monotonic()
                wait_until("memoryEvict woken", lambda: evict.runs > runs, 60)
                assert reader.poll() is None
                assert time.monotonic() - first_ticks < HOUR * (1 - evict.jitter), \
                    "a woken run: no tick was due for about an hour"
                assert watch.wakes >= 1 and agent.scheduler.wakes >= 1
                assert agent.memtrigger is not None and agent.memtrigger.wakes == 0, \
                    "the node's usage crossed no line: the wake was PSI's"
                stall = "-"
                if node.version == 2:
                    with open(node.path(ls.containers[0], "memory.pressure", "memory")) as f:
                        stall = "LS container " + f.readline().strip()
                print(f"PSI: reader start -> event {1e3 * (fired - started):.0f} ms ({watch.events - events} "
                      f"events; {'privileged' if watch.privileged else 'unprivileged: 2 s windows'}); "
                      f"{stall}; load {os.getloadavg()[0]:.1f}")
        finally:
            remove()


LINES = [b"some 20000 2000000", b"full 20000 2000000", b"some 5000 500000", b"some 5000 400000", b"some 5000 200000",
         b"some 0 2000000", b"some 2000001 2000000", b"some 20000 20000000", b"some 20000 4000000",
         b"avg 20000 2000000", b"some 20000 2000000x"]


@pytest.mark.parametrize("resource", ["memory", "cpu"])
def test_the_fake_kernel_takes_the_trigger_lines_the_kernel_takes(resource: str) -> None:
    """Each line, with the NUL the agent writes and without it, to the real ``/proc/pressure/<resource>``
    and to the fake kernel's parser, with this process's privilege: both accept it or both refuse it
    (EINVAL).  A trigger taken is dropped at once (its descriptor closed)."""
    path = f"/proc/pressure/{resource}"
    if not os.path.exists(path):
        pytest.skip(f"this kernel has no PSI ({path}): booted without psi=1")
    privileged = cap_sys_resource()
    differ = []
    for line in LINES:
        for data in (line + b"\0", line):
            try:
                fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            except PermissionError:
                pytest.skip(f"{path} cannot be opened for writing here")
            try:
                os.write(fd, data)
                real = 0
                p = select.poll()
                p.register(fd, select.POLLPRI)
                p.poll(0)
            except OSError as e:
                real = e.errno or -1
            finally:
                os.close(fd)
            try:
                parse_trigger(data, privileged)
                fake = 0
            except OSError as e:
                fake = e.errno or -1
            if (real, fake) not in ((0, 0), (errno.EINVAL, errno.EINVAL)):
                differ.append((data, real, fake))
    assert not differ, f"(line, the kernel's errno, the fake's) with CAP_SYS_RESOURCE {privileged}: {differ}"
