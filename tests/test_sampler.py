"""The fast path's counter sampler: the native one (``qosmanager._native.sampler``) and its plain-Python
twin (``qosmanager._native.pure_sampler``) keep the same samples, estimate the same load, refuse the
same garbled files and wake at the same levels."""

from __future__ import annotations

import math
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from qosmanager._native import pure_sampler

native = pytest.importorskip("qosmanager._native.sampler")
IMPLS = {"native": native, "pure": pure_sampler}
HZ = 100.0


class Files:
    def __init__(self, tmp: Path, v2: bool = True) -> None:
        self.v2 = v2
        self.paths = [str(tmp / "stat"), str(tmp / "kubepods"), str(tmp / "be")]

    def write(self, node_ticks: int, kubepods: float, be: float) -> None:
        with open(self.paths[0], "w") as f:
            f.write(f"cpu  {node_ticks} 0 0 {10**6} 7 0 0 3 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1\n")
        for path, used in ((self.paths[1], kubepods), (self.paths[2], be)):
            with open(path, "w") as f:
                f.write(f"usage_usec {int(used * 1e6)}\nuser_usec 1\nsystem_usec 2\n" if self.v2
                        else f"{int(used * 1e9)}\n")

    def sampler(self, mod: Any, stop_fd: int = -1, keep: int = 21, interval: float = 0.05) -> Any:
        kind = mod.KIND_USAGE_USEC if self.v2 else mod.KIND_NS
        return mod.CounterSampler(*self.paths, kind, HZ, keep, interval, stop_fd)


@pytest.mark.parametrize("v2", [True, False])
def test_both_keep_the_same_samples_and_load(tmp_path: Path, v2: bool) -> None:
    files = Files(tmp_path, v2)
    rng = random.Random(7)
    samplers = {name: files.sampler(mod, keep=5) for name, mod in IMPLS.items()}
    samplers["native"].set_trigger(0.0, 0.0, -math.inf, 0.25, math.nan)
    samplers["pure"].set_trigger(0.0, 0.0, -math.inf, 0.25, math.nan)
    ticks, kp, be, t = 1000, 10.0, 3.0, 100.0
    for i in range(12):
        files.write(ticks, kp, be)
        got = {name: (s.record(t), s.samples(), s.load()) for name, s in samplers.items()}
        assert got["native"][:2] == got["pure"][:2]
        n_load, p_load = got["native"][2], got["pure"][2]
        assert (math.isnan(n_load) and math.isnan(p_load)) or n_load == p_load
        assert len(got["native"][1]) == min(i + 1, 5)
        ticks += rng.randrange(0, 40)
        kp += rng.uniform(0, 0.3)
        be += rng.uniform(0, 0.1)
        t += 0.05
    assert samplers["native"].load() > 0.25 - 1e-12  # the floor of the system term counts
    for s in samplers.values():
        s.close()


GARBLED = [
    (b"cpu 1 2 3\n", None),  # too few numbers
    (b"cpux 1 2 3 4 5 6 7 8\n", None),
    (b"intr 1\ncpu  1 2 3 4 5 6 7\n", None),  # not first
    (b"cpu  1 2 3 4 5 6 x 8\n", None),
    (b"cpu  1 2 3 4 5 6 7\n", None),  # the shortest accepted line
    (b"cpu\t1\t2 3 4 5 6 7 8 9 10", None),
    (b"cpu  1 2 3 4 5 6 12345678901234567890\n", None),
]
USAGE = [b"usage_usec 12\n", b"user_usec 1\nusage_usec 9", b"usage_usec -1\n", b"usage_usec\n", b"nothing\n",
         b"usage_usec 12 \n", b"usage_usec 1x\n"]
NS = [b"123\n", b"123", b" 123\n", b"12 3\n", b"-5\n", b"", b"123 \n\n", b"1234567890123456789\n"]


def _outcome(tmp_path: Path, mod: Any, stat: bytes, usage: bytes, v2: bool) -> Any:
    files = Files(tmp_path, v2)
    with open(files.paths[0], "wb") as f:
        f.write(stat)
    for p in files.paths[1:]:
        with open(p, "wb") as f:
            f.write(usage)
    s = files.sampler(mod)
    try:
        return s.record(1.0), s.samples(), s.errors
    finally:
        s.close()


