"""memoryHigh on a real cgroup v2 kernel (``test_guest.py`` runs this in the guest): a BE process that keeps
allocating is held near the cap the agent puts on the BestEffort QoS dir's ``memory.high`` -- throttled
by the kernel, not killed: no eviction, no OOM kill -- and a clean stop of the agent lifts the cap.

The node's memory use is the test's own (``/proc/meminfo`` through ``--proc-root``): MemTotal 1 GiB, in use
128 MiB plus what the kernel counts in this test's cgroups (the shared machine's, or the guest's, other
work would otherwise move it).  NodeSLO: eviction at 50 %, lower percent 40 %: memoryHigh engages at
35 % and caps BE at its budget at 40 %, well under the eviction threshold even with the few percent
the kernel lets a throttled allocator go over memory.high."""

from __future__ import annotations

import os
import sys
import time

import pytest

from qosmanager.host.cgroups import KubeQoS
from realnode import kv_file, proc_view, real_node

pytestmark = pytest.mark.kernel

MiB = 1 << 20
CAPACITY, SYSTEM = 1024 * MiB, 128 * MiB
TARGET = 450 * MiB  # what BE tries to allocate: 56 % of the node with the system's share, past eviction
CHUNK = 2 * MiB


def allocator(progress: str) -> str:
    """A BE process that allocates (and touches) CHUNK at a time up to TARGET, saying how far it got."""
    return (f"import time\nheld = []\nwhile len(held) * {CHUNK} < {TARGET}:\n"
            f"    b = bytearray({CHUNK})\n    b[::4096] = b'x' * ({CHUNK} // 4096)\n    held.append(b)\n"
            f"    with open({progress!r}, 'w') as f:\n        f.write(str(len(held) * {CHUNK}))\n"
            f"    time.sleep(0.05)\ntime.sleep(600)\n")


def test_memory_high_holds_a_be_allocator_without_eviction_or_oom(tmp_path) -> None:
    with real_node(tmp_path, version=2, controllers=("cpu", "memory")) as node:
        def counter(rel: str, name: str) -> int:
            return int(node.read(rel, name, "memory"))

        def used() -> int:  # the test's cgroups as the kernel counts them, page cache that can go excluded
            stat = kv_file(node.path("", "memory.stat", "memory"))
            return counter("", "memory.current") - stat.get("inactive_file", 0)

        be_dir = node.layout.qos_dir(KubeQoS.BESTEFFORT)

        def cap() -> int | None:
            text = node.read(be_dir, "memory.high", "memory")
            return None if text == "max" else int(text)

        def events(rel: str) -> dict[str, int]:
            return kv_file(node.path(rel, "memory.events", "memory"))

        def allocated() -> int:
            try:
                return int((tmp_path / "allocated").read_text() or 0)
            except (OSError, ValueError):
                return 0

        node.write_node(memory=CAPACITY)
        be = node.add_pod("be-alloc", "BE")
        ls = node.add_pod("ls", "LS")
        ls_proc = node.start(ls, ["sleep", "600"])
        node.write_nodeslo({"resourceUsedThresholdWithBE": {
            "enable": True, "memoryEvictThresholdPercent": 50, "memoryEvictLowerPercent": 40}})
        with proc_view(node, memory=(CAPACITY, lambda: SYSTEM + used())) as view, \
                node.agent("--strategies", "memoryHigh,memoryEvict",
                           "--feature-gates", "BEMemoryHigh=true,BEMemoryEvict=true", "--evict-mode", "kill",
                           "--collect-interval", "500ms", "--memory-evict-interval-seconds", "0.5",
                           "--proc-root", view.root) as agent:
            assert cap() is None
            proc = node.start(be, [sys.executable, "-c", allocator(str(tmp_path / "allocated"))])
            agent.wait_for("BE's cap", lambda: cap() is not None, 180)
            agent.wait_for("the kernel holding BE at it", lambda: events(be_dir).get("high", 0) > 0, 180)
            # held: BE's counter stays near the cap (the kernel throttles an allocator over memory.high by a
            # delay that grows with the square of the overage) while the allocator is still short of its goal
            samples = []
            for _ in range(12):
                time.sleep(0.5)
                samples.append((counter(be_dir, "memory.current"), cap(), allocated()))
            assert proc.poll() is None, "the allocator is throttled, not killed"
            assert ls_proc.poll() is None
            for current, limit, got in samples:
                assert limit is not None, samples
                assert current <= limit * 1.2, (current, limit, samples)
                assert got < TARGET, samples
            assert not [r for r in agent.audit() if r["action"] == "evict"], "no eviction"
            assert events("").get("oom_kill", 0) == 0, "no OOM kill"
            writes = agent.audit("memoryHigh")
            assert writes and all(r["target"].endswith("memory.high") for r in writes if r["action"] == "write")
        # a clean stop (SIGTERM) lifts the cap
        assert cap() is None


