"""The memory outcome benchmark's loads (``test_bench_outcome_memory.py``), one process each.

    python memload.py PROGRESS ls HOLD_MIB REQUEST_MIB
    python memload.py PROGRESS pagecache ANON_MIB DEVICE
    python memload.py PROGRESS spike SPIKE_MIB HOLD_S PAUSE_S
    python memload.py PROGRESS growth TARGET_MIB RATE_MIB_S

Each writes its work so far to PROGRESS (one number, replaced in place): the LS load the requests it
served (each allocates and touches REQUEST_MIB, then frees it, beside HOLD_MIB it keeps), BE loads the
bytes they processed -- read from DEVICE through the page cache (beside ANON_MIB of their own), or
allocated and touched (a spike: SPIKE_MIB at once, held HOLD_S, freed, PAUSE_S; growth: RATE_MIB_S up
to TARGET_MIB, then held).  Standard library only; the kernel's throttling or a kill ends the count.
"""

from __future__ import annotations

import os
import sys
import time

MiB = 1 << 20
CHUNK = 4 * MiB
PAGE = 4096


def touched(size: int) -> bytearray:
    b = bytearray(size)
    b[::PAGE] = b"x" * (size // PAGE)
    return b


class Progress:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)

    def put(self, value: int) -> None:
        data = str(value).encode()
        os.pwrite(self.fd, data.ljust(20), 0)


def ls(progress: Progress, hold_mib: int, request_mib: int) -> None:
    held = touched(hold_mib * MiB)
    served = 0
    while True:
        for i in range(served % 16 * PAGE, len(held), 16 * PAGE):  # its working set, a sixteenth a request
            held[i] = served & 0xFF
        request = touched(request_mib * MiB)
        del request
        served += 1
        progress.put(served)
        time.sleep(0.02)


def pagecache(progress: Progress, anon_mib: int, device: str) -> None:
    held = touched(anon_mib * MiB)  # noqa: F841 - kept: BE's own anonymous memory beside its page cache
    done = 0
    progress.put(done)
    while True:
        with open(device, "rb", buffering=0) as f:
            while chunk := f.read(MiB):
                done += len(chunk)
                progress.put(done)


def spike(progress: Progress, spike_mib: int, hold_s: float, pause_s: float) -> None:
    done = 0
    progress.put(done)
    while True:
        held = []
        while len(held) * CHUNK < spike_mib * MiB:
            held.append(touched(CHUNK))
            done += CHUNK
            progress.put(done)
        time.sleep(hold_s)
        held.clear()
        time.sleep(pause_s)


def growth(progress: Progress, target_mib: int, rate_mib_s: float) -> None:
    held = []
    done = 0
    progress.put(done)
    start = time.monotonic()
    while done < target_mib * MiB:
        due = start + done / (rate_mib_s * MiB)
        time.sleep(max(0.0, due - time.monotonic()))
        held.append(touched(CHUNK))
        done += CHUNK
        progress.put(done)
    time.sleep(3600)


def main(argv: list[str]) -> None:
    progress = Progress(argv[0])
    kind, args = argv[1], argv[2:]
    if kind == "ls":
        ls(progress, int(args[0]), int(args[1]))
    elif kind == "pagecache":
        pagecache(progress, int(args[0]), args[1])
    elif kind == "spike":
        spike(progress, int(args[0]), float(args[1]), float(args[2]))
    elif kind == "growth":
        growth(progress, int(args[0]), float(args[1]))
    else:
        raise SystemExit(f"unknown load {kind!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
