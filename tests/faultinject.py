"""Make chosen host writes and reads fail with a chosen errno, for the fault tests.

:class:`IOFaults` wraps the executor's writes (the batch ``pwrite`` of the sysio module, which the
one-shot writes of its descriptor table use too) and its batch read.  A rule names a file by a
substring of its path and says which errno it gets, for how many attempts (``None``: every one).
Every other file is written or read for real, in the batch's order.  ``attempts`` lists every write
the executor tried (path, payload), failed or not, so a test can tell what was sent.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from qosmanager._native import sysio


def fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


@dataclass
class Rule:
    match: str
    errno: int
    times: int | None  # attempts left to fail; None = all
    on: str  # "write" | "read"


class IOFaults:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rules: list[Rule] = []
        self.attempts: list[tuple[str, bytes]] = []
        self.reads: list[str] = []
        self._pwrite = sysio.pwrite_batch
        self._pread = sysio.pread_batch
        # one-shot writes (FileTable.write_once) go through pwrite_batch too
        monkeypatch.setattr(sysio, "pwrite_batch", self._pwrite_batch)
        monkeypatch.setattr(sysio, "pread_batch", self._pread_batch)

    def fail(self, match: str, err: int, times: int | None = None, on: str = "write") -> None:
        self.rules.append(Rule(match, err, times, on))

    def clear(self) -> None:
        self.rules.clear()

    def written(self, match: str) -> list[bytes]:
        """Payloads sent to files whose path contains ``match`` (failed attempts included)."""
        return [p for path, p in self.attempts if match in path]

    def _fault(self, path: str, on: str) -> int:
        for r in self.rules:
            if r.on == on and r.match in path and (r.times is None or r.times > 0):
                if r.times is not None:
                    r.times -= 1
                return r.errno
        return 0

    def _pwrite_batch(self, fds: np.ndarray, payloads: Sequence[bytes], truncate: np.ndarray) -> np.ndarray:
        out = np.zeros(len(payloads), dtype=np.int32)
        for i, (fd, p) in enumerate(zip(fds.tolist(), payloads)):  # one by one: the batch's order holds
            path = fd_path(fd)
            self.attempts.append((path, p))
            err = self._fault(path, "write")
            out[i] = err if err else self._pwrite(fds[i:i + 1], [p], truncate[i:i + 1])[0]
        return out

    def _pread_batch(self, fds: np.ndarray, maxlen: int = 4096) -> list[bytes | int]:
        out: list[bytes | int] = []
        for i, fd in enumerate(fds.tolist()):
            path = fd_path(fd)
            self.reads.append(path)
            err = self._fault(path, "read")
            out.append(-err if err else self._pread(fds[i:i + 1], maxlen)[0])
        return out


# ------------------------------------------------------------------------------------------------
# a signal to the agent process in the middle of an executor batch
# ------------------------------------------------------------------------------------------------
SIGNAL_MID_BATCH = r"""
import os, sys
import numpy as np
from qosmanager._native import sysio
from qosmanager.cli import main

sig, at_least = int(sys.argv[1]), int(sys.argv[2])
real = sysio.pwrite_batch
fired = []

def pwrite_batch(fds, payloads, truncate):
    if fired or len(payloads) < at_least:
        return real(fds, payloads, truncate)
    fired.append(1)
    half = len(payloads) // 2
    first = real(fds[:half], payloads[:half], truncate[:half])
    with open(os.environ["QOSM_FAULT_MARK"], "w") as f:
        f.write(f"{half} {len(payloads)}\n")
    os.kill(os.getpid(), sig)  # SIGTERM: its handler runs here, then the batch goes on; SIGKILL: the end
    rest = real(fds[half:], payloads[half:], truncate[half:])
    return np.concatenate([first, rest])

sysio.pwrite_batch = pwrite_batch
sys.exit(main(sys.argv[3:]))
"""