V1_CAPACITY, V1_SYSTEM, V1_HOG = 2048 * MiB, 256 * MiB, 512 * MiB


def test_v1_soft_limit_is_the_cap_and_never_a_kill(tmp_path) -> None:
    """cgroup v1 (the host): level 1 is the BE QoS dir's ``memory.soft_limit_in_bytes`` at BE's budget, on
    a real memory hierarchy.  The kernel takes the agent's cap (page-aligned, read back as written); no
    hard limit is set, and the BE process lives on with its memory (a soft limit acts only in the node's
    global reclaim).  The cap is lifted (the kernel's unlimited) when the NodeSLO's thresholds rise past
    the node's use, put back when they fall, and lifted on a clean stop.

    The node's memory use is the test's own, as in the v2 test: MemTotal 2 GiB, in use 256 MiB plus what
    the kernel counts in this test's cgroups less their page cache.  NodeSLO: eviction at 40 %, lower
    35 %: memoryHigh engages at 30 %; with the 512 MiB BE process the node is at about 38 %, BE's budget
    (35 % of the node less the rest) about 460 MiB: below BE's usage, which a soft limit allows."""
    with real_node(tmp_path, version=1, controllers=("cpu", "memory")) as node:
        def stat(rel: str) -> dict[str, int]:
            return kv_file(node.path(rel, "memory.stat", "memory"))

        def counted(rel: str) -> int:  # the page counter less page cache, as node usage counts it
            return int(node.read(rel, "memory.usage_in_bytes", "memory")) - stat(rel).get("total_cache", 0)

        def used() -> int:
            return V1_SYSTEM + counted("")

        be_dir = node.layout.qos_dir(KubeQoS.BESTEFFORT)

        def soft() -> int:
            return int(node.read(be_dir, "memory.soft_limit_in_bytes", "memory"))

        unlimited = soft()
        hard = node.read(be_dir, "memory.limit_in_bytes", "memory")
        assert unlimited >= 1 << 62, "a new memory cgroup's soft limit is unlimited"
        node.write_node(memory=V1_CAPACITY)
        be = node.add_pod("be-hog", "BE")
        ls = node.add_pod("ls", "LS")
        ls_proc = node.start(ls, ["sleep", "600"], memory=True)
        code = f"import time\nb = bytearray({V1_HOG})\nb[::4096] = b'x' * {V1_HOG // 4096}\ntime.sleep(600)\n"
        hog = node.start(be, [sys.executable, "-c", code], memory=True)
        deadline = time.monotonic() + 60
        while counted(be_dir) < V1_HOG:
            assert time.monotonic() < deadline, "the BE process's allocation"
            time.sleep(0.1)
        slo = {"enable": True, "memoryEvictThresholdPercent": 40, "memoryEvictLowerPercent": 35}
        node.write_nodeslo({"resourceUsedThresholdWithBE": slo})
        with proc_view(node, memory=(V1_CAPACITY, used)) as view, \
                node.agent("--strategies", "memoryHigh", "--feature-gates", "BEMemoryHigh=true",
                           "--collect-interval", "500ms", "--memory-evict-interval-seconds", "0.5",
                           "--proc-root", view.root) as agent:
            agent.wait_for("BE's soft limit", lambda: soft() < unlimited, 120)
            budget = V1_CAPACITY * 35 // 100 - (used() - counted(be_dir))
            step = V1_CAPACITY * 5 // 1000  # memoryHigh rewrites the cap when it moves this much
            cap = soft()
            assert cap % 4096 == 0 and abs(cap - budget) <= step, (cap, budget)
            assert cap < counted(be_dir), "BE's budget is below its usage here: a soft limit allows that"
            writes = [r for r in agent.audit("memoryHigh") if r["action"] == "write"]
            assert writes and {r["target"].rsplit("/", 1)[1] for r in writes} == {"memory.soft_limit_in_bytes"}
            assert str(cap) in {r["value"] for r in writes}
            # the thresholds rise past the node's use: the pressure ended, the cap is lifted
            node.write_nodeslo({"resourceUsedThresholdWithBE": {**slo, "memoryEvictThresholdPercent": 90,
                                                                "memoryEvictLowerPercent": 85}})
            agent.wait_for("the cap lifted", lambda: soft() == unlimited, 60)
            node.write_nodeslo({"resourceUsedThresholdWithBE": slo})
            agent.wait_for("the cap again", lambda: soft() < unlimited, 60)
            assert hog.poll() is None and ls_proc.poll() is None, "nothing is killed"
            assert counted(be_dir) >= V1_HOG, "the soft limit took nothing from BE (no global pressure)"
            assert node.read(be_dir, "memory.limit_in_bytes", "memory") == hard, "no hard limit"
            assert not [r for r in agent.audit() if r["action"] == "evict"]
        assert soft() == unlimited, "a clean stop lifts the cap"