@pytest.mark.parametrize("stat", [g for g, _ in GARBLED])
def test_both_read_proc_stat_alike(tmp_path: Path, stat: bytes) -> None:
    got = [_outcome(tmp_path, mod, stat, b"usage_usec 5\n", True) for mod in IMPLS.values()]
    assert got[0] == got[1]


@pytest.mark.parametrize("usage", USAGE)
def test_both_read_cpu_stat_alike(tmp_path: Path, usage: bytes) -> None:
    got = [_outcome(tmp_path, mod, b"cpu  1 2 3 4 5 6 7 8\n", usage, True) for mod in IMPLS.values()]
    assert got[0] == got[1]


@pytest.mark.parametrize("usage", NS)
def test_both_read_cpuacct_usage_alike(tmp_path: Path, usage: bytes) -> None:
    got = [_outcome(tmp_path, mod, b"cpu  1 2 3 4 5 6 7 8\n", usage, False) for mod in IMPLS.values()]
    assert got[0] == got[1]


@pytest.mark.parametrize("impl", IMPLS)
def test_a_failed_read_drops_the_samples_and_a_replaced_file_is_opened_again(tmp_path: Path, impl: str) -> None:
    files = Files(tmp_path)
    s = files.sampler(IMPLS[impl])
    files.write(10, 1.0, 0.5)
    assert s.record(1.0) and s.record(1.05)
    with open(files.paths[2], "w") as f:
        f.write("garbled\n")
    assert not s.record(1.1) and s.samples() == [] and s.errors == 1
    os.unlink(files.paths[2])  # the descriptor was closed: a new file at the path is read
    files.write(20, 2.0, 0.5)
    assert s.record(1.15)
    assert s.samples() == [(1.15, 0.2, 2.0, 0.5)]
    s.close()


@pytest.mark.parametrize("impl", IMPLS)
def test_wait_returns_at_the_trigger_level_or_when_stopped(tmp_path: Path, impl: str) -> None:
    files = Files(tmp_path)
    files.write(0, 0.0, 0.0)
    r, w = os.pipe()
    try:
        s = files.sampler(IMPLS[impl], r, interval=0.01)
        s.set_trigger(math.inf, math.inf, -math.inf, 0.0, math.nan)
        done: list[int] = []
        th = threading.Thread(target=lambda: done.append(s.wait()))
        th.start()
        time.sleep(0.2)
        assert not done, "an infinite level never wakes"
        os.write(w, b"x")
        th.join(5)
        assert done == [IMPLS[impl].WOKE_STOP]
        taken = s.taken
        assert taken >= 5, "it sampled while waiting"
        os.read(r, 1)
        # a load of 2 cores (the kubepods counter advancing 2 s per s) against a level of 1.5 cores
        stop = threading.Event()

        def advance() -> None:
            t0 = time.monotonic()
            while not stop.wait(0.005):
                files.write(0, 2.0 * (time.monotonic() - t0), 0.0)

        writer = threading.Thread(target=advance)
        writer.start()
        try:
            s.set_trigger(1.5, 1.5, -math.inf, 0.0, math.nan)
            assert s.wait() == IMPLS[impl].WOKE_TRIGGER
            assert s.load() >= 1.5
        finally:
            stop.set()
            writer.join()
        s.close()
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("impl", IMPLS)
def test_interrupt_ends_a_wait_without_a_stop_descriptor(tmp_path: Path, impl: str) -> None:
    """The fast path stops its sampler by interrupt() (the native one sleeps on a futex word, no
    descriptor to poll): a wait in progress returns at once, and so does every later one."""
    files = Files(tmp_path)
    files.write(0, 0.0, 0.0)
    s = files.sampler(IMPLS[impl], -1, interval=0.01)
    s.set_trigger(math.inf, math.inf, -math.inf, 0.0, math.nan)
    done: list[int] = []
    th = threading.Thread(target=lambda: done.append(s.wait()))
    th.start()
    time.sleep(0.2)
    assert not done, "an infinite level never wakes"
    assert s.taken >= 5, "it sampled while waiting"
    s.interrupt()
    th.join(5)
    assert done == [IMPLS[impl].WOKE_STOP]
    taken = s.taken
    assert s.wait() == IMPLS[impl].WOKE_STOP and s.taken == taken, "interrupted for good, no sample more"
    s.close()


