"""The agent's own loop (``Agent.run``) on a thread, for tests that watch it run: started, polled, stopped."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Until = Callable[[str, Callable[[], Any]], None]


@contextmanager
def agent_running(agent: Any, seconds: float = 600.0, *, real_time: bool = False,
                  timeout: float = 120.0) -> Iterator[Until]:
    """Run ``agent.run(seconds)`` on a thread; yields ``until(what, check)``, which polls ``check`` every
    20 ms and fails saying ``what`` once ``timeout`` seconds have passed since the start, or at once when the
    loop has ended.  ``real_time``: the scheduler on ``time.monotonic``, every job due now (an agent a test
    built on a simulated clock).  Stopped and joined after; the loop must end."""
    if real_time:
        agent.scheduler.monotonic = time.monotonic
        for job in agent.scheduler.jobs:
            job.next_at = job.earliest = time.monotonic()
    runner = threading.Thread(target=agent.run, args=(seconds,), daemon=True)
    deadline = time.monotonic() + timeout

    def until(what: str, check: Callable[[], Any]) -> None:
        while not check():
            assert runner.is_alive(), f"the agent's loop ended before {what}"
            assert time.monotonic() < deadline, f"waited {timeout:.0f} s in vain for {what}"
            time.sleep(0.02)

    runner.start()
    try:
        yield until
    finally:
        agent.stop()
        runner.join(60)
    assert not runner.is_alive(), "the agent stops"