def test_level2_reclaims_be_down_from_a_cap_a_killed_agent_left(tmp_path) -> None:
    """cgroup v2, level 2 (``memory.reclaim``) through the agent: BE holds page cache far over its budget
    under a cap an agent killed with SIGKILL left at BE's usage.  The new agent keeps the cap at BE's usage
    (never below it at start), and level 2 takes BE down in ``memory.reclaim`` steps of at most 32 MiB that
    the kernel carries out; the cap follows BE's usage down, towards the budget; nothing is killed.

    The node: MemTotal 1 GiB, in use 420 MiB plus what the kernel counts in this test's cgroups less their
    page cache; NodeSLO eviction at 50 %, lower 45 %: memoryHigh engages at 40 %, BE's budget is about
    40 MiB; BE reads 192 MiB of the guest's disk into its page cache."""
    disk = os.environ.get("QOSM_GUEST_DISK")
    with real_node(tmp_path, version=2, controllers=("cpu", "memory")) as node:
        if not disk or not os.path.exists(disk):
            pytest.skip("needs a block device to read page cache from in QOSM_GUEST_DISK (the test guest has one)")

        def counter(rel: str, name: str) -> int:
            return int(node.read(rel, name, "memory"))

        def used() -> int:
            return 420 * MiB + counter("", "memory.current") - kv_file(node.path("", "memory.stat", "memory"))["file"]

        be_dir = node.layout.qos_dir(KubeQoS.BESTEFFORT)

        def cap() -> int | None:
            text = node.read(be_dir, "memory.high", "memory")
            return None if text == "max" else int(text)

        node.write_node(memory=CAPACITY)
        be = node.add_pod("be-reader", "BE")
        node.add_pod("ls", "LS")
        read = tmp_path / "read"
        # the reader keeps the disk open: the last close of a block device drops its page cache
        reader = node.start(be, ["sh", "-c", 'exec 3<"$0"; dd if="$0" of=/dev/null bs=1M count=192 2>/dev/null '
                                             '&& touch "$1"; exec sleep 600', disk, str(read)])
        deadline = time.monotonic() + 180
        while not read.exists():
            assert time.monotonic() < deadline and reader.poll() is None, "BE's read of the disk"
            time.sleep(0.2)
        cache = kv_file(node.path(be_dir, "memory.stat", "memory"))["file"]
        assert cache >= 128 * MiB, f"BE holds the page cache of its read: {cache} bytes"
        left = counter(be_dir, "memory.current") // 4096 * 4096
        node.write(be_dir, "memory.high", str(left), "memory")  # the cap the killed agent left
        node.write_nodeslo({"resourceUsedThresholdWithBE": {
            "enable": True, "memoryEvictThresholdPercent": 50, "memoryEvictLowerPercent": 45}})
        with proc_view(node, memory=(CAPACITY, used)) as view, \
                node.agent("--strategies", "memoryHigh", "--feature-gates", "BEMemoryHigh=true,BEMemoryReclaim=true",
                           "--collect-interval", "500ms", "--memory-evict-interval-seconds", "0.5",
                           "--proc-root", view.root) as agent:
            def reclaims() -> list[dict]:
                return [r for r in agent.audit("memoryHigh") if r["target"].endswith("memory.reclaim")]

            def state() -> str:
                stat = kv_file(node.path(be_dir, "memory.stat", "memory"))
                records = [(r["action"], str(r["target"]).rsplit("/", 1)[-1], r.get("value"), r.get("executed"),
                            str(r.get("reason"))[-300:]) for r in agent.audit("memoryHigh")]
                return (f"BE memory.current {counter(be_dir, 'memory.current')}, file {stat.get('file')}, "
                        f"anon {stat.get('anon')}, cap {cap()}, left {left}, node used {used()}; "
                        f"memoryHigh's audit: {records[-6:]}")

            agent.wait_for("level 2 reclaiming", lambda: len(reclaims()) >= 3, 180, state)
            agent.wait_for("BE's page cache reclaimed to half", lambda: counter(be_dir, "memory.current") < left // 2,
                           180, state)
            done = reclaims()
            assert all(r["executed"] and 0 < int(r["value"]) <= 32 * MiB for r in done), done[:3]
            in_force = cap()
            assert in_force is not None and in_force < left, "the cap follows BE's usage down"
            assert reader.poll() is None, "BE's process is not killed"
            writes = [r for r in agent.audit("memoryHigh") if r["target"].endswith("memory.high")]
            assert writes and all(int(r["value"]) < left + 4096 for r in writes), "never raised past the left cap"
            assert kv_file(node.path("", "memory.events", "memory")).get("oom_kill", 0) == 0
        assert cap() is None, "a clean stop lifts the cap"
