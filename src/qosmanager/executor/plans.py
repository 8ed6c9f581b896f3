"""Plans and plan groups: which of a strategy's many rarely-changing writes are sent this round.

Decides, per :class:`~qosmanager.executor.types.Plan`, whether it is skipped wholesale (its version
is unchanged and its force window runs: its writes are not even built), sent whole (new, or its
window ended: every file re-read and corrected, whatever the write cache says; a ``spread`` plan's
first window ends somewhere in the second half of ``force_seconds``), or sent in part (a new
version: only the writes that differ, plus those that failed or lost their file last time).

The re-check at a window's end of an unchanged plan goes through the executor's verifier first
(:mod:`.verify`), with the writes kept from its last send: it compares the files it can vouch for
with what they held when last read, in one native call, and gives back the rest (files that differ,
or that it cannot vouch for).  Only when there is a rest is the plan built again, and only the rest's
writes go through the batch pipeline, to be read, compared, corrected and audited as before.  Every
file is still read once per window.  (A new version at the window's end, or a retry pending: every
file goes through the pipeline.)  A
:class:`~qosmanager.executor.types.PlanGroup` whose sequence is the same object costs one step until
the earliest of its plans' windows ends; it is then walked, re-checking with the due plans those
whose windows end within the next ``force_seconds / 10``.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from qosmanager.executor.types import RETRY_STATUSES, ExecutorStats, Plan, PlanGroup, PlanState, Write, WriteResult

# which writes of this round's list one sent plan contributed: (its state, start, end)
Span = tuple[PlanState, int, int]


@dataclass(slots=True)
class GroupState:
    plans: Sequence[Plan]  # the sequence last walked
    due: float  # the next walk: the earliest end of its plans' windows (-inf: a retry is pending)
    seen: float


# the executor's verifier: of a plan's writes due for their re-check, those to send through the pipeline
Verify = Callable[[list[Write], float, PlanState | None], list[Write]]


class Plans:
    def __init__(self, force_seconds: float, stats: ExecutorStats, verify: Verify | None = None) -> None:
        self.force_seconds = force_seconds
        self.stats = stats
        self.verify = verify
        self.plans: dict[tuple[str, str], PlanState] = {}
        self.groups: dict[tuple[str, str], GroupState] = {}

    def plan(self, p: Plan, now: float, out: list[Write], spans: list[Span]) -> None:
        """Append what plan ``p`` needs sent this round."""
        self._to_send((p,), now, now, out, spans)

    def group(self, g: PlanGroup, now: float, out: list[Write], spans: list[Span],
              walked: list[GroupState]) -> None:
        """Append what the plans of group ``g`` need sent this round (nothing while it is unchanged and
        none of its windows ended)."""
        gk = (g.strategy, g.key)
        gs = self.groups.get(gk)
        if gs is not None and gs.plans is g.plans and now < gs.due:
            gs.seen = now
            self.stats.plans_skipped += len(g.plans)
            return
        # plans whose windows end within the next tenth of the window are re-checked with the ones due
        # now, so a group of staggered plans is walked every force_seconds / 10
        self._to_send(g.plans, now, now + self.force_seconds / 10, out, spans)
        if gs is None:
            gs = self.groups[gk] = GroupState(g.plans, now, now)
        gs.plans, gs.seen = g.plans, now
        walked.append(gs)

    def landed(self, spans: list[Span], walked: list[GroupState], results: list[WriteResult]) -> None:
        """After the batch: what did not land is sent again on the next round; each walked group's next
        walk is its earliest window end, or at once for a retry."""
        for st, a, b in spans:
            st.retry = [r.write for r in results[a:b] if r.status in RETRY_STATUSES]
        for gs in walked:
            states = [p.state for p in gs.plans if p.state is not None]
            gs.due = min((-math.inf if ps.retry else ps.expires for ps in states), default=math.inf)

    def _to_send(self, plans: Iterable[Plan], now: float, horizon: float, out: list[Write],
                 spans: list[Span]) -> None:
        skipped = 0
        for p in plans:
            st = p.state
            if (st is not None and st.version is p.version and horizon < st.expires and not st.retry
                    and st.alive and st.owner is self):
                st.seen = now  # the steady state: an unchanged plan object the strategy keeps
                skipped += 1
                continue
            start = len(out)
            sent = self._writes(p, now, horizon, out)
            if sent is not None:
                spans.append((sent, start, len(out)))
        self.stats.plans_skipped += skipped

    def _writes(self, p: Plan, now: float, horizon: float, out: list[Write]) -> PlanState | None:
        """Append what plan ``p`` needs sent now; None when it is skipped (unchanged, and its window
        ends after ``horizon``)."""
        pk = (p.strategy, p.key)
        st = self.plans.get(pk)
        force = self.force_seconds
        same = st is not None and (st.version is p.version or st.version == p.version)
        if st is not None and same:
            st.version, st.seen = p.version, now  # the same object next time: an identity check
            p.state = st
            if horizon < st.expires:
                if not st.retry:
                    self.stats.plans_skipped += 1
                    return None
                out.extend(st.retry)
                return st
            if self.verify is not None and not st.retry:
                # the window is over: the files the verifier cannot vouch for go through the pipeline
                st.expires = now + force
                self.stats.plans_verified += 1
                due = self.verify(st.sent, now, st)
                if due:
                    due = self._rebuilt(p, st, due)
                for w in due:
                    w.recheck = True
                out.extend(due)
                return st
        built = list(p.build())
        self.stats.plans_sent += 1
        if st is None:
            # a spread plan's first window ends somewhere in the second half of the force window
            window = force
            if p.spread:
                window *= 1.0 - zlib.crc32(f"{p.strategy}/{p.key}".encode()) / 2**33
            st = self.plans[pk] = PlanState(p.version, now + window, now, built, [], self)
            p.state = st
            out.extend(built)
            return st
        if st.expires <= horizon:  # the force window is over: every file of the plan is re-read
            for w in built:
                w.recheck = True
            st.expires = now + force
            out.extend(built)
        else:  # a new version: what differs from the last one, and what did not land last time
            old = {(w.resource, w.cgroup, w.entry): w.value for w in st.sent}
            again = {(w.resource, w.cgroup, w.entry) for w in st.retry}
            for w in built:
                k = (w.resource, w.cgroup, w.entry)
                if old.get(k) != w.value or k in again:
                    out.append(w)
        st.version, st.seen, st.sent = p.version, now, built
        p.state = st
        return st

    def _rebuilt(self, p: Plan, st: PlanState, due: list[Write]) -> list[Write]:
        """Some files of an unchanged plan need the pipeline: its writes are built again (a strategy may
        leave out what it learnt meanwhile, a knob this kernel lacks) and those of the due files sent."""
        built = list(p.build())
        self.stats.plans_sent += 1
        keys = {(w.resource, w.cgroup, w.entry) for w in due}
        kept = {(w.resource, w.cgroup, w.entry) for w in st.sent}
        st.sent = built
        return [w for w in built if (w.resource, w.cgroup, w.entry) in keys
                or (w.resource, w.cgroup, w.entry) not in kept]

    def release(self, strategy: str) -> None:
        for pk in [pk for pk in self.plans if pk[0] == strategy]:
            self.plans.pop(pk).alive = False
        for gk in [gk for gk in self.groups if gk[0] == strategy]:
            del self.groups[gk]

    def gc(self, now: float, idle: float) -> None:
        """Drop plans and groups no strategy presented for ``idle`` seconds (a pod that left, a strategy
        switched off)."""
        for pk in [pk for pk, st in self.plans.items() if now - st.seen > idle]:
            self.plans.pop(pk).alive = False
        for gk in [gk for gk, gs in self.groups.items() if now - gs.seen > idle]:
            del self.groups[gk]