def test_both_keep_pushed_samples_alike(tmp_path: Path) -> None:
    """Counter values read elsewhere (replay's series) are kept as samples, the ring bounded alike."""
    files = Files(tmp_path)
    got = []
    for mod in IMPLS.values():
        s = files.sampler(mod, keep=4)
        s.set_trigger(0.0, 0.0, -math.inf, 0.0, math.nan)
        for i in range(6):
            s.push(10.0 + 0.05 * i, 1.0 + 0.1 * i, 2.0 + 0.2 * i, 0.5)
        got.append((s.samples(), s.load(), s.taken))
        s.close()
    assert got[0] == got[1] and len(got[0][0]) == 4 and got[0][2] == 6


def test_both_take_the_window_one_sample_back_after_a_quiet_sleep(tmp_path: Path) -> None:
    """The pods' window: two samples back, one back when the latest or the one before it followed a quiet
    sleep (two intervals); both keep at most ``keep - 0.5`` intervals of samples (the system term's second)."""
    files = Files(tmp_path)
    got = []
    for mod in IMPLS.values():
        s = files.sampler(mod, keep=7, interval=0.05)
        s.set_trigger(0.0, 0.0, -math.inf, 0.0, math.nan)
        seen = []
        t, kp = 10.0, 0.0
        # quiet samples 0.1 s apart with LS idle, then a burst of 2 cores from t = 10.35 (seen in part by
        # the quiet sample at 10.4), then alert samples 0.05 s apart
        for dt, quiet in [(0.1, True)] * 4 + [(0.05, False)] * 3:
            t = round(t + dt, 2)
            kp = max(0.0, 2.0 * (t - 10.35))
            s.push(t, 100.0 + kp, kp, 0.0, quiet)
            samples, first = s.window()
            load = s.load()
            seen.append((len(samples), first, None if math.isnan(load) else round(load, 6)))
        got.append(seen)
        s.close()
    assert got[0] == got[1]
    # 10.1, 10.2: fewer than three, no window; 10.3 (quiet): one back; 10.4 (quiet): the burst's first 50 ms
    # over the last 100 ms, 1 core; 10.45 (after the quiet 10.4): one back, the whole burst, 2 cores; 10.5 and
    # 10.55: two back.  The ring spans at most 6.5 intervals (0.325 s): 10.1 goes at 10.45, 10.2 at 10.55.
    assert [(n, f) for n, f, _ in got[0]] == [(1, -1), (2, -1), (3, 1), (4, 2), (4, 2), (5, 2), (5, 2)]
    assert [load for *_, load in got[0][2:]] == [0.0, 1.0, 2.0, 2.0, 2.0]


@pytest.mark.parametrize("impl", IMPLS)
def test_wait_samples_every_second_interval_while_the_load_stays_away(tmp_path: Path, impl: str) -> None:
    """A flat load far below the level: a sample every two intervals (a delayed one only makes fewer)."""
    files = Files(tmp_path)
    files.write(0, 0.0, 0.0)
    r, w = os.pipe()
    try:
        s = files.sampler(IMPLS[impl], r, interval=0.02)
        s.set_trigger(5.0, 5.0, -math.inf, 0.0, math.nan)
        th = threading.Thread(target=s.wait)
        t0 = time.monotonic()
        th.start()
        time.sleep(1.0)
        os.write(w, b"x")
        th.join(5)
        elapsed = time.monotonic() - t0
        # every interval would be elapsed / 0.02 (50): every second one half that, the first three alert
        assert s.taken <= elapsed / 0.04 + 4, f"{s.taken} samples in {elapsed:.2f} s at a 0.02 s interval"
        assert s.taken >= 3
        s.close()
    finally:
        os.close(r)
        os.close(w)
