"""Repeat reporting: how a write that keeps failing is said, so a failure every tick is one line.

Decides what is logged and audited about failed and refused (invalid) writes: in full the first time
(or when the same file fails another way), then as a count at most every ``repeat_seconds`` ("failed
240 more times in the last 5 min"), and "works again" once when it stops failing.  Within one batch,
log lines alike (the same strategy, outcome and error: an EMFILE storm over 2,000 files) become one
line with a count and an example; every record is still in the audit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from qosmanager.executor.audit import AuditLog
from qosmanager.executor.types import Key, Write, log
from qosmanager.logfmt import Repeat, RepeatLimiter

# a batch's log lines, grouped: (strategy, what, error, repeated) -> [(where, times)]
Said = dict[tuple[str, str, str, bool], list[tuple[str, str]]]


class Reporter:
    def __init__(self, audit: AuditLog, repeat_seconds: float, clock: Callable[[], float]) -> None:
        self.audit = audit
        self.repeats = RepeatLimiter(repeat_seconds, clock=clock)
        self.said: Said | None = None  # the current batch's lines
        self.last_sweep = clock()

    def __contains__(self, key: Key) -> bool:
        return key in self.repeats

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group the log lines said inside into one line per kind."""
        self.said = {}
        try:
            yield
        finally:
            said, self.said = self.said, None
            say_grouped(said)

    def refused(self, key: Key, kind: str, w: Write, target: str, value: str, old: str | None, error: str,
                now: float) -> None:
        """Log and audit a failed or invalid write: in full the first time (or when it fails another
        way), then as a count at most every ``repeat_seconds``."""
        # the same file failing the same way is one failure, whatever value is wanted this tick
        cause = error if kind == "failed" else kind
        info = (kind, w, target, value, old, error)
        rep = self.repeats.hit(key, (w.strategy, cause), info, now)
        if rep is not None:
            self._report(rep, *info)

    def _report(self, rep: Repeat, kind: str, w: Write, target: str, value: str, old: str | None,
                error: str) -> None:
        verb = "refused (invalid value)" if kind == "invalid" else "failed"
        if rep.first:
            self.say(w.strategy, verb, error, f"{target} = {value}")
            self.audit.record(strategy=w.strategy, action="write", target=target, value=value, old=old,
                              uid=w.uid, reason=w.reason, executed=False, error=error)
            return
        self.say(w.strategy, verb, error, f"{target} = {value}", rep.times())
        self.audit.record(strategy=w.strategy, action="write", target=target, value=value, old=old, uid=w.uid,
                          reason=f"{w.reason} ({verb} {rep.times()})", executed=False, error=error,
                          repeats=rep.count)

    def recovered(self, key: Key, strategy: str, target: str, now: float) -> None:
        rep = self.repeats.clear(key, now)
        if rep is not None:
            self.say(strategy, "works again", "", target, rep.times())

    def say(self, strategy: str, what: str, error: str, where: str, times: str = "") -> None:
        """One log line about a write (grouped with its kind within a batch)."""
        if self.said is not None:
            self.said.setdefault((strategy, what, error, bool(times)), []).append((where, times))
            return
        say_grouped({(strategy, what, error, bool(times)): [(where, times)]})

    def sweep(self, now: float) -> None:
        """Sum up failures that stopped repeating (the strategy no longer asks for that write), at most
        every tenth of ``repeat_seconds``."""
        if not self.repeats or now - self.last_sweep < self.repeats.interval / 10:
            return
        self.last_sweep = now
        for _, info, rep in self.repeats.due(now):
            self._report(rep, *info)

    def forget(self, prefixes: tuple[str, ...]) -> None:
        if self.repeats:
            self.repeats.forget(lambda k: isinstance(k, tuple) and k[0].startswith(prefixes))


def say_grouped(said: Said) -> None:
    for (strategy, what, error, _), lines in said.items():
        where, times = lines[0]
        if what == "works again":
            if len(lines) == 1:
                log.warning("%s: writing %s works again (it failed %s)", strategy, where, times)
            else:
                log.warning("%s: writing %d files works again, e.g. %s (it failed %s)", strategy,
                            len(lines), where, times)
            continue
        detail = f" {times}" if times else ""
        if len(lines) == 1:
            log.warning("%s: writing %s %s%s: %s", strategy, where, what, detail, error)
        else:
            log.warning("%s: %d writes %s%s: %s; e.g. writing %s (each is in the audit log)", strategy,
                        len(lines), what, " again" if times else "", error, where)
